"""The cost model: one vectorised function scores a batch of configurations.

``score(model, cluster, training, batch)`` returns step time, throughput, MFU, peak memory and
their breakdowns for every configuration of ``batch``. Scoring one configuration is a batch of
one. The structure follows cost-model.md: per pipeline stage, forward and backward compute of
its layers (plus embedding / LM head on the first / last stage), recomputation, TP collectives
per layer on the critical path, PP point-to-point per micro-batch, the schedule's bubble, the
exposed part of the DP gradient reduction, the optimizer step; memory per stage, peak = the
largest stage.

Every collective goes through :mod:`costmodel.collectives` (NCCL's own algorithm/protocol
model) on the communication group's real geometry from :mod:`costmodel.topology`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel import collectives as coll
from costmodel import topology
from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS, Efficiency, efficiency_for
from costmodel.compute import (
    ACT_BYTES,
    GEMM_BYTES,
    fused_softmax_available,
    gemm_time_s,
    layer_forward_flops,
    memory_op_time_s,
    model_flops_per_step,
    padded_vocab,
    soft_max,
)
from costmodel.memory import (
    GRAD_BYTES,
    OPTIMIZER_BYTES,
    PARAM_BYTES,
    layer_activation_bytes,
    microbatches_in_flight,
    model_state_bytes,
)
from costmodel.schedule import GPIPE, INTERLEAVED, pipeline_span_s, stage_layers
from costmodel.specs import PRECISIONS, ClusterSpec, ModelSpec, TrainingSpec

TIME_KEYS = ("compute", "recompute", "tp_comm", "host_overhead", "pp_comm", "pipeline_bubble",
             "dp_comm_exposed", "embedding_sync", "optimizer", "overhead")
MEMORY_KEYS = ("weights", "gradients", "optimizer_states", "activations", "logits",
               "communication_buffers", "cuda_context", "allocator_reserve")

# Megatron's DDP bucket: max(40M, 1M x dp) elements (megatron/core/distributed).
DDP_BUCKET_ELEMENTS = 40e6
# HBM bytes per parameter of one optimizer step (Megatron-LM's mixed-precision optimizer):
# unscale + inf/NaN check of the fp32 grads (read 4, write 4), grad-norm for clipping (read 4),
# Adam (read master, m, v, grad: 16; write master, m, v: 12), copy master -> 16-bit params
# (read 4, write 2), zero the grad buffer (write 4): 50. fp32: no unscale, no copy: 36.
OPTIMIZER_STEP_BYTES = np.array([36.0, 36.0, 50.0, 50.0, 50.0])
# HBM bytes per parameter of BF16_Optimizer's update_hp_grads after each micro-batch's
# backward: the bf16 gradient cast to fp32 (read 2, write 4) and added into the fp32 buffer
# (read 4 + 4, write 4)
HP_GRAD_UPDATE_BYTES = 18.0
# Bytes per local layer parameter of Transformer Engine's cached fp8 weight and its fp8
# transpose (te.Linear fp8 workspaces, reused while is_first_microbatch is False)
FP8_WEIGHT_CACHE_BYTES = 2.0
# HBM bytes per element of Transformer Engine's fused cast-transpose to fp8: read the 16-bit
# tensor (2), write its fp8 copy (1) and the transposed fp8 copy (1)
FP8_CAST_BYTES = 4.0


@dataclass(frozen=True)
class Scores:
    """Per-configuration results, each an array of the batch's length."""

    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    samples_per_s: np.ndarray
    mfu: np.ndarray
    peak_memory_bytes: np.ndarray  # what must fit: the larger of the backward and the step
    observed_memory_bytes: np.ndarray  # nvidia-smi's maximum: the step's copy on the cache
    time_breakdown_s: dict[str, np.ndarray]
    memory_breakdown_bytes: dict[str, np.ndarray]
    microbatches: np.ndarray
    bubble_share: np.ndarray  # pipeline bubble / step time
    stage_imbalance: np.ndarray  # slowest stage / mean stage, per micro-batch
    tp_crosses_nodes: np.ndarray
    dp_comm_total_s: np.ndarray  # the whole DP reduction, exposed or not

    def __len__(self) -> int:
        return int(self.step_time_s.shape[0])

    @staticmethod
    def concat(parts: Sequence[Scores]) -> Scores:
        """Scores of consecutive sub-batches, joined in order."""
        if len(parts) == 1:
            return parts[0]
        cat = {}
        for name in Scores.__dataclass_fields__:
            first = getattr(parts[0], name)
            if isinstance(first, dict):
                cat[name] = {k: np.concatenate([getattr(p, name)[k] for p in parts])
                             for k in first}
            else:
                cat[name] = np.concatenate([getattr(p, name) for p in parts])
        return Scores(**cat)

    def row(self, i: int) -> dict:
        """Plain-Python metrics of configuration ``i`` (the JSON ``metrics`` object)."""
        return {
            "step_time_s": float(self.step_time_s[i]),
            "tokens_per_s": float(self.tokens_per_s[i]),
            "samples_per_s": float(self.samples_per_s[i]),
            "mfu": float(self.mfu[i]),
            "peak_memory_bytes": float(self.peak_memory_bytes[i]),
            "observed_memory_bytes": float(self.observed_memory_bytes[i]),
            "microbatches_per_step": int(self.microbatches[i]),
            "bubble_share": float(self.bubble_share[i]),
            "stage_imbalance": float(self.stage_imbalance[i]),
            "tp_crosses_nodes": bool(self.tp_crosses_nodes[i]),
            "time_breakdown_s": {k: float(v[i]) for k, v in self.time_breakdown_s.items()},
            "memory_breakdown_bytes": {k: float(v[i])
                                       for k, v in self.memory_breakdown_bytes.items()},
        }


# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _system(cluster: ClusterSpec) -> coll.NcclSystem:
    return coll.nccl_system(cluster)


def _nccl_buffer_bytes(system: coll.NcclSystem, lay: topology.LayoutTopology, tied: bool
                       ) -> float:
    """NCCL connection buffers on one rank, summed over the communicators it joins: the world
    (init barriers), TP, DP, PP, model-parallel (TP x PP: gradient norm and overflow
    checks) and, with tied embeddings, the first/last-stage embedding group
    (NcclSystem.communicator_buffer_bytes; Megatron-LM parallel_state.initialize_model_parallel
    and DeepSpeed's PipelineModule create these groups)."""
    gpn = system.gpus_per_node
    t, p, d = lay.tp.n_ranks, lay.pp.n_ranks, lay.dp.n_ranks
    n = t * p * d
    groups = [(min(n, gpn), -(-n // gpn))]
    for g in (lay.tp, lay.dp, lay.pp):
        groups.append((g.ranks_per_node, g.n_nodes))
    if t > 1 and p > 1:
        ppn = min(lay.tp.ranks_per_node * lay.pp.ranks_per_node, gpn)
        groups.append((ppn, -(-t * p // ppn)))
    if tied and p > 1:
        groups.append((1, 2) if lay.pp.crosses_nodes else (2, 1))
    return sum(system.communicator_buffer_bytes(ppn, nodes) for ppn, nodes in groups)


def _geometry(cluster: ClusterSpec, tp, pp, dp, tied: bool = True
              ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Group geometry per configuration, computed once per unique (tp, pp, dp).

    Returns the per-configuration columns and each configuration's layout index."""
    key = (tp.astype(np.int64) * 1_000_003 + pp) * 1_000_003 + dp
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    cols = {name: np.empty(len(uniq)) for name in
            ("tp_nodes", "dp_nodes", "pp_inter", "nccl_buffers")}
    system = _system(cluster)
    for j, i in enumerate(first):
        lay = topology.layout_topology(cluster, int(tp[i]), int(pp[i]), int(dp[i]))
        cols["tp_nodes"][j] = lay.tp.n_nodes
        cols["dp_nodes"][j] = lay.dp.n_nodes
        cols["pp_inter"][j] = 1.0 if lay.pp.crosses_nodes else 0.0
        cols["nccl_buffers"][j] = _nccl_buffer_bytes(system, lay, tied)
    inv = inv.reshape(-1)
    return {k: v[inv] for k, v in cols.items()}, inv


def _gradient_bytes(fw, prec, pb, gb, z, d, bf16_opt):
    """Gradient bytes per parameter as the framework's optimizer holds them: (the bytes
    ``model_state_bytes`` shards from ZeRO-2 on, the bytes already divided by d where ZeRO-1
    shards them). The optimizer states stay ``OPTIMIZER_BYTES``.

    Megatron-LM: fp32 main gradients (``GRAD_BYTES``), except fp16 training, which keeps fp16
    main gradients and copies the local gradients (or the distributed optimizer's shard) to
    fp32 for the step: 2 + 4 / d (``FrameworkCosts.fp16_grad_copy``; the 20 and 4 + 16/d of
    cost-model.md 4.2). DeepSpeed: bf16 weights (bf16, and fp8,
    whose DeepSpeed config is the bf16 one) with ZeRO 0/1 run BF16_Optimizer, bf16 gradients
    beside an unsharded fp32 accumulation buffer (2 + 4; deepspeed/runtime/bf16_optimizer.py
    fp32_groups_gradients_flat); other 16-bit training runs the ZeRO optimizer (or
    FP16_Optimizer without ZeRO): 16-bit gradients (2) and, for the step, an fp32 copy of the
    local gradient partition (4 / d) next to the fp32 master weights and Adam moments (12 / d).
    With the weights that is DeepSpeed's own estimate (cost-model.md 4.3): 4 + 16/d at ZeRO-1
    (older estimate_zero2_model_states_mem_needs), 2 + 18/d at ZeRO-2 (current: 18 = 2 grads16
    + 4 grads32 + 4 params32 + 8 Adam).
    """
    sixteen = pb < 4.0
    zero16 = (fw.zero_grad16 & sixteen & ~bf16_opt) | _fp16_main_grads(fw, prec)
    gm = np.where(bf16_opt, 6.0, np.where(zero16, 2.0, gb))
    g_part = np.where(zero16, 4.0, 0.0) / np.where(z >= 1, d, 1.0)
    return gm, g_part


# DeepSpeed's gradient all-reduce gathers tensors into one flat buffer until it holds more
# than this many elements (engine.py allreduce_no_retain, pipe engine MEMORY_OPT_ALLREDUCE_SIZE)
DEEPSPEED_ALLREDUCE_ELEMENTS = 5e8


def _reduce_copy_bytes(bf16_opt, gcomm, g_part, psi):
    """Bytes per local parameter that exist only after the backward, for the gradient
    reduction and the optimizer step, on top of the model states: the fp32 copy of the local
    16-bit gradient partition (``g_part``, see :func:`_gradient_bytes`), or, with DeepSpeed's
    BF16_Optimizer, the all-reduce's copies of its fp32 gradient buffer.

    BF16_Optimizer hands its flat fp32 gradient buffer, one per parameter group, to the
    engine's all-reduce (pipe/engine.py _bf16_reduce_grads -> buffered_allreduce_fallback),
    which casts each bucket to ``communication_data_type`` before reducing it
    (engine.py allreduce_bucket: ``tensor.to(self.communication_data_type)``, bf16 for bf16
    training without ZeRO), a copy of ``gcomm`` bytes per parameter while the fp32 buffer
    lives on. A group's buffer larger than the bucket size is reduced alone, as a view; below
    it, the two groups (with and without weight decay) are first concatenated into a new
    fp32 tensor, 4 bytes more. DeepSpeed decides that on the decay group's size; the model on
    the stage's parameters, the no-decay group (biases and norms) being small beside it.

    Read from DeepSpeed 0.6.3, the first release with BF16_Optimizer (2022-04), whose
    pipeline engine runs it at ZeRO stage 0 (it shards its fp32 states over DP itself) and
    refuses bf16 with ZeRO 1. BLOOM's Feb-2022 rows, which record "ZeRO 1" and "new
    BF16_Optimizer", ran a pre-release of it; the model assumes it reduced the same way.
    """
    small = psi <= DEEPSPEED_ALLREDUCE_ELEMENTS
    cast = np.where(gcomm < 4.0, gcomm, 0.0) + np.where(small, 4.0, 0.0)
    return np.where(bf16_opt, cast, g_part)


def _fp16_main_grads(fw, prec):
    """Megatron-LM's fp16 training keeps (and all-reduces) fp16 main gradients: only bf16
    forces --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py)."""
    return fw.fp16_grad_copy & (prec == PRECISIONS.index("fp16"))


def grad_wire_bytes(fw, prec):
    """Bytes per gradient element of the data-parallel reduction: the gradient buffer's own
    width (``GRAD_BYTES``), 16 bits for Megatron's fp16 main gradients, and DeepSpeed's
    ``communication_data_type`` (``FrameworkCosts.grad_comm_bytes``) for 16-bit training."""
    pb, gb = PARAM_BYTES[prec], GRAD_BYTES[prec]
    wire = np.where((fw.grad_comm_bytes > 0) & (pb < 4.0), fw.grad_comm_bytes, gb)
    return np.where(_fp16_main_grads(fw, prec), 2.0, wire)


def uses_bf16_optimizer(fw, prec, z):
    """DeepSpeed's BF16_Optimizer: bf16 weights (bf16 training, and fp8, whose DeepSpeed config
    is the bf16 one) with ZeRO 0/1. It all-reduces the gradients (pipe engine
    _bf16_reduce_grads -> buffered_allreduce_fallback) and then gathers its updated partition."""
    bf16_weights = (prec == PRECISIONS.index("bf16")) | (prec == PRECISIONS.index("fp8"))
    return fw.bf16_fp32_grads & bf16_weights & (z <= 1)


class _Collectives:
    """Collective times through the NCCL model, computed once per distinct call.

    Every collective of a step is a function of the layout, the micro-batch size, the
    precision, the ZeRO stage and the NCCL algorithm/protocol. Those columns form one
    integer key; collectives are evaluated on one representative configuration per key and
    gathered back, so a batch of a million configurations costs a few hundred NCCL-model
    evaluations.
    """

    def __init__(self, system: coll.NcclSystem, batch: ConfigBatch, layout: np.ndarray
                 ) -> None:
        self.system = system
        self.algo_table = batch.nccl_algo_table
        self.proto_table = batch.nccl_proto_table
        key = layout.astype(np.int64)
        for col, radix in ((batch.micro_batch_size, 1 << 16), (batch.precision, 8),
                           (batch.zero_stage, 4), (batch.nccl_algo, 256),
                           (batch.nccl_proto, 256)):
            key = key * radix + col
        _, self.first, self.inv = np.unique(key, return_index=True, return_inverse=True)
        self.inv = self.inv.reshape(-1)
        self.algo = batch.nccl_algo[self.first]
        self.proto = batch.nccl_proto[self.first]

    def time_s(self, collective: str, nbytes, n_ranks, n_nodes) -> np.ndarray:
        n = self.inv.shape[0]
        pick = self.first

        def rep(x, dtype):
            a = np.asarray(x, dtype=dtype)
            return np.broadcast_to(a, (n,))[pick] if a.ndim else np.full(len(pick), a)

        nbytes, n_ranks, n_nodes = rep(nbytes, float), rep(n_ranks, np.int64), rep(n_nodes,
                                                                                  np.int64)
        out = np.zeros(len(pick))
        active = n_ranks > 1
        for a_code in np.unique(self.algo[active]):
            for p_code in np.unique(self.proto[active]):
                sel = active & (self.algo == a_code) & (self.proto == p_code)
                if not sel.any():
                    continue
                res = coll.collective_time_s(
                    self.system, collective, nbytes[sel], n_ranks[sel], n_nodes[sel],
                    algo=self.algo_table[a_code], proto=self.proto_table[p_code],
                    on_invalid="inf")
                out[sel] = np.asarray(res.time_s, dtype=float)
        return out[self.inv]


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
    kernels (``FrameworkCosts.megatron_softmax``), 16-bit or fp8 training (fp32 never takes the
    kernel and is charged its fp32 passes as before) and no flash attention."""
    if training.flash_attention or not fw.megatron_softmax:
        return np.zeros(np.shape(attn_batches), dtype=bool)
    sixteen = np.asarray(prec) != PRECISIONS.index("fp32")
    avail = fused_softmax_available(attn_batches, training.seq_length, causal=model.causal)
    return sixteen & ~avail


LAYER_TERMS = ("layer_f", "layer_b", "layer_rc", "layer_tp", "layer_host", "emb_t", "head_t",
               "per_layer_act", "full_layer_act", "layer_accum", "emb_accum", "head_accum",
               "layer_hp", "emb_hp")


def _layer_key(batch: ConfigBatch, tp_nodes: np.ndarray) -> np.ndarray:
    """The columns a layer's cost depends on, packed into one integer per configuration."""
    key = batch.tp.astype(np.int64)
    for col, radix in ((tp_nodes.astype(np.int64), 1 << 12),
                       (batch.micro_batch_size, 1 << 16), (batch.precision, 8),
                       (batch.recompute, 4), (batch.sequence_parallel.astype(np.int64), 2),
                       (batch.nccl_algo, 256), (batch.nccl_proto, 256)):
        key = key * radix + col
    return key


def _layer_terms(model: ModelSpec, training: TrainingSpec, eff: Efficiency, fw, gpu,
                 comm: _Collectives, batch: ConfigBatch, tp_nodes: np.ndarray
                 ) -> dict[str, np.ndarray]:
    """One transformer layer for one micro-batch on one TP rank, plus the embedding and the
    LM head: forward/backward/recompute time, TP communication, host overhead, activations.
    """
    t = batch.tp.astype(float)
    b = batch.micro_batch_size.astype(float)
    prec = batch.precision
    rc = batch.recompute
    sp = batch.sequence_parallel & (batch.tp > 1)
    s = float(training.seq_length)
    h, hd, a, g, f = (float(model.hidden_size), float(model.head_dim),
                      float(model.num_attention_heads), float(model.num_kv_heads),
                      float(model.ffn_hidden_size))
    V = padded_vocab(model.vocab_size, batch.tp)
    peaks = np.array([gpu.peak_flops_per_s.get(pr, np.nan) for pr in PRECISIONS])
    peak = peaks[prec]
    fp8 = prec == PRECISIONS.index("fp8")
    gemm_peak = peak * np.where(fp8, eff.fp8_gemm_scale, 1.0)
    bw = gpu.memory_bandwidth_bytes_per_s
    eg = GEMM_BYTES[prec]
    ea = ACT_BYTES[prec]

    tensor_cores = prec != PRECISIONS.index("fp32")
    # the attention core's batched GEMMs (and the output layer, below) stay in 16-bit when
    # the linears run in fp8 (Transformer Engine keeps dot-product attention in bf16)
    attn_peak = peaks[np.where(fp8, PRECISIONS.index("bf16"), prec)]

    def gemm(mm, nn, kk, peak_=gemm_peak, bytes_=eg):
        return gemm_time_s(mm, nn, kk, peak_flops_per_s=peak_, mem_bandwidth_bytes_per_s=bw,
                           elem_bytes=bytes_, eff=eff, sm_count=gpu.sm_count,
                           tensor_cores=tensor_cores)

    def memop(nbytes, kernels=1.0):
        return memory_op_time_s(nbytes, mem_bandwidth_bytes_per_s=bw, eff=eff,
                                n_kernels=kernels)

    # ---- one layer, one micro-batch, one TP rank -------------------------------------------
    tokens = b * s
    up = (2.0 if model.gated_mlp else 1.0) * f
    # column-parallel QKV and FC1 (N split by tp), row-parallel projection and FC2 (K split)
    t_qkv = gemm(tokens, (a + 2 * g) * hd / t, h)
    t_proj = gemm(tokens, h, a * hd / t)
    t_fc1 = gemm(tokens, up / t, h)
    t_fc2 = gemm(tokens, h, f / t)
    t_gemm_f = t_qkv + t_proj + t_fc1 + t_fc2
    lf = layer_forward_flops(model, training.seq_length, b, t)
    fallback = softmax_falls_back(fw, model, training, prec, b * a / t)
    if training.flash_attention:
        # causal fused attention does half of the square (Dao et al. 2022); the kernels are
        # built for head dimensions in steps of 32 (FlashAttention-2: 32..256), so others run
        # padded to the next one
        square = 0.5 if model.causal else 1.0  # causal kernels skip the masked half
        pad = np.ceil(hd / 32.0) * 32.0 / hd
        t_attn_f = (square * pad * lf.attention_flops / (eff.attention * attn_peak)
                    + eff.kernel_overhead_s)
        t_attn_b = 2.5 * (t_attn_f - eff.kernel_overhead_s) + eff.kernel_overhead_s
        # selective recompute checkpoints the core attention even when it is fused in
        # Megatron-Core (recompute_modules=["core_attn"]: Attention._checkpointed_attention_
        # forward), so its backward runs the fused forward kernel once more; legacy Megatron
        # (Megatron-DeepSpeed) checkpoints it only when it is not fused
        t_attn_recompute = t_attn_f if fw.recompute_fused_attention else 0.0 * t_attn_f
    else:
        heads_local = b * a / t
        # batched QK^T and probabilities x V, each approximated as one GEMM, in 16-bit
        score_gemm = gemm(s * heads_local, s, hd, attn_peak, ea)
        ctx_gemm = gemm(s * heads_local, hd, s, attn_peak, ea)
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
        sm_f = memop((part + 1.0) * scores * ea + dropout_bytes, 2.0 if drop else 1.0)
        sm_b = memop((2.0 * part + 1.0) * scores * ea + dropout_bytes, 2.0 if drop else 1.0)
        # where the fused kernel does not apply (attention batches b x a/t not a multiple of
        # 4, ...) Megatron runs the softmax in PyTorch (SOFTMAX_FALLBACK), the same dropout
        # after it
        fb_f, fb_b, fb_kernels = SOFTMAX_FALLBACK[fw.softmax_in_fp32]
        kernels = fb_kernels + (1.0 if drop else 0.0)
        sm_f = np.where(fallback, memop(fb_f * scores + dropout_bytes, kernels), sm_f)
        sm_b = np.where(fallback, memop(fb_b * scores + dropout_bytes, kernels), sm_b)
        t_attn_f = score_gemm + ctx_gemm + sm_f
        t_attn_b = 2.0 * (score_gemm + ctx_gemm) + sm_b
        t_attn_recompute = t_attn_f
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
    t_elem_f = memop(fw.elementwise_traffic * (outside / np.where(sp, t, 1.0) + inside / t),
                     6.0)
    # fp8 linears (Transformer Engine): each casts its 16-bit input to fp8 together with the
    # transposed copy its weight gradient needs (read 2, write 1 + 1 bytes per element), and
    # the backward casts each output gradient the same way; the weights' fp8 copies are kept
    # across a step's micro-batches (is_first_microbatch), so their cast is left out. With
    # sequence parallelism the layer-norm outputs feeding QKV and FC1 are cast on the local
    # sequence shard and all-gathered in fp8 (TE LayerNormLinear / LayerNormMLP).
    cast_in = tokens * (2.0 * h / np.where(sp, t, 1.0) + a * hd / t + f / t)
    cast_out = tokens * ((a + 2 * g) * hd / t + 2.0 * h + up / t)
    t_cast_f = np.where(fp8, memop(FP8_CAST_BYTES * cast_in, 4.0), 0.0)
    t_cast_b = np.where(fp8, memop(FP8_CAST_BYTES * cast_out, 4.0), 0.0)
    layer_f = t_gemm_f + t_attn_f + t_elem_f + t_cast_f
    layer_b = 2.0 * t_gemm_f + t_attn_b + 2.0 * t_elem_f + t_cast_b
    # gradient accumulation outside the GEMMs (AccumulateGrad adds a micro-batch's gradient
    # into param.grad; the first micro-batch of a step only hands it over, so score() charges
    # it (m - 1) / m per micro-batch)
    has_accum = fw.grad_accum_bytes > 0
    layer_accum = (memop(fw.grad_accum_bytes * float(model.params_per_layer) / t)
                   if has_accum else 0.0)
    # BF16_Optimizer (DeepSpeed 0.6.3 bf16_optimizer.update_hp_grads, after every
    # micro-batch's backward; the bf16 gradients are set to None before each backward, so
    # autograd accumulates nothing): cast each bf16 gradient to fp32 (r2 w4) and add it into
    # the fp32 buffer (r4 r4 w4), 18 bytes per parameter; two kernels per layer, lumped as
    # layer_accum's one (a layer's dozen tensors each launch their own, ~0.1% of a step)
    layer_hp = (memop(HP_GRAD_UPDATE_BYTES * float(model.params_per_layer) / t, 2.0)
                if fw.bf16_fp32_grads else 0.0)
    layer_rc = np.where(rc == 2, layer_f, np.where(rc == 1, t_attn_recompute, 0.0))

    # ---- TP collectives per layer per micro-batch (Shoeybi et al. 2019; Korthikanti 4.2.2) --
    act = tokens * h * ea
    tp_n = batch.tp
    ar = comm.time_s("allreduce", act, tp_n, tp_nodes)
    ag = comm.time_s("allgather", act, tp_n, tp_nodes)
    rs = comm.time_s("reducescatter", act, tp_n, tp_nodes)
    # 2 all-reduces forward + 2 backward (+ 2 in the recomputed forward); with sequence
    # parallelism each all-reduce becomes an all-gather + reduce-scatter pair.
    n_collectives = 4.0 + np.where(rc == 2, 2.0, 0.0)
    cs = fw.collective_s  # each blocking collective's rendezvous of the TP ranks (launch skew)

    def exposed(comm_s, window_s):
        # overlapped communication: what the window cannot cover, plus the share overlap does
        # not hide (communication kernels take SMs; nccl.md section 12), as for DP overlap
        return (np.maximum(0.0, comm_s - window_s)
                + (1.0 - eff.overlap_hidden) * np.minimum(comm_s, window_s))

    layer_tp = np.where(batch.tp > 1, n_collectives * (np.where(sp, ag + rs, ar) + cs), 0.0)
    if fw.async_tp_grad:
        # the column-parallel linears' (QKV, FC1) input gradient is all-reduced (reduce-
        # scattered with SP) asynchronously while their weight-gradient GEMM runs (Megatron-LM
        # LinearWithGradAccumulationAndAsyncCommunication): two of the backward collectives
        # are hidden behind a GEMM as long as the forward one, up to the overlap share
        # (collective - exposed(collective, window) = overlap_hidden x min(collective, window),
        # written so that an unrunnable (infinite) collective stays infinite, not NaN)
        grad_coll = np.where(sp, rs, ar) + cs
        hidden_bwd = eff.overlap_hidden * (np.minimum(grad_coll, t_qkv)
                                           + np.minimum(grad_coll, t_fc1))
        layer_tp = layer_tp - np.where(batch.tp > 1, hidden_bwd, 0.0)
        regather_window = 1.0  # the weight-gradient GEMM is taken: dgrad only
    else:
        regather_window = 2.0
    # sequence parallelism re-gathers the input of the QKV and FC1 linears in the backward
    # (Korthikanti et al. 4.2.2) for their weight gradients, overlapped with those linears'
    # backward GEMMs
    regather = (exposed(ag, regather_window * t_qkv) + exposed(ag, regather_window * t_fc1))
    layer_tp = layer_tp + np.where(sp, regather, 0.0)
    if training.tp_comm_overlap:
        # Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers), sequence parallel
        # only: each collective is split into chunks pipelined with its own GEMM. Forward:
        # all-gather -> QKV / FC1, projection / FC2 -> reduce-scatter. Backward (dgrad + wgrad,
        # twice the forward GEMM): QKV and FC1 reduce-scatter their input gradient and
        # re-gather their input; the projection and FC2 all-gather their output gradient.
        fwd = (exposed(ag + cs, t_qkv) + exposed(rs + cs, t_proj)
               + exposed(ag + cs, t_fc1) + exposed(rs + cs, t_fc2))
        bwd = (exposed(rs + ag + 2.0 * cs, 2.0 * t_qkv) + exposed(ag + cs, 2.0 * t_proj)
               + exposed(rs + ag + 2.0 * cs, 2.0 * t_fc1) + exposed(ag + cs, 2.0 * t_fc2))
        overlapped = fwd + bwd + np.where(rc == 2, fwd, 0.0)
        layer_tp = np.where(sp, np.minimum(overlapped, layer_tp), layer_tp)

    # ---- embedding (first stage) and LM head + loss (last stage) ---------------------------
    emb_f = memop(2.0 * tokens * h * ea, 1.0) + np.where(batch.tp > 1, np.where(sp, rs, ar), 0)
    emb_b = memop(3.0 * tokens * h * ea, 1.0) + np.where(sp, ag, 0.0)
    # the output layer is a plain 16-bit linear even in fp8 training (Megatron-Core's
    # output_layer is a ColumnParallelLinear, not a Transformer Engine module; MPT's tied head
    # is F.linear): 16-bit peak and operands
    head_gemm = gemm(tokens, V / t, h, attn_peak, ea)
    loss = memop(fw.loss_bytes_per_logit * tokens * V / t, 4.0)  # softmax fwd/bwd passes
    head_f = head_gemm + loss + np.where(sp, ag, 0.0)
    # the output layer's input is copied into the TP region: its backward all-reduces the
    # input gradient (reduce-scatter with SP); Megatron-LM runs it through the same linear as
    # the layers (parallel_lm_logits), so with async_tp_grad it hides behind the weight
    # gradient, and with SP the input is re-gathered for that weight gradient too
    head_coll = np.where(batch.tp > 1, np.where(sp, rs, ar), 0.0)
    if fw.async_tp_grad:
        head_coll = exposed(head_coll, head_gemm)
    head_regather = np.where(sp, exposed(ag, regather_window * head_gemm), 0.0)
    head_b = 2.0 * head_gemm + head_coll + head_regather
    # the word embedding's dense backward zero-fills a [V/t, h] gradient every micro-batch;
    # it and the output layer's weight gradient are then accumulated like the layers'
    emb_accum = head_accum = emb_hp = 0.0
    if has_accum:
        emb_b = emb_b + memop(2.0 * V * h / t)
        emb_accum = memop(fw.grad_accum_bytes * V * h / t)
        head_accum = emb_accum
    if fw.bf16_fp32_grads:
        emb_hp = memop(HP_GRAD_UPDATE_BYTES * V * h / t, 2.0)
    emb_t = emb_f + emb_b
    head_t = head_f + head_b

    gpu_layer = layer_f + layer_b + layer_rc + layer_tp
    # The host launches asynchronously: a layer takes about the longer of its GPU time and the
    # framework's host time (per pass: forward, two backward halves, recomputed forward), the
    # two joined by a p-norm (FrameworkCosts.host_overlap_p) since the host's time per layer
    # varies and the GPU idles whenever it falls behind. Only small layers are host-bound.
    host_layer = fw.layer_pass_s * (3.0 + np.where(rc == 2, 1.0, 0.0))
    # each TP collective's host-side call (a tp = 1 layer makes none); with SP each is an
    # all-gather + reduce-scatter pair, plus the backward's two re-gathers
    calls = np.where(sp, 2.0 * n_collectives + 2.0, n_collectives)
    host_layer = host_layer + np.where(batch.tp > 1, calls * fw.collective_host_s, 0.0)
    joined = soft_max(gpu_layer, host_layer, fw.host_overlap_p)
    layer_host = np.subtract(joined, gpu_layer, out=np.zeros(joined.shape),
                             where=np.isfinite(gpu_layer))  # an unrunnable layer stays inf
    # selective recompute checkpoints the core only where the time side re-runs it
    core_recomputed = (rc == 1) & (not training.flash_attention
                                   or fw.recompute_fused_attention)
    per_layer_act = layer_activation_bytes(model, training.seq_length, b, t, sp, rc,
                                           flash_attention=training.flash_attention,
                                           dropout=training.dropout, act_bytes=ea, fp8=fp8,
                                           core_recomputed=core_recomputed,
                                           softmax_fp32_saved=fallback & fw.softmax_in_fp32)
    full_layer_act = layer_activation_bytes(model, training.seq_length, b, t, sp,
                                            np.zeros_like(rc),
                                            flash_attention=training.flash_attention,
                                            dropout=training.dropout, act_bytes=ea, fp8=fp8,
                                            softmax_fp32_saved=fallback & fw.softmax_in_fp32)
    out = locals()
    return {k: np.broadcast_to(out[k], t.shape) for k in LAYER_TERMS}


# ---------------------------------------------------------------------------------------------
def score(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, batch: ConfigBatch,
          *, efficiency: Efficiency | None = None) -> Scores:
    """Score every configuration of ``batch``; see the module docstring for the structure."""
    gpu = cluster.gpu
    eff = efficiency or efficiency_for(gpu.compute_capability)
    fw = FRAMEWORKS[training.framework]
    system = _system(cluster)

    t = batch.tp.astype(float)
    p = batch.pp.astype(float)
    d = batch.dp.astype(float)
    b = batch.micro_batch_size.astype(float)
    prec = batch.precision
    rc = batch.recompute
    # DeepSpeed's BF16_Optimizer shards its fp32 master weights and Adam moments over DP and
    # gathers the updated bf16 weights at ZeRO 0 as at 1 (it is what DeepSpeed runs for bf16
    # without the ZeRO optimizer; bf16_optimizer.py partitions by the DP group's size): a
    # ZeRO-1 for the model
    bf16_opt = uses_bf16_optimizer(fw, prec, batch.zero_stage)
    z = np.where(bf16_opt, 1, batch.zero_stage)
    sched = batch.schedule
    v = np.where(sched == INTERLEAVED, batch.virtual_stages, 1).astype(float)
    s = float(training.seq_length)
    B = float(training.global_batch_size)
    L = float(model.num_layers)
    h = float(model.hidden_size)
    m = B / (b * d)
    # layers on the first, a middle and the last stage (uneven when pp does not divide L)
    n_first, n_mid, n_last, _ = stage_layers(L, batch.pp)
    V = padded_vocab(model.vocab_size, batch.tp)

    peaks = np.array([gpu.peak_flops_per_s.get(pr, np.nan) for pr in PRECISIONS])
    peak = peaks[prec]
    bw = gpu.memory_bandwidth_bytes_per_s
    ea = ACT_BYTES[prec]

    def memop(nbytes, kernels=1.0):
        return memory_op_time_s(nbytes, mem_bandwidth_bytes_per_s=bw, eff=eff,
                                n_kernels=kernels)

    geo, layout = _geometry(cluster, batch.tp, batch.pp, batch.dp, model.tied_embeddings)
    comm = _Collectives(system, batch, layout)

    # ---- per-layer and per-micro-batch terms, once per distinct layer shape ------------------
    lk = _layer_key(batch, geo["tp_nodes"])
    _, lfirst, linv = np.unique(lk, return_index=True, return_inverse=True)
    linv = linv.reshape(-1)
    sub = batch.take(lfirst)
    terms = _layer_terms(model, training, eff, fw, gpu, _Collectives(system, sub, layout[lfirst]),
                         sub, geo["tp_nodes"][lfirst])
    (layer_f, layer_b, layer_rc, layer_tp, layer_host, emb_t, head_t, per_layer_act,
     full_layer_act, layer_accum, emb_accum, head_accum, layer_hp, emb_hp) = (
        terms[k][linv] for k in LAYER_TERMS)
    # gradient accumulation outside the GEMMs: every micro-batch but a step's first; with
    # BF16_Optimizer its fp32 update after every micro-batch instead
    later = (m - 1.0) / m
    layer_b = layer_b + np.where(bf16_opt, layer_hp, later * layer_accum)
    emb_t = emb_t + np.where(bf16_opt, emb_hp, later * emb_accum)
    # a tied output layer on the embedding's stage (pp = 1) is the same parameter: no update
    # of its own, but autograd adds its gradient to the embedding's within every backward
    tied_here = model.tied_embeddings & (batch.pp == 1)
    head_t = head_t + np.where(tied_here, head_accum,
                               np.where(bf16_opt, emb_hp, later * head_accum))
    tokens = b * s
    act = tokens * h * ea

    # ---- pipeline point-to-point per micro-batch ----------------------------------------------
    p2p_bytes = act / np.where(batch.tp > 1, t, 1.0)  # scatter/gather optimisation
    p2p_one = coll.p2p_time_s(system, p2p_bytes, geo["pp_inter"] > 0.5)
    # the receiver re-assembles the full tensor with an all-gather over the TP group
    # (Narayanan et al. 2021 4.1; DeepSpeed's partitioned pipe activations and gradients);
    # with sequence parallelism the tensor is already split along the sequence: no gather
    regroup = np.where((batch.tp > 1) & ~batch.sequence_parallel,
                       comm.time_s("allgather", act, batch.tp, geo["tp_nodes"]), 0.0)
    # per micro-batch: 2v transfers on every stage (activation out and gradient in on the
    # first, the reverse on the last); the first and last stage receive one tensor fewer
    # (2v - 1 re-gathers), a middle stage 2v
    pp_mb = np.where(batch.pp > 1, 2.0 * v * p2p_one + (2.0 * v - 1.0) * regroup, 0.0)
    pp_mb_mid = np.where(batch.pp > 1, 2.0 * v * (p2p_one + regroup), 0.0)
    # DeepSpeed frees a sent activation's full tensor and re-gathers it from its partition for
    # the backward (PipelineEngine._exec_backward_pass: part_output.full()): one more
    # re-gather per micro-batch on every stage but the last
    out_regroup = np.where(batch.pp > 1, v * regroup, 0.0) if fw.pipe_regather_output else 0.0
    pp_first = pp_mb + out_regroup

    # ---- per-stage micro-batch times ----------------------------------------------------------
    layer_total = layer_f + layer_b + layer_rc + layer_tp + layer_host
    single = batch.pp == 1
    first = n_first * layer_total + emb_t + np.where(single, head_t, pp_first)
    # a middle stage of a framework with serial blocking p2p (DeepSpeed) pays 4 transfers
    # (serial transfers add no re-gathers)
    pp_mid = (pp_mb_mid + out_regroup
              + np.where(fw.serial_p2p & (batch.pp >= 3), 2.0 * v * p2p_one, 0.0))
    middle = n_mid * layer_total + pp_mid
    last = np.where(single, first, n_last * layer_total + head_t + pp_mb)
    span, steady, bubble = pipeline_span_s(first, middle, last, batch.pp, m, sched, v)
    slowest_is_last = (last >= first) & ~single
    slowest_is_mid = (middle > np.maximum(first, last)) & (batch.pp >= 3)
    # components of the slowest stage x m (the steady part of the span)
    extra_compute = np.where(slowest_is_mid, 0.0,
                             np.where(slowest_is_last, head_t,
                                      emb_t + np.where(single, head_t, 0.0)))
    Ls = np.where(slowest_is_mid, n_mid, np.where(slowest_is_last, n_last, n_first))
    compute_mb = Ls * (layer_f + layer_b) + extra_compute
    recompute_mb = Ls * layer_rc
    tp_mb = Ls * layer_tp
    host_mb = Ls * layer_host
    pp_steady = np.where(single, 0.0, np.where(slowest_is_mid, pp_mid,
                                               np.where(slowest_is_last, pp_mb, pp_first)))
    # residual rounding (e.g. SP collectives inside emb/head) folds into compute (an
    # unrunnable configuration's infinite terms leave it NaN: its step time is inf)
    with np.errstate(invalid="ignore"):
        compute_mb = compute_mb + (steady / m - (compute_mb + recompute_mb + tp_mb + host_mb
                                                 + pp_steady))

    # ---- data parallel: gradient reduction, parameter gathers ----------------------------------
    layer_params = float(model.params_per_layer)
    emb_params = V * h
    head_params = np.where(model.tied_embeddings & (batch.pp == 1), 0.0, V * h)
    # learned positions (replicated over TP) on the first stage; the final norm on the last
    pos_params = float(model.position_params(training.seq_length))
    norm_params = float(model.hidden_size * (2 if model.normalization == "layernorm" else 1))
    psi_first = (n_first * layer_params / t + emb_params / t + pos_params
                 + np.where(single, head_params / t + norm_params, 0.0))
    psi_last = n_last * layer_params / t + head_params / t + norm_params
    has_mid = batch.pp >= 3
    psi_mid = n_mid * layer_params / t
    psi_max = np.maximum(np.maximum(psi_first, np.where(single, 0.0, psi_last)),
                         np.where(has_mid, psi_mid, 0.0))
    pb, gb, ob = PARAM_BYTES[prec], GRAD_BYTES[prec], OPTIMIZER_BYTES[prec]
    dp_n, dp_nodes = batch.dp, geo["dp_nodes"]
    # bytes per gradient on the wire (FrameworkCosts.grad_comm_bytes: DeepSpeed reduces 16-bit
    # gradients in the training dtype)
    gcomm = grad_wire_bytes(fw, prec)
    grad_bytes = psi_max * gcomm
    t_ar = comm.time_s("allreduce", grad_bytes, dp_n, dp_nodes)
    t_rs = comm.time_s("reducescatter", grad_bytes, dp_n, dp_nodes)
    t_ag = comm.time_s("allgather", psi_max * pb, dp_n, dp_nodes)
    bucket = np.minimum(grad_bytes, np.maximum(DDP_BUCKET_ELEMENTS, 1e6 * d) * gcomm)
    # gradients all-reduced: plain DP, and DeepSpeed's BF16_Optimizer at ZeRO-1
    all_reduce = (z == 0) | bf16_opt
    t_bucket = np.where(all_reduce, comm.time_s("allreduce", bucket, dp_n, dp_nodes),
                        comm.time_s("reducescatter", bucket, dp_n, dp_nodes))
    # backward of the last micro-batch on the first stage, with its recomputed forwards (the
    # gradient buckets fill over both)
    window_b = n_first * (layer_b + layer_rc)
    window_f = n_first * layer_f
    reduce_t = np.where(all_reduce, t_ar, t_rs)
    if training.overlap_grad_reduce:
        hidden = 1.0 - eff.overlap_hidden  # share of overlapped communication still paid
        exposed_reduce = (np.maximum(0.0, reduce_t - window_b) + np.minimum(t_bucket, reduce_t)
                          + hidden * np.minimum(reduce_t, window_b))
        exposed_gather = np.maximum(0.0, t_ag - window_f) + hidden * np.minimum(t_ag, window_f)
    else:
        exposed_reduce = reduce_t
        exposed_gather = t_ag
    # ZeRO-3: parameters gathered for forward and backward of every micro-batch, gradients
    # reduce-scattered per micro-batch, prefetched one layer ahead (FSDP / DeepSpeed stage 3).
    z3_mb = 2.0 * t_ag + t_rs
    z3_window = compute_mb + recompute_mb
    z3_exposed = (m * (np.maximum(0.0, z3_mb - z3_window)
                       + (1.0 - eff.overlap_hidden) * np.minimum(z3_mb, z3_window))
                  + t_ag / np.maximum(n_first, 1))
    # ZeRO-2: gradients are sharded, so they are reduce-scattered every micro-batch (DeepSpeed
    # stage 2, Megatron-FSDP optim_grads), overlapped with that micro-batch's backward;
    # PyTorch FSDP's SHARD_GRAD_OP also reshards the parameters after each backward and
    # gathers them again for the next micro-batch's forward (FrameworkCosts.zero2_regather)
    z2_window = n_first * (layer_b + layer_rc)
    z2_gathers = np.where(fw.zero2_regather, m, 1.0)
    z2_exposed = (m * (np.maximum(0.0, t_rs - z2_window)
                       + (1.0 - eff.overlap_hidden) * np.minimum(t_rs, z2_window))
                  + z2_gathers * exposed_gather)
    dp_exposed = np.where(z >= 3, z3_exposed,
                          np.where(z == 2, z2_exposed,
                                   np.where(z == 1, exposed_reduce + exposed_gather,
                                            exposed_reduce)))
    dp_exposed = np.where(batch.dp > 1, dp_exposed, 0.0)
    dp_total = np.where(batch.dp > 1,
                        np.where(z >= 3, m * z3_mb,
                                 np.where(z == 2, m * t_rs + z2_gathers * t_ag,
                                          np.where(z == 1, reduce_t + t_ag, t_ar))), 0.0)

    # tied embeddings: the word-embedding gradient is all-reduced between first and last stage
    tied_sync = np.zeros_like(t)
    if model.tied_embeddings:
        tied_sync = np.where(batch.pp > 1,
                             comm.time_s("allreduce", V * h / t * gcomm, 2,
                                         np.where(geo["pp_inter"] > 0.5, 2, 1)), 0.0)

    # ---- optimizer step (memory bound on the local shard) --------------------------------------
    psi_opt = psi_max / np.where(z >= 1, d, 1.0)
    t_opt = memop(psi_opt * OPTIMIZER_STEP_BYTES[prec], 8.0)

    step = span + dp_exposed + tied_sync + t_opt + eff.step_overhead_s

    # ---- memory per stage ----------------------------------------------------------------------
    transient = np.where(rc == 2, full_layer_act, 0.0)  # one layer live while recomputed
    infl_first = microbatches_in_flight(sched, batch.pp, m, v, 0)
    infl_last = microbatches_in_flight(sched, batch.pp, m, v, batch.pp - 1)
    act_first = n_first * per_layer_act * infl_first + transient
    act_last = n_last * per_layer_act * infl_last + transient
    # the second stage: a full middle stage with one micro-batch fewer in flight than the
    # first; it holds the most when the first stage has fewer layers (uneven split)
    infl_mid = microbatches_in_flight(sched, batch.pp, m, v, np.minimum(1, batch.pp - 1))
    act_mid = n_mid * per_layer_act * infl_mid + transient
    # the loss's buffers on the last stage (FrameworkCosts.logits_saved_bytes: what a
    # micro-batch keeps from its forward to its backward, Korthikanti 4.3's fp32 logits in
    # Megatron; plus what the running loss allocates on top), kept for every micro-batch in
    # flight on the last stage: one in 1F1B, m in GPipe (all forwards before any backward)
    infl_loss = np.where((sched == GPIPE) & ~single, m, 1.0)
    # DeepSpeed's PipelineEngine also keeps the last stage's output, the 16-bit logits, in its
    # output buffer until the micro-batch's backward (pipe_buffers["outputs"])
    saved = fw.logits_saved_bytes + np.where(fw.pipe_buffers & ~single, 2.0, 0.0)
    logits = (saved * infl_loss + fw.logits_transient_bytes) * tokens * V / t
    if fw.pipe_buffers:  # two activations per in-flight micro-batch (calibrated, see the field)
        act_first = act_first + np.where(single, 0.0, 2.0 * tokens * h * ea * infl_first)
        act_last = act_last + np.where(single, 0.0, 2.0 * tokens * h * ea * infl_last)
        act_mid = act_mid + 2.0 * tokens * h * ea * infl_mid
    gm, g_part = _gradient_bytes(fw, prec, pb, gb, z, d, bf16_opt)
    # PyTorch FSDP FULL_SHARD keeps no 16-bit shard: the fp32 flat-parameter shard (the
    # master, counted with the optimizer states) is cast to 16 bits when a unit is gathered
    pw = np.where(fw.fp32_flat_shard & (z >= 3) & (pb < 4.0), 0.0, pb)
    w1, g1, o1 = model_state_bytes(psi_first, pw, gm, ob, z, d)
    w2, g2, o2 = model_state_bytes(psi_last, pw, gm, ob, z, d)
    w3, g3, o3 = model_state_bytes(psi_mid, pw, gm, ob, z, d)
    # Transformer Engine's fp8 copies of each layer's linear weights, and their transposes
    # for the backward on Hopper, cached across the step's micro-batches where the framework
    # passes is_first_microbatch (Megatron-Core): FP8_WEIGHT_CACHE_BYTES per local layer
    # parameter beside the 16-bit weights (--fp8-param-gather, which keeps no 16-bit copy,
    # is not modelled)
    cache = np.where((prec == PRECISIONS.index("fp8")) & fw.fp8_weight_cache & (z < 3),
                     FP8_WEIGHT_CACHE_BYTES * layer_params / t, 0.0)
    w1, w2, w3 = w1 + n_first * cache, w2 + n_last * cache, w3 + n_mid * cache
    # the fp32 copy of the (local partition of the) 16-bit gradients, or BF16_Optimizer's
    # bf16 cast of its fp32 gradients for the all-reduce, exists only after the backward has
    # freed the activations (below)
    c1, c2, c3 = (psi_first * _reduce_copy_bytes(bf16_opt, gcomm, g_part, psi_first),
                  psi_last * _reduce_copy_bytes(bf16_opt, gcomm, g_part, psi_last),
                  psi_mid * _reduce_copy_bytes(bf16_opt, gcomm, g_part, psi_mid))
    zbuf = np.where(z >= 3, 2.0 * layer_params / t * pb, 0.0)
    # What the caching allocator reserves on each stage. Of what is allocated and freed
    # within a step (activations, logits, engine buckets and, where autograd allocates them
    # every step, the gradients in the weights' dtype) a share ``allocator_fraction`` of the
    # reserve stays free but fragmented at the peak, and nvidia-smi counts it; buffers
    # allocated once at start-up (weights, contiguous gradient buffers, optimizer states) do
    # not fragment. NCCL allocates its own buffers.
    # BF16_Optimizer reduces its fp32 gradients through the cast counted in c, not a bucket
    engine = (np.where(bf16_opt, 0.0, fw.reduce_bucket_bytes) + fw.gather_bucket_bytes + zbuf)
    step_grad = np.where(fw.autograd_grads, pb, 0.0) / np.where(z >= 2, d, 1.0)
    keep = eff.allocator_fraction / (1.0 - eff.allocator_fraction)
    logits_first = np.where(single, logits, 0.0)
    # Two phases per stage. The backward's peak holds the activations (and logits) with their
    # share of fragmented reserve; the optimizer step holds the fp32 gradient copy (c) once
    # they are freed, with only the engine's and autograd's gradients' reserve left.
    kept_first = (engine + step_grad * psi_first) * keep
    kept_last = (engine + step_grad * psi_last) * keep
    kept_mid = (engine + step_grad * psi_mid) * keep
    res_first = (act_first + logits_first) * keep + kept_first
    res_last = (act_last + logits) * keep + kept_last
    res_mid = act_mid * keep + kept_mid
    state_first, state_last, state_mid = w1 + g1 + o1, w2 + g2 + o2, w3 + g3 + o3
    bwd_first = state_first + act_first + logits_first + res_first
    bwd_last = state_last + act_last + logits + res_last
    bwd_mid = state_mid + act_mid + res_mid
    opt_first, opt_last, opt_mid = (state_first + c1 + kept_first, state_last + c2 + kept_last,
                                    state_mid + c3 + kept_mid)
    mem_first = np.maximum(bwd_first, opt_first)
    mem_last = np.maximum(bwd_last, opt_last)
    mem_mid = np.maximum(bwd_mid, opt_mid)
    # a middle stage only where it holds strictly more than the first and the last
    use_mid = has_mid & (mem_mid > np.maximum(mem_first, mem_last))
    use_last = ~single & ~use_mid & (mem_last > mem_first)

    def pick(x1, x2, x3):
        return np.where(use_mid, x3, np.where(use_last, x2, x1))

    fixed = engine + geo["nccl_buffers"] + eff.cuda_context_bytes
    peak_mem = pick(mem_first, mem_last, mem_mid) + fixed
    in_step = pick(opt_first > bwd_first, opt_last > bwd_last, opt_mid > bwd_mid)
    in_bwd = ~in_step
    # What nvidia-smi's maximum shows: PyTorch's caching allocator keeps the backward's freed
    # blocks reserved and takes new ones for the step's copy, so the two add up there (the
    # allocator would release the cached blocks rather than fail: it is not what must fit).
    # Where the sum exceeds the GPU's memory it does so (a failed cudaMalloc frees the cached
    # blocks and retries, CUDACachingAllocator release_cached_blocks): nvidia-smi then reads
    # the whole GPU at most.
    observed = np.maximum(np.maximum(bwd_first + c1, np.where(single, 0.0, bwd_last + c2)),
                          np.where(has_mid, bwd_mid + c3, 0.0)) + fixed
    observed = np.minimum(observed, np.maximum(peak_mem, gpu.memory_bytes))
    memory = {
        "weights": pick(w1, w2, w3),
        "gradients": pick(g1, g2, g3) + np.where(in_step, pick(c1, c2, c3), 0.0),
        "optimizer_states": pick(o1, o2, o3),
        "activations": np.where(in_bwd, pick(act_first, act_last, act_mid), 0.0),
        "logits": np.where(in_bwd, pick(logits_first, logits, 0.0), 0.0),
        "communication_buffers": geo["nccl_buffers"] + engine,
        "cuda_context": np.full_like(t, eff.cuda_context_bytes),
        "allocator_reserve": np.where(in_bwd, pick(res_first, res_last, res_mid),
                                      pick(kept_first, kept_last, kept_mid)),
    }

    # ---- results -------------------------------------------------------------------------------
    times = {
        "compute": m * compute_mb,
        "recompute": m * recompute_mb,
        "tp_comm": m * tp_mb,
        "host_overhead": m * host_mb,
        "pp_comm": m * pp_steady,
        "pipeline_bubble": bubble,
        "dp_comm_exposed": dp_exposed,
        "embedding_sync": tied_sync,
        "optimizer": t_opt,
        "overhead": np.full_like(t, eff.step_overhead_s),
    }
    n_gpus = t * p * d
    flops = model_flops_per_step(model, training.seq_length, training.global_batch_size)
    # the mean over stages of the true work: L layers (not p x ceil(L/p)), embedding, LM head
    stage_mean = np.where(single, first, (L * layer_total + emb_t + head_t
                                          + pp_first + pp_mb
                                          + np.maximum(p - 2, 0) * np.where(p > 2, pp_mid, 0.0))
                          / p)
    slow = np.where(single, first, np.maximum(np.maximum(first, last),
                                              np.where(batch.pp >= 3, middle, 0.0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        step = np.where(np.isfinite(step), step, np.inf)
        return Scores(
            step_time_s=step,
            tokens_per_s=B * s / step,
            samples_per_s=B / step,
            mfu=flops / (step * n_gpus * peak),
            peak_memory_bytes=peak_mem,
            observed_memory_bytes=observed,
            time_breakdown_s=times,
            memory_breakdown_bytes=memory,
            microbatches=m,
            bubble_share=bubble / step,
            stage_imbalance=slow / stage_mean,
            tp_crosses_nodes=geo["tp_nodes"] > 1,
            dp_comm_total_s=dp_total,
        )
