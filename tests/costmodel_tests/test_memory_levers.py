"""Memory levers (issue 21 item 2) and FSDP with pipelines (item 3): partial recompute
(Megatron-Core's block method), the precision-aware optimizer, ZeRO-3 / FSDP2 under PP."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.model import run_phases
from costmodel.specs import ParallelConfig
from optimizer.api import resolve_problem
from search_spaces.rules import Context, explain


def _phases(pr, **kw):
    return run_phases(pr.model, pr.cluster, pr.training,
                      ConfigBatch.from_configs([ParallelConfig(**kw)]))


@pytest.fixture(scope="module")
def llama70b():
    return resolve_problem(model="70b", gpus=64, gpu="h100-sxm-80gb", seq_length=4096,
                           global_batch_size=128)


BASE = dict(tp=4, pp=4, dp=4, micro_batch_size=1, precision="bf16", sequence_parallel=True,
            zero_stage=1)


# ---- partial recompute ---------------------------------------------------------------------
def test_partial_recompute_sits_between_none_and_full(llama70b):
    none = _phases(llama70b, **BASE, recompute="none").scores
    full = _phases(llama70b, **BASE, recompute="full").scores
    part = _phases(llama70b, **BASE, recompute="full", recompute_num_layers=10).scores
    assert none.step_time_s[0] < part.step_time_s[0] < full.step_time_s[0]
    assert full.peak_memory_bytes[0] < part.peak_memory_bytes[0] < none.peak_memory_bytes[0]


def test_partial_recompute_is_linear_in_the_recomputed_layers(llama70b):
    # 80 layers on 4 stages: 20 per stage; activations move by the same amount per layer
    acts = [_phases(llama70b, **BASE, recompute="full", recompute_num_layers=n)
            .memory.stages[2].activations[0] for n in (5, 10, 15)]
    assert acts[0] - acts[1] == pytest.approx(acts[1] - acts[2], rel=1e-9)
    rc = [_phases(llama70b, **BASE, recompute="full", recompute_num_layers=n)
          .scores.time_breakdown_s["recompute"][0] for n in (5, 10)]
    assert rc[1] == pytest.approx(2.0 * rc[0], rel=1e-9)


def test_partial_recompute_rules(llama70b):
    ctx = Context(llama70b.model, llama70b.cluster, llama70b.training)
    ok = dict(BASE, recompute="full", recompute_num_layers=10)
    assert explain(ctx, ParallelConfig(**ok)) == []
    bad = [name for name, _ in explain(ctx, ParallelConfig(**dict(ok, recompute="selective")))]
    assert bad == ["partial_recompute"]
    # 20 layers per stage: 20 recomputed is plain full recompute
    bad = [name for name, _ in explain(ctx, ParallelConfig(**dict(ok, recompute_num_layers=20)))]
    assert bad == ["partial_recompute"]
    # interleaved, 2 chunks of 10: N counts per chunk
    inter = dict(ok, schedule="interleaved", virtual_stages=2, recompute_num_layers=10)
    assert "partial_recompute" in [n for n, _ in explain(ctx, ParallelConfig(**inter))]


@pytest.mark.parametrize(("framework", "admitted"), [
    ("megatron", True), ("torchtitan", True), ("deepspeed", False), ("fsdp", False)])
def test_partial_recompute_frameworks(llama70b, framework, admitted):
    # torchtitan expresses it through its config module's PartialFullAC (the first N blocks
    # of each pipeline model part); DeepSpeed and plain FSDP have no such policy
    training = replace(llama70b.training, framework=framework)
    ctx = Context(llama70b.model, llama70b.cluster, training)
    # ZeRO-3 (FSDP2 in torchtitan, which has no ZeRO-1), pp 1: every framework runs it
    ok = ParallelConfig(**dict(BASE, pp=1, dp=16, zero_stage=3, recompute="full",
                               recompute_num_layers=10))
    bad = [name for name, _ in explain(ctx, ok)]
    assert ("partial_recompute" not in bad) == admitted
    # the chunk bound holds for torchtitan too: 80 layers, 80 recomputed is plain full
    if framework == "torchtitan":
        assert bad == []
        full = replace(ok, recompute_num_layers=80)
        assert [name for name, _ in explain(ctx, full)] == ["partial_recompute"]


# ---- precision-aware optimizer -------------------------------------------------------------
def test_precision_aware_optimizer_saves_the_moments_and_grads(llama70b):
    cfg = dict(BASE, recompute="full")
    off = _phases(llama70b, **cfg)
    mom = _phases(llama70b, **cfg, precision_aware_optimizer="bf16_moments")
    grads = _phases(llama70b, **cfg, precision_aware_optimizer="bf16_moments_grads")
    psi = off.params.per_group[2][0]  # a middle stage
    d = 4.0
    st = [p.memory.stages[2] for p in (off, mom, grads)]
    assert st[0].optimizer_states[0] - st[1].optimizer_states[0] == pytest.approx(psi * 4 / d)
    assert st[1].gradients[0] - st[2].gradients[0] == pytest.approx(psi * 2.0)
    # bf16 main gradients go on the wire in bf16; the step streams fewer bytes
    assert grads.data_parallel.grad_bytes[0] == pytest.approx(off.data_parallel.grad_bytes[0] / 2)
    assert grads.data_parallel.optimizer_s[0] < mom.data_parallel.optimizer_s[0] \
        < off.data_parallel.optimizer_s[0]


def test_precision_aware_optimizer_rules(llama70b):
    ctx = Context(llama70b.model, llama70b.cluster, llama70b.training)
    cfg = dict(BASE, recompute="full", precision_aware_optimizer="bf16_moments")
    assert explain(ctx, ParallelConfig(**cfg)) == []
    assert [n for n, _ in explain(ctx, ParallelConfig(**dict(cfg, precision="fp16")))] == [
        "precision_aware_optimizer"]
    fsdp = Context(llama70b.model, llama70b.cluster,
                   replace(llama70b.training, framework="fsdp"))
    assert "precision_aware_optimizer" in [n for n, _ in explain(fsdp, ParallelConfig(**cfg))]


# ---- ZeRO-3 / FSDP2 with pipeline and tensor parallelism -----------------------------------
def test_fsdp_tp_pp_is_admitted_except_in_deepspeed(llama70b):
    cfg = ParallelConfig(**dict(BASE, zero_stage=3, recompute="full"))
    for fw in ("fsdp", "megatron"):
        ctx = Context(llama70b.model, llama70b.cluster, replace(llama70b.training, framework=fw))
        assert explain(ctx, cfg) == [], fw
    ds = Context(llama70b.model, llama70b.cluster,
                 replace(llama70b.training, framework="deepspeed"))
    assert "zero3_no_pp" in [n for n, _ in explain(ds, cfg)]


def test_fsdp2_under_pp_gathers_once_and_keeps_the_stage_unsharded(llama70b):
    pr = replace(llama70b, training=replace(llama70b.training, framework="fsdp"))
    z3 = _phases(pr, **dict(BASE, zero_stage=3, recompute="full"))
    z1 = _phases(pr, **dict(BASE, zero_stage=1, recompute="full"))
    assert bool(z3.sharding.once[0])
    dp = z3.data_parallel
    # one all-gather and one reduce-scatter per step, as many bytes as the distributed
    # optimizer moves
    assert z3.scores.dp_comm_total_s[0] == pytest.approx(dp.reduce_s[0] + dp.gather_s[0])
    assert dp.reduce_s[0] == pytest.approx(z1.data_parallel.reduce_s[0])
    psi = z3.params.per_group[2][0]
    st = z3.memory.stages[2]
    # the stage's 16-bit weights stay gathered; fp32 gradients accumulate unsharded
    assert st.weights[0] == pytest.approx(psi * 2.0)
    assert st.gradients[0] == pytest.approx(psi * 4.0 * (1 + 1 / 4))
    # without a pipeline FSDP keeps resharding: no change there
    flat = _phases(pr, tp=4, pp=1, dp=16, micro_batch_size=1, sequence_parallel=True,
                   zero_stage=3, recompute="full")
    assert not bool(flat.sharding.once[0])
    assert flat.memory.stages[0].weights[0] == 0.0


def test_megatron_fsdp_under_pp_gathers_every_microbatch(llama70b):
    z3 = _phases(llama70b, **dict(BASE, zero_stage=3, recompute="full"))
    assert not bool(z3.sharding.once[0])
    m = z3.scores.microbatches[0]
    dp = z3.data_parallel
    assert z3.scores.dp_comm_total_s[0] == pytest.approx(m * (2 * dp.gather_s[0] + dp.reduce_s[0]))
    assert np.isfinite(z3.scores.step_time_s[0])


# ---- launch flags --------------------------------------------------------------------------
def test_megatron_flags_for_the_levers(llama70b):
    from optimizer.launch.flags import megatron_args

    cfg = ParallelConfig(**dict(BASE, recompute="full", recompute_num_layers=6,
                                precision_aware_optimizer="bf16_moments_grads"))
    args = megatron_args(llama70b.model, llama70b.cluster, llama70b.training, cfg)
    i = args.index("--recompute-granularity")
    assert args[i:i + 6] == ["--recompute-granularity", "full", "--recompute-method", "block",
                             "--recompute-num-layers", "6"]
    i = args.index("--use-precision-aware-optimizer")
    assert args[i:i + 7] == ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                             "--exp-avg-sq-dtype", "bf16", "--main-grads-dtype", "bf16"]
    plain = megatron_args(llama70b.model, llama70b.cluster, llama70b.training,
                          ParallelConfig(**dict(BASE, recompute="full")))
    assert "--use-precision-aware-optimizer" not in plain
    assert plain[plain.index("--recompute-method") + 1] == "uniform"


# ---- activation offload ----------------------------------------------------------------------
def test_activation_offload_moves_activations_to_the_host():
    pr = resolve_problem(model="7b", gpus=8, gpu="h100-sxm-80gb", seq_length=4096,
                         global_batch_size=64)
    cfg = dict(tp=8, pp=1, dp=1, micro_batch_size=2, sequence_parallel=True)
    plain = _phases(pr, **cfg)
    off = _phases(pr, **cfg, cpu_offloading_num_layers=16)
    layer_act = plain.layer.full_activation_bytes[0]
    # 16 of 32 layers leave the GPU, one is in transit
    saved = plain.memory.stages[0].activations[0] - off.memory.stages[0].activations[0]
    assert saved == pytest.approx(15 * layer_act)
    # the transfers beyond the overlap window are on the critical path, and never negative
    assert off.scores.step_time_s[0] >= plain.scores.step_time_s[0]
    ctx = Context(pr.model, pr.cluster, pr.training)
    assert explain(ctx, ParallelConfig(**cfg, cpu_offloading_num_layers=16)) == []
    bad = ParallelConfig(**dict(cfg, tp=4, pp=2), cpu_offloading_num_layers=16)
    assert "activation_offload" in [n for n, _ in explain(ctx, bad)]
    bad = ParallelConfig(**cfg, recompute="full", cpu_offloading_num_layers=16)
    assert "activation_offload" in [n for n, _ in explain(ctx, bad)]


def test_activation_offload_exposes_what_the_host_link_cannot_hide():
    from costmodel.stages import activation_offload_s

    pr = resolve_problem(model="7b", gpus=8, gpu="h100-sxm-80gb", seq_length=4096,
                         global_batch_size=64)
    layer = _phases(pr, tp=8, pp=1, dp=1, micro_batch_size=2, sequence_parallel=True).layer
    slow = activation_offload_s(layer, np.array([4]), 1e9)[0]  # 1 GB/s: fully exposed-ish
    x = layer.full_activation_bytes[0] / 1e9
    assert slow == pytest.approx(4 * (2 * x - layer.forward_s[0] - layer.backward_s[0]))
    assert activation_offload_s(layer, np.array([4]), 1e15)[0] == 0.0
    assert activation_offload_s(layer, np.array([0]), 1e9) is None


def test_moe_partial_recompute_keeps_the_all_to_all_of_the_layers_it_does_not_recompute():
    """The layers partial recompute leaves alone keep a MoE layer's EP all-to-all and its
    dispatcher host stall (before, they were priced as a dense layer's: N = 1 of 4 layers per
    chunk scored 7.32 s against 8.64 s without any recompute, on Mixtral 8x7B)."""
    from costmodel.batch import ConfigBatch
    from costmodel.loaders import load_cluster, load_model
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = load_model("mixtral-8x7b")
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 4, "gpus_per_node": 8})
    cfgs = [ParallelConfig(tp=2, pp=4, dp=4, ep=4, schedule="interleaved", virtual_stages=2,
                           recompute=r, recompute_num_layers=n)
            for r, n in (("none", 0), ("full", 1), ("full", 2), ("full", 3), ("full", 0))]
    t = score(model, cluster, TrainingSpec(4096, 256), ConfigBatch.from_configs(cfgs)).step_time_s
    assert all(a < b for a, b in zip(t, t[1:], strict=False)), t  # none < N=1 < 2 < 3 < full
