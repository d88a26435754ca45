"""Selective recompute by modules (issue 21 item 2; costmodel.recompute): Megatron-Core's
--recompute-modules mlp / layernorm / moe_act next to the attention core, in memory (the
activations Korthikanti et al. 2022 count for those modules are not stored), in time (their
forward re-runs), in the rules and in the default space."""

from __future__ import annotations

import pytest

from costmodel.batch import ConfigBatch
from costmodel.model import run_phases
from costmodel.specs import ParallelConfig
from optimizer.api import resolve_problem
from search_spaces.rules import Context, explain
from search_spaces.space import default_space


def _phases(pr, **kw):
    return run_phases(pr.model, pr.cluster, pr.training,
                      ConfigBatch.from_configs([ParallelConfig(**kw)]))


@pytest.fixture(scope="module")
def llama70b():
    return resolve_problem(model="70b", gpus=64, gpu="h100-sxm-80gb", seq_length=4096,
                           global_batch_size=128)


@pytest.fixture(scope="module")
def qwen3_moe():
    return resolve_problem(model="qwen3-30b-a3b", gpus=16, gpu="h100-sxm-80gb",
                           seq_length=4096, global_batch_size=128)


BASE = dict(tp=4, pp=4, dp=4, micro_batch_size=1, precision="bf16", sequence_parallel=True,
            zero_stage=1, recompute="selective")


def _act(pr, stage=0, **kw):
    return _phases(pr, **{**BASE, **kw}).memory.stages[stage].activations[0]


def _recompute_s(pr, **kw):
    return _phases(pr, **{**BASE, **kw}).scores.time_breakdown_s["recompute"][0]


def test_mlp_recompute_frees_the_mlp_activations_korthikanti(llama70b):
    # Llama 2 70B: h 8192, f 28672 (SwiGLU), s 4096, b 1, t 4 with SP, bf16. The MLP
    # checkpoint frees FC1's input 2sbh/t (its norm is fused into FC1) and the gated MLP's
    # 4sbf/t activation input + 2sbf/t FC2 input (Korthikanti et al. 4.1); the first of 4
    # stages has 20 layers and min(p - i, m) = 4 micro-batches in flight, and one layer's
    # recomputed MLP is live in its backward
    m = llama70b.model
    s, t = 4096, 4
    per_layer = 2 * s * m.hidden_size / t + 6 * s * m.ffn_hidden_size / t
    freed = _act(llama70b, recompute_modules="core_attn") - _act(
        llama70b, recompute_modules="core_attn+mlp")
    assert freed == pytest.approx((20 * 4 - 1) * per_layer, rel=1e-9)


def test_mlp_recompute_reruns_the_mlp_forward(llama70b):
    core = _recompute_s(llama70b, recompute_modules="core_attn")
    mlp = _recompute_s(llama70b, recompute_modules="mlp")
    both = _recompute_s(llama70b, recompute_modules="core_attn+mlp")
    assert both == pytest.approx(core + mlp, rel=1e-9)  # the modules' re-runs add up
    # the MLP is about 2/3 of a Llama layer's GEMM FLOPs: its re-run costs more than the
    # fused core's and less than the whole forward (full recompute)
    full = _recompute_s(llama70b, recompute="full")
    assert core < mlp < full


def test_selective_without_core_attn_keeps_the_core(llama70b):
    # "mlp" alone: the fused core is not re-run (no attention forward in the recompute pass)
    # and its output is kept: memory equals core_attn+mlp's less nothing it frees
    core_only = _phases(llama70b, **BASE, recompute_modules="core_attn").scores
    none = _phases(llama70b, **{**BASE, "recompute": "none"}).scores
    assert core_only.time_breakdown_s["recompute"][0] > 0.0
    assert none.time_breakdown_s["recompute"][0] == 0.0
    assert _act(llama70b, recompute_modules="mlp") >= _act(
        llama70b, recompute_modules="core_attn+mlp")


def test_moe_layernorm_and_moe_act(qwen3_moe):
    kw = dict(tp=1, pp=1, dp=16, ep=8, micro_batch_size=1, zero_stage=1,
              sequence_parallel=False)
    core = _phases(qwen3_moe, **{**BASE, **kw, "recompute_modules": "core_attn"})
    mods = _phases(qwen3_moe, **{**BASE, **kw, "recompute_modules": "layernorm+moe_act"})
    assert mods.memory.stages[0].activations[0] < core.memory.stages[0].activations[0]
    # norm and activation re-runs are memory-bound passes, cheaper than the fused core's
    assert 0.0 < mods.scores.time_breakdown_s["recompute"][0]
    assert (mods.scores.time_breakdown_s["recompute"][0]
            < core.scores.time_breakdown_s["recompute"][0])


@pytest.mark.parametrize("kw, broken", [
    (dict(recompute_modules="mlp"), []),
    (dict(recompute_modules="core_attn+mlp"), []),
    (dict(recompute_modules="mlp", recompute="none"), ["recompute_modules"]),
    (dict(recompute_modules="mlp", recompute="full"), ["recompute_modules"]),
    # a dense Llama layer's norms are fused into linear_qkv / linear_fc1 (TE spec): no-op
    (dict(recompute_modules="layernorm"), ["recompute_modules"]),
    (dict(recompute_modules="moe_act"), ["recompute_modules"]),
])
def test_rules_dense(llama70b, kw, broken):
    ctx = Context(llama70b.model, llama70b.cluster, llama70b.training)
    assert [n for n, _ in explain(ctx, ParallelConfig(**{**BASE, **kw}))] == broken


def test_rules_moe_and_frameworks(qwen3_moe, llama70b):
    ctx = Context(qwen3_moe.model, qwen3_moe.cluster, qwen3_moe.training)
    kw = dict(BASE, tp=1, pp=1, dp=16, ep=8, sequence_parallel=False)
    assert explain(ctx, ParallelConfig(**kw, recompute_modules="layernorm+moe_act")) == []
    # Qwen3-30B-A3B has no dense layer: nothing for "mlp" to recompute
    assert [n for n, _ in explain(ctx, ParallelConfig(**kw, recompute_modules="mlp"))] == [
        "recompute_modules"]
    ds = resolve_problem(model="70b", gpus=64, gpu="h100-sxm-80gb", seq_length=4096,
                         global_batch_size=128, training={"framework": "deepspeed"})
    dctx = Context(ds.model, ds.cluster, ds.training)
    assert "recompute_modules" in [n for n, _ in explain(
        dctx, ParallelConfig(**BASE, recompute_modules="mlp"))]


def test_default_space(llama70b, qwen3_moe):
    assert default_space(llama70b.model, llama70b.cluster,
                         llama70b.training).recompute_modules == ("core_attn", "mlp")
    assert default_space(qwen3_moe.model, qwen3_moe.cluster,
                         qwen3_moe.training).recompute_modules == ("core_attn",
                                                                   "layernorm+moe_act")
