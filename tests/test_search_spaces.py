"""search_spaces: dimensions, defaults, validity rules, exact vectorised enumeration.

Specs are built directly here (not from the catalogs) so the expected numbers are visible.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.errors import InputError
from costmodel.specs import (
    ClusterSpec,
    GPUSpec,
    IntraNodeSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)
from search_spaces import (
    ALL_RULES,
    DIMENSIONS,
    RULES_BY_NAME,
    Context,
    SearchSpace,
    batch_from_choices,
    check,
    count_product,
    default_space,
    enumerate_valid,
    explain,
    optuna_choices,
    rejected_by_rule,
    restrict,
    space_from_mapping,
    space_size,
    violations,
)

# --------------------------------------------------------------------------------------------
# Specs (peaks are only used as "is this precision supported", so round numbers suffice)
A100 = GPUSpec("a100-sxm-80gb", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12,
                                 "fp32": 19.5e12}, 80e9, 2.0e12, 300e9, 12, 108, 80)
H100 = GPUSpec("h100-sxm-80gb", {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12,
                                 "tf32": 495e12, "fp32": 67e12}, 80e9, 3.35e12, 450e9, 18, 132,
               90)
V100 = GPUSpec("v100-sxm-32gb", {"fp16": 125e12, "fp32": 15.7e12}, 32e9, 0.9e12, 150e9, 6,
               80, 70)
LLAMA_65B = ModelSpec("llama-65b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                      ffn_hidden_size=22016, vocab_size=32000, gated_mlp=True)
LLAMA2_70B = ModelSpec("llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                       num_kv_heads=8, ffn_hidden_size=28672, vocab_size=32000, gated_mlp=True)
GPT3_175B = ModelSpec("gpt3-175b", num_layers=96, hidden_size=12288, num_attention_heads=96,
                      ffn_hidden_size=4 * 12288, vocab_size=51200)
TRAIN = TrainingSpec(seq_length=2048, global_batch_size=1024)


def cluster(gpu: GPUSpec = A100, nodes: int = 2, per_node: int = 8,
            fabric: str = "nvswitch") -> ClusterSpec:
    return ClusterSpec(f"{nodes}x{per_node}", nodes, per_node, gpu,
                       intra_node=IntraNodeSpec(fabric=fabric))


CTX = Context(LLAMA_65B, cluster(), TRAIN)  # 16 A100s, 2 nodes of 8


def broken(ctx: Context, **choices: object) -> set[str]:
    return {name for name, _ in explain(ctx, choices)}


# --------------------------------------------------------------------------------------------
# Each rule on hand-picked valid and invalid configurations
def test_valid_reference_config_breaks_nothing() -> None:
    # 4 * 4 * 1 = 16 GPUs; 64 % 4 == 0 heads; 80 % 4 == 0 layers; 1024 % (1*1) == 0
    cfg = ParallelConfig(tp=4, pp=4, dp=1, micro_batch_size=1)
    assert explain(CTX, cfg) == []


def test_world_size() -> None:
    assert "world_size" not in broken(CTX, tp=4, pp=4, dp=1)
    assert "world_size" in broken(CTX, tp=4, pp=4, dp=2)  # 32 != 16
    assert "world_size" in broken(CTX, tp=8, pp=4)  # derived dp = 16 // 32 = 0
    assert "world_size" in broken(CTX, tp=2, pp=5)  # dp = 16 // 10 = 1, 10 != 16


def test_tp_divides_heads() -> None:
    assert "tp_divides_heads" in broken(CTX, tp=3)  # 64 % 3 = 1
    assert "tp_divides_heads" not in broken(CTX, tp=8)  # 64 % 8 = 0
    # Llama-2-70B: 64 heads but 8 KV heads: tp=16 divides the heads, not the KV heads
    ctx = Context(LLAMA2_70B, cluster(), TRAIN, allow_cross_node_tp=True)
    assert broken(ctx, tp=16) >= {"tp_divides_heads"}
    assert "tp_divides_heads" not in broken(ctx, tp=8)


def test_tp_within_node() -> None:
    assert "tp_within_node" in broken(CTX, tp=16)  # 16 > 8 GPUs per node
    assert "tp_within_node" not in broken(CTX, tp=8)
    allowed = Context(LLAMA_65B, cluster(), TRAIN, allow_cross_node_tp=True)
    assert explain(allowed, {"tp": 16}) == []  # 16*1*1 = 16 GPUs, 64 % 16 == 0
    # 6-GPU nodes: tp=4 fits in a node but does not divide 6, so a group would straddle
    ctx6 = Context(LLAMA_65B, cluster(per_node=6, nodes=2), TRAIN)
    assert "tp_within_node" in broken(ctx6, tp=4)
    assert "tp_within_node" not in broken(ctx6, tp=2)
    # allowed cross-node groups must still tile whole nodes: 12 is neither a divisor nor a
    # multiple of 8
    ctx = Context(ModelSpec("m", 8, 768, 12, 3072, 1000), cluster(nodes=3), TRAIN,
                  allow_cross_node_tp=True)
    assert "tp_within_node" in broken(ctx, tp=12, pp=2)


def test_pp_splits_layers() -> None:
    # an uneven split is valid: 80 layers on 3 stages -> 27 / 27 / 26
    ctx = Context(LLAMA_65B, cluster(nodes=3, per_node=8), TRAIN)  # 24 GPUs
    assert "pp_splits_layers" not in broken(ctx, tp=8, pp=3)
    ctx5 = Context(LLAMA_65B, cluster(nodes=5, per_node=8), TRAIN)  # 40 GPUs
    assert explain(ctx5, {"tp": 8, "pp": 5}) == []  # 80 % 5 = 0, 8*5*1 = 40
    tiny = ModelSpec("tiny", 2, 64, 2, 256, 100)
    assert "pp_splits_layers" in broken(Context(tiny, cluster(), TRAIN), tp=1, pp=16)
    # 5 layers on 4 stages: 2 on each middle stage leaves 1 for the first and last together
    five = ModelSpec("five", 5, 64, 2, 256, 100)
    assert "pp_splits_layers" in broken(Context(five, cluster(), TRAIN), tp=2, pp=4)


def test_batch_divisible() -> None:
    # tp=8, pp=1 -> dp = 2; 1024 % (3*2) = 4
    assert "batch_divisible" in broken(CTX, tp=8, micro_batch_size=3)
    assert "batch_divisible" not in broken(CTX, tp=8, micro_batch_size=4)  # 1024 % 8 = 0


def test_interleaved_needs_pp_and_virtual_stages() -> None:
    assert "interleaved_needs_pp" in broken(CTX, tp=8, pp=1, dp=2, schedule="interleaved",
                                            virtual_stages=2)  # pp = 1
    assert "interleaved_needs_pp" in broken(CTX, tp=8, pp=2, schedule="interleaved",
                                            virtual_stages=1)  # v = 1
    assert "interleaved_needs_pp" in broken(CTX, tp=8, pp=2, schedule="1f1b",
                                            virtual_stages=2)  # v > 1 without interleaving
    assert "interleaved_needs_pp" in broken(CTX, tp=8, pp=2, schedule="gpipe",
                                            virtual_stages=4)
    assert explain(CTX, {"tp": 8, "pp": 2, "schedule": "interleaved",
                         "virtual_stages": 2}) == []


def test_virtual_stages_divide_layers() -> None:
    # 80 layers / pp 4 = 20 layers per stage
    assert "virtual_stages_divide_layers" in broken(CTX, tp=4, pp=4, schedule="interleaved",
                                                    virtual_stages=3)  # 20 % 3 = 2
    assert explain(CTX, {"tp": 4, "pp": 4, "schedule": "interleaved",
                         "virtual_stages": 5}) == []  # 20 % 5 = 0
    # an uneven split (80 layers on 3 stages: 27, 27, 26) interleaves through a pipeline
    # layout (issue 21): every middle stage needs v layers, the first and last v - 1
    ctx = Context(LLAMA_65B, cluster(nodes=3), TRAIN)
    assert "virtual_stages_divide_layers" not in broken(ctx, tp=8, pp=3, schedule="interleaved",
                                                        virtual_stages=2)
    assert "virtual_stages_divide_layers" in broken(ctx, tp=8, pp=3, schedule="interleaved",
                                                    virtual_stages=28)
    # an even split keeps the even-chunk rule: 10 layers per stage on pp 8 in 4 chunks
    assert "virtual_stages_divide_layers" in broken(CTX, tp=2, pp=8, schedule="interleaved",
                                                    virtual_stages=4)


def test_interleaved_microbatches_multiple_of_pp() -> None:
    ctx = Context(LLAMA_65B, cluster(), TrainingSpec(2048, 1000))
    base = {"tp": 2, "pp": 4, "schedule": "interleaved", "virtual_stages": 2}  # dp = 2
    # m = 1000 / (4 * 2) = 125, 125 % 4 = 1 -> invalid
    assert broken(ctx, micro_batch_size=4, **base) == {"interleaved_microbatches"}
    # same batch with 1F1B is fine: only the interleaved schedule needs it
    assert explain(ctx, {**base, "micro_batch_size": 4, "schedule": "1f1b",
                         "virtual_stages": 1}) == []
    # m = 1000 / (5 * 2) = 100, 100 % 4 = 0 -> valid
    assert explain(ctx, {**base, "micro_batch_size": 5}) == []


def test_sp_needs_tp() -> None:
    assert "sp_needs_tp" in broken(CTX, tp=1, pp=4, dp=4, sequence_parallel=True)
    assert "sp_needs_tp" not in broken(CTX, tp=2, pp=4, sequence_parallel=True)


def test_fp8_and_precision_hardware() -> None:
    # fp8 on an A100 is reported by fp8_hardware only (not twice)
    assert broken(CTX, tp=8, pp=2, precision="fp8") == {"fp8_hardware"}
    h100 = Context(LLAMA_65B, cluster(H100), TRAIN)
    assert explain(h100, {"tp": 8, "pp": 2, "precision": "fp8"}) == []
    v100 = Context(LLAMA_65B, cluster(V100), TRAIN)
    assert broken(v100, tp=8, pp=2, precision="bf16") == {"precision_hardware"}
    assert explain(v100, {"tp": 8, "pp": 2, "precision": "fp16"}) == []


def test_zero_rules() -> None:
    # FSDP2 / Megatron-FSDP run under a pipeline (torchtitan 3D, issue 21); DeepSpeed's
    # pipeline engine does not
    assert explain(CTX, {"tp": 4, "pp": 2, "zero_stage": 3}) == []  # dp = 2
    ds = Context(LLAMA_65B, cluster(), replace(TRAIN, framework="deepspeed"))
    assert "zero3_no_pp" in broken(ds, tp=4, pp=2, zero_stage=3)
    assert explain(CTX, {"tp": 4, "pp": 1, "zero_stage": 3}) == []  # dp = 4
    assert "zero_needs_dp" in broken(CTX, tp=4, pp=4, zero_stage=1)  # dp = 1
    assert explain(CTX, {"tp": 4, "pp": 2, "zero_stage": 1}) == []  # dp = 2


def test_torchtitan_expresses() -> None:
    # framework torchtitan: FSDP2 (ZeRO 2/3) or DDP alone; no ZeRO-1, no Ulysses CP, no fp16
    tt = Context(LLAMA_65B, cluster(H100), replace(TRAIN, seq_length=8192,
                                                   framework="torchtitan"))
    assert "torchtitan_expresses" in broken(tt, tp=4, pp=2, zero_stage=1)  # dp = 2
    assert "torchtitan_expresses" in broken(tt, tp=4, pp=2, zero_stage=0)  # DDP with TP/PP
    for z in (2, 3):
        assert "torchtitan_expresses" not in broken(tt, tp=4, pp=2, zero_stage=z)
    assert "torchtitan_expresses" not in broken(tt, tp=1, pp=1, zero_stage=0)  # 1-D DDP
    assert "torchtitan_expresses" not in broken(tt, tp=4, cp=2, cp_comm_type="all_gather",
                                                zero_stage=3)
    for ct in ("p2p", "a2a", "a2a+p2p"):
        assert "torchtitan_expresses" in broken(tt, tp=4, cp=2, cp_comm_type=ct, zero_stage=3)
    assert "torchtitan_expresses" in broken(tt, tp=4, pp=2, zero_stage=3, precision="fp16")
    # Megatron keeps them all
    mg = replace(tt, training=replace(tt.training, framework="megatron"))
    assert "torchtitan_expresses" not in broken(mg, tp=4, pp=2, zero_stage=1, cp=2,
                                                cp_comm_type="a2a")
    # the default space searches what torchtitan has
    space = default_space(LLAMA_65B, tt.cluster, replace(tt.training, global_batch_size=8))
    assert space.zero_stage == (0, 2, 3) and space.cp_comm_type == ("p2p", "all_gather")
    assert default_space(LLAMA_65B, mg.cluster, mg.training).zero_stage == (0, 1, 3)


# NCCL gates ---------------------------------------------------------------------------------
H100_1NODE = Context(LLAMA_65B, cluster(H100, nodes=1), TRAIN)
H100_2NODES = Context(LLAMA_65B, cluster(H100, nodes=2), TRAIN)


@pytest.mark.parametrize(("ctx", "choices", "ok"), [
    (CTX, {"nccl_algo": "nvls"}, False),  # A100 is sm80: no NVLS
    (H100_1NODE, {"nccl_algo": "nvls"}, True),  # NVSwitch + sm90, one node
    (H100_2NODES, {"nccl_algo": "nvls"}, False),  # NVLS across nodes needs CollNet
    (H100_1NODE, {"nccl_algo": "nvlstree"}, False),  # NVLSTree is multi-node only
    (H100_2NODES, {"nccl_algo": "nvlstree"}, True),
    (H100_1NODE, {"nccl_algo": "nvls", "nccl_proto": "ll"}, False),  # NVLS: Simple only
    (H100_1NODE, {"nccl_algo": "nvls", "nccl_proto": "simple"}, True),
    (CTX, {"nccl_algo": "collnet"}, False),  # CollNet is off unless allowed
    (CTX, {"nccl_algo": "pat"}, False),  # 8 GPUs per node
    (CTX, {"nccl_algo": "ring", "nccl_proto": "ll128"}, True),  # NVSwitch node, sm80
    (CTX, {"nccl_algo": "tree"}, True),  # tp=1, ZeRO 0, no SP: only AllReduce is used
    (CTX, {"nccl_algo": "tree", "zero_stage": 1}, False),  # Tree cannot run AllGather
    (CTX, {"nccl_algo": "allreduce:tree;allgather:ring;reducescatter:ring",
           "zero_stage": 1}, True),
    (CTX, {"nccl_algo": "^tree", "zero_stage": 1}, True),  # everything but Tree: Ring left
    (CTX, {"nccl_algo": "^ring,tree"}, False),  # nothing left that runs AllReduce on A100
])
def test_nccl_gates(ctx: Context, choices: dict, ok: bool) -> None:
    # tp=1, pp=1, dp=16 (or 8) unless given: plain data parallel
    got = broken(ctx, tp=1, pp=1, **choices)
    assert ("nccl_gates" not in got) is ok, explain(ctx, {"tp": 1, "pp": 1, **choices})


def test_nccl_gates_cluster_dependent() -> None:
    collnet = Context(LLAMA_65B, cluster(), TRAIN, allow_collnet=True)
    assert "nccl_gates" not in broken(collnet, tp=1, nccl_algo="collnet")
    # one GPU per node: PAT runs AllGather/ReduceScatter, never AllReduce
    single = Context(LLAMA_65B, cluster(nodes=16, per_node=1), TRAIN)
    assert "nccl_gates" in broken(single, nccl_algo="pat")
    assert "nccl_gates" not in broken(single, nccl_algo="allreduce:ring;allgather:pat;"
                                                       "reducescatter:pat", zero_stage=1)
    # LL128 on PCIe-only nodes is refused, also inside a list
    pcie = Context(LLAMA_65B, cluster(fabric="pcie"), TRAIN)
    assert "nccl_gates" in broken(pcie, nccl_proto="ll128")
    assert "nccl_gates" in broken(pcie, nccl_proto="ll,ll128")
    assert "nccl_gates" not in broken(pcie, nccl_proto="^ll128")
    # Megatron broadcasts data to the TP group: a global Tree force breaks tp > 1
    assert "nccl_gates" in broken(CTX, tp=8, pp=2, nccl_algo="tree")
    msg = dict(explain(CTX, {"tp": 8, "pp": 2, "nccl_algo": "tree"}))["nccl_gates"]
    assert "broadcast" in msg


def test_explain_messages_name_the_values() -> None:
    msgs = dict(explain(CTX, {"tp": 3, "pp": 4}))
    assert "tp=3" in msgs["tp_divides_heads"] and "num_attention_heads=64" in \
        msgs["tp_divides_heads"]
    assert "cluster has 16 GPUs" in msgs["world_size"]


def test_check_is_vectorised_and_matches_explain() -> None:
    rows = [{"tp": 4, "pp": 4}, {"tp": 3, "pp": 4}, {"tp": 8, "pp": 2, "zero_stage": 1},
            {"tp": 1, "pp": 1, "sequence_parallel": True}, {"tp": 8, "pp": 2,
                                                            "nccl_algo": "tree"},
            {"tp": 2, "pp": 8, "schedule": "interleaved", "virtual_stages": 2}]
    batch = batch_from_choices(rows, CTX.world_size)
    expected = np.array([explain(CTX, r) == [] for r in rows])
    # by hand: valid, 64 % 3, zero without dp (8*2*1), SP with tp 1, Tree + broadcast, valid
    assert expected.tolist() == [True, False, False, False, False, True]
    assert check(CTX, batch).tolist() == expected.tolist()
    v = violations(CTX, batch)
    assert set(v) == {r.name for r in ALL_RULES}
    assert v["sp_needs_tp"].tolist() == [False, False, False, True, False, False]


def test_rules_are_named_values() -> None:
    names = [r.name for r in ALL_RULES]
    assert len(names) == len(set(names))
    assert {"world_size", "tp_divides_heads", "tp_within_node", "pp_splits_layers",
            "batch_divisible", "interleaved_needs_pp", "virtual_stages_divide_layers",
            "interleaved_microbatches", "sp_needs_tp", "fp8_hardware", "precision_hardware",
            "zero3_no_pp", "zero_needs_dp", "nccl_gates"} <= set(names)
    assert "tp_divides_heads" in repr(RULES_BY_NAME["tp_divides_heads"])


# --------------------------------------------------------------------------------------------
# Space: defaults, restrict, mapping, Optuna choice lists
def test_default_space_175b_on_1024_a100() -> None:
    ctx_cluster = cluster(nodes=128)
    space = default_space(GPT3_175B, ctx_cluster, TrainingSpec(2048, 1536))
    # powers of two up to min(2*8, 96 heads, 1024) = 16
    assert space.tp == (1, 2, 4, 8, 16)
    # divisors of 96 and of 1024 (64: 96 layers on 64 stages, 1 or 2 per stage)
    assert space.pp == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
    assert space.micro_batch_size == (1, 2, 4, 8, 16)
    assert space.precision == ("bf16",)
    assert space.recompute == ("none", "selective", "full")
    assert space.sequence_parallel == (False, True)
    # ZeRO-3 / FSDP too, with pipelines (issue 21)
    assert space.zero_stage == (0, 1, 3)
    assert space.schedule == ("1f1b", "interleaved")
    # every v up to 8 that some default pp interleaves: 96 = pp * v * k (5, 7: none; the
    # one uneven pp, 64, holds 2 layers on its middle stages); beyond 8, up to 24, the counts
    # that split 96 layers into chunks of one or two on some pp: 12 (pp 4, 8), 16 (pp 3, 6),
    # 24 (pp 2, 4); not 9-11, 13-15, 17-23 (no pp gives them chunks that small)
    assert space.virtual_stages == (1, 2, 3, 4, 6, 8, 12, 16, 24)
    assert space.stage_plan == ("default", "balanced")
    assert space.recompute_num_layers == (0, 1, 2, 4, 8)
    assert space.cp == (1,)  # 2k tokens: no context parallelism
    assert space.nccl_algo == ("auto",) and space.nccl_proto == ("auto",)


def test_default_space_issue21_levers() -> None:
    # H100: fp8 joins bf16; 8k tokens offer cp 2, a batch smaller than the GPUs up to 8
    l405 = ModelSpec("l405", 126, 16384, 128, 53248, 128256, num_kv_heads=8)
    h100 = cluster(H100, nodes=128)
    space = default_space(l405, h100, TrainingSpec(8192, 2048))
    assert space.precision == ("bf16", "fp8")
    assert space.cp == (1, 2)
    assert default_space(l405, h100, TrainingSpec(8192, 512)).cp == (1, 2, 4)
    assert default_space(l405, h100, TrainingSpec(4096, 2048)).cp == (1,)
    assert default_space(l405, h100, TrainingSpec(131072, 128)).cp[-1] == 64
    # DeepSpeed has no partial recompute (Megatron-Core's block method)
    ds = default_space(l405, h100, TrainingSpec(8192, 2048, framework="deepspeed"))
    assert ds.recompute_num_layers == (0,)
    # torchtitan has it (its config module's PartialFullAC)
    tt = default_space(l405, h100, TrainingSpec(8192, 2048, framework="torchtitan"))
    assert tt.recompute_num_layers == (0, 1, 2, 4, 8)
    # the balanced stage plan and every v are searched; the article case's balanced plan
    # is valid (LLaMA-65B, PP4 TP4 on 16 A100)
    ctx = Context(LLAMA_65B, cluster(nodes=2), TrainingSpec(2048, 1024))
    assert "balanced" in default_space(LLAMA_65B, ctx.cluster, ctx.training).stage_plan


def test_default_space_offers_uneven_pipeline_splits() -> None:
    # Llama 3 405B: 126 layers, trained on 16 pipeline stages (one layer fewer on the first
    # and the last); 126 = 2 * 3^2 * 7 has no power-of-two divisor beyond 2
    l405 = ModelSpec("l405", 126, 16384, 128, 53248, 128256, num_kv_heads=8)
    ctx = Context(l405, cluster(nodes=128), TrainingSpec(8192, 2048))
    space = default_space(l405, ctx.cluster, ctx.training)
    assert {8, 16, 64} <= set(space.pp) and max(space.pp) <= 126
    assert explain(ctx, {"tp": 8, "pp": 16}) == []
    # interleaving the uneven split (7, 8 x 14, 7) with any v up to 8 (issue 21)
    for v in (2, 3, 4, 8):
        assert "virtual_stages_divide_layers" not in broken(ctx, tp=8, pp=16,
                                                            schedule="interleaved",
                                                            virtual_stages=v), v
    assert "virtual_stages_divide_layers" in broken(ctx, tp=8, pp=16, schedule="interleaved",
                                                    virtual_stages=9)


def test_default_space_offers_fine_grained_interleaving() -> None:
    # Megatron-Bridge's presets interleave Llama 3 70B (80 layers) as pp 2 x v 20 (GB300 SFT,
    # 2 layers a chunk) and pp 8 x v 10 (GB200 SFT, 1 layer): both in the default space and
    # valid; v 40 (pp 2, 1 layer a chunk) is past the cap of 24
    l70 = ModelSpec("l70", 80, 8192, 64, 28672, 128256, num_kv_heads=8)
    ctx = Context(l70, cluster(H100, nodes=4), TrainingSpec(4096, 32))
    space = default_space(l70, ctx.cluster, ctx.training)
    assert {10, 20} <= set(space.virtual_stages) and max(space.virtual_stages) <= 24
    assert 9 not in space.virtual_stages  # 80 = pp * 9 * k for no pp
    for pp, v in ((2, 20), (8, 10)):
        assert "virtual_stages_divide_layers" not in broken(ctx, tp=1, pp=pp,
                                                            schedule="interleaved",
                                                            virtual_stages=v), (pp, v)


def test_default_space_caps() -> None:
    # 16 GPUs, 80 layers: pp = divisors of 80 up to 16; tiny global batch caps mbs
    space = default_space(LLAMA_65B, cluster(V100), TrainingSpec(2048, 4))
    assert space.pp == (1, 2, 4, 5, 8, 10, 16)
    assert space.micro_batch_size == (1, 2, 4)
    assert space.precision == ("fp16",)  # V100 has no bf16
    # 4 heads caps tp below 2 * gpus_per_node
    small = ModelSpec("s", 4, 256, 4, 1024, 100)
    assert default_space(small, cluster(), TRAIN).tp == (1, 2, 4)
    # 6-GPU nodes: divisors of 6 join the powers of two (up to 12, and 16 GPUs)
    assert default_space(GPT3_175B, cluster(per_node=6), TRAIN).tp == (1, 2, 3, 4, 6, 8)


def test_restrict_and_its_errors() -> None:
    base = SearchSpace(tp=(1, 2, 4, 8))
    assert restrict(base, tp=8).tp == (8,)
    assert restrict(base, precision=["BF16", "fp16"]).precision == ("bf16", "fp16")
    assert restrict(base, tp=[2, 2, 4]).tp == (2, 4)  # duplicates dropped, order kept
    assert restrict(base, nccl_algo=["auto", "allreduce:tree;allgather:ring"]).nccl_algo == (
        "auto", "allreduce:tree;allgather:ring")
    with pytest.raises(InputError) as e:
        restrict(base, tpp=2)
    assert e.value.field == "space.tpp" and "'tp'" in e.value.hint
    with pytest.raises(InputError) as e:
        restrict(base, precision="bf61")
    assert e.value.field == "space.precision" and "'bf16'" in e.value.hint
    with pytest.raises(InputError) as e:
        restrict(base, nccl_algo="rign")
    assert e.value.field == "space.nccl_algo" and "'ring'" in e.value.hint
    with pytest.raises(InputError) as e:
        restrict(base, nccl_algo="allredcue:tree")
    assert e.value.field == "space.nccl_algo" and "'allreduce'" in e.value.hint
    with pytest.raises(InputError) as e:
        restrict(base, dp=4)
    assert e.value.field == "space.dp" and "derived" in e.value.hint
    for bad in ({"tp": 0}, {"tp": 1.5}, {"tp": True}, {"zero_stage": 4},
                {"sequence_parallel": "yes"}, {"micro_batch_size": []}):
        with pytest.raises(InputError) as e:
            restrict(base, **bad)
        assert e.value.field == f"space.{next(iter(bad))}"


def test_space_from_mapping() -> None:
    base = SearchSpace(tp=(1, 2, 4, 8), pp=(1, 2))
    got = space_from_mapping({"tp": [2, 4], "schedule": "interleaved"}, base)
    assert got.tp == (2, 4) and got.pp == (1, 2) and got.schedule == ("interleaved",)
    assert space_from_mapping(None, base) is base
    with pytest.raises(InputError) as e:
        space_from_mapping({"recompte": ["full"]}, base)
    assert e.value.field == "space.recompte" and "'recompute'" in e.value.hint
    with pytest.raises(InputError):
        space_from_mapping(["tp"], base)  # type: ignore[arg-type]


def test_optuna_choices_are_fixed_plain_lists() -> None:
    space = default_space(LLAMA_65B, cluster(), TRAIN)
    choices = optuna_choices(space)
    assert tuple(choices) == DIMENSIONS
    assert choices == optuna_choices(default_space(LLAMA_65B, cluster(), TRAIN))
    for values in choices.values():
        assert isinstance(values, tuple) and values
        assert all(type(v) in (int, bool, str) for v in values)
    assert choices["tp"] == (1, 2, 4, 8, 16)


# --------------------------------------------------------------------------------------------
# Enumeration
SMALL_MODEL = ModelSpec("small", num_layers=12, hidden_size=768, num_attention_heads=12,
                        num_kv_heads=4, ffn_hidden_size=3072, vocab_size=1000)


def brute_force(ctx: Context, space: SearchSpace) -> list[tuple]:
    """itertools.product over the dimensions, kept when explain() finds nothing."""
    out = []
    for combo in itertools.product(*(getattr(space, d) for d in DIMENSIONS)):
        if not explain(ctx, dict(zip(DIMENSIONS, combo, strict=True))):
            out.append(combo)
    return out


def as_tuples(batch: ConfigBatch) -> list[tuple]:
    return [tuple(getattr(c, d) for d in DIMENSIONS) for c in batch.configs()]


SMALL_GQA = ModelSpec("small-gqa", num_layers=12, hidden_size=1024, num_attention_heads=16,
                      num_kv_heads=8, ffn_hidden_size=4096, vocab_size=1000)


@pytest.mark.parametrize(("ctx", "space", "exercised"), [
    # 2 nodes x 4 A100s, global batch 36: 5*5*2*2*2*3*2*2*2 = 4800 points
    # (DeepSpeed: its pipeline engine is what rejects ZeRO-3 with a pipeline)
    (Context(SMALL_GQA, cluster(nodes=2, per_node=4), TrainingSpec(128, 36,
                                                                   framework="deepspeed")),
     SearchSpace(tp=(1, 2, 4, 8, 3), pp=(1, 2, 3, 4, 8), micro_batch_size=(1, 3),
                 precision=("bf16", "fp8"), sequence_parallel=(False, True),
                 zero_stage=(0, 1, 3), schedule=("1f1b", "interleaved"), virtual_stages=(1, 2),
                 nccl_algo=("auto", "tree")),
     {"world_size", "tp_divides_heads", "tp_within_node", "pp_splits_layers",
      "batch_divisible", "interleaved_needs_pp", "interleaved_microbatches", "sp_needs_tp",
      "fp8_hardware", "zero3_no_pp", "zero_needs_dp", "nccl_gates"}),
    # one H100 node of 8, cross-node TP allowed (no effect inside a node), forced NCCL pairs;
    # values deliberately listed out of numeric order: the output follows the listed order
    (Context(SMALL_MODEL, cluster(H100, nodes=1, per_node=8), TrainingSpec(128, 16),
             allow_cross_node_tp=True),
     SearchSpace(tp=(1, 2, 4, 3), pp=(2, 1, 6), micro_batch_size=(2, 1),
                 precision=("fp8", "bf16"), recompute=("full", "none"),
                 sequence_parallel=(True, False), zero_stage=(1, 0),
                 schedule=("gpipe", "interleaved"), virtual_stages=(1, 2),
                 nccl_algo=("nvls", "ring", "allreduce:nvls;allgather:ring"),
                 nccl_proto=("ll", "auto")),
     {"world_size", "tp_divides_heads", "interleaved_needs_pp", "sp_needs_tp",
      "zero_needs_dp", "nccl_gates"}),
])
def test_enumeration_equals_brute_force(ctx: Context, space: SearchSpace,
                                        exercised: set[str]) -> None:
    batch = enumerate_valid(ctx, space)
    expected = brute_force(ctx, space)
    assert 0 < len(expected) < count_product(space)  # the space tests both sides
    assert as_tuples(batch) == expected  # same set, same (product) order
    assert space_size(ctx, space) == len(expected)
    assert batch.nccl_algo_table == space.nccl_algo
    # dp is derived: tp * pp * dp = world size everywhere
    assert np.all(batch.tp * batch.pp * batch.dp == ctx.world_size)
    rejected = rejected_by_rule(ctx, space)
    assert sum(rejected.values()) == count_product(space) - len(expected)
    # the space really exercises these rules (each rejects some points)
    assert {name for name, n in rejected.items() if n > 0} >= exercised


def test_enumeration_is_deterministic() -> None:
    ctx = Context(LLAMA_65B, cluster(nodes=4), TRAIN)
    space = default_space(LLAMA_65B, ctx.cluster, TRAIN)
    a, b = enumerate_valid(ctx, space), enumerate_valid(ctx, space)
    for d in (*DIMENSIONS, "dp"):
        np.testing.assert_array_equal(getattr(a, d), getattr(b, d))
    # product order: tp never decreases along the batch
    assert np.all(np.diff(a.tp) >= 0)


def test_enumeration_empty_and_counts() -> None:
    space = SearchSpace(tp=(3,), pp=(1, 2))  # 64 % 3 != 0 and 3 does not divide 16
    assert len(enumerate_valid(CTX, space)) == 0
    assert space_size(CTX, space) == 0
    assert count_product(space) == 2
    # one valid point: tp=8, pp=2, dp=1; zero_stage 1 needs dp > 1 and is dropped
    single = SearchSpace(tp=(8,), pp=(2,), zero_stage=(0, 1))
    assert enumerate_valid(CTX, single).configs() == [ParallelConfig(tp=8, pp=2, dp=1)]
    assert rejected_by_rule(CTX, single)["zero_needs_dp"] == 1


def test_175b_on_1024_gpus_enumerates_fast() -> None:
    c = cluster(nodes=128)
    training = TrainingSpec(2048, 1536)
    ctx = Context(GPT3_175B, c, training)
    space = default_space(GPT3_175B, c, training)
    enumerate_valid(ctx, space)  # warm-up (imports, caches)
    t0 = time.perf_counter()
    batch = enumerate_valid(ctx, space)
    elapsed_s = time.perf_counter() - t0
    assert elapsed_s < 1.0
    assert len(batch) > 0 and check(ctx, batch).all()
    assert not np.any(batch.tp > 8)  # cross-node TP filtered by default


def test_batch_from_choices_derives_dp() -> None:
    b = batch_from_choices([{"tp": 4, "pp": 2}, {"tp": 2, "pp": 2, "dp": 4}], 16)
    assert b.dp.tolist() == [2, 4]  # 16 / (4*2) = 2; given
    with pytest.raises(InputError) as e:
        batch_from_choices([{"tp": 4, "precison": "bf16"}], 16)
    assert e.value.field == "space.precison"


def test_no_optuna_or_joblib_import() -> None:
    code = ("import sys, search_spaces; "
            "sys.exit(int(any(m in sys.modules for m in ('optuna', 'joblib'))))")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_with_catalog_entries() -> None:
    from costmodel.hardware import default_cluster, get_gpu
    from costmodel.models_catalog import get_model

    gpt3 = get_model("175b")
    c = default_cluster(1024)  # 128 DGX-A100-like nodes of 8
    training = TrainingSpec(2048, 1536)
    ctx = Context(gpt3, c, training)
    space = default_space(gpt3, c, training)
    assert space.tp == (1, 2, 4, 8, 16) and space.precision == ("bf16",)
    batch = enumerate_valid(ctx, space)
    assert len(batch) > 0 and set(batch.tp.tolist()) <= {1, 2, 4, 8}
    # the Megatron-LM paper's 175B layout (tp=8, pp=16 -> dp=8 on 1024 GPUs) is in the set
    assert any(c.tp == 8 and c.pp == 16 and c.dp == 8 for c in batch.configs())
    llama = get_model("65b")
    on_a100 = Context(llama, default_cluster(16), TRAIN)
    on_h100 = Context(llama, default_cluster(16, gpu=get_gpu("h100-sxm-80gb")), TRAIN)
    assert broken(on_a100, tp=8, pp=2, precision="fp8") == {"fp8_hardware"}
    assert explain(on_h100, {"tp": 8, "pp": 2, "precision": "fp8"}) == []


# NCCL values: one grammar (costmodel.nccl_grammar) for the space, the rules and scoring -----
@pytest.mark.parametrize("value, field_message", [
    ("^", "empty list"), ("ring;", "empty entry"), ("ring,,tree", "empty list item"),
    ("bcast:ring", "unknown collective 'bcast'"), ("allreduce:tree;ring", "names no collective"),
])
def test_space_refuses_nccl_values_that_mean_nothing(value, field_message) -> None:
    with pytest.raises(InputError) as e:
        SearchSpace(nccl_algo=(value,))
    assert e.value.field == "space.nccl_algo" and field_message in e.value.message


def test_space_takes_what_the_grammar_takes() -> None:
    # the space's vocabulary (NCCL_ALGOS) is what the help lists; NCCL's own names are
    # accepted too, and 'collective:auto' leaves that collective to NCCL
    sp = SearchSpace(nccl_algo=("collnetdirect", " Ring;AllReduce:auto"))
    assert sp.nccl_algo == ("collnetdirect", "ring;allreduce:auto")


def test_parse_nccl_adapter_and_its_deprecated_vocabulary_form() -> None:
    from search_spaces.space import parse_nccl

    (e,) = parse_nccl("collnet,ring", "algo", "f")
    assert e.collective is None and e.names == ("collnet", "ring")  # as written
    # the deprecated form (optimizer.launch.flags): the kind is inferred from the vocabulary
    assert parse_nccl("^ll128", ("simple", "ll", "ll128", "auto"), "f")[0].exclude
    assert parse_nccl("ring;allreduce:auto", ("ring", "tree", "auto"), "f")[1].names == ()
    with pytest.raises(InputError) as err:  # a grammar name outside the given vocabulary
        parse_nccl("nvls", ("ring", "tree", "auto"), "parallel.nccl_algo")
    assert err.value.field == "parallel.nccl_algo"
    with pytest.raises(ValueError, match="pass kind"):
        parse_nccl("ring", ("ring", "simple"), "f")


@pytest.mark.parametrize("argv, rc", [
    # changelog-cost-model.md, NCCL grammar: ebe5f60 / a3923e9 / now
    (["nccl", "--collective", "allreduce", "--gpus", "16", "--size", "1GiB",
      "--algo", "allreduce:auto"], 0),  # 0 / 2 / 0
    (["nccl", "--collective", "allreduce", "--gpus", "16", "--size", "1GiB", "--algo", "^"], 2),
    (["nccl", "--collective", "allreduce", "--gpus", "16", "--size", "1GiB",
      "--algo", "ring;"], 2),  # 2 / 0 / 2
    (["nccl", "--collective", "allreduce", "--gpus", "16", "--size", "1GiB",
      "--algo", "bcast:ring"], 2),  # 0 / 0 / 2: NCCL has no 'bcast'
    (["--model", "7b", "--gpus", "16", "--nccl-algo", "ring;"], 2),  # 2 / 0 / 2
])
def test_nccl_grammar_exit_codes(argv, rc, capsys) -> None:
    from optimizer.cli import main

    assert main(argv) == rc, capsys.readouterr()
