"""Context parallelism: the dimension, its rules, the shard, the CP ops, memory, flags."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.batch import ConfigBatch
from costmodel.cp import cp_a2a_size, kv_chunk_bytes
from costmodel.model import run_phases, score
from costmodel.shard import shard_of
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.api import resolve_problem


@pytest.fixture(scope="module")
def p70b():
    return resolve_problem(model="llama3-70b", gpus=64, gpu="h100-sxm-80gb",
                           seq_length=131072, global_batch_size=8)


def _cfg(**kw):
    base = dict(tp=8, pp=1, cp=8, dp=1, micro_batch_size=1, recompute="full",
                sequence_parallel=True, zero_stage=1)
    base.update(kw)
    return ParallelConfig(**base)


def _phases(problem, configs):
    return run_phases(problem.model, problem.cluster, problem.training,
                      ConfigBatch.from_configs(configs))


# ---- cp = 1 is today's model ---------------------------------------------------------------
def test_cp1_rows_unchanged_beside_cp_rows(p70b):
    """A batch mixing cp = 1 and cp > 1 configurations scores its cp = 1 rows exactly as a
    batch of those rows alone (the CP path leaves them alone; tests/test_golden.py pins them
    against the pre-CP model)."""
    plain = [_cfg(cp=1, dp=8), _cfg(cp=1, dp=4, pp=2, recompute="selective"),
             _cfg(cp=1, tp=4, dp=16, zero_stage=0, sequence_parallel=False)]
    with_cp = plain + [_cfg(cp=8), _cfg(cp=4, dp=2, cp_comm_type="all_gather")]
    a = score(p70b.model, p70b.cluster, p70b.training, ConfigBatch.from_configs(plain))
    b = score(p70b.model, p70b.cluster, p70b.training, ConfigBatch.from_configs(with_cp))
    for name in ("step_time_s", "peak_memory_bytes", "mfu", "observed_memory_bytes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name)[:3])
    for k, v in a.time_breakdown_s.items():
        np.testing.assert_array_equal(v, b.time_breakdown_s[k][:3])


# ---- shard -----------------------------------------------------------------------------------
def test_shard_divides_tokens(p70b):
    b = ConfigBatch.from_configs([_cfg(cp=1, dp=8), _cfg(cp=8)])
    sh = shard_of(p70b.model, p70b.training, b)
    assert sh.tokens[0] == 131072 and sh.tokens[1] == 131072 / 8
    assert sh.seq == 131072  # the key range every local query chunk attends to


def test_attention_flops_are_one_cp_th(p70b):
    ph = _phases(p70b, [_cfg(cp=1, dp=8), _cfg(cp=8)])
    attn = ph.distinct_layers.times["attn"]
    order = np.argsort(attn)
    small, big = attn[order[0]], attn[order[1]]  # launch overhead included: ~8x
    assert big / small == pytest.approx(8.0, rel=1e-3)


# ---- ops per comm type ----------------------------------------------------------------------
def test_p2p_ring_hidden_at_long_sequence(p70b):
    """Llama-3-70B at 128k, cp = 8 across nodes (tp 8, stride 8): a ring step's attention
    (~1 ms) covers the 8.4 MB K/V transfer (~0.2 ms): only the overlap share, the extra
    launches and the output corrections are exposed (modern-training.md 1.4 worked example)."""
    ph = _phases(p70b, [_cfg(cp=8)])
    lay = ph.layer
    kv = ph.distinct_layers.times["cp.kv"][0]
    attn = ph.distinct_layers.times["attn"][0]
    assert kv < attn / 8  # the per-step transfer is shorter than a step's attention
    fwd_cp = lay.cp_comm_s[0]
    assert 0 < fwd_cp < 0.1 * (lay.forward_s[0] + lay.backward_s[0])


def test_kv_chunk_bytes_worked_example(p70b):
    b = ConfigBatch.from_configs([_cfg(cp=8)])
    sh = shard_of(p70b.model, p70b.training, b)
    # 2 b s_c g_l d_h e = 2 * 16384 * 1 * 128 * 2 = 8.39 MB (modern-training.md 1.4)
    assert kv_chunk_bytes(sh, 2.0)[0] == pytest.approx(8.39e6, rel=1e-3)


def test_all_gather_exposed_and_a2a_priced():
    p = resolve_problem(model="llama3-8b", gpus=64, gpu="h100-sxm-80gb",
                        seq_length=65536, global_batch_size=8)
    configs = [_cfg(tp=1, cp=8, dp=8, sequence_parallel=False, cp_comm_type=c)
               for c in ("p2p", "all_gather", "a2a", "a2a+p2p")]
    ph = _phases(p, configs)
    t = ph.distinct_layers.times
    lay = ph.layer
    # all_gather: gather forward; gather again + reduce-scatter backward, none hidden; full
    # recompute gathers once more
    i = [c.cp_comm_type for c in configs].index("all_gather")
    ag = t["cp.allgather"][np.argmax(t["cp.allgather"])]
    rs = t["cp.reducescatter"][np.argmax(t["cp.reducescatter"])]
    assert ag > 0 and rs > 0
    assert lay.cp_comm_s[i] == pytest.approx(3 * ag + rs, rel=1e-9)
    # a2a (8 KV heads, tp 1: 8 divides them): four all-to-alls forward, four backward
    j = [c.cp_comm_type for c in configs].index("a2a")
    a2a = t["cp.a2a.qkv"].max() + t["cp.a2a.out"].max()
    assert a2a > 0 and lay.cp_comm_s[j] == pytest.approx(3 * a2a, rel=1e-9)
    assert np.all(np.isfinite(lay.cp_comm_s)) and np.all(lay.cp_comm_s > 0)


def test_hierarchical_group_size():
    # Llama-3-8B: 32 heads, 8 KV heads; tp 1 on 8-GPU nodes, cp 16: a2a over 8, ring over 2
    assert int(cp_a2a_size(8, 32, 8, 1, 16)) == 8
    # tp 8 leaves one KV head per rank: no a2a group
    assert int(cp_a2a_size(8, 32, 8, 8, 16)) == 1
    # tp 2, cp 4: a2a over 4 fits a node (2 * 4 = 8) and 4 KV heads, but must stay below cp
    assert int(cp_a2a_size(8, 32, 8, 2, 4)) == 2


# ---- gradient reduction over dp x cp, memory -------------------------------------------------
def test_gradient_reduction_over_dp_times_cp(p70b):
    ph = _phases(p70b, [_cfg(cp=1, dp=8), _cfg(cp=8, dp=1), _cfg(cp=2, dp=4)])
    total = ph.data_parallel.total_s
    assert total[0] == pytest.approx(total[1], rel=1e-12)
    assert total[0] == pytest.approx(total[2], rel=1e-12)
    assert ph.data_parallel.exposed_s[1] > 0  # dp = 1 yet reduced over the CP ranks
    # microbatches count the data-parallel replicas only: 8 / (1 * dp)
    np.testing.assert_array_equal(ph.scores.microbatches, [1.0, 8.0, 2.0])


def test_activations_divided_by_cp(p70b):
    ph = _phases(p70b, [_cfg(cp=1, dp=8, recompute="none"), _cfg(cp=8, recompute="none")])
    act = ph.layer.activation_bytes
    assert act[0] / act[1] == pytest.approx(8.0, rel=1e-12)
    assert ph.layer.cp_buffer_bytes[1] > 0 and ph.layer.cp_buffer_bytes[0] == 0
    assert ph.scores.peak_memory_bytes[1] < ph.scores.peak_memory_bytes[0]


# ---- rules ---------------------------------------------------------------------------------
def _violations(problem, configs):
    from search_spaces.rules import Context, violations

    ctx = Context(problem.model, problem.cluster, problem.training)
    v = violations(ctx, ConfigBatch.from_configs(configs))
    return {k: m.tolist() for k, m in v.items()}


def test_rules():
    p = resolve_problem(model="llama3-70b", gpus=64, gpu="h100-sxm-80gb",
                        seq_length=8192 + 16, global_batch_size=8)
    v = _violations(p, [_cfg(cp=8),  # 8208 % (2*8*8): SP needs tp too
                        _cfg(cp=8, sequence_parallel=False, tp=8),  # 8208 % 16 = 0
                        _cfg(cp=1, dp=8, cp_comm_type="a2a"),  # only p2p at cp = 1
                        _cfg(cp=8, sequence_parallel=False, cp_comm_type="a2a"),  # g_l = 1
                        _cfg(cp=3, dp=1, tp=8, pp=1, sequence_parallel=False)])
    assert v["cp_splits_sequence"] == [True, False, False, False, False]  # 8208 % 6 == 0
    assert v["cp_comm_type"] == [False, False, True, True, False]
    assert v["cp_within_world"][4] and v["world_size"][4]
    no_flash = resolve_problem(model="llama3-70b", gpus=64, gpu="h100-sxm-80gb",
                               training=TrainingSpec(seq_length=8192, global_batch_size=8,
                                                     flash_attention=False))
    assert _violations(no_flash, [_cfg(cp=8)])["cp_needs_flash_attention"] == [True]


def test_default_space_offers_cp_only_for_long_sequences():
    from optimizer.search.base import problem_space

    short = resolve_problem(model="65b", gpus=16)
    sp = problem_space(short, None)
    assert sp.cp == (1,) and sp.cp_comm_type == ("p2p",)
    assert "cp" not in sp.fingerprint_dict() and "cp_comm_type" not in sp.fingerprint_dict()
    long = resolve_problem(model="llama3-70b", gpus=64, gpu="h100-sxm-80gb",
                           seq_length=131072, global_batch_size=8)
    sl = problem_space(long, None)
    assert sl.cp == (1, 2, 4, 8, 16, 32, 64) and "cp" in sl.fingerprint_dict()


# ---- flags -----------------------------------------------------------------------------------
def test_launch_flags(p70b):
    from optimizer.launch.flags import megatron_args, torchtitan_args

    args = megatron_args(p70b.model, p70b.cluster, p70b.training, _cfg(cp=8))
    i = args.index("--context-parallel-size")
    assert args[i + 1] == "8" and args[args.index("--cp-comm-type") + 1] == "p2p"
    p8 = resolve_problem(model="llama3-8b", gpus=64, gpu="h100-sxm-80gb",
                         seq_length=131072, global_batch_size=8)
    hier = _cfg(tp=1, cp=16, dp=4, sequence_parallel=False, cp_comm_type="a2a+p2p")
    a = megatron_args(p8.model, p8.cluster, p8.training, hier)
    j = a.index("--hierarchical-context-parallel-sizes")
    assert a[j + 1:j + 3] == ["8", "2"]
    assert "--context-parallel-size" not in megatron_args(
        p70b.model, p70b.cluster, p70b.training, _cfg(cp=1, dp=8))
    tt = torchtitan_args(p70b.model, p70b.cluster, p70b.training, _cfg(cp=8))
    assert tt[tt.index("--parallelism.context_parallel_degree") + 1] == "8"


# ---- acceptance ------------------------------------------------------------------------------
def test_long_sequence_recommends_cp():
    from optimizer.api import optimize

    # at 512k tokens a no-CP layout fits since ZeRO-3 joins pipelines in the default space
    # (tp8 pp16 dp2 Z3 fp8, full recompute: 76.8 GiB at 13% MFU); CP is still the pick
    res = optimize(model="llama3-70b", gpus=256, gpu="h100-sxm-80gb", seq_length=524288,
                   global_batch_size=8)
    rec = res.pareto_front[res.recommended_index].config
    assert rec.cp > 1
    # at 1M tokens nothing fits without CP, and the answer says so
    res = optimize(model="llama3-70b", gpus=256, gpu="h100-sxm-80gb", seq_length=1048576,
                   global_batch_size=8)
    assert res.pareto_front[res.recommended_index].config.cp > 1
    assert res.stats["configs_feasible_without_cp"] == 0


def test_trace_lists_cp_ops(p70b):
    from costmodel.trace import trace

    t = trace(p70b.model, p70b.cluster, p70b.training, _cfg(cp=8))
    kv = next(o for o in t.ops if o.name == "cp.kv.fwd")
    assert (kv.count, kv.ranks, kv.nodes) == (7.0, 8, 8)
    assert kv.nbytes == pytest.approx(8.39e6, rel=1e-3)


def test_launch_warns_where_a_framework_has_no_such_cp(p70b):
    from optimizer.launch.flags import launch_warnings

    w = launch_warnings(_cfg(cp=8), model=p70b.model, cluster=p70b.cluster,
                        training=p70b.training)
    assert any("context parallelism (cp=8, p2p)" in x for x in w)
    assert not any("context parallelism" in x for x in launch_warnings(_cfg(cp=1, dp=8)))


def test_breakdown_reports_cp_comm(p70b):
    ph = _phases(p70b, [_cfg(cp=1, dp=8), _cfg(cp=8), _cfg(cp=8, cp_comm_type="all_gather")])
    tb = ph.scores.time_breakdown_s
    assert tb["cp_comm"][0] == 0.0 and tb["cp_comm"][1] > 0 and tb["cp_comm"][2] > 0
    total = sum(v for v in tb.values())
    np.testing.assert_allclose(total, ph.scores.step_time_s, rtol=1e-9)
    assert np.all(tb["compute"] > 0) and np.all(tb["recompute"] > 0)


# ---- property: cp = 1 scores do not see the CP path ---------------------------------------
_SPACE = {}


def _valid_cp_space():
    if not _SPACE:
        from search_spaces import Context, default_space, enumerate_valid

        p = resolve_problem(model="llama3-8b", gpus=16, gpu="h100-sxm-80gb",
                            seq_length=32768, global_batch_size=16)
        valid = enumerate_valid(Context(p.model, p.cluster, p.training),
                                default_space(p.model, p.cluster, p.training))
        _SPACE.update(problem=p, valid=valid, plain=np.flatnonzero(valid.cp == 1),
                      cp=np.flatnonzero(valid.cp > 1))
    return _SPACE


def test_cp_space_has_every_comm_type():
    v = _valid_cp_space()["valid"]
    assert set(np.unique(v.cp)) == {1, 2, 4, 8, 16}
    assert set(np.unique(v.cp_comm_type[v.cp > 1])) == {0, 1, 2, 3}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_property_cp1_scores_equal_alone_and_beside_cp(i, j):
    """Any valid cp = 1 configuration scores bit for bit the same alone and in a batch with a
    cp > 1 one (the CP columns, keys and ops leave it untouched); the CP configuration's
    breakdown sums to its step time and is finite."""
    s = _valid_cp_space()
    p, valid = s["problem"], s["valid"]
    a = int(s["plain"][i % len(s["plain"])])
    b = int(s["cp"][j % len(s["cp"])])
    alone = score(p.model, p.cluster, p.training, valid.take(np.array([a])))
    both = score(p.model, p.cluster, p.training, valid.take(np.array([a, b])))
    for name in ("step_time_s", "peak_memory_bytes", "observed_memory_bytes", "mfu"):
        assert getattr(alone, name)[0] == getattr(both, name)[0], (name, valid.config(a))
    for k, t in alone.time_breakdown_s.items():
        assert t[0] == both.time_breakdown_s[k][0], k
    assert both.time_breakdown_s["cp_comm"][0] == 0.0
    total = sum(t[1] for t in both.time_breakdown_s.values())
    assert np.isfinite(both.step_time_s[1]), valid.config(b)
    assert np.isclose(total, both.step_time_s[1], rtol=1e-9), valid.config(b)
    assert all(t[1] >= -1e-12 * both.step_time_s[1] for t in both.time_breakdown_s.values())
