"""The validation harness (issue 3): mapping of published entries, Spearman, the CLI, and the
CI guard that runs every usable entry of ../shared/validation and asserts the accuracy
thresholds (a little looser than the issue's targets).

The accuracy tests fail until the cost model is calibrated; they are the guard that keeps
accuracy from silently regressing afterwards.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from costmodel.errors import InputError
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.cli.validate import main as validate_main
from optimizer.validation import published as v

# --------------------------------------------------------------------------------------------
# Hand-picked entries, trimmed copies of ../shared/validation/published_runs.yaml (one per
# group), so the mapping tests do not depend on the data folder.
# --------------------------------------------------------------------------------------------
SELENE = ("8x NVIDIA Mellanox HDR 200 Gb/s InfiniBand HCAs per node for application traffic "
          "(+2 for storage); 3-level fat-tree, 850 switches")
OPA = ("Omni-Path Architecture (OPA), '4 OmniPath links' per node, fully dedicated NCCL subnet "
       "(README). Link speed 100 Gb/s each is from BLOOM paper recollection - not verified here")
BLOOM_FP16 = ("fp16 mixed (inferred: text at 02-28 says bf16 optimizer testing starts there, "
              "earlier runs grad-accumulate in fp16)")

SC21_76B = {
    "id": "megatron_sc21_table1_76p1B", "group": "megatron_sc21_weak_scaling",
    "model": {"name": "GPT 76.1B", "layers": 60, "hidden": 10240, "heads": 80,
              "ffn_hidden": 40960, "vocab": 51200, "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 SXM4 80GB", "gpu_memory_gb": 80, "gpus_per_node": 8,
                 "inter_node": SELENE, "num_gpus": 1024},
    "parallel": {"tp": 8, "pp": 4, "dp": 32, "vpp": 3, "micro_batch": 2, "global_batch": 1792,
                 "recompute": "full (--activations-checkpoint-method uniform, 1 layer per "
                              "checkpoint)",
                 "sequence_parallel": False, "zero_stage": 0,
                 "precision": "fp16 mixed precision (script: --fp16 --loss-scale 8192)",
                 "ddp_impl": "local"},
    "measured": {"tflops_per_gpu": 140},
    "derived": {"iteration_time_s": 16.06},
}
KORTHIKANTI_175B_SEL = {
    "id": "korthikanti_table5_175B_seqpar_selective", "group": "korthikanti_end_to_end",
    "source": {"location": "Table 3 (configs) + Table 5 (end-to-end iteration time, MFU, HFU)"},
    "model": {"name": "GPT 175B (GPT-3)", "layers": 96, "hidden": 12288, "heads": 96,
              "ffn_hidden": 49152, "vocab": 51200, "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 SXM4 80GB", "gpus_per_node": 8, "inter_node": SELENE,
                 "num_gpus": 64},
    "parallel": {"tp": 8, "pp": 8, "dp": 1, "vpp": 3, "micro_batch": 1, "global_batch": 64,
                 "recompute": "selective (attention core: QK^T, softmax, softmax-dropout, "
                              "attn-over-V)",
                 "sequence_parallel": True, "zero_stage": 0,
                 "precision": "16-bit mixed precision (paper: mixed precision on Selene)",
                 "framework": "Megatron-LM"},
    "measured": {"iteration_time_s": 13.75, "mfu_pct": 51.4},
}
KORTHIKANTI_T4 = {
    "id": "korthikanti_table4_22B_layer_selective_recompute", "group": "korthikanti_per_layer",
    "source": {"location": "Table 4 (time for fwd+bwd of ONE transformer layer of the 22B "
                           "model)"},
    "model": {"name": "GPT 22B", "layers": 48, "hidden": 6144, "heads": 64, "ffn_hidden": 24576,
              "vocab": 51200, "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 SXM4 80GB", "gpus_per_node": 8, "num_gpus": 8},
    "parallel": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 4, "global_batch": 4,
                 "recompute": "selective", "sequence_parallel": False,
                 "precision": "16-bit mixed"},
    "measured": {"per_layer_forward_ms": 7.7, "per_layer_backward_ms": 13.2,
                 "per_layer_combined_ms": 20.9},
}
BLOOM_000 = {
    "id": "bloom_prequel_000", "group": "bloom_prequel_config_sweep",
    "model": {"name": "BLOOM candidate 181B", "layers": 72, "hidden": 14336, "heads": 64,
              "ffn_hidden": 57344, "vocab": "~250k (250,680-token tokenizer)", "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 80GB", "gpu_memory_gb": 80, "gpus_per_node": 8,
                 "inter_node": OPA, "num_gpus": 384},
    "parallel": {"tp": 8, "pp": 12, "dp": 4, "micro_batch": 1, "global_batch": 2048,
                 "recompute": "full (DeepSpeed activation checkpointing assumed, as in final "
                              "setup)",
                 "sequence_parallel": False, "zero_stage": 1, "precision": BLOOM_FP16,
                 "framework": "Megatron-DeepSpeed + DeepSpeed"},
    "measured": {"iteration_time_s": 143.31, "tflops_per_gpu": 112.49,
                 "max_gpu_mem_GB_nvidia_smi_first_last_node": 29},
}
BLOOM_110_OOM = {
    "id": "bloom_prequel_110", "group": "bloom_prequel_config_sweep",
    "model": {"name": "BLOOM candidate 206B", "layers": 82, "hidden": 14336, "heads": 128,
              "ffn_hidden": 57344, "vocab": "~250k (250,680-token tokenizer)", "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 80GB", "gpu_memory_gb": 80, "gpus_per_node": 8,
                 "inter_node": OPA, "num_gpus": 384},
    "parallel": {"tp": 4, "pp": 12, "dp": 8, "micro_batch": 2, "global_batch": 2048,
                 "recompute": "full (DeepSpeed activation checkpointing assumed, as in final "
                              "setup)",
                 "sequence_parallel": False, "zero_stage": 1,
                 "precision": "bf16 + new BF16_Optimizer (fp32 grad accumulation; ~4 "
                              "bytes/param extra unsharded) ; pp-partition type:transformer|"
                              "embedding",
                 "framework": "Megatron-DeepSpeed + DeepSpeed"},
    "measured": {"oom": True, "oom_reliable": False},
}
LLMFOUNDRY_080 = {
    "id": "llmfoundry_080_30b_a100_80gb_amp_bf16_8gpu_s4096",
    "group": "llmfoundry_mpt_benchmarks",
    "model": {"name": "MPT-30b", "layers": 48, "hidden": 7168, "heads": 56, "ffn_hidden": 28672,
              "vocab": 50368, "seq_len": 4096,
              "arch_notes": "MPT: ALiBi, no biases, GeLU 4x MLP, FlashAttention"},
    "hardware": {"gpu": "NVIDIA A100 80GB", "gpu_memory_gb": 80, "num_gpus": 8,
                 "gpus_per_node": "8 (assumed)",
                 "inter_node": "1600 Gbps node-node interconnect (RoCE) per README section "
                               "title"},
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 168,
                 "global_batch_tokens": 688128, "recompute": "full activation checkpointing",
                 "zero_stage": "FSDP FULL_SHARD (ZeRO-3 equivalent)",
                 "precision": "amp_bf16 (MP mode DEFAULT)",
                 "framework": "MosaicML Composer + PyTorch FSDP (llm-foundry)"},
    "measured": {"throughput_samples_per_s": 1.0, "throughput_tokens_per_s": 6513.0,
                 "throughput_tokens_per_s_per_gpu": 814.0},
}
LLMFOUNDRY_40GB_PER_GPU_ONLY = {
    "id": "llmfoundry_x_70b_a100_40gb", "group": "llmfoundry_mpt_benchmarks",
    "model": {"name": "MPT-70b", "layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 32768,
              "vocab": 50368, "seq_len": 2048, "arch_notes": "MPT: ALiBi, no biases"},
    "hardware": {"gpu": "NVIDIA A100 40GB", "gpu_memory_gb": 40, "num_gpus": 128,
                 "gpus_per_node": "8 (assumed)",
                 "inter_node": "1600 Gbps node-node interconnect (RoCE)"},
    "parallel": {"tp": 1, "pp": 1, "dp": 128, "micro_batch": 4, "global_batch": 512,
                 "recompute": "full activation checkpointing",
                 "zero_stage": "FSDP FULL_SHARD (ZeRO-3 equivalent)",
                 "precision": "bf16 (MP mode PURE)"},
    "measured": {"throughput_tokens_per_s_per_gpu": 376.0},
}
VTRAIN_MULTI = {
    "id": "vtrain_multi_004_3.6B_t2d32p1_mb16", "group": "vtrain_ground_truth_multi_node",
    "model": {"name": "GPT 3.6B", "layers": 30, "hidden": 3072, "heads": 32, "ffn_hidden": 12288,
              "seq_len": 2048},
    "hardware": {"gpu": "NVIDIA A100 (memory size not stated in repo data)", "num_gpus": 64,
                 "gpus_per_node": 8,
                 "inter_node": "800 Gbps per node (vTrain config default inter_node_bandwidth, "
                               "Gbps)"},
    "parallel": {"tp": 2, "pp": 1, "dp": 32, "micro_batch": 16, "global_batch": 512,
                 "recompute": "full (vTrain validation configs use use_checkpoint: true)",
                 "precision": "mixed (assumed fp16/bf16; not stated)",
                 "framework": "Megatron-DeepSpeed", "pipeline_schedule": "1f1b (vTrain config)"},
    "measured": {"iteration_time_ms": 3937.5},
}
VTRAIN_ROW = {"id": "vtrain_single_0002", "num_gpus": 4, "global_batch": 16, "micro_batch": 4,
              "hidden": 2048, "heads": 16, "layers": 24, "seq_len": 1024, "tp": 1, "dp": 2,
              "pp": 2, "iteration_time_ms": 410.490577}
MCORE_H100 = {  # no micro-batch in the README table: incomplete layout
    "id": "megatron_readme_h100_weak_177B", "group": "megatron_core_h100_weak_scaling",
    "model": {"name": "GPT 177B", "layers": 96, "hidden": 12288, "heads": 96, "vocab": 131072,
              "seq_len": 4096},
    "hardware": {"gpu": "NVIDIA H100 SXM5 80GB", "gpus_per_node": 8, "num_gpus": 2304},
    "parallel": {"tp": 8, "pp": 6, "dp": 48, "global_batch": 1152,
                 "precision": "not stated (MFU consistent with BF16 dense peak ~989 TFLOP/s)",
                 "framework": "Megatron-Core r0.8.0"},
    "measured": {"tflops_per_gpu": 432.8},
}
NCCL_A100 = {
    "id": "nccl_gtc25_inter_nvl3___8x200gb_rdma__dgx_a100", "group": "nccl_allreduce_busbw_vendor",
    "model": {"collective": "AllReduce (nccl-tests all_reduce_perf)"},
    "hardware": {"interconnect": "NVL3 + 8x200Gb RDMA (DGX A100)",
                 "scope": "32 GPUs (slide footnote)"},
    "parallel": {}, "measured": {"busbw_GBps": 192},
}
NCCL_H100_INTRA = {
    "id": "nccl_gtc25_intra_nvlink4__h100", "group": "nccl_allreduce_busbw_vendor",
    "hardware": {"interconnect": "NVLink4 (H100)", "scope": "8 GPUs (slide footnote)"},
    "measured": {"busbw_GBps": 370},
}
NEMO_ROW = {  # a synthetic NeMo performance-table row (none in the current data)
    "id": "nemo_llama3_70b_h100_64gpu", "group": "nemo_performance_tables",
    "model": {"name": "Llama 3 70B", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
              "ffn_hidden": 28672, "vocab": 128256, "seq_len": 8192},
    "hardware": {"gpu": "H100 SXM", "num_gpus": 64},
    "parallel": {"tp": 4, "pp": 4, "dp": 4, "vpp": 5, "micro_batch": 1, "global_batch": 128,
                 "precision": "not stated", "framework": "NeMo 2.0"},
    "measured": {"throughput_tokens_per_s_per_gpu": 1000.0},
}


# --------------------------------------------------------------------------------------------
# Spearman
# --------------------------------------------------------------------------------------------
def test_average_ranks_share_ties():
    # 10 -> 1; the two 20s occupy ranks 2 and 3 -> 2.5 each; 30 -> 4
    assert v.average_ranks([20, 10, 30, 20]).tolist() == [2.5, 1.0, 4.0, 2.5]


def test_spearman_known_example_with_a_tie():
    # x ranks 1..5; y = [5, 6, 7, 8, 7] ranks [1, 2, 3.5, 5, 3.5].
    # centred: dx = [-2, -1, 0, 1, 2], dy = [-2, -1, 0.5, 2, 0.5]
    # sum dx*dy = 4 + 1 + 0 + 2 + 1 = 8; sum dx^2 = 10; sum dy^2 = 4 + 1 + .25 + 4 + .25 = 9.5
    # rho = 8 / sqrt(10 * 9.5) = 0.820783...
    assert v.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))


def test_spearman_is_rank_based_and_signed():
    assert v.spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    assert v.spearman([1, 2, 3, 4], [9, 7, 5, 1]) == pytest.approx(-1.0)
    assert math.isnan(v.spearman([1, 2, 3], [4, 4, 4]))  # constant side: undefined


# --------------------------------------------------------------------------------------------
# Mapping, one entry per group
# --------------------------------------------------------------------------------------------
def test_sc21_needs_include_derived_and_maps_interleaved_local_ddp():
    col = v.collect_runs([SC21_76B])  # only derived.iteration_time_s: not a measurement
    assert col.runs == [] and "derived" in col.skipped[0]["reason"]
    run = v.map_entry(SC21_76B, include_derived=True)
    assert run.step_time_s == 16.06 and run.step_time_source == "derived.iteration_time_s"
    p = run.parallel
    assert (p.tp, p.pp, p.dp, p.micro_batch_size) == (8, 4, 32, 2)
    assert (p.schedule, p.virtual_stages) == ("interleaved", 3)
    assert (p.precision, p.recompute, p.zero_stage, p.sequence_parallel) == (
        "fp16", "full", 0, False)
    assert run.cluster.gpu.name == "a100-sxm-80gb"
    assert (run.cluster.num_nodes, run.cluster.gpus_per_node) == (128, 8)  # 1024 / 8
    # "8x ... HDR 200 Gb/s": 8 NICs of 200e9 / 8 = 25e9 B/s
    assert run.cluster.inter_node.nics_per_node == 8
    assert run.cluster.inter_node.nic_bandwidth_bytes_per_s == 25e9
    t = run.training
    assert (t.seq_length, t.global_batch_size) == (2048, 1792)
    assert (t.flash_attention, t.dropout, t.overlap_grad_reduce) == (False, True, False)
    m = run.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size,
            m.vocab_size, m.gated_mlp) == (60, 10240, 80, 40960, 51200, False)


def test_korthikanti_table5_entry():
    run = v.map_entry(KORTHIKANTI_175B_SEL)
    assert run.table == "table5" and run.step_time_s == 13.75
    p = run.parallel
    assert (p.recompute, p.sequence_parallel, p.schedule, p.virtual_stages) == (
        "selective", True, "interleaved", 3)
    assert p.precision == "fp16"  # "16-bit mixed precision": neither fp8 nor bf16
    assert (run.training.flash_attention, run.training.dropout,
            run.training.overlap_grad_reduce) == (False, True, False)
    assert run.cluster.num_gpus == 64


def test_korthikanti_table4_entry_is_a_per_layer_run():
    run = v.map_entry(KORTHIKANTI_T4)
    assert run.table == "table4" and run.step_time_s is None
    assert run.per_layer_s == pytest.approx(20.9e-3)
    assert (run.parallel.recompute, run.parallel.tp, run.parallel.micro_batch_size) == (
        "selective", 8, 4)


def test_bloom_fp16_omnipath_vocab_and_memory():
    run = v.map_entry(BLOOM_000)
    # "bf16" only inside the parenthetical remark: the run itself is fp16
    assert run.parallel.precision == "fp16"
    assert run.parallel.zero_stage == 1 and run.parallel.recompute == "full"
    assert run.model.vocab_size == 250880
    assert run.model.learned_position_embeddings is False  # ALiBi
    # Omni-Path: 4 NICs of 100 Gb/s = 12.5e9 B/s
    assert run.cluster.inter_node.nics_per_node == 4
    assert run.cluster.inter_node.nic_bandwidth_bytes_per_s == 12.5e9
    assert run.cluster.num_nodes == 48  # 384 / 8
    assert (run.training.flash_attention, run.training.dropout,
            run.training.overlap_grad_reduce) == (False, False, False)
    assert run.step_time_s == 143.31
    assert run.memory_bytes == 29 * 2**30  # "GB" from nvidia-smi read as GiB


def test_bloom_bf16_oom_entry():
    run = v.map_entry(BLOOM_110_OOM)
    assert run.oom is True and run.step_time_s is None and run.memory_bytes is None
    assert run.parallel.precision == "bf16"
    # kept by collect_runs although it has no step time; its report is marked unreliable,
    # so the OOM check lists it apart (test_unreliable_oom_reports_are_listed_not_counted)
    assert [r.id for r in v.collect_runs([BLOOM_110_OOM]).runs] == ["bloom_prequel_110"]
    assert run.oom_reliable is False


def test_llmfoundry_fsdp_tokens_per_second_and_roce():
    run = v.map_entry(LLMFOUNDRY_080)
    # step = global batch tokens / tokens per second = 168 * 4096 / 6513 = 105.655 s
    assert run.step_time_s == pytest.approx(168 * 4096 / 6513)
    assert run.step_time_source == "throughput_tokens_per_s"
    p = run.parallel
    assert (p.zero_stage, p.precision, p.recompute, p.dp) == (3, "bf16", "full", 8)
    # "1600 Gbps" per node -> 1600 / 200 = 8 NICs of 25e9 B/s, RoCE fabric
    ib = run.cluster.inter_node
    assert (ib.nics_per_node, ib.nic_bandwidth_bytes_per_s, ib.fabric) == (8, 25e9, "roce")
    m = run.model
    assert (m.linear_bias, m.learned_position_embeddings, m.vocab_size) == (False, False, 50368)
    assert (run.training.flash_attention, run.training.dropout,
            run.training.overlap_grad_reduce) == (True, False, True)


def test_llmfoundry_per_gpu_throughput_and_a100_40gb():
    run = v.map_entry(LLMFOUNDRY_40GB_PER_GPU_ONLY)
    # 512 * 2048 tokens / (376 tokens/s/GPU * 128 GPUs) = 1048576 / 48128 = 21.787 s
    assert run.step_time_s == pytest.approx(512 * 2048 / (376.0 * 128))
    assert run.cluster.gpu.name == "a100-sxm-40gb"
    assert run.parallel.precision == "bf16"


def test_vtrain_multi_node_rules():
    run = v.map_entry(VTRAIN_MULTI)
    # vTrain rule: fp16 even though the text mentions bf16
    p = run.parallel
    assert (p.precision, p.recompute, p.zero_stage, p.schedule) == ("fp16", "full", 0, "1f1b")
    assert run.cluster.gpu.name == "a100-sxm-80gb"
    assert run.cluster.inter_node.nics_per_node == 4  # 800 Gbps / 200
    assert run.model.vocab_size == 51200 and run.model.ffn_hidden_size == 12288
    assert run.step_time_s == pytest.approx(3.9375)


def test_vtrain_single_row():
    run = v.map_vtrain_row(VTRAIN_ROW)
    assert run.group == v.VTRAIN_SINGLE_GROUP
    assert (run.cluster.num_nodes, run.cluster.gpus_per_node) == (1, 4)
    assert run.model.ffn_hidden_size == 4 * 2048 and run.model.vocab_size == 51200
    assert run.step_time_s == pytest.approx(0.410490577)
    p = run.parallel
    assert (p.tp, p.pp, p.dp, p.micro_batch_size, p.precision, p.recompute) == (
        1, 2, 2, 4, "fp16", "full")


def test_nemo_table_defaults():
    run = v.map_entry(NEMO_ROW)
    p = run.parallel
    # README (2026): the NVIDIA recipes run the dense Llama rows without recompute
    assert (p.recompute, p.sequence_parallel, p.zero_stage, p.precision) == (
        "none", True, 1, "fp8")
    assert (p.schedule, p.virtual_stages) == ("interleaved", 5)
    m = run.model
    assert (m.gated_mlp, m.tied_embeddings, m.num_kv_heads, m.normalization) == (
        True, False, 8, "rmsnorm")
    assert run.cluster.gpu.name == "h100-sxm-80gb"
    assert run.training.flash_attention is True
    assert run.training.tp_comm_overlap is True  # NeMo's performance recipes


def test_tp_comm_overlap_only_for_megatron_core_family():
    assert v.map_entry(BLOOM_000).training.tp_comm_overlap is False
    assert v.map_entry(LLMFOUNDRY_080).training.tp_comm_overlap is False
    assert v.map_entry(KORTHIKANTI_175B_SEL).training.tp_comm_overlap is False
    flags = v.framework_flags("some_new_group", {"framework": "Megatron-LM",
                                                 "overlap": "--tp-comm-overlap"})
    assert flags.tp_comm_overlap and flags.framework == "megatron"
    # plain Megatron-Core defaults to no TP overlap; the README table's entries name it
    assert not v.framework_flags("megatron_core_h100_weak_scaling", {}).tp_comm_overlap
    assert v.framework_flags("megatron_core_h100_weak_scaling",
                             {"overlap": "--overlap-grad-reduce, --tp-comm-overlap"}
                             ).tp_comm_overlap


@pytest.mark.parametrize("model, parallel, moe", [
    ({"name": "Mixtral 8x22B"}, {}, True), ({"name": "DBRX"}, {}, True),
    ({"moe": True}, {}, True), ({"experts": "64 routed + 2 shared"}, {}, True),
    ({"num_experts": 8}, {}, True), ({}, {"ep": 4}, True),
    ({"name": "Llama 3 70B", "num_experts": 1}, {"ep": 1}, False),
    ({"name": "GPT-3 175B"}, {}, False),
])
def test_mixture_of_experts_detection(model, parallel, moe):
    assert bool(v.mixture_of_experts(model, parallel)) is moe


@pytest.mark.parametrize("entry, words", [
    (MCORE_H100, "micro_batch missing"),
    (NCCL_A100, "NCCL"),
    ({**KORTHIKANTI_175B_SEL, "parallel": {**KORTHIKANTI_175B_SEL["parallel"], "cp": 2}},
     "tp*cp*pp*dp = 128"),
    ({**KORTHIKANTI_175B_SEL, "parallel": {**KORTHIKANTI_175B_SEL["parallel"], "tp": 5,
                                           "dp": 1, "pp": 8}}, "not divisible by tp"),
    ({**BLOOM_000, "model": {**BLOOM_000["model"], "heads": None}}, "heads missing"),
    ({**NEMO_ROW, "model": {**NEMO_ROW["model"], "name": "Mixtral 8x7B"}}, "mixture of experts"),
    ({**NEMO_ROW, "parallel": {**NEMO_ROW["parallel"], "ep": 8}}, "parallel.ep=8"),
    ({**BLOOM_000, "hardware": {**BLOOM_000["hardware"], "num_gpus": 100}}, "num_gpus 100"),
])
def test_skips_carry_a_reason(entry, words):
    col = v.collect_runs([entry])
    assert col.runs == []
    assert words in col.skipped[0]["reason"]


def test_parsers():
    assert v.parse_precision("amp_fp8 (MP mode DEFAULT)") == "fp8"
    assert v.parse_precision("amp_bf16 (MP mode DEFAULT)") == "bf16"
    assert v.parse_precision(BLOOM_FP16) == "fp16"
    assert v.parse_precision("not stated", nemo=True) == "fp8"
    assert v.parse_recompute(None) == "full"
    assert v.parse_recompute("none") == "none"
    assert v.parse_zero("FSDP SHARD_GRAD_OP") == 2
    assert v.parse_zero(None) == 0
    assert v.parse_vocab("250k") == 250880
    assert v.gpu_key("NVIDIA A100 (DGX-A100; memory size not stated)") == "a100-sxm-80gb"
    assert v.gpu_key("NVIDIA V100 (DGX-2, NVSwitch)") == "v100-sxm-32gb"
    with pytest.raises(v.SkipEntry):
        v.gpu_key("MI250X")


def test_nccl_case_mapping():
    a100 = v.nccl_case(NCCL_A100)
    # 32 GPUs = 4 DGX A100 nodes, 8 NICs of 200 Gb/s each
    assert (a100.n_ranks, a100.n_nodes, a100.algos) == (32, 4, ("auto",))
    assert a100.cluster.inter_node.nics_per_node == 8
    assert a100.cluster.inter_node.nic_bandwidth_bytes_per_s == 25e9
    h100 = v.nccl_case(NCCL_H100_INTRA)
    assert (h100.n_ranks, h100.n_nodes, h100.algos) == (8, 1, ("ring",))
    assert h100.cluster.gpu.name == "h100-sxm-80gb"


# --------------------------------------------------------------------------------------------
# Data location and the CLI (on a tiny data folder)
# --------------------------------------------------------------------------------------------
def _write_data(path, entries):
    import yaml

    path.mkdir(parents=True, exist_ok=True)
    (path / v.PUBLISHED_FILE).write_text(yaml.safe_dump({"meta": {}, "entries": entries}))
    (path / v.VTRAIN_FILE).write_text(yaml.safe_dump({"meta": {}, "rows": [VTRAIN_ROW]}))
    return path


def test_missing_data_folder_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.delenv(v.ENV_VAR, raising=False)
    with pytest.raises(InputError) as e:
        v.resolve_data_dir(tmp_path / "nope")
    assert e.value.field == "data"
    monkeypatch.setenv(v.ENV_VAR, str(tmp_path / "nope-either"))
    with pytest.raises(InputError):
        validate_main([])


def test_env_var_and_json_output(tmp_path, monkeypatch, capsys):
    data = _write_data(tmp_path / "val", [KORTHIKANTI_175B_SEL, BLOOM_000, NCCL_A100,
                                          MCORE_H100])
    monkeypatch.setenv(v.ENV_VAR, str(data))
    assert v.resolve_data_dir() == data
    assert validate_main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["data_dir"] == str(data)
    assert {r["id"] for r in doc["runs"]} == {KORTHIKANTI_175B_SEL["id"], BLOOM_000["id"],
                                              VTRAIN_ROW["id"]}
    assert [s["id"] for s in doc["skipped"]] == [NCCL_A100["id"], MCORE_H100["id"]]
    assert doc["memory"]["count"] == 1 and doc["korthikanti_table5"]["count"] == 1
    # --check exits 1 exactly when a threshold fails (three runs cannot make a sweep)
    code = validate_main(["--json", "--check", "--data", str(data)])
    assert code == (0 if doc["passed"] else 1)
    assert not doc["passed"]  # mean Spearman over zero sweeps is undefined -> fails


# --------------------------------------------------------------------------------------------
# The CI guard: every usable entry of ../shared/validation
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def result():
    try:
        path = v.resolve_data_dir()
    except InputError as e:
        pytest.skip(f"validation data not available: {e}")
    return v.validate(path)


def test_harness_maps_every_group(result):
    groups = {g["group"]: g["count"] for g in result["groups"]}
    for g in ("korthikanti_end_to_end", "bloom_prequel_config_sweep",
              "llmfoundry_mpt_benchmarks", "vtrain_ground_truth_multi_node",
              "vtrain_single_node"):
        assert groups.get(g, 0) >= 5, g
    assert result["step_time"]["n_sweeps"] >= 50
    assert result["memory"]["count"] >= 30 and result["oom"]["count"] >= 2
    assert result["korthikanti_table5"]["count"] == 8
    assert result["model_errors"] == []


def test_step_time_group_balanced_mape(result):
    assert result["step_time"]["group_balanced_mape"] <= v.THRESHOLDS["group_balanced_mape"]


def test_step_time_every_group_median(result):
    bad = {g["group"]: round(g["median_ape"], 3) for g in result["groups"]
           if not g["median_ape"] <= v.THRESHOLDS["worst_group_median_ape"]}
    assert bad == {}


def test_replicates_averaged_merges_repeated_measurements_of_one_configuration():
    from types import SimpleNamespace as NS

    a, b, c = (ParallelConfig(tp=t) for t in (1, 2, 4))
    tr = TrainingSpec()
    runs = [NS(id="1", parallel=a, training=tr, step_time_s=1.0),
            NS(id="2", parallel=b, training=tr, step_time_s=3.0),
            NS(id="3", parallel=b, training=tr, step_time_s=1.4),  # a noisy repeat of b
            NS(id="4", parallel=c, training=tr, step_time_s=2.5)]
    pred = {r.id: v.Predicted(t, 0.0, 0.0) for r, t in zip(runs, (1.0, 2.0, 2.0, 3.0), strict=True)}
    # per run the model's tie of the two b runs costs it: 1 < 2.2 (mean of 3.0, 1.4) < 2.5
    assert v.spearman([pred[r.id].step_time_s for r in runs],
                      [r.step_time_s for r in runs]) < 0.9
    p, m = v.replicates_averaged(runs, pred)
    assert p == [1.0, 2.0, 3.0] and m == pytest.approx([1.0, 2.2, 2.5])
    assert v.spearman(p, m) == pytest.approx(1.0)


def test_replicate_averaged_ranking_is_reported_not_checked(result):
    s = result["step_time"]
    assert s["n_sweeps_replicates_averaged"] <= s["n_sweeps"]
    assert 0.0 < s["mean_spearman_replicates_averaged"] <= 1.0
    assert "mean_spearman_replicates_averaged" not in v.THRESHOLDS


def test_ranking_within_sweeps(result):
    # CI threshold (0.87), a little below issue 3's target; 0.907 on 2026-11-30 (session 9:
    # 0.890 before one measurement quoted twice counted once)
    assert result["step_time"]["mean_spearman"] >= v.THRESHOLDS["mean_spearman"]


def test_ranking_meets_the_issue_target(result):
    # issue 3: mean Spearman within sweeps >= 0.9 (0.907 on 2026-11-30; an exact model would
    # reach ~0.97 under the data's noise, benchmarks/spearman_ceiling.py)
    assert result["step_time"]["mean_spearman"] >= 0.9


def test_memory_against_bloom_peaks(result):
    # CI threshold (12%); 4.7% on 2026-11-30 (7.0% before BF16_Optimizer's all-reduce cast)
    assert result["memory"]["mape"] <= v.THRESHOLDS["memory_mape"]


def test_memory_meets_the_issue_target(result):
    # issue 3: memory MAPE <= 10% against BLOOM's measured peaks
    assert result["memory"]["mape"] <= 0.10


def test_memory_errors_do_not_depend_on_the_optimizer(result):
    # DeepSpeed's fp16 ZeRO optimizer and its BF16_Optimizer hold different states; with
    # both modelled, neither family of BLOOM runs is off by more than the other's spread
    # (medians -3.3% and +0.3%; 7 points apart without the all-reduce's bf16 cast)
    col = v.collect_runs(*v.load_data(v.resolve_data_dir()))
    precision = {r.id: r.parallel.precision for r in col.runs}
    by = {"fp16": [], "bf16": []}
    for row in result["memory"]["runs"]:
        by[precision[row["id"]]].append(row["signed_error"])
    assert len(by["fp16"]) >= 10 and len(by["bf16"]) >= 5
    assert abs(statistics.median(by["fp16"]) - statistics.median(by["bf16"])) <= 0.06


def test_no_oom_run_predicted_to_fit(result):
    assert [x["id"] for x in result["oom"]["runs"] if x["predicted_to_fit"]] == []
    assert result["oom"]["count"] >= 3  # BLOOM's 051 and torchtitan's two A100 OOMs


def test_unreliable_oom_reports_are_listed_not_counted(result):
    # the data's owner marks bloom_prequel_110's OOM report oom_reliable: false
    excluded = [x["id"] for x in result["oom"]["excluded_unreliable"]]
    assert excluded == ["bloom_prequel_110"]
    assert "bloom_prequel_110" not in [x["id"] for x in result["oom"]["runs"]]


def test_runs_that_ran_are_rarely_predicted_over_memory(result):
    # a run with a measured step time fitted in its GPU; a model that predicts it over the
    # memory would hide that layout from the search. 11 of 928 today, all within 1.2x
    # (vTrain's fp16 ZeRO-0 pipelines and llm-foundry's memory-filling micro-batches);
    # 42 before the loss buffers followed the framework (llm-foundry's fused cross entropy)
    ro = result["ran_predicted_over_memory"]
    assert ro["count"] > 900
    assert ro["predicted_over"] <= 20
    assert all(x["ratio"] < 1.25 for x in ro["runs"])


def test_korthikanti_table5_each_close(result):
    bad = {x["id"]: round(x["ape"], 3) for x in result["korthikanti_table5"]["runs"]
           if not x["ape"] <= v.THRESHOLDS["korthikanti_table5_max_ape"]}
    assert bad == {}


def test_korthikanti_table5_each_within_the_issue_target(result):
    # issue 3: each of Table 5's eight iteration times within 5% (max 3.7% on 2026-11-30)
    bad = {x["id"]: round(x["ape"], 3) for x in result["korthikanti_table5"]["runs"]
           if not x["ape"] <= 0.05}
    assert result["korthikanti_table5"]["count"] == 8 and bad == {}


def test_korthikanti_table4_layer_times(result):
    # one 22B layer (tp 8, micro-batch 4) under the five recompute / SP variants: the
    # cleanest per-layer check of compute + TP communication (max 2.6% on 2026-11-30)
    runs = result["korthikanti_table4"]["runs"]
    assert len(runs) == 5
    assert {x["id"]: round(x["ape"], 3) for x in runs if not x["ape"] <= 0.03} == {}


def test_a_measurement_quoted_twice_counts_once():
    import copy

    first = copy.deepcopy(BLOOM_000)
    quoted = copy.deepcopy(BLOOM_000) | {"id": "requoted"}  # same layout, same time
    rerun = copy.deepcopy(BLOOM_000) | {"id": "rerun"}  # same layout, another time
    rerun["measured"] = dict(rerun["measured"], iteration_time_s=rerun["measured"]
                             ["iteration_time_s"] * 1.001)
    col = v.collect_runs([first, quoted, rerun])
    assert [r.id for r in col.runs] == [first["id"], "rerun"]
    assert [(x["id"], first["id"] in x["reason"]) for x in col.skipped] == [("requoted", True)]
    assert len(col.runs) + len(col.skipped) == col.n_entries == 3

    # the same time is not enough: another memory reading, TFLOP/s figure, group or layout
    # makes it a second measurement
    def variant(name, **changes):
        e = copy.deepcopy(BLOOM_000) | {"id": name}
        for section, fields in changes.items():
            e[section] = e[section] | fields if isinstance(e[section], dict) else fields
        return e

    others = [variant("memory", measured={"max_gpu_mem_GB_nvidia_smi_first_last_node": 30}),
              variant("tflops", measured={"tflops_per_gpu": 112.5}),
              variant("group", group="bloom_other_sweep"),
              variant("layout", parallel={"tp": 4, "dp": 8}),
              variant("batch", parallel={"global_batch": 1024})]
    col = v.collect_runs([first, *others])
    assert [r.id for r in col.runs] == [first["id"], *(e["id"] for e in others)]
    # two OOM reports of one layout carry no value that tells a copy from a re-run
    oom = copy.deepcopy(BLOOM_110_OOM)
    col = v.collect_runs([oom, copy.deepcopy(oom) | {"id": "oom_again"}])
    assert len(col.runs) == 2 and [r.oom for r in col.runs] == [True, True]


def test_the_data_quote_two_bloom_baselines_twice(result):
    # the chronicles repeat two baseline rows in later tables with identical times; they are
    # counted once (the L78 h13824 a64 "sweep" is then two measurements, no sweep)
    skipped = {x["id"]: x["reason"] for x in result["skipped"]}
    assert "bloom_prequel_022" in skipped.get("bloom_prequel_031", "")
    assert "bloom_prequel_018" in skipped.get("bloom_prequel_036", "")
    requoted = [i for i, why in skipped.items() if "same measurement" in why]
    assert sorted(requoted) == ["bloom_prequel_031", "bloom_prequel_036"]


def test_malformed_entries_are_skipped_with_a_reason():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    junk = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                        lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.sampled_from(
                            ["id", "group", "model", "hardware", "parallel", "measured",
                             "derived", "tp", "pp", "dp", "micro_batch", "global_batch", "name",
                             "experts", "ep", "moe", "layers", "hidden", "heads", "gpu",
                             "num_gpus", "cp", "iteration_time_s"]), c, max_size=6),
                        max_leaves=20)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(junk, max_size=4), st.lists(junk, max_size=2))
    def check(entries, rows):
        col = v.collect_runs(entries, rows)  # never raises: every entry is mapped or skipped
        assert len(col.runs) + len(col.skipped) == col.n_entries == len(entries) + len(rows)
        assert all(x["reason"] for x in col.skipped)

    check()


def test_default_memory_verdict_on_the_data(result):
    # issue 21 item 5: under paraplan's default verdict (predicted peak, allocator reserve
    # included, under the GPU's memory less the one 2% margin) no reliable OOM report fits,
    # and the runs that ran and are predicted not to fit stay at most today's 24 of 1,057
    # (106 under the old 0.9 x HBM limit with a 15% reserve everywhere; 37 before torchtitan's
    # op-level SAC, loss and FSDP2 root, TE's fp8 copies per recipe and --fp8-param-gather;
    # docs/memory-verdict.md lists each with its reason)
    mv = result["memory_verdict"]
    assert mv["margin"] == pytest.approx(0.02)
    assert mv["oom"] >= 3 and mv["oom_predicted_to_fit"] == 0
    assert mv["ran"] > 1000 and mv["ran_not_fitting"] <= 24
    ids = {x["id"] for x in mv["ran_not_fitting_runs"]}
    # the published Llama 3 70B FP8 layout on 64 H100 (TP4 PP8 VP5) is admitted
    assert "mlm_examples_llama3_70b_h100_fp8_64gpu" not in ids
    assert "bloom_prequel_110" not in {x["id"] for x in mv["oom_predicted_to_fit_runs"]}
    assert "Default memory verdict" in v.format_report(result)


def test_allocator_setting_follows_the_run():
    # fixed segments before PyTorch 2.1 (published_runs.yaml), expandable segments in the
    # 2026 collection's launch scripts; an entry can say so itself
    assert not v.uses_expandable_segments({"_file": v.PUBLISHED_FILE})
    assert v.uses_expandable_segments({"_file": v.PUBLISHED_2026_FILE})
    assert not v.uses_expandable_segments({"_file": v.PUBLISHED_2026_FILE,
                                           "parallel": {"expandable_segments": False}})
