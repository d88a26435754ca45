"""Layers as op tables: the kernels one micro-batch of a block runs on one rank, by pass.

Each block kind emits rows (:class:`Op`) that name a priced :class:`~costmodel.pricing.Kernel`
(a GEMM, an attention kernel, a memory-bound pass, a TP collective), each tagged with its
pass (``forward``, ``backward``: data and weight gradients, ``recompute``), the category its
time is summed in and, for collectives, the communication axis and the kernel whose time
hides it (its overlap window). A dense transformer layer is the attention block, the MLP
block and the layer's lumped element-wise kernels; the embedding and the LM head + loss are
tables of their own. Every op reads the rank's :class:`~costmodel.shard.Shard`.

A pass's time is the sum over categories (in order of first appearance) of the sum of their
rows (:func:`pass_time`): the order the terms have always been added in. The TP
communication's overlap with the GEMMs (async TP gradients, the SP re-gather, tp-comm-overlap)
and the host's overlap with the GPU are irregular; they are named combination steps
(:func:`tp_exposed_s`, :func:`host_overhead_s`) over the priced kernels.

Formulas: GEMM shapes of Shoeybi et al. 2019 (column-parallel QKV and FC1, row-parallel
projection and FC2); TP collectives per layer Korthikanti et al. 2022 (arXiv:2205.05198) 4.2.2;
fused attention Dao et al. 2022.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

import numpy as np

from costmodel import recompute as rcm
from costmodel.batch import ConfigBatch
from costmodel.calibration import Efficiency
from costmodel.compute import fused_softmax_available, layer_forward_flops, soft_max
from costmodel.cp import cp_buffer_bytes, cp_exposed_s, cp_table
from costmodel.groups import Collectives
from costmodel.memory import layer_activation_bytes
from costmodel.pricing import (
    ATTENTION,
    COLLECTIVE,
    GEMM,
    MEMORY,
    Axis,
    Device,
    Kernel,
    device_for,
    price,
)
from costmodel.shard import Shard, shard_of
from costmodel.specs import PRECISIONS, ModelSpec, TrainingSpec

FORWARD, BACKWARD, RECOMPUTE = "forward", "backward", "recompute"
DATA_AND_WEIGHT = ("data", "weight")  # a linear's backward: two GEMMs as long as the forward

# HBM bytes per parameter of BF16_Optimizer's update_hp_grads after each micro-batch's
# backward: the bf16 gradient cast to fp32 (read 2, write 4) and added into the fp32 buffer
# (read 4 + 4, write 4)
HP_GRAD_UPDATE_BYTES = 18.0
# HBM bytes per element of Transformer Engine's fused cast-transpose to fp8: read the 16-bit
# tensor (2), write its fp8 copy (1) and the transposed fp8 copy (1)
FP8_CAST_BYTES = 4.0

# Megatron's PyTorch softmax fallback (forward_torch_softmax), per attention score: HBM bytes
# forward and backward and kernels each way. In fp32 (apply_query_key_layer_scaling or
# --attention-softmax-in-fp32; Megatron-DeepSpeed scales by default): cast to fp32 (read 2,
# write 4), scale (4 + 4), in-place mask fill (4 + 4), softmax (4 + 4), cast back (4 + 2) =
# 36; backward through the casts (2 + 4, 4 + 2), softmax (read output and gradient 8, write
# 4), mask fill and scale (4 + 4 each) = 40. In 16 bits (Megatron-LM's defaults today, no
# scaling): mask fill (2 + 2) and softmax (2 + 2) = 8; backward softmax (4 + 2) and mask fill
# (2 + 2) = 10. The fused kernel moves 3-4 (part + 1 and 2 part + 1 16-bit passes).
SOFTMAX_FALLBACK = {True: (36.0, 40.0, 5.0), False: (8.0, 10.0, 2.0)}  # by softmax_in_fp32


def softmax_falls_back(fw, model: ModelSpec, training: TrainingSpec, prec, attn_batches):
    """Whether a layer's unfused attention softmax leaves Megatron's fused kernel for the
    PyTorch path (``compute.fused_softmax_available``): only frameworks built on Megatron's
    kernels (``FrameworkCosts.kernels.megatron_softmax``), 16-bit or fp8 training (fp32 never
    takes the kernel and is charged its fp32 passes as before) and no flash attention."""
    if training.flash_attention or not fw.kernels.megatron_softmax:
        return np.zeros(np.shape(attn_batches), dtype=bool)
    sixteen = np.asarray(prec) != PRECISIONS.index("fp32")
    avail = fused_softmax_available(attn_batches, training.seq_length, causal=model.causal)
    return sixteen & ~avail


class Op(NamedTuple):
    """One row of an op table: where a kernel runs, in which pass, summed where."""

    name: str
    kernel: str  # the priced Kernel's name (rows may share a kernel)
    pass_: str  # FORWARD, BACKWARD or RECOMPUTE
    category: str  # the sum its time joins: linear, core, elementwise, cast, ...
    repeat: Any = None  # times the kernel runs (None: once); 0 x time keeps an inf as NaN
    parts: tuple[str, ...] = ()  # DATA_AND_WEIGHT for a linear's backward
    when: Any = True  # where the row runs
    group: str | None = None  # the communication axis of a collective row
    window: str | None = None  # the kernel whose time can hide this collective


@dataclass(frozen=True)
class OpTable:
    """A block's kernels and the rows that run them."""

    block: str
    kernels: tuple[Kernel, ...]
    ops: tuple[Op, ...]

    def __add__(self, other: OpTable) -> OpTable:
        return OpTable(f"{self.block}+{other.block}", self.kernels + other.kernels,
                       self.ops + other.ops)

    def kernel(self, name: str) -> Kernel:
        return next(k for k in self.kernels if k.name == name)


def row_time(op: Op, times: dict[str, np.ndarray]) -> np.ndarray:
    t = times[op.kernel]
    if op.repeat is not None:
        t = op.repeat * t
    if op.when is not True:
        t = np.where(op.when, t, 0.0)
    return t


def pass_time(table: OpTable, times: dict[str, np.ndarray], pass_: str,
              category: str | None = None) -> np.ndarray:
    """GPU time of a pass's compute rows: categories in order, each the sum of its rows
    (``category``: that category's rows only, 0 where it has none)."""
    sums: dict[str, np.ndarray] = {}
    for op in table.ops:
        if op.pass_ != pass_ or op.group is not None:
            continue
        if category is not None and op.category != category:
            continue
        t = row_time(op, times)
        sums[op.category] = sums[op.category] + t if op.category in sums else t
    parts = list(sums.values())
    if not parts:
        return np.zeros(())
    total = parts[0]
    for t in parts[1:]:
        total = total + t
    return total


# ---- block kinds ------------------------------------------------------------------------------
def attention_block(sh: Shard, model: ModelSpec, training: TrainingSpec, fw, dev: Device,
                    fallback) -> OpTable:
    """Column-parallel QKV (N split by t), the attention core, row-parallel projection (K
    split by t)."""
    t, h, hd, a, g = sh.tp, sh.hidden, sh.head_dim, sh.heads, sh.kv_heads
    tokens = sh.tokens
    lin = [Kernel("qkv", GEMM, tokens, (a + 2 * g) * hd / t, h),
           Kernel("proj", GEMM, tokens, h, a * hd / t)]
    if model.mla is not None:
        lin = _mla_linears(sh, model)
    if training.flash_attention:
        # with CP the rank's query chunks (b s / c tokens) attend to the whole causal key
        # range, balanced over 2c chunks: 1/c of the attention FLOPs (costmodel.cp)
        lf = layer_forward_flops(model, sh.seq, _local_samples(sh), t)
        # causal fused attention does half of the square (Dao et al. 2022); the kernels are
        # built for head dimensions in steps of 32 (FlashAttention-2: 32..256), so others run
        # padded to the next one
        square = 0.5 if model.causal else 1.0  # causal kernels skip the masked half
        hd_k = hd if model.mla is None else float(model.mla.qk_head_dim)
        pad = np.ceil(hd_k / 32.0) * 32.0 / hd_k
        core = [Kernel("attn", ATTENTION, flops=square * pad * lf.attention_flops),
                Kernel("attn.bwd", ATTENTION, backward_of="attn")]
        # selective recompute checkpoints the core attention even when it is fused in
        # Megatron-Core (recompute_modules=["core_attn"]: Attention._checkpointed_attention_
        # forward), so its backward runs the fused forward kernel once more; legacy Megatron
        # (Megatron-DeepSpeed) checkpoints it only when it is not fused
        rc_count = None if fw.kernels.recompute_fused_attention else 0.0
        core_ops = [Op("attn.fwd", "attn", FORWARD, "core"),
                    Op("attn.bwd", "attn.bwd", BACKWARD, "core", parts=("data",)),
                    Op("attn.recompute", "attn", RECOMPUTE, "core", repeat=rc_count)]
    else:
        core, core_ops = _unfused_core(sh, model, training, fw, dev, fallback)
    # the linears' rows first: each pass sums its linear GEMMs before the attention core
    ops = [Op(f"{k.name}.fwd", k.name, FORWARD, "linear") for k in lin]
    ops += [Op(f"{k.name}.bwd", k.name, BACKWARD, "linear", 2.0, DATA_AND_WEIGHT)
            for k in lin]
    ops += core_ops
    return OpTable("attention", tuple(lin + core), tuple(ops))


def _local_samples(sh: Shard):
    """b where cp = 1 (exactly), b / c where context parallelism splits the sequence."""
    return np.where(sh.cp_ranks > 1, sh.local_samples, sh.micro_batch)


def _mla_linears(sh: Shard, model: ModelSpec) -> list[Kernel]:
    """MLA's linears (modern-training.md 2.6; Megatron MLASelfAttention): the q and joint kv
    down-projections (replicated over TP: ``linear_q_down_proj``, ``linear_kv_down_proj``),
    their column-parallel up-projections (``qkv`` is the q up-projection, the layer's TP
    overlap window as for dense QKV), the output projection over a heads of v_head_dim."""
    la, t, h, a, tokens = model.mla, sh.tp, sh.hidden, sh.heads, sh.tokens
    q_in = float(la.q_lora_rank or h)
    kv = float(la.kv_lora_rank)
    lin = [Kernel("qkv", GEMM, tokens, a * la.qk_head_dim / t, q_in),
           Kernel("proj", GEMM, tokens, h, a * la.v_head_dim / t),
           Kernel("mla.kv_down", GEMM, tokens, kv + la.qk_rope_head_dim, h),
           Kernel("mla.kv_up", GEMM, tokens, a * (la.qk_nope_head_dim + la.v_head_dim) / t, kv)]
    if la.q_lora_rank is not None:
        lin.append(Kernel("mla.q_down", GEMM, tokens, q_in, h))
    return lin


def _unfused_core(sh: Shard, model: ModelSpec, training: TrainingSpec, fw, dev: Device,
                  fallback) -> tuple[list[Kernel], list[Op]]:
    s, hd, ea = sh.seq, sh.head_dim, dev.act_bytes
    heads_local = sh.heads_local
    # batched QK^T and probabilities x V, each approximated as one GEMM, in 16-bit
    kerns = [Kernel("score", GEMM, s * heads_local, s, hd, peak="attention"),
             Kernel("context", GEMM, s * heads_local, hd, s, peak="attention")]
    # HBM passes over the b x heads/t x s x s scores (in 16-bit elements): Megatron's fused
    # scale-mask-softmax kernels (scaled_upper_triang_masked_softmax for a causal mask)
    # read only the rows' unmasked part (half the square when causal) and write every
    # element; the backward reads the output and its gradient the same way and writes the
    # input gradient. Attention dropout reads the probabilities and writes them and a
    # 1-byte mask (half a 16-bit pass); its backward reads the gradient and the mask and
    # writes the gradient.
    part = 0.5 if model.causal else 1.0
    drop = training.dropout
    scores = heads_local * s * s
    dropout_bytes = (2.5 * ea * scores) if drop else 0.0
    # where the fused kernel does not apply (attention batches b x a/t not a multiple of
    # 4, ...) Megatron runs the softmax in PyTorch (SOFTMAX_FALLBACK), the same dropout
    # after it
    fb_f, fb_b, fb_kernels = SOFTMAX_FALLBACK[fw.kernels.softmax_in_fp32]
    fused_kernels = 2.0 if drop else 1.0
    kernels = np.where(fallback, fb_kernels + (1.0 if drop else 0.0), fused_kernels)
    kerns += [Kernel("softmax", MEMORY, kernels=kernels,
                     nbytes=np.where(fallback, fb_f * scores + dropout_bytes,
                                     (part + 1.0) * scores * ea + dropout_bytes)),
              Kernel("softmax.bwd", MEMORY, kernels=kernels,
                     nbytes=np.where(fallback, fb_b * scores + dropout_bytes,
                                     (2.0 * part + 1.0) * scores * ea + dropout_bytes))]
    ops = [Op("score.fwd", "score", FORWARD, "core"),
           Op("context.fwd", "context", FORWARD, "core"),
           Op("softmax.fwd", "softmax", FORWARD, "core"),
           Op("score.bwd", "score", BACKWARD, "core", 2.0, ("data", "data")),
           Op("context.bwd", "context", BACKWARD, "core", 2.0, ("data", "data")),
           Op("softmax.bwd", "softmax.bwd", BACKWARD, "core", parts=("data",)),
           # selective recompute re-runs the unfused core's forward
           Op("score.recompute", "score", RECOMPUTE, "core"),
           Op("context.recompute", "context", RECOMPUTE, "core"),
           Op("softmax.recompute", "softmax", RECOMPUTE, "core")]
    return kerns, ops


def mlp_block(sh: Shard) -> OpTable:
    """Column-parallel FC1 (gate and up for a gated MLP), row-parallel FC2."""
    kerns = (Kernel("fc1", GEMM, sh.tokens, sh.up / sh.tp, sh.hidden),
             Kernel("fc2", GEMM, sh.tokens, sh.hidden, sh.ffn / sh.tp))
    ops = (Op("fc1.fwd", "fc1", FORWARD, "linear"), Op("fc2.fwd", "fc2", FORWARD, "linear"),
           Op("fc1.bwd", "fc1", BACKWARD, "linear", 2.0, DATA_AND_WEIGHT),
           Op("fc2.bwd", "fc2", BACKWARD, "linear", 2.0, DATA_AND_WEIGHT))
    return OpTable("mlp", kerns, ops)


def elementwise_traffic(fw, training: TrainingSpec) -> float:
    """The framework's element-wise HBM traffic over the fused minimum: its eager or compiled
    figure where ``training.torch_compile`` says how the model ran and the profile has one
    (calibration.KernelCosts), else its fitted ``elementwise_traffic``."""
    k = fw.kernels
    if training.torch_compile is True and k.compiled_elementwise_traffic is not None:
        return k.compiled_elementwise_traffic
    if training.torch_compile is False and k.eager_elementwise_traffic is not None:
        return k.eager_elementwise_traffic
    return k.elementwise_traffic


def layer_memory_ops(sh: Shard, model: ModelSpec, training: TrainingSpec, fw, dev: Device
                     ) -> OpTable:
    """The layer's memory-bound kernels outside the GEMMs and the attention core, lumped."""
    t, h, hd, a, g, f = sh.tp, sh.hidden, sh.head_dim, sh.heads, sh.kv_heads, sh.ffn
    tokens, ea = sh.tokens, dev.act_bytes
    # memory-bound element-wise ops: 2 norms (4sbh), 2 residual adds (6sbh), activation (gated
    # 3sbf, plain 2sbf), rotary on q,k (2sb(a+g)d_h); hidden dropout is fused into the
    # bias-dropout-add kernels (Megatron-LM bias_dropout_add_fused_train), which only add
    # the write of two 1-byte masks (sbh in 16-bit elements)
    outside = (10.0 + (1.0 if training.dropout else 0.0)) * tokens * h * ea
    # rotary on q and k unless positions are a learned table (GPT-2/3 style); ALiBi models
    # (BLOOM, MPT), which have neither, are charged the rotary pass too (ModelSpec does not
    # tell ALiBi from RoPE; the FSDP fusion factor was fitted on MPT with it)
    rotary = 0.0 if model.learned_position_embeddings else 2.0
    inside = ((3.0 if model.gated_mlp else 2.0) * tokens * f
              + rotary * tokens * (a + g) * hd) * ea
    sp_split = np.where(sh.sp, t, 1.0)
    # fp8 linears (Transformer Engine): each casts its 16-bit input to fp8 together with the
    # transposed copy its weight gradient needs (read 2, write 1 + 1 bytes per element), and
    # the backward casts each output gradient the same way; the weights' fp8 copies are kept
    # across a step's micro-batches (is_first_microbatch), so their cast is left out. With
    # sequence parallelism the layer-norm outputs feeding QKV and FC1 are cast on the local
    # sequence shard and all-gathered in fp8 (TE LayerNormLinear / LayerNormMLP).
    cast_in = tokens * (2.0 * h / sp_split + a * hd / t + f / t)
    cast_out = tokens * ((a + 2 * g) * hd / t + 2.0 * h + sh.up / t)
    traffic, cast_scale = elementwise_traffic(fw, training), dev.cast_scale
    if training.torch_compile and fw.kernels.compiled_elementwise_traffic is not None:
        # Inductor fuses a current-scaling cast's amax reduction into the kernel that
        # produces the tensor: what is left is delayed scaling's cast + transpose
        cast_scale = min(cast_scale, 1.0)
    kerns = (Kernel("elementwise", MEMORY, kernels=6.0,
                    nbytes=traffic * (outside / sp_split + inside / t)),
             Kernel("fp8_cast", MEMORY, nbytes=FP8_CAST_BYTES * cast_scale * cast_in, kernels=4.0,
                    when=dev.fp8),
             Kernel("fp8_cast.bwd", MEMORY, nbytes=FP8_CAST_BYTES * cast_scale * cast_out, kernels=4.0,
                    when=dev.fp8))
    ops = (Op("elementwise.fwd", "elementwise", FORWARD, "elementwise"),
           Op("fp8_cast.fwd", "fp8_cast", FORWARD, "cast"),
           Op("elementwise.bwd", "elementwise", BACKWARD, "elementwise", 2.0),
           Op("fp8_cast.bwd", "fp8_cast.bwd", BACKWARD, "cast"))
    return OpTable("layer", kerns, ops)


def tp_collectives(sh: Shard, dev: Device, rc) -> OpTable:
    """The layer's TP collectives on a b s h activation (Shoeybi et al. 2019; Korthikanti
    4.2.2): 2 all-reduces forward + 2 backward (+ 2 in the recomputed forward); with sequence
    parallelism each all-reduce becomes an all-gather + reduce-scatter pair, and the backward
    re-gathers the QKV and FC1 inputs for their weight gradients."""
    act = sh.tokens * sh.hidden * dev.act_bytes
    kerns = tuple(Kernel(f"tp.{c}", COLLECTIVE, nbytes=act, collective=c, group="tp")
                  for c in ("allreduce", "allgather", "reducescatter"))
    sp = sh.sp
    plain = (sh.tp_ranks > 1) & ~sp
    # (collective, where, the GEMM it follows or feeds): the forward all-reduces after the
    # row-parallel projection and FC2 (with SP: all-gather before QKV / FC1, reduce-scatter
    # after projection / FC2); the backward mirrors it on the input gradients
    forward = (("allreduce", plain, "proj"), ("allreduce", plain, "fc2"),
               ("allgather", sp, "qkv"), ("reducescatter", sp, "proj"),
               ("allgather", sp, "fc1"), ("reducescatter", sp, "fc2"))
    backward = (("allreduce", plain, "qkv"), ("allreduce", plain, "fc1"),
                ("reducescatter", sp, "qkv"), ("allgather", sp, "proj"),
                ("reducescatter", sp, "fc1"), ("allgather", sp, "fc2"),
                # the re-gathered QKV / FC1 inputs for their weight gradients
                ("allgather", sp, "qkv.regather"), ("allgather", sp, "fc1.regather"))
    full = rc == 2  # the recomputed forward of full recompute
    masks = {id(plain): plain & full, id(sp): sp & full}
    recomputed = tuple((c, masks[id(when)], w) for c, when, w in forward)
    ops = [Op(f"tp.{c}.{pass_}.{w}", f"tp.{c}", pass_, "tp", group="tp", when=when,
              window=w.split(".")[0])
           for pass_, rows in ((FORWARD, forward), (BACKWARD, backward),
                               (RECOMPUTE, recomputed))
           for c, when, w in rows]
    return OpTable("tp", kerns, tuple(ops))


def embedding_table(sh: Shard, fw, dev: Device, layer_params: float) -> OpTable:
    """Embedding lookup and its dense backward (first stage), LM head and loss (last), and the
    gradient-accumulation passes over their weights and the layers'."""
    tokens, h, ea, t, V = sh.tokens, sh.hidden, dev.act_bytes, sh.tp, sh.vocab
    kerns = [Kernel("embedding", MEMORY, nbytes=2.0 * tokens * h * ea),
             Kernel("embedding.bwd", MEMORY, nbytes=3.0 * tokens * h * ea),
             # the output layer is a plain 16-bit linear even in fp8 training (Megatron-Core's
             # output_layer is a ColumnParallelLinear, not a Transformer Engine module; MPT's
             # tied head is F.linear): 16-bit peak and operands
             Kernel("head", GEMM, tokens, V / t, h, peak="attention"),
             Kernel("loss", MEMORY, nbytes=fw.kernels.loss_bytes_per_logit * tokens * V / t,
                    kernels=4.0)]  # softmax fwd/bwd passes
    if fw.kernels.grad_accum_bytes > 0:
        # gradient accumulation outside the GEMMs (AccumulateGrad adds a micro-batch's
        # gradient into param.grad; the first micro-batch of a step only hands it over, so
        # the stage phase charges it (m - 1) / m per micro-batch); the word embedding's dense
        # backward zero-fills a [V/t, h] gradient every micro-batch
        accum = fw.kernels.grad_accum_bytes
        kerns += [Kernel("grad_accum", MEMORY, nbytes=accum * layer_params / t),
                  Kernel("embedding.grad_zero", MEMORY, nbytes=2.0 * V * h / t),
                  Kernel("embedding.grad_accum", MEMORY, nbytes=accum * V * h / t)]
    if fw.dp.bf16_fp32_grads:
        # BF16_Optimizer (DeepSpeed 0.6.3 bf16_optimizer.update_hp_grads, after every
        # micro-batch's backward; the bf16 gradients are set to None before each backward, so
        # autograd accumulates nothing): cast each bf16 gradient to fp32 (r2 w4) and add it
        # into the fp32 buffer (r4 r4 w4), 18 bytes per parameter; two kernels per layer,
        # lumped as grad_accum's one (a layer's dozen tensors each launch their own, ~0.1% of
        # a step)
        kerns += [Kernel("hp_grad", MEMORY, nbytes=HP_GRAD_UPDATE_BYTES * layer_params / t,
                         kernels=2.0),
                  Kernel("embedding.hp_grad", MEMORY, nbytes=HP_GRAD_UPDATE_BYTES * V * h / t,
                         kernels=2.0)]
    ops = (Op("embedding.fwd", "embedding", FORWARD, "embedding"),
           Op("embedding.bwd", "embedding.bwd", BACKWARD, "embedding"),
           Op("head.fwd", "head", FORWARD, "head"), Op("loss", "loss", FORWARD, "head"),
           Op("head.bwd", "head", BACKWARD, "head", 2.0, DATA_AND_WEIGHT))
    return OpTable("embedding+head", tuple(kerns), ops)


# ---- combination steps ------------------------------------------------------------------------
def exposed(comm_s, window_s, eff: Efficiency):
    """Overlapped communication: what the window cannot cover, plus the share overlap does
    not hide (communication kernels take SMs; nccl.md section 12), as for DP overlap."""
    return (np.maximum(0.0, comm_s - window_s)
            + (1.0 - eff.overlap_hidden) * np.minimum(comm_s, window_s))


def tp_exposed_s(times, sh: Shard, rc, fw, eff: Efficiency, tp_comm_overlap: bool
                 ) -> tuple[np.ndarray, float]:
    """The layer's TP communication on the critical path per micro-batch, and the share of a
    linear's backward (dgrad + wgrad: 2, dgrad only: 1) that hides the SP re-gather."""
    ar, ag, rs = times["tp.allreduce"], times["tp.allgather"], times["tp.reducescatter"]
    t_qkv, t_proj, t_fc1, t_fc2 = times["qkv"], times["proj"], times["fc1"], times["fc2"]
    tp_on, sp = sh.tp_ranks > 1, sh.sp
    n_collectives = 4.0 + np.where(rc == 2, 2.0, 0.0)
    cs = fw.tp.collective_s  # each blocking collective's rendezvous of the TP ranks (launch skew)
    layer_tp = np.where(tp_on, n_collectives * (np.where(sp, ag + rs, ar) + cs), 0.0)
    if fw.tp.async_tp_grad:
        # the column-parallel linears' (QKV, FC1) input gradient is all-reduced (reduce-
        # scattered with SP) asynchronously while their weight-gradient GEMM runs (Megatron-LM
        # LinearWithGradAccumulationAndAsyncCommunication): two of the backward collectives
        # are hidden behind a GEMM as long as the forward one, up to the overlap share
        # (collective - exposed(collective, window) = overlap_hidden x min(collective, window),
        # written so that an unrunnable (infinite) collective stays infinite, not NaN)
        grad_coll = np.where(sp, rs, ar) + cs
        hidden_bwd = eff.overlap_hidden * (np.minimum(grad_coll, t_qkv)
                                           + np.minimum(grad_coll, t_fc1))
        layer_tp = layer_tp - np.where(tp_on, hidden_bwd, 0.0)
        regather_window = 1.0  # the weight-gradient GEMM is taken: dgrad only
    else:
        regather_window = 2.0
    # sequence parallelism re-gathers the input of the QKV and FC1 linears in the backward
    # (Korthikanti et al. 4.2.2) for their weight gradients, overlapped with those linears'
    # backward GEMMs
    regather = (exposed(ag, regather_window * t_qkv, eff)
                + exposed(ag, regather_window * t_fc1, eff))
    layer_tp = layer_tp + np.where(sp, regather, 0.0)
    if tp_comm_overlap:
        # Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers), sequence parallel
        # only: each collective is split into chunks pipelined with its own GEMM. Forward:
        # all-gather -> QKV / FC1, projection / FC2 -> reduce-scatter. Backward (dgrad + wgrad,
        # twice the forward GEMM): QKV and FC1 reduce-scatter their input gradient and
        # re-gather their input; the projection and FC2 all-gather their output gradient.
        # The share it hides is Efficiency.tp_overlap (userbuffers' own, not NCCL's).
        ub = eff.with_(overlap_hidden=eff.tp_overlap)
        fwd = (exposed(ag + cs, t_qkv, ub) + exposed(rs + cs, t_proj, ub)
               + exposed(ag + cs, t_fc1, ub) + exposed(rs + cs, t_fc2, ub))
        bwd = (exposed(rs + ag + 2.0 * cs, 2.0 * t_qkv, ub)
               + exposed(ag + cs, 2.0 * t_proj, ub)
               + exposed(rs + ag + 2.0 * cs, 2.0 * t_fc1, ub)
               + exposed(ag + cs, 2.0 * t_fc2, ub))
        overlapped = fwd + bwd + np.where(rc == 2, fwd, 0.0)
        layer_tp = np.where(sp, np.minimum(overlapped, layer_tp), layer_tp)
    return layer_tp, regather_window


def host_overhead_s(gpu_layer, sh: Shard, rc, fw) -> np.ndarray:
    """The host launches asynchronously: a layer takes about the longer of its GPU time and the
    framework's host time (per pass: forward, two backward halves, recomputed forward), the
    two joined by a p-norm (FrameworkCosts.host.host_overlap_p) since the host's time per layer
    varies and the GPU idles whenever it falls behind. Only small layers are host-bound.
    Returns what the host adds to the layer's GPU time."""
    n_collectives = 4.0 + np.where(rc == 2, 2.0, 0.0)
    host_layer = fw.host.layer_pass_s * (3.0 + np.where(rc == 2, 1.0, 0.0))
    # each TP collective's host-side call (a tp = 1 layer makes none); with SP each is an
    # all-gather + reduce-scatter pair, plus the backward's two re-gathers
    calls = np.where(sh.sp, 2.0 * n_collectives + 2.0, n_collectives)
    host_layer = host_layer + np.where(sh.tp_ranks > 1, calls * fw.host.collective_host_s, 0.0)
    joined = soft_max(gpu_layer, host_layer, fw.host.host_overlap_p)
    return np.subtract(joined, gpu_layer, out=np.zeros(joined.shape),
                       where=np.isfinite(gpu_layer))  # an unrunnable layer stays inf


def embedding_and_head_s(times, sh: Shard, fw, eff: Efficiency, regather_window: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Forward + backward of the embedding (first stage) and of the LM head + loss (last)."""
    ar, ag, rs = times["tp.allreduce"], times["tp.allgather"], times["tp.reducescatter"]
    tp_on, sp = sh.tp_ranks > 1, sh.sp
    emb_f = times["embedding"] + np.where(tp_on, np.where(sp, rs, ar), 0)
    emb_b = times["embedding.bwd"] + np.where(sp, ag, 0.0)
    head_gemm = times["head"]
    head_f = head_gemm + times["loss"] + np.where(sp, ag, 0.0)
    # the output layer's input is copied into the TP region: its backward all-reduces the
    # input gradient (reduce-scatter with SP); Megatron-LM runs it through the same linear as
    # the layers (parallel_lm_logits), so with async_tp_grad it hides behind the weight
    # gradient, and with SP the input is re-gathered for that weight gradient too
    head_coll = np.where(tp_on, np.where(sp, rs, ar), 0.0)
    if fw.tp.async_tp_grad:
        head_coll = exposed(head_coll, head_gemm, eff)
    head_regather = np.where(sp, exposed(ag, regather_window * head_gemm, eff), 0.0)
    head_b = 2.0 * head_gemm + head_coll + head_regather
    if "embedding.grad_zero" in times:
        # the word embedding's dense backward zero-fills its gradient every micro-batch
        emb_b = emb_b + times["embedding.grad_zero"]
    return emb_f + emb_b, head_f + head_b


@dataclass(frozen=True)
class LayerCosts:
    """One transformer layer for one micro-batch on one TP rank, the embedding and the LM
    head: times per pass, exposed TP communication, host overhead, activations, and the
    gradient-accumulation passes the stage phase charges per micro-batch."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_comm_s: np.ndarray
    host_s: np.ndarray
    embedding_s: np.ndarray  # forward + backward
    head_s: np.ndarray  # forward + backward, with the loss
    activation_bytes: np.ndarray  # one layer's stored activations under the recompute mode
    full_activation_bytes: np.ndarray  # without recompute (one layer live while recomputed)
    grad_accum_s: np.ndarray  # AccumulateGrad over the layer's gradients
    embedding_grad_accum_s: np.ndarray  # the same over the embedding's (and the head's)
    hp_grad_s: np.ndarray  # BF16_Optimizer's fp32 gradient update, the layer's
    embedding_hp_grad_s: np.ndarray  # the same, the embedding's
    # context parallelism: the attention communication on the critical path (forward +
    # backward + recomputed forward), already inside forward_s / backward_s / recompute_s,
    # and the CP buffers of the layer being run (costmodel.cp)
    cp_comm_s: np.ndarray = 0.0
    cp_recompute_s: np.ndarray = 0.0  # the recomputed forward's share of cp_comm_s
    cp_buffer_bytes: np.ndarray = 0.0
    # selective recompute by modules: one layer's recomputed module outputs in its backward
    recompute_transient_bytes: np.ndarray = 0.0
    # MoE: the MoE block's rows' share of forward_s and backward_s (the windows of
    # costmodel.moe_overlap); 0 for a dense layer
    moe_forward_s: np.ndarray = 0.0
    moe_backward_s: np.ndarray = 0.0
    tables: tuple[OpTable, ...] = field(default=(), compare=False)
    times: dict = field(default_factory=dict, compare=False)

    def take(self, index) -> LayerCosts:
        """Costs per configuration from costs per distinct layer (``index`` gathers)."""
        return LayerCosts(*(_gather(getattr(self, name), index) for name in _COST_FIELDS))

    def with_(self, **kw) -> LayerCosts:
        return replace(self, **kw)

    @property
    def total_s(self) -> np.ndarray:
        """A layer's micro-batch on the critical path: GPU passes, TP, host."""
        return self.forward_s + self.backward_s + self.recompute_s + self.tp_comm_s + self.host_s


_COST_FIELDS = tuple(f.name for f in fields(LayerCosts) if f.name not in ("tables", "times"))


def _gather(x, index):
    """A cost field per configuration: arrays gathered, a scalar default kept."""
    return x[index] if np.ndim(x) else x


def cp_collectives(sh: Shard, dev: Device) -> OpTable:
    """The context-parallel attention communication (costmodel.cp): ring sends, all-gather /
    reduce-scatter or all-to-alls per comm type, forward and backward, on the CP axes."""
    kerns = cp_table(sh, dev.act_bytes)
    ops = (Op("cp.kv.fwd", "cp.kv", FORWARD, "cp", sh.cp_steps - 1.0, group="cp_ring",
              window="attn"),
           Op("cp.kv.bwd", "cp.kv.bwd", BACKWARD, "cp", sh.cp_steps - 1.0, group="cp_ring",
              window="attn.bwd"),
           Op("cp.allgather.fwd", "cp.allgather", FORWARD, "cp", group="cp"),
           Op("cp.allgather.bwd", "cp.allgather", BACKWARD, "cp", group="cp"),
           Op("cp.reducescatter.bwd", "cp.reducescatter", BACKWARD, "cp", group="cp"),
           Op("cp.a2a.qkv.fwd", "cp.a2a.qkv", FORWARD, "cp", group="cp"),
           Op("cp.a2a.out.fwd", "cp.a2a.out", FORWARD, "cp", group="cp"),
           Op("cp.a2a.out.bwd", "cp.a2a.out", BACKWARD, "cp", group="cp"),
           Op("cp.a2a.qkv.bwd", "cp.a2a.qkv", BACKWARD, "cp", group="cp"),
           Op("cp.h2a.qkv.fwd", "cp.h2a.qkv", FORWARD, "cp", group="cp_a2a"),
           Op("cp.h2a.out.fwd", "cp.h2a.out", FORWARD, "cp", group="cp_a2a"),
           Op("cp.h2a.out.bwd", "cp.h2a.out", BACKWARD, "cp", group="cp_a2a"),
           Op("cp.h2a.qkv.bwd", "cp.h2a.qkv", BACKWARD, "cp", group="cp_a2a"),
           Op("cp.correction", "cp.correction", FORWARD, "cp", group="cp_ring"))
    return OpTable("cp", kerns, ops)


def layer_tables(model: ModelSpec, training: TrainingSpec, fw, dev: Device, sh: Shard, rc,
                 fallback, batch=None) -> tuple[OpTable, ...]:
    """The layer's op table (attention + MLP + element-wise; a MoE model's averaged over its
    dense and MoE layers), its TP collectives, the embedding / head table and, with context
    parallelism, its CP communication."""
    if model.moe is not None:
        tables = _moe_layer_tables(model, training, fw, dev, sh, rc, fallback, batch)
        return (_recompute_modules(tables[0], model, training, fw, dev, sh, rc, batch),
                *tables[1:], *_cp_tables(sh, dev))
    layer = (attention_block(sh, model, training, fw, dev, fallback) + mlp_block(sh)
             + layer_memory_ops(sh, model, training, fw, dev))
    if fw.kernels.selective_op_sac and model.mla is None:
        layer = layer + _op_sac_rows(sh)
    layer = _recompute_modules(layer, model, training, fw, dev, sh, rc, batch)
    return (layer, tp_collectives(sh, dev, rc),
            embedding_table(sh, fw, dev, float(model.params_per_layer))) + _cp_tables(sh, dev)


def _recompute_modules(layer: OpTable, model, training, fw, dev, sh, rc, batch) -> OpTable:
    """Selective recompute by modules (costmodel.recompute): the core rows only where the
    set names core_attn, and the rows of the other modules."""
    if batch is None or not np.any(np.asarray(batch.recompute_modules) != 0):
        return layer
    masks = rcm.module_masks(batch)
    ms = None
    if model.moe is not None:
        from costmodel import moe as moe_ops

        ms = moe_ops.moe_shape(model, training, batch, sh.tokens, sh.tp)
    keep = rcm.core_kept(masks, rc)
    ops = tuple(op._replace(when=np.asarray(op.when) & keep)
                if op.pass_ == RECOMPUTE and op.category == "core" else op for op in layer.ops)
    kerns, rows = rcm.module_rows(model, sh, fw, dev, masks, ms)
    return (OpTable(layer.block, layer.kernels, ops)
            + OpTable("recompute_modules", tuple(kerns), tuple(Op(*r) for r in rows)))


def _op_sac_rows(sh: Shard) -> OpTable:
    """torchtitan's selective op-level activation checkpointing (``selective_ac_option =
    "op"``, torchtitan ``_apply_ac_to_transformer_block`` at 2024-12): the policy saves the
    outputs of SDPA and of every other ``aten.mm`` of a block and recomputes all other ops
    in the backward (the policy as recalled, not re-read at the source). The block's
    matmuls run in the order wq, wk, wv, wo, w1, w3, w2, so the 2nd, 4th and 6th (wk, wo, w3) are re-run: of the fused QKV kernel the K share g/(a+2g),
    the whole output projection, half of the gated FC1 (w3). The element-wise ops (norms,
    rotary, SiLU x mul) are re-run as well. Rows of the RECOMPUTE pass, read where the
    recompute is selective; no kernel is fitted."""
    a, g = sh.heads, sh.kv_heads
    k_share = g / (a + 2.0 * g)
    ops = (Op("qkv.recompute", "qkv", RECOMPUTE, "linear", k_share),
           Op("proj.recompute", "proj", RECOMPUTE, "linear"),
           Op("fc1.recompute", "fc1", RECOMPUTE, "linear", 0.5),
           Op("elementwise.recompute", "elementwise", RECOMPUTE, "elementwise"))
    return OpTable("op_sac", (), ops)


def _cp_tables(sh: Shard, dev: Device) -> tuple[OpTable, ...]:
    """The CP communication table where a configuration uses context parallelism, else none."""
    return (cp_collectives(sh, dev),) if np.any(np.asarray(sh.cp_ranks) > 1) else ()


def _cp_axes(sh: Shard, cp_nodes) -> dict[str, Axis]:
    """The CP group (stride tp), hierarchical CP's all-to-all group (c1 ranks inside a node)
    and its ring (c / c1 ranks, across nodes where the CP group is)."""
    nodes = np.ones(np.shape(sh.cp_ranks)) if cp_nodes is None else cp_nodes
    c1 = np.asarray(sh.cp_a2a)
    ring = np.where(sh.cp_type == 3, sh.cp_ranks // np.maximum(c1, 1), sh.cp_ranks)
    return {"cp": Axis(sh.cp_ranks, nodes),
            "cp_a2a": Axis(np.broadcast_to(c1, np.shape(sh.cp_ranks)),
                           np.ones(np.shape(sh.cp_ranks))),
            "cp_ring": Axis(ring, np.where(ring > 1, nodes, 1.0))}


def cp_costs(times, sh: Shard, rc, fw, eff: Efficiency, act_bytes
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(forward, backward, recomputed forward) CP time on the critical path per layer and
    micro-batch, and the CP buffers (:mod:`costmodel.cp`)."""
    cf, cb = cp_exposed_s(times, sh, times["attn"], times["attn.bwd"],
                          eff.kernel_overhead_s, exposed, eff)
    # the recomputed forward re-runs the attention's CP communication: full recompute, and
    # selective where it checkpoints the (fused) attention core
    again = (rc == 2) | ((rc == 1) & fw.kernels.recompute_fused_attention)
    return cf, cb, np.where(again, cf, 0.0), cp_buffer_bytes(sh, act_bytes)


def _moe_layer_tables(model: ModelSpec, training: TrainingSpec, fw, dev: Device, sh: Shard,
                      rc, fallback, batch) -> tuple[OpTable, OpTable, OpTable]:
    """A MoE model's layer, averaged over its layers (``frac`` of them MoE): attention and
    element-wise as dense (the element-wise FFN term on the dense layers' share), the dense
    MLP's rows ``1 - frac`` times, the MoE block's (:mod:`costmodel.moe`) ``frac`` times."""
    from costmodel import moe as moe_ops

    ms = moe_ops.moe_shape(model, training, batch, sh.tokens, sh.tp)
    frac = ms.frac
    dense_sh = replace(sh, ffn=(1.0 - frac) * sh.ffn, up=(1.0 - frac) * sh.up)
    mlp = mlp_block(sh)
    mlp = OpTable("mlp", mlp.kernels, tuple(
        op._replace(repeat=(1.0 if op.repeat is None else op.repeat) * (1.0 - frac))
        for op in mlp.ops))
    kerns, rows = moe_ops.moe_kernels(model, sh, ms, dev.act_bytes)
    ops = tuple(Op(n, k, p, c, frac * (1.0 if r is None else r), parts)
                for n, k, p, c, r, parts in rows)
    layer = (attention_block(sh, model, training, fw, dev, fallback) + mlp
             + OpTable("moe", tuple(kerns), ops)
             + layer_memory_ops(dense_sh, model, training, fw, dev))
    non_expert, expert = moe_ops.expert_param_split(model)
    local = non_expert + expert * sh.tp / (ms.ep * ms.etp)  # /t below: per-rank gradients
    return (layer, tp_collectives(sh, dev, rc), embedding_table(sh, fw, dev, local))


def layer_costs(model: ModelSpec, training: TrainingSpec, eff: Efficiency, fw, gpu, comm,
                batch: ConfigBatch, tp_nodes: np.ndarray, cp_nodes=None) -> LayerCosts:
    """Build, price and combine the layer's op tables for every configuration of ``batch``
    (one representative per distinct layer shape: :func:`costmodel.model.run_phases`)."""
    rc = batch.recompute
    dev = device_for(gpu, eff, batch.precision, training.fp8_recipe,
                     training.fp8_dot_product_attention)
    sh = shard_of(model, training, batch, comm.system.gpus_per_node)
    fallback = softmax_falls_back(fw, model, training, batch.precision, sh.heads_local)
    tables = layer_tables(model, training, fw, dev, sh, rc, fallback, batch)
    kernels = tuple(k for table in tables for k in table.kernels)
    cp_on = len(tables) > 3
    axes = {"tp": Axis(batch.tp, tp_nodes)}
    if cp_on:
        axes.update(_cp_axes(sh, cp_nodes))
    times = price(kernels, dev, comm, axes)
    layer = tables[0]
    layer_f = pass_time(layer, times, FORWARD)
    layer_b = pass_time(layer, times, BACKWARD)
    zero = np.zeros(rc.shape)
    cp_f = cp_b = cp_rc = cp_buf = zero
    if cp_on:
        cp_f, cp_b, cp_rc, cp_buf = cp_costs(times, sh, rc, fw, eff, dev.act_bytes)
        on = sh.cp_ranks > 1
        layer_f = np.where(on, layer_f + cp_f, layer_f)
        layer_b = np.where(on, layer_b + cp_b, layer_b)
    layer_rc = np.where(rc == 2, layer_f, np.where(rc == 1, pass_time(layer, times, RECOMPUTE),
                                                   0.0))
    masks = rcm.module_masks(batch)
    if cp_on:
        cp_rc = np.where((rc != 1) | masks.core_attn, cp_rc, 0.0)  # no core re-run: no CP
        layer_rc = np.where(sh.cp_ranks > 1, layer_rc + np.where(rc == 1, cp_rc, 0.0), layer_rc)
    layer_rc = layer_rc + rcm.module_tp_s(times, sh, masks, model, fw, eff,
                                          training.tp_comm_overlap, exposed)
    layer_tp, regather_window = tp_exposed_s(times, sh, rc, fw, eff, training.tp_comm_overlap)
    emb_t, head_t = embedding_and_head_s(times, sh, fw, eff, regather_window)
    gpu_layer = layer_f + layer_b + layer_rc + layer_tp
    layer_host = host_overhead_s(gpu_layer, sh, rc, fw)
    # selective recompute checkpoints the core only where the time side re-runs it
    core_recomputed = masks.core_attn & (not training.flash_attention
                                         or fw.kernels.recompute_fused_attention)
    act = dict(flash_attention=training.flash_attention, dropout=training.dropout,
               act_bytes=dev.act_bytes, fp8=dev.fp8,
               softmax_fp32_saved=fallback & fw.kernels.softmax_in_fp32,
               # torchtitan's op-level SAC saves what its policy saves (as _op_sac_rows)
               op_sac=fw.kernels.selective_op_sac and model.mla is None)
    # sequence-linear: a CP rank's b s / c tokens (CP needs fused attention: no s^2 term)
    per_layer_act = layer_activation_bytes(model, sh.seq, _local_samples(sh), sh.tp,
                                           sh.sp, rc, core_recomputed=core_recomputed, **act)
    full_layer_act = layer_activation_bytes(model, sh.seq, _local_samples(sh), sh.tp,
                                            sh.sp, np.zeros_like(rc), **act)
    if model.moe is not None:
        from costmodel import moe as moe_ops

        ms = moe_ops.moe_shape(model, training, batch, sh.tokens, sh.tp)
        per_layer_act = per_layer_act + moe_ops.moe_activation_delta(model, sh, ms, rc,
                                                                     dev.act_bytes, dev.fp8)
        full_layer_act = full_layer_act + moe_ops.moe_activation_delta(
            model, sh, ms, np.zeros_like(rc), dev.act_bytes, dev.fp8)
    rc_mod = rcm.module_saved_bytes(model, sh.seq, _local_samples(sh), sh, masks,
                                    dev.act_bytes, dev.fp8, ms if model.moe is not None else None)
    per_layer_act = per_layer_act - rc_mod.saved_bytes

    def kernel_s(name):
        return np.broadcast_to(times[name], rc.shape) if name in times else zero

    return LayerCosts(
        forward_s=layer_f, backward_s=layer_b, recompute_s=np.broadcast_to(layer_rc, rc.shape),
        tp_comm_s=layer_tp, host_s=layer_host, embedding_s=emb_t, head_s=head_t,
        activation_bytes=np.broadcast_to(per_layer_act, rc.shape),
        full_activation_bytes=np.broadcast_to(full_layer_act, rc.shape),
        grad_accum_s=kernel_s("grad_accum"),
        embedding_grad_accum_s=kernel_s("embedding.grad_accum"),
        hp_grad_s=kernel_s("hp_grad"), embedding_hp_grad_s=kernel_s("embedding.hp_grad"),
        cp_comm_s=cp_f + cp_b + np.where(rc == 2, cp_f, cp_rc),
        cp_recompute_s=np.where(rc == 2, cp_f, cp_rc), cp_buffer_bytes=cp_buf,
        recompute_transient_bytes=np.broadcast_to(rc_mod.transient_bytes, rc.shape),
        moe_forward_s=np.broadcast_to(pass_time(layer, times, FORWARD, "moe"), rc.shape),
        moe_backward_s=np.broadcast_to(pass_time(layer, times, BACKWARD, "moe"), rc.shape),
        tables=tables, times=times)


def layer_key(batch: ConfigBatch, tp_nodes: np.ndarray, cp_nodes=None) -> np.ndarray:
    """The columns a layer's cost depends on, packed into one integer per configuration
    (with CP, the distinct keys re-packed with cp, its comm type and the nodes it spans)."""
    key = batch.tp.astype(np.int64)
    for col, radix in ((tp_nodes.astype(np.int64), 1 << 12),
                       (batch.micro_batch_size, 1 << 16), (batch.precision, 8),
                       (batch.recompute, 4), (batch.recompute_modules, 8),
                       (batch.sequence_parallel.astype(np.int64), 2),
                       (batch.nccl_algo, 256), (batch.nccl_proto, 256)):
        key = key * radix + col
    if np.any(batch.cp > 1):
        _, inv = np.unique(key, return_inverse=True)
        key = inv.reshape(-1).astype(np.int64)
        nodes = np.ones(len(key)) if cp_nodes is None else cp_nodes
        for col, radix in ((batch.cp, 1 << 16), (batch.cp_comm_type, 4),
                           (nodes.astype(np.int64), 1 << 16)):
            key = key * radix + col
    return key


def price_distinct_layers(model: ModelSpec, training: TrainingSpec, eff: Efficiency, fw, gpu,
                          system, batch: ConfigBatch, groups) -> tuple[LayerCosts, LayerCosts]:
    """Layer costs per configuration, computed once per distinct layer shape (the key of
    :func:`layer_key`); returns (per configuration, per distinct shape)."""
    cp_nodes = groups.cp_nodes
    key = layer_key(batch, groups.tp_nodes, cp_nodes)
    if model.moe is not None:  # the MoE block's shapes depend on the expert grid
        key = np.unique(np.stack([key, batch.ep, batch.etp], axis=1), axis=0,
                        return_inverse=True)[1].reshape(-1)
    _, lfirst, linv = np.unique(key, return_index=True, return_inverse=True)
    sub = batch.take(lfirst)
    distinct = layer_costs(model, training, eff, fw, gpu,
                           Collectives(system, sub, groups.layout[lfirst]), sub,
                           groups.tp_nodes[lfirst],
                           None if cp_nodes is None else cp_nodes[lfirst])
    return distinct.take(linv.reshape(-1)), distinct
