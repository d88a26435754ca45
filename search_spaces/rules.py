"""Validity rules: named values with a readable reason, each vectorised over a ConfigBatch.

A rule answers "is this configuration structurally possible?" (the cost model is undefined
otherwise); resource limits such as the memory budget are not rules but objectives/constraints
in the optimizer. ``Rule.check(ctx, batch)`` returns one bool per configuration, True where
the rule holds. The rules mirror what Megatron-LM's ``validate_args`` and schedules enforce
(ecosystem.md section 2.1), DeepSpeed/FSDP's ZeRO limits, and NCCL's algorithm/protocol
validity (ecosystem.md section 2.5, nccl.md sections 2 and 5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.cp import cp_a2a_size
from costmodel.errors import InputError
from costmodel.nccl_grammar import COLLECTIVES, candidate_pairs, parse_nccl_setting
from costmodel.pipeline_layout import fits_ranks, layout_stages, parse_layout
from costmodel.schedule import balanced_layers, head_share, stage_layers
from costmodel.specs import (
    PARALLEL_DIMENSIONS,
    PRECISIONS,
    ClusterSpec,
    CpCommType,
    ModelSpec,
    ParallelConfig,
    Precision,
    Schedule,
    StagePlanCode,
    TrainingSpec,
)
from search_spaces.space import batch_from_choices


@dataclass(frozen=True)
class Context:
    """What the rules need besides the configurations themselves."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    allow_cross_node_tp: bool = False
    allow_collnet: bool = False  # CollNet needs NCCL_COLLNET_ENABLE=1 and a SHARP plugin
    allow_cross_domain_ep: bool = False  # EP x ETP groups spanning NVLink domains

    def __post_init__(self) -> None:
        for name, kind in (("model", ModelSpec), ("cluster", ClusterSpec),
                           ("training", TrainingSpec)):
            if not isinstance(getattr(self, name), kind):
                raise InputError(name, f"must be a {kind.__name__}, got "
                                       f"{type(getattr(self, name)).__name__}")
        for name in ("allow_cross_node_tp", "allow_collnet", "allow_cross_domain_ep"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(name, f"must be true or false, got {getattr(self, name)!r}")

    @property
    def world_size(self) -> int:
        return self.cluster.num_gpus


Check = Callable[[Context, ConfigBatch], np.ndarray]
Detail = Callable[[Context, Mapping[str, Any]], str]

#: Every ConfigBatch column: what a rule that does not declare ``reads`` is assumed to read.
_ALL_COLUMNS = frozenset(d.name for d in PARALLEL_DIMENSIONS)


@dataclass(frozen=True)
class Rule:
    """A named validity rule.

    ``check(ctx, batch)`` is True where the rule holds. ``reads`` names the ConfigBatch columns
    the check looks at (the enumerator applies a rule as soon as those are expanded).
    ``detail(ctx, row)`` optionally says, for one configuration, what exactly is wrong.
    """

    name: str
    reason: str
    check: Check
    reads: frozenset[str] = _ALL_COLUMNS
    detail: Detail | None = None

    def __call__(self, ctx: Context, batch: ConfigBatch) -> np.ndarray:
        out = np.asarray(self.check(ctx, batch), dtype=bool)
        return np.broadcast_to(out, (len(batch),))

    def __repr__(self) -> str:
        return f"<Rule {self.name}: {self.reason}>"

    def message(self, ctx: Context, row: Mapping[str, Any]) -> str:
        """The reason, followed by the specifics for ``row`` when the rule has them."""
        return f"{self.reason}: {self.detail(ctx, row)}" if self.detail else self.reason


def _divides(numerator: int | np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``denominator > 0 and numerator % denominator == 0``, without dividing by zero."""
    d = np.asarray(denominator)
    return (d > 0) & (np.asarray(numerator) % np.maximum(d, 1) == 0)


# --------------------------------------------------------------------------------------------
# Structural rules (ecosystem.md section 2.1: Megatron-LM validate_args)
def _world_size(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return b.tp * b.cp * b.pp * b.dp == ctx.world_size


# --------------------------------------------------------------------------------------------
# Context parallelism (modern-training.md 1.2, 1.5: Megatron-LM arguments.py, TE
# attn_forward_func_with_cp)
def _cp_splits_sequence(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # the sequence is cut into 2 cp chunks for causal load balancing (Megatron asserts
    # seq_length % (2 cp) == 0); with sequence parallelism each CP rank's s/cp tokens are split
    # again over tp, so s % (2 cp tp) == 0 (the safe rule; Megatron checks only 2 cp)
    s = ctx.training.seq_length
    cp = b.cp
    sp = b.sequence_parallel & (b.tp > 1)
    return (cp == 1) | _divides(s, 2 * cp * np.where(sp, b.tp, 1))


def _cp_needs_flash_attention(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # CP runs inside Transformer Engine's fused attention (attn_forward_func_with_cp); Megatron
    # has no unfused CP path
    return (b.cp == 1) | ctx.training.flash_attention


def _a2a_heads(c1: np.ndarray, ctx: Context, b: ConfigBatch) -> np.ndarray:
    m = ctx.model
    t = np.maximum(b.tp, 1)
    a_l = m.num_attention_heads // t
    g_l = np.maximum(1, m.num_kv_heads // t)
    return _divides(a_l, c1) & _divides(g_l, c1)


def _cp_comm_type(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Ulysses a2a splits the local heads over the CP ranks: a_l and g_l must be multiples of
    # cp (TE AttnFuncWithCPAndQKVOA2A); a2a+p2p needs that of its a2a group (cp_a2a_size);
    # at cp = 1 only the default p2p is a configuration of its own
    ct = b.cp_comm_type
    a2a = _a2a_heads(b.cp, ctx, b)
    hier = cp_a2a_size(ctx.cluster.gpus_per_node, ctx.model.num_attention_heads,
                       ctx.model.num_kv_heads, b.tp, b.cp) > 1
    return np.where(b.cp == 1, ct == CpCommType.P2P,
                    np.where(ct == CpCommType.A2A, a2a,
                             np.where(ct == CpCommType.A2A_P2P, hier, True)))


def _cp_within_world(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return _divides(ctx.world_size, b.cp)


def _tp_divides_heads(ctx: Context, b: ConfigBatch) -> np.ndarray:
    m = ctx.model
    return _divides(m.num_attention_heads, b.tp) & _divides(m.num_kv_heads, b.tp)


def _tp_divides_ffn(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron's ColumnParallelLinear / RowParallelLinear split the FFN width evenly over tp
    return _divides(ctx.model.ffn_hidden_size, b.tp)


def _fp8_alignment(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Transformer Engine's FP8 GEMMs need the dimensions of each rank's weight shard to be
    # multiples of 16 (hidden, the QKV and projection widths and the FFN width, over tp)
    m = ctx.model
    widths = (m.hidden_size, (m.num_attention_heads + 2 * m.num_kv_heads) * m.head_dim,
              m.num_attention_heads * m.head_dim, m.ffn_hidden_size)
    ok = np.ones(len(b), dtype=bool)
    for w in widths:
        ok &= _divides(w, b.tp) & (np.asarray(w) // np.maximum(b.tp, 1) % 16 == 0)
    return (b.precision != Precision.FP8) | ok


def _tp_within_node(ctx: Context, b: ConfigBatch) -> np.ndarray:
    gpn = ctx.cluster.gpus_per_node
    inside = (b.tp <= gpn) & _divides(gpn, b.tp)
    if ctx.allow_cross_node_tp:  # a TP group must still tile whole nodes
        return inside | _divides(b.tp, np.full_like(b.tp, gpn))
    return inside


def _pp_splits_layers(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # pp need not divide the layers: the middle stages take ceil(L/pp) and the first and last
    # stage the rest (costmodel.schedule.stage_layers; Megatron-Core
    # --decoder-first/last-pipeline-num-layers), as long as each of those gets one
    return stage_layers(ctx.model.num_layers, b.pp)[3]


def _batch_divisible(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return _divides(ctx.training.global_batch_size, b.micro_batch_size * b.dp)


def _interleaved_needs_pp(ctx: Context, b: ConfigBatch) -> np.ndarray:
    inter = b.schedule == Schedule.INTERLEAVED
    return np.where(inter, (b.pp > 1) & (b.virtual_stages > 1), b.virtual_stages == 1)


def plan_layers(ctx: Context, b: ConfigBatch):
    """(first, middle, last, balanced-differs) layers of each row's stage plan."""
    L = ctx.model.num_layers
    first, mid, last, _ = stage_layers(L, b.pp)
    head = head_share(ctx.model, ctx.training.seq_length, b.recompute)
    bf, bm, bl, differs = balanced_layers(L, b.pp, head)
    bal = b.stage_plan == StagePlanCode.BALANCED
    return (np.where(bal, bf, first), np.where(bal, bm, mid), np.where(bal, bl, last),
            differs)


def _virtual_stages_divide_layers(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron's interleaved schedule splits the layers evenly into pp * v chunks
    # (--num-virtual-stages-per-pipeline-rank); an uneven plan (the default split where pp
    # does not divide the layers, or a balanced one) goes through
    # --pipeline-model-parallel-layout, whose chunks may hold any number of layers and one
    # of which may hold the embedding or the loss alone (Llama 3 405B: 7 layers on the first
    # and last stage as E + 7 chunks of one): every middle stage needs v layers, the first and
    # the last v - 1
    v = b.virtual_stages
    if ctx.training.pipeline_layout is not None:  # the layout's chunks: pipeline_layout_fits
        return np.ones(len(b), bool)
    even = (b.stage_plan == StagePlanCode.DEFAULT) & _divides(ctx.model.num_layers, b.pp * v)
    first, mid, last, _ = plan_layers(ctx, b)
    plan_uneven = (first != last) | ((b.pp >= 3) & ((first != mid) | (last != mid)))
    uneven = plan_uneven & (first >= v - 1) & (last >= v - 1) & ((b.pp <= 2) | (mid >= v))
    return (v == 1) | even | uneven


def _layout_chunks(b: ConfigBatch) -> np.ndarray:
    return np.where((b.schedule == Schedule.INTERLEAVED) & (b.virtual_stages > 1),
                    b.virtual_stages, 1)


def _layout_fits(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # an explicit pipeline layout (training.pipeline_layout) fixes pp x vpp to its stages
    # (Megatron derives vpp = stages / pp); it is Megatron's default-plan replacement, so the
    # balanced plan and the V-shaped schedules (two chunks of their own) do not take it
    layout = ctx.training.pipeline_layout
    if layout is None:
        return np.ones(len(b), bool)
    fit = fits_ranks(layout, b.pp, _layout_chunks(b))  # Megatron's per-rank placement too
    return (fit & (b.stage_plan == StagePlanCode.DEFAULT) & (b.schedule < Schedule.ZB_V)
            & (b.pp > 1))


def _balanced_plan_moves_layers(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # a balanced plan that keeps the default split is the same configuration
    return (b.stage_plan == StagePlanCode.DEFAULT) | ((b.pp > 1) & plan_layers(ctx, b)[3])


def _zero_bubble_needs_pp(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return (b.schedule < Schedule.ZB_H1) | (b.pp > 1)


def _v_schedule_chunks(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # ZB-V and DualPipeV put two model chunks on every rank: each stage needs two layers;
    # DualPipeV also needs an even number of micro-batches, at least 2 pp (DualPipe README)
    v_shaped = (b.schedule == Schedule.ZB_V) | (b.schedule == Schedule.DUALPIPE_V)
    first, mid, last, _ = plan_layers(ctx, b)
    two = (first >= 2) & (last >= 2) & ((b.pp <= 2) | (mid >= 2))
    m, whole = _microbatches(ctx, b)
    dual = (b.schedule != Schedule.DUALPIPE_V) | ~whole | ((m % 2 == 0) & (m >= 2 * b.pp))
    return ~v_shaped | (two & dual)


def _microbatches(ctx: Context, b: ConfigBatch) -> tuple[np.ndarray, np.ndarray]:
    """(m, whether m is an integer): microbatches per step, m = global / (mbs * dp)."""
    per_step = b.micro_batch_size * b.dp
    whole = _divides(ctx.training.global_batch_size, per_step)
    return ctx.training.global_batch_size // np.maximum(per_step, 1), whole


def _interleaved_microbatches(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron's interleaved schedule: m must be a multiple of pp (default microbatch group
    # size per virtual stage = pp; also Narayanan et al. 2021 section 2.2.2).
    m, whole = _microbatches(ctx, b)
    return (b.schedule != Schedule.INTERLEAVED) | ~whole | _divides(m, b.pp)


def _sp_needs_tp(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return ~b.sequence_parallel | (b.tp > 1)


def _fp8_hardware(ctx: Context, b: ConfigBatch) -> np.ndarray:
    return (b.precision != Precision.FP8) | ctx.cluster.gpu.supports("fp8")


def _precision_hardware(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # fp8 is judged by fp8_hardware alone, so a config is not reported twice.
    ok = np.array([p == "fp8" or ctx.cluster.gpu.supports(p) for p in PRECISIONS])
    return ok[b.precision]


def _zero3_no_pp(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # FSDP2 composes with pipeline (and tensor) parallelism: torchtitan's 3D layout (FSDP x
    # TP x PP, Llama 3 405B) and Megatron-FSDP with PP. DeepSpeed's pipeline engine refuses
    # ZeRO-3 (PipelineEngine asserts zero_optimization_stage < 2).
    return (b.zero_stage < 3) | (b.pp == 1) | (ctx.training.framework != "deepspeed")


def _partial_recompute(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron-Core --recompute-method block --recompute-num-layers N (full granularity only):
    # N of each model chunk's layers are recomputed, so N must leave a chunk some layers of
    # its own (N at or over the chunk is plain full recompute, --recompute-method uniform).
    # torchtitan: the config module's PartialFullAC checkpoints the first N blocks of each
    # pipeline model part (optimizer.launch.flags.torchtitan_config_source), the same layers
    # (costmodel.stages.recomputed_layers prices v x min(N, layers / v) per rank: exact for
    # equal chunks and Megatron's even spread; an explicit layout's unequal chunks must each
    # hold at least N layers, or at most N, for the count to be Megatron's sum of min(N, c))
    n = b.recompute_num_layers
    chunk = np.ceil(ctx.model.num_layers / (b.pp * b.virtual_stages))
    return (n == 0) | ((b.recompute == 2) & (n < chunk)
                       & (ctx.training.framework in ("megatron", "torchtitan"))
                       & _layout_chunks_priced(ctx, b))


def _layout_chunks_priced(ctx: Context, b: ConfigBatch) -> np.ndarray:
    """Where an explicit layout's chunks on every rank are all >= N or all <= N layers."""
    ok = np.ones(len(b), bool)
    layout = ctx.training.pipeline_layout
    if layout is None:
        return ok
    counts = [st.count("t") for st in parse_layout(layout)]
    n = b.recompute_num_layers
    for p in np.unique(b.pp):
        p = int(p)
        if p < 1 or len(counts) % p:
            continue  # pipeline_layout_fits refuses these
        sel = b.pp == p
        for r in range(p):
            chunks = counts[r::p]
            lo, hi = min(chunks), max(chunks)
            ok = ok & ~(sel & (n > lo) & (n < hi))
    return ok


def _activation_offload(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron-Core TransformerConfig.__post_init__: cpu_offloading_num_layers < num_layers,
    # not with pipeline parallelism, not with activation recomputation
    n = b.cpu_offloading_num_layers
    return (n == 0) | ((n < ctx.model.num_layers) & (b.pp == 1) & (b.recompute == 0)
                       & (ctx.training.framework == "megatron"))


def _precision_aware_optimizer(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # --use-precision-aware-optimizer: Megatron-Core with Transformer Engine's FusedAdam,
    # bf16 parameters (bf16 training, and fp8 whose master weights are bf16's)
    bf16_params = (b.precision == Precision.BF16) | (b.precision == Precision.FP8)
    return (b.precision_aware_optimizer == 0) | (bf16_params
                                                 & (ctx.training.framework == "megatron"))


def _torchtitan_expresses(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # framework torchtitan (what optimizer.launch.flags.torchtitan_refusal refuses to emit):
    # FSDP2 shards parameters, gradients and optimizer states together (ZeRO-2: reshard after
    # forward never; ZeRO-3: always), so there is no sharded-optimizer-only ZeRO-1; DP without
    # sharding is DDP, which torchtitan composes with no other parallelism; its context
    # parallelism all-gathers the K/V shards (context_parallel_rotate_method default
    # "allgather", modern-training.md 1.7; no Ulysses a2a or a2a+p2p); mixed_precision_param
    # is bfloat16 or float32 (no fp16)
    if ctx.training.framework != "torchtitan":
        return np.ones(b.tp.shape, dtype=bool)
    ddp_nd = (b.zero_stage < 2) & (b.dp > 1) & ((b.tp > 1) | (b.pp > 1))
    cp_ok = (b.cp == 1) | (b.cp_comm_type == CpCommType.ALL_GATHER)
    return (b.zero_stage != 1) & ~ddp_nd & cp_ok & (b.precision != Precision.FP16)


def _recompute_modules(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # Megatron-Core --recompute-granularity selective --recompute-modules (TransformerConfig
    # recompute_modules; core_attn is the default and the only module legacy Megatron and
    # the other frameworks have). A module set must change something for the model under
    # Megatron-Core's Transformer Engine layer spec (gpt_layer_specs.py): "mlp" recomputes
    # dense MLPs only (TransformerLayer: not MoE layers); "layernorm" the norms that are
    # modules of their own, the MoE layers' pre_mlp_layernorm and MLA's input_layernorm (a
    # dense layer's norms are fused into linear_qkv / linear_fc1: IdentityOp, a no-op);
    # "moe_act" the experts' activation (MoE layers, grouped GEMM)
    code = b.recompute_modules
    m = ctx.model
    moe = m.moe is not None
    dense_layers = (not moe) or m.moe_layers < m.num_layers
    norms = moe or m.mla is not None
    mlp = np.isin(code, (1, 2))
    ln = np.isin(code, (3, 5))
    act = np.isin(code, (4, 5))
    ok = (b.recompute == 1) & (ctx.training.framework == "megatron")
    ok &= ~mlp | dense_layers
    ok &= ~ln | norms
    ok &= ~act | moe
    return (code == 0) | ok


def _zero_needs_dp(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # the distributed optimizer shards over the data-parallel group with CP (dp x cp)
    return (b.zero_stage == 0) | (b.dp * b.cp > 1)


# --------------------------------------------------------------------------------------------
# NCCL algorithm / protocol gates (ecosystem.md section 2.5; nccl.md sections 2, 4.2, 5)
# What each collective can run is NCCL's capability table (costmodel.nccl_grammar.CAPABILITIES,
# read through candidate_pairs); names are NCCL's (paraplan's "collnet" is both CollNet variants).


def available_algos(ctx: Context) -> frozenset[str]:
    """Algorithms NCCL can enable on this cluster (coarse, per nccl.md section 5).

    NVLS/NVLSTree need an NVSwitch system with sm90+; NVLSTree only runs across nodes and NVLS
    across nodes needs CollNet; PAT needs one GPU per node and sm60+; CollNet needs
    ``ctx.allow_collnet`` (NCCL_COLLNET_ENABLE=1 and a SHARP plugin).
    """
    c = ctx.cluster
    sm = c.gpu.compute_capability
    nvls_hw = c.intra_node.fabric == "nvswitch" and sm >= 90
    out = {"ring", "tree"}
    if nvls_hw and (c.num_nodes == 1 or ctx.allow_collnet):
        out.add("nvls")
    if nvls_hw and c.num_nodes > 1:
        out.add("nvlstree")
    if c.gpus_per_node == 1 and sm >= 60:
        out.add("pat")
    if ctx.allow_collnet:
        out.update(("collnetdirect", "collnetchain"))
    return frozenset(out)


def available_protos(ctx: Context) -> frozenset[str]:
    """Protocols that are safe on this cluster: LL128 needs NVLink-class intra-node paths and
    sm70+ (nccl.md section 5.3; PCIe-only nodes never get it, and forcing it there risks data
    corruption according to the NCCL docs)."""
    c = ctx.cluster
    out = {"ll", "simple"}
    if c.intra_node.fabric != "pcie" and c.gpu.compute_capability >= 70:
        out.add("ll128")
    return frozenset(out)


def used_collectives(tp: int, sequence_parallel: bool, zero_stage: int) -> tuple[str, ...]:
    """Collectives a training step issues, coarsely: AllReduce always (gradients, loss,
    gradient norm); AllGather and ReduceScatter with sequence parallelism or ZeRO >= 1;
    Broadcast with tp > 1 (Megatron broadcasts each batch to its TP group). Pipeline
    send/recv is not governed by NCCL_ALGO."""
    out = ["allreduce"]
    if sequence_parallel or zero_stage > 0:
        out += ["allgather", "reducescatter"]
    if tp > 1:
        out.append("broadcast")
    return tuple(out)


def nccl_problem(ctx: Context, algo: str, proto: str, collectives: Sequence[str]) -> str | None:
    """Why forcing ``algo``/``proto`` cannot run one of ``collectives`` here, or None if it can.

    Since NCCL 2.24 a forced algorithm that cannot run a collective fails at the call
    (nccl.md section 4.2), so each used collective needs a runnable (algorithm, protocol) pair
    inside the forced lists, among the algorithms this cluster enables.
    """
    try:
        algos_set = parse_nccl_setting(algo, "algo", "parallel.nccl_algo")
        protos_set = parse_nccl_setting(proto, "proto", "parallel.nccl_proto")
    except InputError as err:
        return str(err)
    algos_here = available_algos(ctx)
    protos_here = available_protos(ctx)
    if "ll128" not in protos_here and any("ll128" in protos_set.named(c) for c in COLLECTIVES):
        return ("nccl_proto names ll128, which this cluster does not support (PCIe-only "
                "intra-node fabric or sm < 70)")
    for coll in collectives:
        pairs = candidate_pairs(coll)
        algos = set(algos_set.enabled(coll)) & {a for a, _ in pairs}
        runnable = algos & algos_here
        if not runnable:
            return (f"nccl_algo {algo!r} leaves no algorithm that can run {coll} on this "
                    f"cluster (allowed for {coll}: {sorted(algos) or 'none'}; enabled here: "
                    f"{sorted(algos_here)})")
        protos = set(protos_set.enabled(coll)) & protos_here
        if not any((a, p) in pairs for a in runnable for p in protos):
            return (f"nccl_proto {proto!r} leaves no protocol for {coll} with algorithms "
                    f"{sorted(runnable)} (NVLS, NVLSTree, CollNet and PAT run Simple only)")
    return None


# usage patterns: index = 2*(needs allgather/reducescatter) + (needs broadcast)
_USAGES: tuple[tuple[str, ...], ...] = (
    ("allreduce",), ("allreduce", "broadcast"), ("allreduce", "allgather", "reducescatter"),
    ("allreduce", "allgather", "reducescatter", "broadcast"),
)


@lru_cache(maxsize=256)
def _nccl_table_cached(ctx: Context, algos: tuple[str, ...], protos: tuple[str, ...]
                       ) -> np.ndarray:
    return _nccl_table(ctx, algos, protos)


def _nccl_table(ctx: Context, algos: tuple[str, ...], protos: tuple[str, ...]) -> np.ndarray:
    """valid[algo code, proto code, usage pattern] for a batch's NCCL tables."""
    out = np.zeros((len(algos), len(protos), len(_USAGES)), dtype=bool)
    for i, a in enumerate(algos):
        for j, p in enumerate(protos):
            for k, usage in enumerate(_USAGES):
                out[i, j, k] = nccl_problem(ctx, a, p, usage) is None
    out.flags.writeable = False
    return out


def _nccl_gates(ctx: Context, b: ConfigBatch) -> np.ndarray:
    try:
        table = _nccl_table_cached(ctx, b.nccl_algo_table, b.nccl_proto_table)
    except TypeError:  # an unhashable spec (e.g. a custom mapping inside): no cache
        table = _nccl_table(ctx, b.nccl_algo_table, b.nccl_proto_table)
    usage = 2 * (b.sequence_parallel | (b.zero_stage > 0)).astype(np.int64) + (b.tp > 1)
    return table[b.nccl_algo, b.nccl_proto, usage]


def _nccl_detail(ctx: Context, r: Mapping[str, Any]) -> str:
    usage = used_collectives(r["tp"], r["sequence_parallel"], r["zero_stage"])
    return nccl_problem(ctx, r["nccl_algo"], r["nccl_proto"], usage) or "ok"


# --------------------------------------------------------------------------------------------
def _experts_only_moe(ctx: Context, b: ConfigBatch) -> np.ndarray:
    if ctx.model.moe is not None:
        return np.ones(len(b), dtype=bool)
    return (b.ep == 1) & (b.etp == 1)


def _ep_divides_experts(ctx: Context, b: ConfigBatch) -> np.ndarray:
    if ctx.model.moe is None:
        return np.ones(len(b), dtype=bool)
    return _divides(ctx.model.moe.num_experts, b.ep)


def _expert_grid(ctx: Context, b: ConfigBatch) -> np.ndarray:
    # world = tp cp dp pp must be divisible by etp ep pp (Megatron parallel_state): etp ep
    # divides tp cp dp
    return _divides(b.tp * b.cp * b.dp, b.ep * b.etp)


def _etp_divides_ffn(ctx: Context, b: ConfigBatch) -> np.ndarray:
    if ctx.model.moe is None:
        return np.ones(len(b), dtype=bool)
    return _divides(ctx.model.moe.expert_ffn_hidden_size, b.etp) & (b.etp <= b.tp)


def _ep_within_domain(ctx: Context, b: ConfigBatch) -> np.ndarray:
    if ctx.allow_cross_domain_ep:
        return np.ones(len(b), dtype=bool)
    return b.ep * b.etp <= ctx.cluster.domain_gpus


def _m(ctx: Context, r: Mapping[str, Any]) -> str:
    per = r["micro_batch_size"] * r["dp"]
    return f"{ctx.training.global_batch_size}/{per}" if per else "undefined"


WORLD_SIZE = Rule(
    "world_size", "tp * cp * pp * dp must equal the number of GPUs", _world_size,
    frozenset({"tp", "cp", "pp", "dp"}),
    lambda c, r: f"{r['tp']} * {r['cp']} * {r['pp']} * {r['dp']} = "
                 f"{r['tp'] * r['cp'] * r['pp'] * r['dp']}, cluster has {c.world_size} GPUs")
CP_WITHIN_WORLD = Rule(
    "cp_within_world", "cp must divide the number of GPUs", _cp_within_world,
    frozenset({"cp"}), lambda c, r: f"cp={r['cp']}, {c.world_size} GPUs")
CP_SPLITS_SEQUENCE = Rule(
    "cp_splits_sequence", "context parallelism cuts the sequence into 2 * cp chunks: "
    "seq_length must be a multiple of 2 * cp (of 2 * cp * tp with sequence parallelism)",
    _cp_splits_sequence, frozenset({"cp", "tp", "sequence_parallel"}),
    lambda c, r: f"seq_length={c.training.seq_length}, cp={r['cp']}, tp={r['tp']}, "
                 f"SP={'on' if r['sequence_parallel'] else 'off'}")
CP_NEEDS_FLASH_ATTENTION = Rule(
    "cp_needs_flash_attention", "context parallelism runs in Transformer Engine's fused "
    "attention (training.flash_attention)", _cp_needs_flash_attention, frozenset({"cp"}),
    lambda c, r: f"cp={r['cp']}, flash_attention=false")
CP_COMM_TYPE = Rule(
    "cp_comm_type", "cp_comm_type: a2a needs the local attention and KV heads (per tp rank) "
    "to be multiples of cp, a2a+p2p an all-to-all group of 2 or more inside a node; at cp = 1 "
    "only p2p", _cp_comm_type, frozenset({"cp", "cp_comm_type", "tp"}),
    lambda c, r: f"cp={r['cp']}, cp_comm_type={r['cp_comm_type']}, tp={r['tp']}, "
                 f"heads={c.model.num_attention_heads}, kv_heads={c.model.num_kv_heads}")
TP_DIVIDES_HEADS = Rule(
    "tp_divides_heads", "tp must divide num_attention_heads and num_kv_heads",
    _tp_divides_heads, frozenset({"tp"}),
    lambda c, r: f"tp={r['tp']}, num_attention_heads={c.model.num_attention_heads}, "
                 f"num_kv_heads={c.model.num_kv_heads}")
TP_DIVIDES_FFN = Rule(
    "tp_divides_ffn", "tp must divide ffn_hidden_size", _tp_divides_ffn, frozenset({"tp"}),
    lambda c, r: f"tp={r['tp']}, ffn_hidden_size={c.model.ffn_hidden_size}")
FP8_ALIGNMENT = Rule(
    "fp8_alignment", "fp8 GEMMs need each rank's hidden, attention and FFN widths to be "
    "multiples of 16 (Transformer Engine)", _fp8_alignment, frozenset({"precision", "tp"}),
    lambda c, r: f"tp={r['tp']}: hidden {c.model.hidden_size}, attention "
                 f"{c.model.num_attention_heads * c.model.head_dim}, ffn "
                 f"{c.model.ffn_hidden_size} over tp")
TP_WITHIN_NODE = Rule(
    "tp_within_node", "a tensor-parallel group must fit in one node (tp <= gpus_per_node and "
    "divides it) unless cross-node TP is allowed", _tp_within_node, frozenset({"tp"}),
    lambda c, r: f"tp={r['tp']}, gpus_per_node={c.cluster.gpus_per_node}"
                 + (" (cross-node TP allowed, but the group must tile whole nodes)"
                    if c.allow_cross_node_tp else ""))
PP_SPLITS_LAYERS = Rule(
    "pp_splits_layers", "every pipeline stage needs at least one layer (where pp does not "
    "divide num_layers the middle stages take ceil(num_layers/pp) and the first and last "
    "stage share the rest)", _pp_splits_layers, frozenset({"pp"}),
    lambda c, r: f"pp={r['pp']}, num_layers={c.model.num_layers}")
BATCH_DIVISIBLE = Rule(
    "batch_divisible", "global_batch_size must be a multiple of micro_batch_size * dp",
    _batch_divisible, frozenset({"micro_batch_size", "dp"}),
    lambda c, r: f"global_batch_size={c.training.global_batch_size}, "
                 f"micro_batch_size={r['micro_batch_size']}, dp={r['dp']}")
INTERLEAVED_NEEDS_PP = Rule(
    "interleaved_needs_pp", "the interleaved schedule needs pp > 1 and virtual_stages > 1; "
    "other schedules need virtual_stages = 1", _interleaved_needs_pp,
    frozenset({"schedule", "pp", "virtual_stages"}),
    lambda c, r: f"schedule={r['schedule']}, pp={r['pp']}, "
                 f"virtual_stages={r['virtual_stages']}")
VIRTUAL_STAGES_DIVIDE_LAYERS = Rule(
    "virtual_stages_divide_layers", "pp * virtual_stages must divide num_layers (the "
    "interleaved schedule splits the layers evenly into chunks), or, with an uneven stage "
    "plan (a pipeline layout), every middle stage needs virtual_stages layers and the first "
    "and last virtual_stages - 1",
    _virtual_stages_divide_layers, frozenset({"pp", "virtual_stages", "stage_plan",
                                              "recompute"}),
    lambda c, r: f"num_layers/pp = {c.model.num_layers}/{r['pp']}, "
                 f"virtual_stages={r['virtual_stages']}, stage_plan={r['stage_plan']}")
PIPELINE_LAYOUT_FITS = Rule(
    "pipeline_layout_fits", "an explicit pipeline layout (training.pipeline_layout) needs "
    "pp > 1, pp x virtual_stages equal to its stages (an MTP module in its rank's last "
    "chunk), the default stage plan and a 1F1B or interleaved schedule", _layout_fits,
    frozenset({"pp", "virtual_stages", "schedule", "stage_plan"}),
    lambda c, r: f"layout {c.training.pipeline_layout!r} "
                 f"({layout_stages(c.training.pipeline_layout)} stages), pp={r['pp']}, "
                 f"virtual_stages={r['virtual_stages']}, schedule={r['schedule']}, "
                 f"stage_plan={r['stage_plan']}")
BALANCED_PLAN_MOVES_LAYERS = Rule(
    "balanced_plan_moves_layers", "stage_plan balanced needs pp > 1 and a split other than "
    "the default (where no whole-layer move shortens the slowest stage the default split is "
    "already the balanced one)", _balanced_plan_moves_layers,
    frozenset({"pp", "stage_plan", "recompute"}),
    lambda c, r: f"pp={r['pp']}, num_layers={c.model.num_layers}, LM head = "
                 f"{float(head_share(c.model, c.training.seq_length, r['recompute'])):.2f} "
                 "layers' worth")
ZERO_BUBBLE_NEEDS_PP = Rule(
    "zero_bubble_needs_pp", "the zb-h1, zb-v and dualpipev schedules need pp > 1",
    _zero_bubble_needs_pp, frozenset({"schedule", "pp"}), lambda c, r: f"pp={r['pp']}")
V_SCHEDULE_CHUNKS = Rule(
    "v_schedule_chunks", "zb-v and dualpipev hold two model chunks per rank (every stage needs "
    "two layers); dualpipev needs an even number of microbatches, at least 2 pp",
    _v_schedule_chunks, frozenset({"schedule", "pp", "stage_plan", "recompute",
                                   "micro_batch_size", "dp"}),
    lambda c, r: f"schedule={r['schedule']}, pp={r['pp']}, microbatches = {_m(c, r)}")
INTERLEAVED_MICROBATCHES = Rule(
    "interleaved_microbatches", "with the interleaved schedule the number of microbatches "
    "(global_batch_size / (micro_batch_size * dp)) must be a multiple of pp",
    _interleaved_microbatches, frozenset({"schedule", "micro_batch_size", "dp", "pp"}),
    lambda c, r: f"microbatches = {_m(c, r)}, pp={r['pp']}")
SP_NEEDS_TP = Rule(
    "sp_needs_tp", "sequence parallelism needs tp > 1", _sp_needs_tp,
    frozenset({"sequence_parallel", "tp"}))
FP8_HARDWARE = Rule(
    "fp8_hardware", "fp8 needs a GPU with fp8 Tensor Cores", _fp8_hardware,
    frozenset({"precision"}), lambda c, r: f"GPU {c.cluster.gpu.name} has no fp8 peak")
PRECISION_HARDWARE = Rule(
    "precision_hardware", "the GPU must support the precision", _precision_hardware,
    frozenset({"precision"}),
    lambda c, r: f"GPU {c.cluster.gpu.name} supports "
                 f"{', '.join(c.cluster.gpu.peak_flops_per_s)}, not {r['precision']}")
ZERO3_NO_PP = Rule(
    "zero3_no_pp", "DeepSpeed's pipeline engine cannot run ZeRO-3 (FSDP2 and Megatron-FSDP "
    "can: framework fsdp or megatron)", _zero3_no_pp, frozenset({"zero_stage", "pp"}),
    lambda c, r: f"zero_stage={r['zero_stage']}, pp={r['pp']}, "
                 f"framework={c.training.framework}")
PARTIAL_RECOMPUTE = Rule(
    "partial_recompute", "recompute_num_layers > 0 (Megatron-Core's block method) needs "
    "recompute full, framework megatron or torchtitan, fewer layers than a model chunk holds "
    "and, under an explicit pipeline layout, a rank's chunks all at least or all at most N",
    _partial_recompute, frozenset({"recompute_num_layers", "recompute", "pp",
                                   "virtual_stages"}),
    lambda c, r: f"recompute={r['recompute']}, recompute_num_layers="
                 f"{r['recompute_num_layers']}, layers per chunk = "
                 f"ceil({c.model.num_layers}/({r['pp']} x {r['virtual_stages']}))")
ACTIVATION_OFFLOAD = Rule(
    "activation_offload", "cpu_offloading_num_layers > 0 (Megatron-Core) needs pp = 1, no "
    "recompute, framework megatron, and fewer layers than the model has",
    _activation_offload, frozenset({"cpu_offloading_num_layers", "pp", "recompute"}),
    lambda c, r: f"cpu_offloading_num_layers={r['cpu_offloading_num_layers']}, pp={r['pp']}, "
                 f"recompute={r['recompute']}, num_layers={c.model.num_layers}")
PRECISION_AWARE_OPTIMIZER = Rule(
    "precision_aware_optimizer", "the precision-aware optimizer (bf16 moments / main "
    "gradients) needs bf16 or fp8 training with framework megatron",
    _precision_aware_optimizer, frozenset({"precision_aware_optimizer", "precision"}),
    lambda c, r: f"precision={r['precision']}, framework={c.training.framework}")
TORCHTITAN_EXPRESSES = Rule(
    "torchtitan_expresses", "framework torchtitan: ZeRO 0 (DDP, only without tp or pp), 2 or "
    "3 (FSDP2); context parallelism all-gathers K/V (cp_comm_type all_gather); no fp16",
    _torchtitan_expresses,
    frozenset({"zero_stage", "dp", "tp", "pp", "cp", "cp_comm_type", "precision"}),
    lambda c, r: f"zero_stage={r['zero_stage']}, dp={r['dp']}, tp={r['tp']}, pp={r['pp']}, "
                 f"cp={r['cp']} ({r['cp_comm_type']}), precision={r['precision']}")
RECOMPUTE_MODULES = Rule(
    "recompute_modules", "recompute_modules other than core_attn need recompute selective, "
    "framework megatron, and layers the modules exist in (mlp: dense layers; layernorm: "
    "MoE or MLA layers, whose norms are modules of their own; moe_act: MoE layers)",
    _recompute_modules, frozenset({"recompute_modules", "recompute"}),
    lambda c, r: f"recompute={r['recompute']}, recompute_modules={r['recompute_modules']}, "
                 f"framework={c.training.framework}, model {c.model.name}"
                 f"{' (MoE)' if c.model.moe is not None else ' (dense)'}")
ZERO_NEEDS_DP = Rule(
    "zero_needs_dp", "ZeRO shards over the data-parallel group (with CP: dp x cp), so "
    "zero_stage > 0 needs dp * cp > 1",
    _zero_needs_dp, frozenset({"zero_stage", "dp", "cp"}),
    lambda c, r: f"zero_stage={r['zero_stage']}, dp={r['dp']}, cp={r['cp']}")
NCCL_GATES = Rule(
    "nccl_gates", "the forced NCCL algorithm/protocol cannot run every collective this "
    "configuration uses on this cluster", _nccl_gates,
    frozenset({"nccl_algo", "nccl_proto", "sequence_parallel", "zero_stage", "tp"}),
    _nccl_detail)
EXPERTS_ONLY_MOE = Rule(
    "experts_only_moe", "ep and etp > 1 need a Mixture-of-Experts model", _experts_only_moe,
    frozenset({"ep", "etp"}), lambda c, r: f"ep={r['ep']}, etp={r['etp']}, model "
                                           f"{c.model.name} is dense")
EP_DIVIDES_EXPERTS = Rule(
    "ep_divides_experts", "ep must divide the routed experts (Megatron asserts "
    "num_moe_experts % expert_model_parallel_size == 0)", _ep_divides_experts,
    frozenset({"ep"}), lambda c, r: f"ep={r['ep']}, num_experts="
                                    f"{c.model.moe.num_experts if c.model.moe else 0}")
EXPERT_GRID = Rule(
    "expert_grid", "etp * ep * pp must divide the world (the expert view's edp = world / "
    "(etp ep pp) is whole)", _expert_grid, frozenset({"tp", "cp", "dp", "ep", "etp"}),
    lambda c, r: f"etp={r['etp']} ep={r['ep']} pp={r['pp']}, world {c.world_size}")
ETP_DIVIDES_FFN = Rule(
    "etp_divides_expert_ffn", "etp must divide the expert FFN width and be at most tp (the "
    "search keeps expert TP within the dense TP)", _etp_divides_ffn,
    frozenset({"etp", "tp"}), lambda c, r: f"etp={r['etp']}, tp={r['tp']}")
EP_WITHIN_DOMAIN = Rule(
    "ep_within_domain", "an EP x ETP group must fit in one NVLink domain (Megatron MoE "
    "README guideline) unless cross-domain EP is allowed", _ep_within_domain,
    frozenset({"ep", "etp"}), lambda c, r: f"ep*etp={r['ep'] * r['etp']}, NVLink domain "
                                           f"{c.cluster.domain_gpus} GPUs")

ALL_RULES: tuple[Rule, ...] = (
    WORLD_SIZE, TP_DIVIDES_HEADS, TP_DIVIDES_FFN, TP_WITHIN_NODE, PP_SPLITS_LAYERS,
    BATCH_DIVISIBLE, INTERLEAVED_NEEDS_PP, VIRTUAL_STAGES_DIVIDE_LAYERS, PIPELINE_LAYOUT_FITS,
    BALANCED_PLAN_MOVES_LAYERS, ZERO_BUBBLE_NEEDS_PP, V_SCHEDULE_CHUNKS,
    INTERLEAVED_MICROBATCHES, SP_NEEDS_TP, FP8_HARDWARE, FP8_ALIGNMENT, PRECISION_HARDWARE,
    ZERO3_NO_PP, ZERO_NEEDS_DP, TORCHTITAN_EXPRESSES, NCCL_GATES, CP_WITHIN_WORLD, CP_SPLITS_SEQUENCE,
    CP_NEEDS_FLASH_ATTENTION, CP_COMM_TYPE,
    PARTIAL_RECOMPUTE, RECOMPUTE_MODULES, PRECISION_AWARE_OPTIMIZER, ACTIVATION_OFFLOAD,
    EXPERTS_ONLY_MOE, EP_DIVIDES_EXPERTS, EXPERT_GRID, ETP_DIVIDES_FFN, EP_WITHIN_DOMAIN,
)
RULES_BY_NAME: Mapping[str, Rule] = {r.name: r for r in ALL_RULES}


# --------------------------------------------------------------------------------------------
def check(ctx: Context, batch: ConfigBatch, rules: Sequence[Rule] = ALL_RULES) -> np.ndarray:
    """One bool per configuration: True where every rule holds."""
    ok = np.ones(len(batch), dtype=bool)
    for rule in rules:
        ok &= rule(ctx, batch)
    return ok


def violations(ctx: Context, batch: ConfigBatch, rules: Sequence[Rule] = ALL_RULES
               ) -> dict[str, np.ndarray]:
    """Rule name -> bool mask of the configurations that break it."""
    return {rule.name: ~rule(ctx, batch) for rule in rules}


def explain(ctx: Context, config: ParallelConfig | Mapping[str, Any],
            rules: Sequence[Rule] = ALL_RULES) -> list[tuple[str, str]]:
    """``(rule name, message)`` for every rule ``config`` breaks; empty when it is valid.

    ``config`` is a ParallelConfig or a mapping of dimension -> value (dp derived from the
    world size when absent), e.g. the parameters an Optuna trial sampled.
    """
    if isinstance(config, ParallelConfig):
        batch = ConfigBatch.from_configs([config])
    elif isinstance(config, Mapping):
        batch = batch_from_choices([config], ctx.world_size)
    else:
        raise InputError("parallel", f"must be a mapping, got {type(config).__name__}")
    row = batch.row(0)
    return [(rule.name, rule.message(ctx, row)) for rule in rules if not rule(ctx, batch)[0]]
