"""Compute: FLOPs of every op of a transformer layer and their roofline time on one GPU.

All functions are vectorised: array arguments broadcast against each other.

Sources:
- GEMM FLOPs 2*M*N*K and the per-layer FLOP counts: Narayanan et al. 2021 (arXiv:2104.04473),
  Appendix; generalised to GQA and gated MLPs as in Megatron-LM's
  ``num_floating_point_operations`` (cost-model.md section 2.1).
- Model FLOPs per iteration: Korthikanti et al. 2022 (arXiv:2205.05198) eq. 7 (no recompute);
  hardware FLOPs add the recomputed forward (Narayanan et al. eq. 3 for full recompute).
- Roofline time max(F / (eta_c * peak), Q / (eta_m * B_mem)): Williams et al. 2009 (CACM 52(4)).
- Tile and wave quantisation of GEMM tiles over the SMs: NVIDIA "Matrix Multiplication
  Background User's Guide" (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-
  multiplication/), whose A100 example runs 256x128 thread-block tiles, one per SM, so that a
  wave is 108 tiles; cuBLAS chooses the tile per shape from several (its heuristics), which
  the model takes as the best of 256x128, 128x256 and a less efficient 128x128.
- Tensor Core alignment: the same guide (section "Tensor Core Requirements") - cuBLAS reaches
  full Tensor Core speed only when M, N and K are multiples of 16 bytes (8 fp16/bf16
  elements); other sizes run slower kernels. In attention this is the head dimension: e.g.
  hidden 13824 with 128 heads gives 108 (216 bytes), hidden 14400 with 96 heads gives 150.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.calibration import Efficiency
from costmodel.specs import ModelSpec

# Bytes per element of the GEMM inputs per precision code (PRECISIONS order:
# fp32, tf32, fp16, bf16, fp8). fp8 GEMMs read 1-byte operands; activations stay 16-bit.
GEMM_BYTES = np.array([4.0, 4.0, 2.0, 2.0, 1.0])
ACT_BYTES = np.array([4.0, 4.0, 2.0, 2.0, 2.0])

# Thread-block tiles (rows of the output over the tokens, columns over the features) the
# model lets cuBLAS choose from, with the fraction of the large tiles' throughput each reaches
# (None: ``Efficiency.gemm_small_tile``). One block per SM per wave.
GEMM_TILES: tuple[tuple[int, int, float | None], ...] = (
    (256, 128, 1.0), (128, 256, 1.0), (128, 128, None))


def padded_vocab(vocab_size: int, tp: np.ndarray, multiple: int = 128) -> np.ndarray:
    """Megatron pads the vocabulary to a multiple of ``multiple * tp`` (vocab_utils.py)."""
    unit = multiple * np.asarray(tp)
    return np.ceil(vocab_size / unit) * unit


def aligned_16_bytes(dim, elem_bytes) -> np.ndarray:
    """True where a GEMM dimension of ``dim`` elements is a multiple of 16 bytes."""
    nbytes = np.rint(np.asarray(dim, dtype=float) * np.asarray(elem_bytes, dtype=float))
    return np.mod(nbytes, 16.0) == 0.0


def tile_efficiency(m, n, *, sm_count: int, small_tile: float) -> np.ndarray:
    """Fraction of the SMs' tile throughput an (m x n) GEMM output keeps, best tile chosen.

    A tile of ``tm x tn`` costs a full tile even where the matrix ends inside it (tile
    quantisation), and the tiles run in waves of ``sm_count`` (wave quantisation; NVIDIA GEMM
    guide): with ``w = ceil(tiles / sm_count)`` waves the efficiency is
    ``m n / (w sm_count tm tn)``, times the tile's own efficiency (``small_tile`` for 128x128,
    which loads more operand bytes per FLOP than 256x128). cuBLAS's heuristics pick the kernel
    per shape; the model takes the best of the candidates in ``GEMM_TILES``.
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    best = np.zeros(np.broadcast(m, n).shape)
    for tm, tn, own in GEMM_TILES:
        tiles = np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(tiles / sm_count)
        e = (small_tile if own is None else own) * m * n / (waves * sm_count * tm * tn)
        best = np.maximum(best, e)
    return best


def gemm_time_s(m, n, k, *, peak_flops_per_s, mem_bandwidth_bytes_per_s, elem_bytes,
                eff: Efficiency, sm_count: int, tensor_cores=True) -> np.ndarray:
    """Roofline time of one (m x k) @ (k x n) GEMM, with tile/wave quantisation and launch cost.

    time = max(2mnk / (eta_gemm * peak * tile_eff * k_eff * align), bytes / (eta_mem * B_mem))
    + overhead: ``tile_eff`` from :func:`tile_efficiency`, ``k_eff = k / (k + k_half)``,
    align = ``eff.gemm_misaligned`` when N or K is not a multiple of 16 bytes (the dimensions
    the Tensor Core kernels load along; M, the token count, is always aligned here), else 1.
    ``tensor_cores`` False (fp32 on CUDA cores, whose peak the caller passes) skips the
    alignment factor: it describes leaving the Tensor Core fast path.
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    flops = 2.0 * m * n * k
    tile_eff = tile_efficiency(m, n, sm_count=sm_count, small_tile=eff.gemm_small_tile)
    # Small GEMMs lose efficiency beyond quantisation (pipeline fill, fewer K iterations):
    # a saturating factor k / (k + k_half) on the reduction dimension.
    k_eff = k / (k + eff.gemm_k_half)
    aligned = aligned_16_bytes(n, elem_bytes) & aligned_16_bytes(k, elem_bytes)
    align = np.where(aligned | ~np.asarray(tensor_cores, dtype=bool), 1.0, eff.gemm_misaligned)
    t_compute = flops / (eff.gemm * peak_flops_per_s * tile_eff * k_eff * align)
    q = elem_bytes * (m * k + k * n) + 2.0 * m * n
    t_memory = q / (eff.memory * mem_bandwidth_bytes_per_s)
    return np.maximum(t_compute, t_memory) + eff.kernel_overhead_s


def fused_softmax_available(attn_batches, seq_length: int, *, causal: bool) -> np.ndarray:
    """Whether Megatron's fused scale-mask-softmax CUDA kernel runs for these shapes.

    ``attn_batches`` = micro-batch x attention heads per TP rank. Megatron-LM's
    ``FusedScaleMaskSoftmax.is_kernel_available`` (megatron/model/fused_softmax.py, and the
    same test in Megatron-DeepSpeed and Megatron-Core) takes the kernel only when
    16 < s <= 16384, s is a multiple of 4, the attention batches are a multiple of 4 and, for a
    causal mask, a multiple of the kernel's batches per block (``get_batch_per_block``: a block
    of 128 threads, one warp of min(32, next power of two of s) threads per row and two rows
    per warp when that power is <= 128); a padding mask needs s to be that multiple instead.
    Otherwise it falls back to PyTorch (``forward_torch_softmax``). The upper bound on s is
    the current one; older kernels (Megatron 2021-22) stopped at 2048 or 4096, which is not
    modelled."""
    ab = np.asarray(attn_batches, dtype=float)
    s = int(seq_length)
    ok = (16 < s <= 16384) and s % 4 == 0
    if not ok:
        return np.zeros(ab.shape, dtype=bool)
    pow2 = 1 << (s - 1).bit_length()
    warp = min(pow2, 32)
    per_block = (128 // warp) * (2 if pow2 <= 128 else 1)
    avail = np.mod(ab, 4.0) == 0
    if causal:
        avail &= np.mod(ab, float(per_block)) == 0
    else:
        avail &= s % per_block == 0
    return avail


def soft_max(a, b, p: float) -> np.ndarray:
    """``(a^p + b^p)^(1/p)``: the larger of two overlapped times, plus what the overlap loses
    near the crossover; ``p = inf`` is the plain maximum. Written as ``hi (1 + (lo/hi)^p)^(1/p)``
    so that it neither overflows nor turns an infinite (unrunnable) time into NaN."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    hi = np.maximum(a, b)
    if not np.isfinite(p):
        return hi
    lo = np.minimum(a, b)
    ratio = np.divide(lo, hi, out=np.zeros(np.broadcast(lo, hi).shape),
                      where=(hi > 0) & np.isfinite(hi))
    return hi * (1.0 + ratio ** p) ** (1.0 / p)


def memory_op_time_s(bytes_moved, *, mem_bandwidth_bytes_per_s, eff: Efficiency,
                     n_kernels: float = 1.0) -> np.ndarray:
    """A memory-bound op (norm, activation, residual, softmax, optimizer): bytes / B_mem."""
    return (np.asarray(bytes_moved, dtype=float) / (eff.memory * mem_bandwidth_bytes_per_s)
            + n_kernels * eff.kernel_overhead_s)


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs of one transformer layer for one micro-batch on one TP rank."""

    gemm_flops: np.ndarray  # QKV + output projection + MLP
    attention_flops: np.ndarray  # QK^T and attention over V (full square, paper convention)

    @property
    def total(self) -> np.ndarray:
        return self.gemm_flops + self.attention_flops


def layer_forward_flops(model: ModelSpec, seq_length: int, micro_batch, tp) -> LayerFlops:
    """2*b*s*(2*h*d_h*(a+g) + c*h*f)/t GEMM + 4*b*s^2*a*d_h/t attention (forward)."""
    b = np.asarray(micro_batch, dtype=float)
    t = np.asarray(tp, dtype=float)
    s = float(seq_length)
    h, d, a, g, f = (model.hidden_size, model.head_dim, model.num_attention_heads,
                     model.num_kv_heads, model.ffn_hidden_size)
    c = 3.0 if model.gated_mlp else 2.0
    if getattr(model, "moe", None) is not None or getattr(model, "mla", None) is not None:
        return _moe_mla_layer_flops(model, s, b, t)
    gemm = 2.0 * b * s * (2.0 * h * d * (a + g) + c * h * f) / t
    attn = 4.0 * b * s * s * a * d / t
    return LayerFlops(gemm, attn)


def active_layer_gemm_params(model) -> float:
    """GEMM parameters a token meets per layer, averaged over the layers (MFU on active
    parameters: routed experts count k of E; the router counts)."""
    m = model.moe
    h = model.hidden_size
    attn = model.attention_params
    g = 3 if model.gated_mlp else 2
    dense = model.dense_layers * (attn + g * h * model.ffn_hidden_size)
    moe = model.moe_layers * (attn + g * h * (m.top_k * m.expert_ffn_hidden_size
                                               + m.shared_ffn_hidden_size)
                              + h * m.num_experts)
    return (dense + moe) / model.num_layers


def _moe_mla_layer_flops(model: ModelSpec, s: float, b, t) -> LayerFlops:
    """A MoE and/or MLA model's layer, averaged over its layers: 2 FLOPs per token per GEMM
    parameter it meets (routed experts k of E, shared experts, router; MLA's projections)
    and the attention core 2 s^2 a (d_qk + d_v) (MLM training.py; d_qk = d_v = d_h: the
    dense 4 s^2 a d_h)."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.moe is not None:
        params = active_layer_gemm_params(model)
    else:
        params = model.attention_params + (3 if model.gated_mlp else 2) * h * \
            model.ffn_hidden_size
    if model.mla is not None:
        dqk, dv = model.mla.qk_head_dim, model.mla.v_head_dim
    else:
        dqk = dv = model.head_dim
    gemm = 2.0 * b * s * params / t
    attn = 2.0 * b * s * s * a * (dqk + dv) / t
    return LayerFlops(gemm, attn)


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch_size: int
                         ) -> float:
    """Model FLOPs of one optimizer step, Korthikanti et al. eq. 7 generalised (GQA, gated).

    3 x (forward GEMMs + attention + LM head), no recomputation, unpadded vocabulary, full
    s^2 attention (the papers' convention, used for MFU).
    """
    lf = layer_forward_flops(model, seq_length, 1, 1)
    per_sample = (model.num_layers * float(lf.total)
                  + 2.0 * seq_length * model.hidden_size * model.vocab_size)
    return 3.0 * per_sample * global_batch_size


def recompute_flops_per_step(model: ModelSpec, seq_length: int, global_batch_size: int,
                             recompute: np.ndarray, flash_attention: bool) -> np.ndarray:
    """Extra forward FLOPs executed by recomputation (hardware FLOPs - model FLOPs).

    full: one more forward of every layer (Narayanan et al. eq. 3); selective: the attention
    core only (Korthikanti et al. section 5), already recomputed by fused attention.
    """
    lf = layer_forward_flops(model, seq_length, 1, 1)
    full = model.num_layers * float(lf.total) * global_batch_size
    sel = 0.0 if flash_attention else model.num_layers * float(lf.attention_flops) * global_batch_size
    recompute = np.asarray(recompute)
    return np.where(recompute == 2, full, np.where(recompute == 1, sel, 0.0))
