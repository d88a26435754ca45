"""Issue 23's physics: attention kernels per generation, Blackwell's own GEMM fraction, fp8
recipes (NVFP4 at the FP4 peak), NVL72 domains as one NCCL node, MFU over the bf16 peak."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import calibration as cal
from costmodel import hardware as hw
from costmodel.batch import ConfigBatch
from costmodel.groups import nccl_system, resolve_groups
from costmodel.model import score
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec

LLAMA8B = ModelSpec(name="llama3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                    num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, gated_mlp=True)


def _score(cluster, training, **par):
    return score(LLAMA8B, cluster, training, ConfigBatch.from_configs([ParallelConfig(**par)]))


def test_attention_kernel_by_framework_and_architecture():
    # Ampere: unchanged whatever the framework (TE runs FlashAttention-2 there)
    assert cal.efficiency_for(80, "cudnn").attention == cal.efficiency_for(80).attention == 0.35
    hopper_fa2, hopper_cudnn = cal.efficiency_for(90), cal.efficiency_for(90, "cudnn")
    assert hopper_fa2.attention == hopper_fa2.attention_backward == 0.18
    assert hopper_cudnn.attention > 0.35 * 1.2 and hopper_cudnn.attention_backward > 0.35 * 1.2
    # published bounds: FA3 reaches at most 75% of H100's bf16 peak
    for (_, _), (fwd, bwd) in cal.ATTENTION_KERNELS.items():
        assert 0 < bwd <= fwd <= 0.75
    assert cal.FRAMEWORKS["megatron"].kernels.attention_kernel == "cudnn"
    assert cal.FRAMEWORKS["fsdp"].kernels.attention_kernel == "flash2"
    # sm103 (Blackwell Ultra) has its own forward
    assert cal.efficiency_for(103, "cudnn").attention > cal.efficiency_for(100, "cudnn").attention


def test_blackwell_has_its_own_efficiency():
    assert cal.BY_ARCH["blackwell"] is not cal.BY_ARCH["hopper"]
    assert cal.BY_ARCH["blackwell"].gemm != cal.BY_ARCH["hopper"].gemm


def test_backward_attention_uses_its_own_efficiency():
    cluster = hw.get_cluster_preset("dgx-h100", 1)
    tr = TrainingSpec(seq_length=8192, global_batch_size=8)
    base = _score(cluster, tr, dp=8, precision="bf16")
    eff = cal.efficiency_for(90, "cudnn")
    slower = score(LLAMA8B, cluster, tr, ConfigBatch.from_configs([ParallelConfig(dp=8)]),
                   efficiency=eff.with_(attention_bwd=eff.attention_backward / 2))
    assert slower.step_time_s[0] > base.step_time_s[0]


def test_nvfp4_runs_the_linears_at_the_fp4_peak():
    cluster = hw.get_cluster_preset("dgx-b200", 1)
    t = {r: _score(cluster, TrainingSpec(seq_length=8192, global_batch_size=16, fp8_recipe=r),
                   dp=8, micro_batch_size=2, precision="fp8").step_time_s[0]
         for r in ("delayed", "tensorwise", "nvfp4")}
    assert t["nvfp4"] < t["delayed"] < t["tensorwise"]  # current scaling: one more amax pass
    # a GPU without an FP4 peak runs an nvfp4 request at the fp8 peak
    h100 = hw.get_cluster_preset("dgx-h100", 1)
    a = _score(h100, TrainingSpec(seq_length=4096, global_batch_size=8, fp8_recipe="nvfp4"),
               dp=8, precision="fp8")
    b = _score(h100, TrainingSpec(seq_length=4096, global_batch_size=8, fp8_recipe="delayed"),
               dp=8, precision="fp8")
    assert a.step_time_s[0] > b.step_time_s[0] * 0.9


def test_nvl72_domain_is_one_nccl_node():
    rack = hw.get_cluster_preset("gb200-nvl72", 8)  # 32 GPUs, 8 hosts of one domain
    sys = nccl_system(rack)
    assert sys.mnnvl and sys.gpus_per_node == 72 and sys.nics_per_node == 4 * 18
    g = resolve_groups(rack, np.array([1]), np.array([1]), np.array([32]))
    assert g.dp_nodes[0] == 1  # the DP group spans 8 hosts, one domain
    hosts = dataclasses.replace(rack, gpus_per_domain=None)
    assert not nccl_system(hosts).mnnvl
    assert resolve_groups(hosts, np.array([1]), np.array([1]), np.array([32])).dp_nodes[0] == 8
    tr = TrainingSpec(seq_length=4096, global_batch_size=32)
    on = _score(rack, tr, dp=32, precision="bf16")
    off = _score(hosts, tr, dp=32, precision="bf16")
    assert on.dp_comm_total_s[0] < off.dp_comm_total_s[0]


def test_mfu_over_the_bf16_peak_and_low_precision_utilization():
    cluster = hw.get_cluster_preset("dgx-h100", 1)
    tr = TrainingSpec(seq_length=4096, global_batch_size=8)
    s = _score(cluster, tr, dp=8, precision="fp8")
    gpu = cluster.gpu
    ratio = gpu.peak_flops_per_s["fp8"] / gpu.peak_flops_per_s["bf16"]
    assert s.mfu[0] == pytest.approx(s.low_precision_utilization[0] * ratio)
    b = _score(cluster, tr, dp=8, precision="bf16")
    assert b.mfu[0] == pytest.approx(b.low_precision_utilization[0])
    assert "low_precision_utilization" in s.row(0)


def test_interleaved_p2p_overlap_hides_transfers():
    cluster = hw.get_cluster_preset("dgx-h100", 2)
    par = dict(tp=2, pp=4, dp=2, schedule="interleaved", virtual_stages=2, precision="bf16")
    a = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=64), **par)
    b = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=64,
                                     overlap_p2p_comm=True), **par)
    assert b.time_breakdown_s["pp_comm"][0] < a.time_breakdown_s["pp_comm"][0]


def test_fp8_parameter_gather_halves_the_fsdp_gathers():
    cluster = hw.get_cluster_preset("dgx-h100", 2)
    par = dict(dp=16, zero_stage=3, precision="fp8")
    a = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16, framework="fsdp"),
               **par)
    b = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16, framework="fsdp",
                                     fp8_param_gather=True), **par)
    assert b.dp_comm_total_s[0] < a.dp_comm_total_s[0]
    c = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16, framework="fsdp",
                                     fp8_param_gather=True), dp=16, zero_stage=3,
               precision="bf16")
    d = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16, framework="fsdp"),
               dp=16, zero_stage=3, precision="bf16")
    assert c.step_time_s[0] == d.step_time_s[0]  # bf16 runs gather in bf16 whatever the flag


def test_bf16_gradient_reduction_halves_the_dp_bytes():
    cluster = hw.get_cluster_preset("dgx-h100", 2)
    a = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16), dp=16,
               zero_stage=1, precision="bf16")
    b = _score(cluster, TrainingSpec(seq_length=4096, global_batch_size=16,
                                     grad_reduce_in_bf16=True), dp=16, zero_stage=1,
               precision="bf16")
    assert b.dp_comm_total_s[0] < a.dp_comm_total_s[0]
    # Megatron's DDP buffer takes the parameters' dtype with the flag: bf16 gradients (2 bytes
    # instead of 4) and the step's fp32 cast of the distributed optimizer's shard (4 / 16)
    ga, gb = (s.memory_breakdown_bytes["gradients"][0] for s in (a, b))
    assert gb < ga
    assert b.peak_memory_bytes[0] < a.peak_memory_bytes[0]
