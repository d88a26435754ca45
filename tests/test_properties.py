"""Property tests of the cost model (issue 8), hypothesis, 200 examples each.

Configurations are drawn from ``search_spaces.enumerate_valid`` of a few model/cluster
combinations that exercise different code paths: a single node, two and four nodes, a PCIe +
RoCE cluster, GQA, tied embeddings with learned positions and LayerNorm + biases (GPT), an
unpadded vocabulary (BERT), fp16/fp8, non-flash attention, no overlap of the DP reduction.
The spaces include every ZeRO stage and every precision the GPU supports.

Pairs of configurations (tp doubled, pp doubled, ZeRO stage k-1 -> k) are looked up inside
the valid set, so a drawn pair is always valid (``assume`` rejects only ZeRO pairs whose
balanced stage plans differ).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from costmodel.batch import ConfigBatch
from costmodel.compute import padded_vocab
from costmodel.hardware import default_cluster, get_cluster_preset
from costmodel.memory import PARAM_BYTES
from costmodel.model import plan_of, score
from costmodel.models_catalog import get_model
from costmodel.specs import PRECISIONS, ClusterSpec, ModelSpec, TrainingSpec
from search_spaces import Context, default_space, enumerate_valid, restrict
from search_spaces.rules import check

PROPS = settings(max_examples=200, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass(frozen=True)
class Combo:
    name: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec


def _combos() -> tuple[Combo, ...]:
    return (
        Combo("llama-7b/1x8-a100", get_model("llama-7b"), default_cluster(8),
              TrainingSpec(seq_length=2048, global_batch_size=64)),
        Combo("llama2-70b/2x8-h100", get_model("llama2-70b"),
              default_cluster(16, gpu="h100-sxm-80gb"),
              TrainingSpec(seq_length=4096, global_batch_size=128)),
        Combo("gpt-1.7b/2x8-pcie-roce", get_model("gpt-1.7b"),
              get_cluster_preset("pcie-roce-a100", 2),
              TrainingSpec(seq_length=2048, global_batch_size=32, overlap_grad_reduce=False,
                           dropout=True)),
        Combo("bert-large/1x4-v100", get_model("bert-large"),
              default_cluster(4, gpu="v100-sxm-32gb"),
              TrainingSpec(seq_length=512, global_batch_size=32, flash_attention=False)),
        Combo("llama-13b/4x8-h100", get_model("llama-13b"),
              default_cluster(32, gpu="h100-sxm-80gb"),
              TrainingSpec(seq_length=2048, global_batch_size=256)),
        # framework paths: DeepSpeed (host floor, serial p2p, blocking TP, re-gathers) and
        # Megatron-Core's --tp-comm-overlap
        Combo("gpt-1.7b/4x8-a100-deepspeed", get_model("gpt-1.7b"), default_cluster(32),
              TrainingSpec(seq_length=2048, global_batch_size=64, framework="deepspeed",
                           flash_attention=False, overlap_grad_reduce=False, dropout=True)),
        Combo("llama-7b/2x8-h100-tp-overlap", get_model("llama-7b"),
              default_cluster(16, gpu="h100-sxm-80gb"),
              TrainingSpec(seq_length=4096, global_batch_size=64, tp_comm_overlap=True)),
    )


COMBOS = _combos()
# every searched column (a pair must differ in its one dimension alone: the default space's
# partial recompute and stage plans, issue 21, would otherwise pair unlike rows)
# every configuration column (a dimension added later joins the key by itself: a key that
# missed recompute_modules paired configurations that differed in it)
COLS = tuple(f.name for f in fields(ConfigBatch) if not f.name.endswith("_table"))


@dataclass(frozen=True)
class Valid:
    combo: Combo
    batch: ConfigBatch
    index: dict  # column tuple -> row

    def __repr__(self) -> str:  # keep hypothesis' falsifying-example line short
        return f"Valid({self.combo.name!r}, {len(self.batch)} configs)"


@cache
def valid(i: int) -> Valid:
    c = COMBOS[i]
    base = default_space(c.model, c.cluster, c.training)
    precisions = tuple(p for p in PRECISIONS if c.cluster.gpu.supports(p))
    space = restrict(base, zero_stage=(0, 1, 2, 3), precision=precisions)
    batch = enumerate_valid(Context(c.model, c.cluster, c.training), space)
    assert len(batch) > 50, (c.name, len(batch))
    rows = np.stack([getattr(batch, k).astype(np.int64) for k in COLS], axis=1)
    index = {tuple(r): j for j, r in enumerate(rows.tolist())}
    return Valid(c, batch, index)


def _key(v: Valid, j: int) -> list[int]:
    return [int(getattr(v.batch, k)[j]) for k in COLS]


@cache
def pairs(i: int, kind: str) -> tuple[tuple[int, int], ...]:
    """(row, row') pairs of valid configurations: tp doubled / pp doubled (dp halved), or
    the ZeRO stage raised by one; everything else equal."""
    v = valid(i)
    tp, pp, dp, zs = (COLS.index(k) for k in ("tp", "pp", "dp", "zero_stage"))
    out = []
    for j in range(len(v.batch)):
        k = _key(v, j)
        if kind in ("tp", "pp"):
            if k[dp] % 2:
                continue
            k[tp if kind == "tp" else pp] *= 2
            k[dp] //= 2
        else:
            k[zs] += 1
        j2 = v.index.get(tuple(k))
        if j2 is not None:
            out.append((j, j2))
    return tuple(out)


def _score(v: Valid, rows, training: TrainingSpec | None = None):
    c = v.combo
    return score(c.model, c.cluster, training or c.training,
                 v.batch.take(np.asarray(rows, dtype=np.int64)))


@st.composite
def configs(draw, n: int = 1):
    i = draw(st.integers(0, len(COMBOS) - 1))
    v = valid(i)
    rows = draw(st.lists(st.integers(0, len(v.batch) - 1), min_size=n, max_size=n))
    return v, rows


@st.composite
def pair(draw, kind: str):
    i = draw(st.sampled_from([i for i in range(len(COMBOS)) if pairs(i, kind)]))
    return valid(i), draw(st.sampled_from(pairs(i, kind)))


def _cfg(v: Valid, j: int) -> str:
    return f"{v.combo.name}: {v.batch.config(j)}"


# ---------------------------------------------------------------------------------------------
def test_combos_cover_the_pairs():
    # every pair kind must exist in several combinations, else the properties test little
    for kind in ("tp", "pp", "zero"):
        assert sum(bool(pairs(i, kind)) for i in range(len(COMBOS))) >= 3, kind
    assert any(3 in valid(i).batch.zero_stage for i in range(len(COMBOS)))


@PROPS
@given(configs())
def test_mfu_in_unit_interval(drawn):
    v, rows = drawn
    s = _score(v, rows)
    assert np.isfinite(s.step_time_s[0]) and s.step_time_s[0] > 0, _cfg(v, rows[0])
    assert 0.0 < s.mfu[0] <= 1.0, (_cfg(v, rows[0]), s.mfu[0])


@PROPS
@given(configs())
def test_time_breakdown_sums_to_step_time(drawn):
    v, rows = drawn
    s = _score(v, rows)
    total = sum(t[0] for t in s.time_breakdown_s.values())
    assert np.isclose(total, s.step_time_s[0], rtol=1e-9, atol=0), _cfg(v, rows[0])
    assert all(t[0] >= -1e-12 * s.step_time_s[0] for t in s.time_breakdown_s.values()), \
        (_cfg(v, rows[0]), {k: t[0] for k, t in s.time_breakdown_s.items()})


@PROPS
@given(configs())
def test_memory_breakdown_sums_to_peak(drawn):
    v, rows = drawn
    s = _score(v, rows)
    total = sum(m[0] for m in s.memory_breakdown_bytes.values())
    assert np.isclose(total, s.peak_memory_bytes[0], rtol=1e-12), _cfg(v, rows[0])
    assert all(m[0] >= 0 for m in s.memory_breakdown_bytes.values()), _cfg(v, rows[0])


def _zero3_padding_bytes(v: Valid, j: int) -> float:
    """What ZeRO-3 may add when tp doubles: the vocabulary padding and the TP-replicated
    parameters' larger dp shard, nothing else.

    Megatron pads the vocabulary to a multiple of 128 * tp (costmodel.compute.padded_vocab),
    so the embedding (and an untied LM head) grow by (V(2t) - V(t)) * h parameters. Without
    ZeRO-3 a rank holds V(t)/t rows, and ceil(V/256t)*128 <= ceil(V/128t)*128, so weights
    never grow; with ZeRO-3 a rank holds all parameters / (t * d), and t * d is fixed, so
    the padded rows show up. Example (llama2-70b, h = 8192, tf32, 16 GPUs): V(2) = 32000,
    V(4) = 32256: 2 * 256 * 8192 * 4 B / 16 = 1 MiB more per GPU.
    """
    if v.batch.zero_stage[j] < 3:
        return 0.0
    t, d = int(v.batch.tp[j]), int(v.batch.dp[j])
    m = v.combo.model
    grow = float(padded_vocab(m.vocab_size, 2 * t) - padded_vocab(m.vocab_size, t))
    # tied embeddings on one stage are one matrix; under a pipeline the loss's stage has a copy
    matrices = 1 if m.tied_embeddings and v.batch.pp[j] == 1 else 2
    padding = grow * m.hidden_size * matrices * PARAM_BYTES[v.batch.precision[j]] / (t * d)
    # Parameters TP replicates (the final norm, learned positions) are sharded over dp only:
    # halving dp doubles their share, R / (d / 2) - R / d = R / d.
    replicated = (m.hidden_size * (2 if m.normalization == "layernorm" else 1)
                  + m.position_params(v.combo.training.seq_length))
    # With a pipeline (ZeRO-3 / FSDP under PP, issue 21) the weights breakdown follows the peak
    # stage, which can move from the loss's stage to the embedding's (it holds the learned
    # positions) when tp doubles: at most that share once more.
    stages = 2.0 if v.batch.pp[j] > 1 else 1.0
    return padding + stages * replicated * PARAM_BYTES[v.batch.precision[j]] / d


@PROPS
@given(pair("tp"))
def test_weight_memory_never_grows_with_tp(drawn):
    v, (j, j2) = drawn  # j2: tp doubled, dp halved
    # a balanced stage plan is balanced on the scored times, which tp moves: a layer that
    # moves onto the largest stage is not TP's weight memory (gpt-1.7b pp2 balanced, ZeRO-3:
    # 13/11 at tp 1, 12/12 at tp 2)
    c = v.combo
    assume(plan_of(c.model, c.cluster, c.training, v.batch.config(j))
           == plan_of(c.model, c.cluster, c.training, v.batch.config(j2)))
    w = _score(v, [j, j2]).memory_breakdown_bytes["weights"]
    assert w[1] <= w[0] * (1 + 1e-12) + _zero3_padding_bytes(v, j), (_cfg(v, j), w)


def test_zero3_weight_growth_is_exactly_padding_and_replicated_params():
    # The one exception above, pinned by hand: llama2-70b (V = 32000, h = 8192) on 16 H100,
    # tf32 (4 B), ZeRO-3, tp 2 -> 4: V(2) = 32000, V(4) = 32256 (63 * 512), so the per-GPU
    # weights grow by 2 * 256 * 8192 * 4 / 16 = 1048576 B.
    i = next(i for i, c in enumerate(COMBOS) if c.name.startswith("llama2-70b"))
    v = valid(i)
    j, j2 = next((a, b) for a, b in pairs(i, "tp") if v.batch.zero_stage[a] == 3
                 and v.batch.tp[a] == 2 and PRECISIONS[v.batch.precision[a]] == "tf32")
    # plus the final RMSNorm (8192 fp32 params, TP-replicated) sharded over dp 8 -> 4:
    # 8192 * 4 B / 8 = 4096 B
    w = _score(v, [j, j2]).memory_breakdown_bytes["weights"]
    assert w[1] - w[0] == pytest.approx(1048576.0 + 4096.0, rel=1e-6)
    assert _zero3_padding_bytes(v, j) == 1048576.0 + 4096.0


@PROPS
@given(pair("pp"))
def test_weight_memory_never_grows_with_pp(drawn):
    v, (j, j2) = drawn  # j2: pp doubled, dp halved
    if v.batch.zero_stage[j] == 3:
        # ZeRO-3 (admitted under PP since issue 21) holds a stage's parameters / d, and pp x d
        # is fixed: the layers' share stays, but the embedding and the head, which a stage
        # holds whole, are sharded over half as many ranks
        return
    w = _score(v, [j, j2]).memory_breakdown_bytes["weights"]
    assert w[1] <= w[0] * (1 + 1e-12), (_cfg(v, j), w)


def _optimizer_switch_bytes(v: Valid, j: int) -> float:
    """What raising the ZeRO stage may add where it changes the optimizer: DeepSpeed runs
    BF16_Optimizer for bf16 (and fp8) weights at ZeRO 0/1, which reduces its fp32 gradients
    through a cast and has no reduce bucket, and its ZeRO optimizer at ZeRO 2, whose reduce
    bucket (with its share of the allocator's reserve) a small model's sharded gradients may
    not pay back."""
    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.model import uses_bf16_optimizer

    fw = FRAMEWORKS[v.combo.training.framework]
    # ZeRO 1 -> 2 is the only step that leaves BF16_Optimizer (0 -> 1 keeps it)
    if not (v.batch.zero_stage[j] == 1
            and uses_bf16_optimizer(fw, v.batch.precision[j], v.batch.zero_stage[j])):
        return 0.0
    f = efficiency_for(v.combo.cluster.gpu.compute_capability).allocator_fraction
    return fw.memory.reduce_bucket_bytes / (1.0 - f)


def _zero3_prefetch_bytes(v: Valid, j: int) -> float:
    """ZeRO 2 -> 3 adds two gathered layers of 16-bit parameters (the prefetch buffer, with its
    share of the allocator's reserve), which a pipeline stage of few layers sharded over a
    small dp (ZeRO-3 under PP, issue 21) may not pay back."""
    from costmodel.calibration import efficiency_for
    from costmodel.memory import PARAM_BYTES

    if v.batch.zero_stage[j] != 2:
        return 0.0
    f = efficiency_for(v.combo.cluster.gpu.compute_capability).allocator_fraction
    layer = v.combo.model.params_per_layer / int(v.batch.tp[j])
    return 2.0 * layer * PARAM_BYTES[v.batch.precision[j]] / (1.0 - f)


@PROPS
@given(pair("zero"))
def test_higher_zero_stage_never_needs_more_memory(drawn):
    v, (j, j2) = drawn  # j2: the same configuration with zero_stage + 1
    # a balanced stage plan is balanced on the scored times, which the ZeRO stage moves (its
    # per-micro-batch collectives): a layer that moves onto the largest stage is not ZeRO's
    # memory (gpt-1.7b pp2 balanced: 12/12 at ZeRO-1, 13/11 at ZeRO-2)
    c = v.combo
    assume(plan_of(c.model, c.cluster, c.training, v.batch.config(j))
           == plan_of(c.model, c.cluster, c.training, v.batch.config(j2)))
    s = _score(v, [j, j2])
    assert s.peak_memory_bytes[1] <= (s.peak_memory_bytes[0] * (1 + 1e-12)
                                      + _optimizer_switch_bytes(v, j)
                                      + _zero3_prefetch_bytes(v, j)), \
        (_cfg(v, j), s.peak_memory_bytes)
    m = s.memory_breakdown_bytes
    assert m["optimizer_states"][1] <= m["optimizer_states"][0] * (1 + 1e-12)


@PROPS
@given(configs(n=6))
def test_batch_scores_equal_single_scores(drawn):
    v, rows = drawn
    together = _score(v, rows)
    alone = [_score(v, [r]) for r in rows]
    for name in together.__dataclass_fields__:
        col = getattr(together, name)
        if isinstance(col, dict):
            for k, arr in col.items():
                single = np.concatenate([getattr(a, name)[k] for a in alone])
                assert np.allclose(arr, single, rtol=1e-12, atol=0), (name, k)
        else:
            single = np.concatenate([getattr(a, name) for a in alone])
            assert np.allclose(col, single, rtol=1e-12, atol=0, equal_nan=True), name


@PROPS
@given(configs())
def test_bubble_share_falls_with_more_microbatches(drawn):
    v, rows = drawn
    c = v.combo
    # doubling the global batch doubles the micro-batches m = B / (b * dp); every rule that
    # held for B (divisibility, interleaved m % pp == 0) still holds for 2B
    big = TrainingSpec(seq_length=c.training.seq_length,
                       global_batch_size=2 * c.training.global_batch_size,
                       flash_attention=c.training.flash_attention,
                       overlap_grad_reduce=c.training.overlap_grad_reduce,
                       dropout=c.training.dropout)
    assert check(Context(c.model, c.cluster, big), v.batch.take(np.asarray(rows))).all()
    s1, s2 = _score(v, rows), _score(v, rows, big)
    assert s2.microbatches[0] == 2 * s1.microbatches[0]
    if v.batch.pp[rows[0]] == 1:
        assert s1.bubble_share[0] == 0.0 and s2.bubble_share[0] == 0.0
        assert s1.time_breakdown_s["pipeline_bubble"][0] == 0.0
    else:
        assert 0.0 < s2.bubble_share[0] < s1.bubble_share[0] < 1.0, \
            (_cfg(v, rows[0]), s1.bubble_share[0], s2.bubble_share[0])


@PROPS
@given(st.data())
def test_feasibility_is_monotone_in_the_limit(data):
    from costmodel.errors import InfeasibleError
    from optimizer.api import Problem, finish
    from optimizer.search import SearchOutcome

    v, rows = data.draw(configs(n=24))
    rows = sorted(set(rows))
    c = v.combo
    sub = v.batch.take(np.asarray(rows))
    scores = _score(v, rows)
    hbm = c.cluster.gpu.memory_bytes
    lo, hi = sorted(data.draw(st.lists(st.floats(0.02, 3.0), min_size=2, max_size=2)))
    outcome = SearchOutcome(sub, scores, len(rows), len(v.batch), "exhaustive", {})

    def run(frac):
        problem = Problem(c.model, c.cluster, c.training, frac * hbm)
        try:
            return finish(problem, outcome, 0.0)
        except InfeasibleError:
            return None

    small, large = run(lo), run(hi)
    fits_lo = scores.peak_memory_bytes <= lo * hbm
    fits_hi = scores.peak_memory_bytes <= hi * hbm
    assert not (fits_lo & ~fits_hi).any()
    if small is None:
        assert not fits_lo.any()
        return
    assert large is not None, "a limit that some configuration fits became infeasible"
    assert small.stats["configs_feasible"] <= large.stats["configs_feasible"]
    best_small = max(cand.metrics["tokens_per_s"] for cand in small.pareto_front)
    best_large = max(cand.metrics["tokens_per_s"] for cand in large.pareto_front)
    assert best_large >= best_small
    assert all(cand.metrics["peak_memory_bytes"] <= hi * hbm for cand in small.pareto_front)
