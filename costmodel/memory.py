"""Memory per GPU: model states by precision and ZeRO stage, activations, buffers.

Sources:
- Model states: Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054) section 3.1/5: mixed-precision
  Adam holds 2 + 2 + K bytes per parameter (K = 12), and stages 1/2/3 shard optimizer
  states / gradients / parameters over the d data-parallel ranks. Megatron-LM keeps fp32 main
  gradients for bf16, 2 + 4 + 12 = 18 bytes; fp16 keeps fp16 main gradients and the step
  copies them to fp32, 2 + 2 + 4 + 12 = 20 (README "Distributed Optimizer"; cost-model.md 4.2).
- Activations per layer: Korthikanti et al. 2022 (arXiv:2205.05198) eq. 1 and Table 2,
  extended to GQA, gated MLPs, fused attention and no dropout (cost-model.md 3.2).
- Micro-batches in flight: GPipe m; 1F1B min(p - i, m) on stage i; interleaved: Megatron's
  warm-up count, (2(p - i - 1) + (v - 1)p + 1) model chunks on stage i, which is
  p(1 + (p - 1)/(p v)) stages' worth on the first (Korthikanti et al. 4.2.3).
"""

from __future__ import annotations

import numpy as np

from costmodel.specs import ModelSpec

# Bytes per parameter (param, grad, optimizer) by precision code (PRECISIONS order).
# Mixed precision: 16-bit params, fp32 main grads, fp32 master + Adam m, v (frameworks that
# keep 16-bit gradients say so in FrameworkCosts: stage_memory.gradient_bytes). fp32/tf32: fp32
# params and grads, Adam m and v (no master copy).
PARAM_BYTES = np.array([4.0, 4.0, 2.0, 2.0, 2.0])
GRAD_BYTES = np.array([4.0, 4.0, 4.0, 4.0, 4.0])
OPTIMIZER_BYTES = np.array([8.0, 8.0, 12.0, 12.0, 12.0])


def model_state_bytes(params, param_bytes, grad_bytes, optimizer_bytes, zero_stage, dp):
    """Bytes per GPU of parameters, gradients and optimizer states for ``params`` parameters
    held by the rank before ZeRO sharding (ZeRO paper Fig. 1 / section 5.1).

    Returns (weights, gradients, optimizer) arrays.
    stage 0: P + G + K; 1: P + G + K/d; 2: P + (G + K)/d; 3: (P + G + K)/d.
    """
    z = np.asarray(zero_stage)
    d = np.asarray(dp, dtype=float)
    params = np.asarray(params, dtype=float)
    w = params * param_bytes / np.where(z >= 3, d, 1.0)
    g = params * grad_bytes / np.where(z >= 2, d, 1.0)
    o = params * optimizer_bytes / np.where(z >= 1, d, 1.0)
    return w, g, o


def layer_activation_bytes(model: ModelSpec, seq_length: int, micro_batch, tp, sp, recompute,
                           *, flash_attention: bool, dropout: bool, act_bytes=2.0, fp8=False,
                           core_recomputed=None, softmax_fp32_saved=False,
                           op_sac=False) -> np.ndarray:
    """Activation bytes one layer stores for one micro-batch on one TP rank.

    Korthikanti et al. eq. 1 with 16-bit activations: outside the TP regions 10*sbh (layer-norm
    inputs 4sbh, QKV and MLP inputs 2sbh each, two dropout masks sbh each), split by t only
    with sequence parallelism; inside: Q, K, V 2sb(a+2g)d_h, attention core 5as^2b (2as^2b
    without dropout; 0 with fused attention or selective recompute), output-projection input
    2sbh, MLP 4sbf (plain) or 6sbf (gated), all split by t. Full recompute keeps only the layer
    input 2sbh (split by t with SP).

    ``fp8`` (Transformer Engine linears): each linear keeps its input for the weight gradient
    as the fp8 (transposed) cast, 1 byte instead of 2 (TE _Linear / _LayerNormLinear
    save_for_backward: inputmat_t, ln_out): the QKV and MLP inputs and the FC2 input. The
    out-projection's input is also the fused attention's output, which the attention core
    keeps in 16 bits for its own backward, so there the fp8 copy comes on top (1 + 2 bytes;
    1 where the core is unfused or recomputed). Norm and activation-function inputs stay in
    16 bits.

    ``core_recomputed``: whether selective recompute really checkpoints the attention core
    (default: wherever ``recompute`` is selective; legacy Megatron checkpoints only an
    unfused core, see ``FrameworkCosts.kernels.recompute_fused_attention``).

    ``softmax_fp32_saved``: the unfused softmax runs Megatron's PyTorch fallback in fp32
    (``layers.softmax_falls_back``), whose softmax keeps its fp32 output for the backward in
    place of the fused kernel's 16-bit one: 4 bytes more per score without dropout (the
    batched GEMM after it still keeps the 16-bit copy), 2 with dropout (which keeps only its
    mask and output, not the 16-bit copy).

    ``op_sac``: selective recompute is torchtitan's op-level selective activation
    checkpointing (:func:`op_sac_activation_bytes`) instead of Megatron's core-attention one.
    """
    b = np.asarray(micro_batch, dtype=float)
    t = np.asarray(tp, dtype=float)
    sp = np.asarray(sp, dtype=bool)
    rc = np.asarray(recompute)
    s = float(seq_length)
    h, d, a, g, f = (model.hidden_size, model.head_dim, model.num_attention_heads,
                     model.num_kv_heads, model.ffn_hidden_size)
    e = np.asarray(act_bytes, dtype=float) / 2.0  # formulas below count 16-bit elements
    f8 = np.asarray(fp8, dtype=bool)
    q = np.where(f8, 0.5, 1.0)  # a linear's saved input: fp8 or 16-bit
    sbh = s * b * h
    # layer-norm inputs 4sbh, QKV and MLP inputs 2sbh each, dropout masks
    outside = sbh * (4.0 + 4.0 * q + (2.0 if dropout else 0.0))
    qkv = 2.0 * s * b * (a + 2 * g) * d
    recomputed = (rc == 1) if core_recomputed is None else np.asarray(core_recomputed, bool)
    core_keeps_output = flash_attention & ~recomputed
    out_proj_in = 2.0 * s * b * a * d * np.where(f8, np.where(core_keeps_output, 1.5, 0.5), 1.0)
    # activation-function input (16-bit; gated: both halves) + FC2 input
    mlp = ((4.0 if model.gated_mlp else 2.0) + 2.0 * q) * s * b * f
    if flash_attention:
        # output is the out-proj input; softmax statistics: fp32 per row and head
        core = 4.0 * a * s * b * np.ones_like(b)
    else:
        core = ((5.0 if dropout else 2.0) * a * s * s * b * np.ones_like(b)
                + np.where(softmax_fp32_saved, (2.0 if dropout else 4.0) * a * s * s * b / e,
                           0.0))
    core = np.where(recomputed, 0.0, core)
    inside = qkv + out_proj_in + mlp + core
    per_layer = outside / np.where(sp, t, 1.0) + inside / t
    full = 2.0 * sbh / np.where(sp, t, 1.0)
    if np.any(op_sac):
        sac = op_sac_activation_bytes(model, s, b, t, sp)  # 16-bit bytes, as above
        per_layer = np.where(np.asarray(op_sac, bool) & (rc == 1), sac, per_layer)
    return e * np.where(rc == 2, full, per_layer)


def op_sac_activation_bytes(model: ModelSpec, seq_length: float, micro_batch, tp, sp
                            ) -> np.ndarray:
    """Bytes one layer keeps for one micro-batch on one TP rank under torchtitan's op-level
    selective activation checkpointing (16-bit activations).

    torchtitan 0.3.0 ``SelectiveAC`` (distributed/activation_checkpoint.py; the same policy
    as the 2024 ``_apply_ac_to_transformer_block`` with ``selective_ac_option = "op"``) wraps
    each block in a non-reentrant checkpoint whose policy MUST_SAVEs the outputs of the
    compute-intensive ops (``aten.mm``, the SDPA kernels, ``_c10d_functional.reduce_scatter``
    and ``aten.max``) except every second ``mm`` of the block (a counter per block forward:
    odd counts saved, even ones recomputed); everything else is recomputed in the backward.
    The block's matmuls run wq, wk, wv, wo, w1, w3, w2 (torchtitan's FeedForward:
    ``w2(silu(w1(x)) * w3(x))``), so the saved ones are wq, wv, w1 and w2. What stays:

    - the block's input (the checkpoint's input), s b h / t with SP, s b h without;
    - wq's output s b a d / t and wv's s b g d / t (column-parallel: heads split by t);
    - the flash SDPA's output s b a d / t and its fp32 logsumexp (4 bytes per row and head);
    - w1's output s b f / t;
    - w2's output: the row-parallel matmul's local partial sum, s b h per rank before the
      reduction (all of it at t = 1); with SP the reduce-scatter's output s b h / t is saved
      as well.
    """
    b = np.asarray(micro_batch, dtype=float)
    t = np.asarray(tp, dtype=float)
    sp = np.asarray(sp, dtype=bool)
    h, d, a, g, f = (model.hidden_size, model.head_dim, model.num_attention_heads,
                     model.num_kv_heads, model.ffn_hidden_size)
    tokens = float(seq_length) * b
    sixteen = 2.0 * tokens
    block_in = sixteen * h / np.where(sp, t, 1.0)
    column = sixteen * (a * d + g * d + a * d + f) / t  # wq, wv, SDPA output, w1
    lse = 4.0 * tokens * a / t
    w2 = sixteen * h * (1.0 + np.where(sp & (t > 1), 1.0 / t, 0.0))
    return block_in + column + lse + w2


def microbatches_in_flight(schedule, pp, m, virtual_stages, stage_index=0) -> np.ndarray:
    """How many micro-batches' activations stage ``stage_index`` keeps at its peak, in units
    of the stage's full set of layers.

    GPipe: m (1 when p = 1). 1F1B: min(p - i, m). Interleaved with v model chunks per stage: Megatron's
    schedule runs 2(p - i - 1) + (v - 1)p warm-up chunk forwards on stage i before its first
    backward and keeps one more in the steady state, each chunk 1/v of the stage, capped at
    the m v chunks of a step (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving). On the first stage that is
    p (1 + (p - 1)/(p v)) (Korthikanti et al. 4.2.3); the last keeps ((v - 1)p + 1)/v, not 1.
    """
    sched = np.asarray(schedule)
    p = np.asarray(pp, dtype=float)
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    i = np.asarray(stage_index, dtype=float)
    one_f = np.minimum(p - i, m)
    chunks = 2.0 * (p - i - 1.0) + (v - 1.0) * p + 1.0
    inter = np.minimum(chunks, m * v) / v
    # without a pipeline (p = 1) every schedule is plain gradient accumulation: one at a time
    # ZB-V: 1F1B's first-stage peak, p, on every rank (the V puts the first and the last
    # stage on rank 0); DualPipeV: PP + 1 chunk micro-batches, p + 1/2 of a rank's layers
    # (costmodel.schedule; DeepSeek-V3 Table 2)
    v_shaped = np.minimum(np.where(sched == 5, p + 0.5, p), m)
    return np.where((sched == 0) & (p > 1), m,
                    np.where(sched == 2, inter, np.where(sched >= 4, v_shaped, one_f)))
