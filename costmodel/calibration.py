"""Achieved-efficiency parameters of the cost model (the few numbers that are fitted).

The peaks themselves live in the hardware catalog; this module holds what fraction of them
real kernels reach, per GPU architecture, and the fixed per-kernel and per-step overheads.
Each value says where it comes from. ``benchmarks/validate.py`` reports the model's error on
the published runs of ``../shared/validation`` with these values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak and fixed costs for one GPU architecture."""

    gemm: float  # large-GEMM fraction of the dense Tensor-Core peak
    gemm_k_half: float  # reduction length at which a GEMM reaches half of ``gemm``
    memory: float  # fraction of HBM bandwidth reached by streaming kernels
    attention: float  # fused (flash) attention fraction of the 16-bit peak, forward
    kernel_overhead_s: float  # launch + tail per kernel
    step_overhead_s: float  # per optimizer step: data loader, logging, grad-norm, sync
    cuda_context_bytes: float  # CUDA context, cuBLAS/NCCL workspaces, per GPU
    allocator_fraction: float  # share of the allocator's reserve for step-time tensors left
    # free but fragmented at the peak (fixed segments: PyTorch's default caching allocator)
    fp8_gemm_scale: float = 0.85  # fp8 GEMMs: this x ``gemm`` of the fp8 peak
    overlap_hidden: float = 0.6  # share of overlapped communication that overlap hides
    gemm_misaligned: float = 1.0  # GEMM efficiency factor when N or K is not 16-byte aligned
    gemm_small_tile: float = 0.85  # a 128x128-tile GEMM kernel's throughput / 256x128's
    # fused attention's backward kernel, fraction of the 16-bit peak on its 2.5x the forward's
    # FLOPs (None: as ``attention``); set per kernel generation by :func:`efficiency_for`
    attention_bwd: float | None = None
    # NVFP4 GEMMs (Blackwell): this x ``gemm`` of the FP4 peak (FP4_DENSE_PEAK_FLOPS_PER_S)
    nvfp4_gemm_scale: float = 0.85
    # MXFP8 GEMMs (Blackwell): this x the per-tensor fp8 GEMMs' rate (block-scaled MMA with
    # E8M0 scales per 32 elements of K on both operands; see _BLACKWELL)
    mxfp8_gemm_scale: float = 1.0
    # share of a TP collective that Transformer Engine's userbuffers overlap
    # (--tp-comm-overlap) hides behind its own GEMM (None: ``overlap_hidden``); see _HOPPER
    tp_overlap_hidden: float | None = None
    # the same share with PYTORCH_ALLOC_CONF=expandable_segments:True (what paraplan's launch
    # environment sets; TrainingSpec.expandable_segments)
    expandable_fraction: float = 0.01

    @property
    def attention_backward(self) -> float:
        return self.attention if self.attention_bwd is None else self.attention_bwd

    @property
    def tp_overlap(self) -> float:
        """The share of an overlapped TP collective that userbuffers overlap hides."""
        return self.overlap_hidden if self.tp_overlap_hidden is None else self.tp_overlap_hidden

    def with_(self, **kw: float) -> Efficiency:
        return replace(self, **kw)


# Fitted on the published runs of ../shared/validation (``optimize validate`` prints the
# error). ``gemm`` is the fraction of the dense peak that training GEMMs reach end to end
# (cuBLAS alone reaches more: ~0.8 on A100, ~0.75-0.8 on H100/H200 for 8192^3 bf16, the
# latter measured on this workplace's H200 at 788 TFLOP/s); ``gemm_k_half`` the reduction
# length at which a GEMM loses half of it (TP shards and small hidden sizes lose efficiency);
# ``attention`` the fraction of peak a fused causal attention kernel reaches on the FLOPs it
# executes (half the square). Ampere: A100 runs of Megatron-LM (Korthikanti et al. 2022, SC21),
# vTrain and llm-foundry; 0.78 (the large-tile kernels' fraction: tile and wave quantisation
# and the 128x128 tiles' ``gemm_small_tile`` come on top, compute.tile_efficiency), with the
# backward TP collectives overlapping the weight-gradient GEMMs (``async_tp_grad``) and
# dropout fused: Korthikanti's Table 4 layers are then within 2.6% (MAPE 1.5%) and Table 5
# within 3.7% (grid 0.77-0.81: Table 4 MAPE 2.5, 1.5, 0.9, 0.8, 1.2%, Table 5 max 4.9, 3.7,
# 3.9, 4.7, 5.5%; mean Spearman 0.891, 0.890, 0.885, 0.883, 0.881). Hopper: llm-foundry's
# 35 H100 runs (MAPE 4.4% with gemm 0.68 and attention 0.18; 0.66 gives 4.4% too, 0.70
# 5.0%); the second number is the FlashAttention-2/Triton era of those runs (their
# 16k-65k-token rows pin it); it is the "flash2" kernel of ATTENTION_KERNELS on Hopper, and
# efficiency_for replaces ``attention`` by the kernel generation the framework runs.
# Megatron-Core's H100 weak-scaling table (41-49% MFU, no micro-batch given, so only a sanity
# check at micro-batch 1) comes out at 0.85x its MFU on average, the rest being its unstated
# interleaving and the DP reduce-scatter of dp=48 runs.
# fp8 GEMMs reach ``fp8_gemm_scale`` x the bf16 fraction of their own (2x) peak. Transformer
# Engine's cast-transpose kernels are charged apart, as HBM traffic (layers.FP8_CAST_BYTES):
# they grow with h and the GEMMs with h^2, so folding them into this factor (0.7, before)
# fitted the small models and made large models' fp8 GEMMs ~20% too slow. 0.85 fits
# llm-foundry's three H100 fp8 rows (1B and 3B: -3.9%, -1.4%, -0.3%; 0.8 gives -2.4..+3.0%).
# End-to-end fp8 speed-ups over bf16 come out at 1.33-1.42x for 8B-175B H100 layouts, within
# the 1.3-1.5x NVIDIA reports for Transformer Engine. CUDA context: "typically
# 1-2 GB" (HF Ultra-Scale Playbook).
#
# ``allocator_fraction``: GMLake (Guo et al., ASPLOS 2024, arXiv:2401.08156) reports PyTorch's
# caching allocator leaving 15% of its reserve fragmented on average (up to 33%) over eight
# LLMs trained with DeepSpeed, FSDP and Colossal-AI on A100 80GB. 0.15 is that average, not a
# fit; stage_memory.py applies it to what is allocated and freed within a step (activations,
# logits, engine buckets, autograd-allocated gradients). Against BLOOM's 37 measured peaks it
# gives a
# memory MAPE of 4.7% (0.05: 8.9%, 0.10: 6.7%, 0.20: 4.5%, with 21 runs that ran predicted
# over their GPU's memory against 11). It is the fixed-segment allocator's share (BLOOM's
# PyTorch 1.11 and every run of published_runs.yaml predate expandable segments); re-checked in
# cost model 0.6.0 (0.10, 0.15, 0.20, 0.25: MAPE 6.7, 4.7, 4.5, 6.8%, bias -5.9, -3.1, -0.1,
# +3.4%; runs that ran predicted over their GPU's memory, both data files, at 0.10, 0.15,
# 0.20: 27, 36, 46): the MAPE is flat between 0.15 and 0.20 and 0.15 keeps ten more runs that
# ran admitted.
#
# ``expandable_fraction``: the same share with PYTORCH_ALLOC_CONF=expandable_segments:True,
# which paraplan's launch environment sets (and torchtitan's and Megatron-Bridge's scripts):
# segments grow by mapping pages, so the large per-layer blocks of slowly varying sizes tile
# into them instead of leaving slivers (modern-training.md 4.5). Fitted (cost model 0.7.0) on
# the only reserved peaks measured under it; it was 0.03, chosen, not fitted (a fifth of
# the fixed-segment share) while those peaks, torchtitan's 8
# peak_memory_gib rows, were off by -42..+37% for reasons that were not the allocator. With
# torchtitan's op-level SAC, fp32 loss and gathered FSDP2 root modelled they are within 4.1%,
# and across 0.00, 0.01, 0.02, 0.03, 0.05, 0.10 their MAPE is 2.0, 2.3, 2.7, 3.1, 3.9, 7.3%
# (bias -1.0, -0.3, +0.5, +1.3, +2.9, +7.3%), the runs that ran predicted not to fit under the
# default verdict 25, 25, 25, 30, 32, 37: the data prefer 0.00-0.02 and 0.01 is their
# bias-neutral point, so 0.01 it is (one parameter on 8 rows; OOM runs predicted to fit stay 0).
#
# ``gemm_small_tile``: cuBLAS picks a thread-block tile per GEMM shape; the model lets it take
# 256x128 or 128x256 (the tile NVIDIA's GEMM guide uses for its A100 wave-quantisation example,
# one per SM) or 128x128, which quantises less but loads 1/128 + 1/128 operand elements per
# multiply-add against 1/128 + 1/256 (a third more traffic per FLOP) and so runs slower.
# 0.85 is fitted on vTrain's single-node sweeps, whose GEMMs (hidden 1024-2048, 1-8 TP
# shards) are where the tile choice matters. With the rest of the model as it is, their mean
# Spearman is 0.925 without the 128x128 option and 0.931, 0.940, 0.937, 0.929 with it at
# 0.80, 0.85, 0.90, 0.95 (over all sweeps 0.877; 0.882, 0.890, 0.888, 0.880): 0.85 is a
# narrow optimum. Fixed 128x128 tiles, as before, gave 0.911 on vTrain. The large tiles also
# slow Korthikanti's tp-8 layers (Table 4); ``gemm`` stays at 0.78 once the unfused
# softmax's HBM passes follow Megatron's kernels (layers.py). Per-(hidden, tp, micro-batch)
# residuals on vTrain stay at -32..+22% with ~1% spread inside each cell at tp >= 2 (2-8% at
# tp = 1): kernel choices at particular shapes that only a measured GEMM table of the A100
# would capture.
#
# ``gemm_misaligned``: a GEMM whose N or K is not a multiple of 16 bytes (an attention head
# dimension such as 108 or 150) leaves cuBLAS's fast Tensor Core kernels: before cuBLAS 11 it
# ran on CUDA cores; since, Tensor Cores are used with slower, narrow-load kernels (NVIDIA
# Matrix Multiplication Background guide, "Tensor Core Requirements"). The value is chosen,
# not measured: (16-bit CUDA-core peak / dense Tensor Core peak) x (an assumed 0.4 reached by
# such kernels / ``gemm``) - A100 78/312 x 0.4/0.8 = 0.125, H100 SXM 134/989 x 0.4/0.68 =
# 0.08, V100 31/125 x 0.4/0.75 = 0.13 - and checked on BLOOM's head-dimension 108 and 150
# runs (their errors shrink from about -33% to -10..-23%: it explains part of their slowness,
# not all). It applies to GEMMs the model runs through cuBLAS: the linears and the unfused
# attention core; fused attention instead pads the head dimension to its kernels' step
# (compute.py / layers.py).
_AMPERE = Efficiency(gemm=0.78, gemm_k_half=128.0, memory=0.85, attention=0.35,
                     kernel_overhead_s=4e-6, step_overhead_s=0.0,
                     cuda_context_bytes=1.5e9, allocator_fraction=0.15, gemm_misaligned=0.125)
# ``tp_overlap_hidden`` (Hopper 0.8): the share of a TP collective that Transformer Engine's
# userbuffers overlap (--tp-comm-overlap, Megatron-Core with sequence parallelism) hides
# behind the GEMM it is split across. It is its own number, not ``overlap_hidden``: TE moves
# the chunks with its own userbuffer kernels and copy-engine ring exchanges instead of NCCL
# kernels that hold SMs through the GEMM (TE comm_gemm_overlap; nccl.md section 12 for
# NCCL's SM use). torchtitan's async TP (micro-pipelined TP collectives) uses the same share.
# Fitted on the 7 Hopper runs that run either with tp > 1 (groups mbridge_perf_dense_h100,
# mbridge_perf_dense_sft, mbridge_perf_moe, megatron_lm_examples_llama_fp8 and
# torchtitan_docs_perf_2024_h100's async-TP row); the grid and its objective are in
# docs/calibration-report.md (0.9 before cost model 0.9.0: fitted before the torchtitan row
# mapped async TP).
_HOPPER = Efficiency(gemm=0.68, gemm_k_half=128.0, memory=0.85, attention=0.18,
                     kernel_overhead_s=4e-6, step_overhead_s=0.0,
                     cuda_context_bytes=1.5e9, allocator_fraction=0.15, gemm_misaligned=0.08,
                     tp_overlap_hidden=0.8)
_VOLTA = _AMPERE.with_(gemm=0.75, attention=0.25, gemm_misaligned=0.13)
# Blackwell (sm100 B200/GB200, sm103 B300/GB300): its own large-GEMM fraction, fitted on the
# 2026 Blackwell runs (values, sources and the fit: docs/calibration-report.md, generated by
# benchmarks/calibration_report.py); the rest as Hopper except:
# ``mxfp8_gemm_scale`` 0.92: MXFP8 linears run at 0.92 x the per-tensor fp8 ones. The
# block-scaled MMA reads an E8M0 scale per 32 elements of K of both operands, and TE
# swizzles the scales for it (modern-training.md 5.1); the cast traffic is charged apart
# (FP8_RECIPES). Fitted on the 7 Megatron-Bridge pairs that ran one layout family in fp8
# (current scaling) and in mxfp8 on one GPU and release (GB200 405B x5, GB200 and GB300 70B
# SFT): measured mxfp8/fp8 step ratios 1.01-1.12 (mean 1.068); rms log error of the
# predicted ratios 0.070, 0.040, 0.042, 0.050 at 1.0, 0.92, 0.90, 0.88 (mean log error
# -0.059, -0.001, +0.014, +0.030).
# ``tp_overlap_hidden`` 0.0: on the GB200/GB300 NVL72 rows the TP collectives come out as
# exposed as without userbuffers overlap (the plain path: Megatron's async input-gradient
# reduce behind the weight gradient, TensorParallelCosts.async_tp_grad). Fitted on
# mbridge_perf_dense_blackwell (12 GB200 tp-4 and 6 GB300 tp-2 rows): MAPE 5.9% at 0.0 and
# 0.15, 6.3% at 0.3, 7.6% at 0.45, 8.9% at 0.6 (Hopper's overlap_hidden), 10.3% at 0.75
# (with mxfp8_gemm_scale 0.92); whether the NVL72 recipes enable --tp-comm-overlap over
# multi-node NVLink is not in the data.
_BLACKWELL = _HOPPER.with_(gemm=0.74, nvfp4_gemm_scale=0.55, mxfp8_gemm_scale=0.92,
                           tp_overlap_hidden=0.0)

BY_ARCH: dict[str, Efficiency] = {
    "volta": _VOLTA,
    "ampere": _AMPERE,
    "hopper": _HOPPER,
    "blackwell": _BLACKWELL,
}


def arch_of(compute_capability: int) -> str:
    """NVIDIA architecture family from the compute capability (x10: 80 = sm80)."""
    if compute_capability >= 100:
        return "blackwell"
    if compute_capability >= 90:
        return "hopper"
    if compute_capability >= 80:
        return "ampere"
    return "volta"


# ---- kernel generations ---------------------------------------------------------------------
# Fused causal attention at training shapes (head dim 128, 4k-8k tokens), (forward, backward)
# as fractions of the 16-bit dense peak on the FLOPs each kernel executes (the backward's are
# 2.5x the forward's). Keyed by (architecture, kernel): "flash2" is what the FSDP/DeepSpeed
# stacks of the calibration data run (FlashAttention-2, or Triton flash attention for
# llm-foundry's ALiBi models); "cudnn" is Transformer Engine's FusedAttention (cuDNN) that
# Megatron-Core runs by default. "blackwell_ultra" is sm103 (B300/GB300), whose doubled SFU
# (exponential) throughput lifts the softmax-bound forward. Where an architecture has no
# entry for a kernel, "flash2" stands in (TE on Ampere runs FlashAttention-2). Every value's
# source (FlashAttention-3 paper figures, FA4 paper) or fit is in docs/calibration-report.md.
ATTENTION_KERNELS: dict[tuple[str, str], tuple[float, float]] = {
    ("volta", "flash2"): (0.25, 0.25),
    ("ampere", "flash2"): (0.35, 0.35),
    ("hopper", "flash2"): (0.18, 0.18),
    ("hopper", "cudnn"): (0.50, 0.49),
    ("blackwell", "cudnn"): (0.50, 0.40),
    ("blackwell_ultra", "cudnn"): (0.65, 0.40),
}
ATTENTION_KERNEL_NAMES = ("flash2", "cudnn")


def attention_efficiency(compute_capability: int, kernel: str) -> tuple[float, float]:
    """(forward, backward) fraction of the 16-bit peak of ``kernel`` on this architecture."""
    arch = arch_of(compute_capability)
    if arch == "blackwell" and compute_capability >= 103:
        key = ("blackwell_ultra", kernel)
        if key in ATTENTION_KERNELS:
            return ATTENTION_KERNELS[key]
    if (arch, kernel) in ATTENTION_KERNELS:
        return ATTENTION_KERNELS[(arch, kernel)]
    if arch == "blackwell":  # no FlashAttention-2 build for sm100: the cuDNN kernels
        return ATTENTION_KERNELS[(arch, "cudnn")]
    return ATTENTION_KERNELS[(arch, "flash2")]


# Low-precision GEMM recipes (TrainingSpec.fp8_recipe, read where the precision is fp8):
# the peak the linears run at, the fraction of ``Efficiency.gemm`` they keep there (field of
# Efficiency), and the HBM bytes per quantised element Transformer Engine's cast kernels move
# (layers.py). "delayed": per-tensor scales from the amax history, cast + transpose fused
# (read 2, write 1 + 1). "tensorwise" (current scaling; Megatron-Bridge's "fp8", torchao's
# tensorwise/rowwise): an amax pass over each tensor first (+2 read). "blockwise": 1x128 /
# 128x128 scales, rowwise and columnwise copies quantised separately (read 2 + 2, write 1 + 1).
# "mxfp8" (Blackwell): 1x32 E8M0 scales, rowwise and columnwise copies (read 2, write 1 + 1 +
# 2/32 of scales). "nvfp4": FP4 operands at the FP4 peak, 1x16 scales, rowwise and columnwise
# copies (read 2, write 0.5 + 0.5 + 2/16) plus the random Hadamard transform of the wgrad
# operands (read 2, write 2 of a quarter of the elements: 1).
FP8_RECIPES: dict[str, float] = {
    "delayed": 4.0,
    "tensorwise": 6.0,
    "blockwise": 6.0,
    "mxfp8": 4.0 + 2.0 / 32.0,
    "nvfp4": 3.0 + 2.0 / 16.0 + 1.0,
}


def efficiency_for(compute_capability: int, attention_kernel: str = "flash2") -> Efficiency:
    """The architecture's efficiencies with the attention kernel generation the framework
    runs (``FrameworkCosts.kernels.attention_kernel``)."""
    fwd, bwd = attention_efficiency(compute_capability, attention_kernel)
    return BY_ARCH[arch_of(compute_capability)].with_(attention=fwd, attention_bwd=bwd)


@dataclass(frozen=True)
class HostCosts:
    """The host side of each layer, which the GPU waits for when the layer is small.

    ``layer_pass_s``: host-side cost per layer and pass (forward, recomputed forward, and each
    of the two backward GEMM sets) that the GPU waits for: eager-mode op dispatch, autograd
    and checkpointing hooks, stream synchronisation. Dominant for small layers, negligible for
    large ones.
    """

    layer_pass_s: float = 0.0
    # Host time of each blocking TP collective call, on top of ``layer_pass_s`` (tp > 1 only):
    # Megatron's mappings return at once when the TP group has one rank (_reduce: "Bypass the
    # function if we are using only 1 GPU"), so a tp = 1 layer issues no collective; with
    # tp > 1 every all-reduce goes through torch.distributed / ProcessGroupNCCL (checks, work
    # object, CUDA event record + stream wait on each side, NCCL enqueue and kernel launch).
    # It only shows where the layer is host-bound.
    collective_host_s: float = 0.0
    # p of the p-norm that joins a layer's host and GPU time (compute.soft_max; inf: the
    # plain maximum). See the DeepSpeed entry of FRAMEWORKS.
    host_overlap_p: float = 7.0


@dataclass(frozen=True)
class KernelCosts:
    """The layers' kernels beyond the fused minimum the model counts.

    ``elementwise_traffic``: HBM traffic of norms, activations, residuals and rotary relative
    to the fused minimum the model counts (Megatron fuses them; DeepSpeed partly; FSDP stacks
    such as llm-foundry run them mostly unfused). ``loss_bytes_per_logit`` /
    ``grad_accum_bytes``: HBM traffic of an unfused cross entropy and of gradient
    accumulation outside the GEMMs (Megatron-DeepSpeed; derived byte counts, see the fields).
    """

    elementwise_traffic: float = 1.0  # HBM traffic of element-wise ops / the fused minimum
    # the same ratio where TrainingSpec.torch_compile says how the model ran (None: as
    # ``elementwise_traffic``): eager PyTorch, and under torch.compile (Inductor's fusion)
    eager_elementwise_traffic: float | None = None
    compiled_elementwise_traffic: float | None = None
    # HBM bytes per logit of the cross entropy (forward + backward). Megatron's
    # _VocabParallelCrossEntropy as Megatron-DeepSpeed runs it (2021-22) is unfused:
    # .contiguous() + .float() of the 16-bit logits (r2 w2 + r2 w4), max (r4), subtract (r4 w4),
    # exp (r4 w4), sum (r4), divide (r4 w4); backward mul_ by the loss gradient (r4 w4) and the
    # cast back to 16 bits (r4 w2): ~58. The fused minimum (read the logits, write the softmax,
    # read it in the backward) is 16.
    loss_bytes_per_logit: float = 16.0
    # HBM bytes per local parameter per micro-batch of gradient accumulation outside the GEMM:
    # PyTorch's AccumulateGrad adds each later micro-batch's fresh 16-bit gradient into
    # param.grad (the first one is handed over) (read 2 + 2, write 2 = 6; BF16_Optimizer,
    # which clears the bf16 gradients before each backward and adds them into its fp32
    # buffer after it, is charged layers.HP_GRAD_UPDATE_BYTES on every micro-batch instead)
    # unless the framework fuses accumulation into the weight-gradient GEMM (Megatron-LM's
    # gradient_accumulation_fusion into the fp32 main_grad). The word embedding's dense
    # backward also zero-fills a full [V/t, h] gradient every micro-batch (+2).
    grad_accum_bytes: float = 0.0
    # selective recompute re-runs a fused (flash) attention core too: Megatron-Core
    # checkpoints core_attn whatever its kernel; legacy Megatron (Megatron-DeepSpeed) only
    # checkpoints the unfused one
    recompute_fused_attention: bool = False
    # the unfused attention softmax is Megatron's fused scale-mask-softmax kernel, with its
    # PyTorch fallback for shapes the kernel does not take (layers.softmax_falls_back):
    # Megatron-LM and Megatron-DeepSpeed; FSDP stacks run their own attention (llm-foundry:
    # flash or Triton kernels), charged the fused kernel's passes. ``softmax_in_fp32``: that
    # fallback computes in fp32 (Megatron-DeepSpeed, whose apply_query_key_layer_scaling is on
    # by default; Megatron-LM turned both off by default in 2023)
    megatron_softmax: bool = False
    softmax_in_fp32: bool = False
    # the fused-attention kernel generation the framework runs (ATTENTION_KERNELS)
    attention_kernel: str = "flash2"
    # "selective" recompute is torchtitan's op-level SAC (layers._op_sac_rows): every other
    # matmul and the element-wise ops re-run, SDPA saved; else Megatron's core-attention one
    selective_op_sac: bool = False


@dataclass(frozen=True)
class TensorParallelCosts:
    """The TP collectives' cost beyond NCCL's model, and their overlap.

    ``async_tp_grad``: the column-parallel linears (QKV, FC1) launch the all-reduce (with
    sequence parallelism: reduce-scatter) of their input gradient asynchronously and run
    their weight-gradient GEMM meanwhile (Megatron-LM's
    LinearWithGradAccumulationAndAsyncCommunication, default since 2022; with SP its
    backward all-gather overlaps the data-gradient GEMM). Megatron-DeepSpeed's 2021 fork
    blocks on both; the validation data agree (vTrain/BLOOM rank worse with it on).
    """

    collective_s: float = 0.0  # rendezvous cost per blocking TP collective (launch skew)
    # backward TP collectives of QKV / FC1 overlapped with their weight-gradient GEMMs
    async_tp_grad: bool = False


@dataclass(frozen=True)
class PipelineCosts:
    """The pipeline engine's transfers and buffers.

    ``pipe_buffers``: two full activations (b s h, 16-bit) per in-flight micro-batch
    on top of the layers' checkpoints, a calibrated term: DeepSpeed's PipelineEngine keeps the
    received input and the stage output per micro-batch (pipe_buffers, num_pipe_buffers), but
    with tp > 1 (pipe partitioning) its 0.6 code keeps only the output's 1/t partition and the
    input is the first layer's checkpoint; BLOOM's measured peaks grow by 6-8 GiB per unit of
    micro-batch at 12 micro-batches in flight, which that count (4.7-5.2) undershoots and two
    full tensors (6.0-6.6) match; what holds the rest is not identified (docs/cost-model.md).
    The last stage's output buffer also keeps the 16-bit logits (2 bytes per logit, added in
    stage_memory.memory_context).
    """

    # Pipeline send/recv are blocking and not batched (DeepSpeed PipelineEngine: p2p.send /
    # p2p.recv one after another, each waited on by the compute stream), so a middle stage pays
    # its four transfers per micro-batch (receive activation, send activation, receive
    # gradient, send gradient) one after another; Megatron-LM batches each send with the
    # opposite receive (send_forward_recv_backward), two transfer times.
    serial_p2p: bool = False
    # DeepSpeed's PipelineEngine keeps only the TP partition of a sent activation and
    # re-gathers the full tensor for the backward (one more all-gather per micro-batch on
    # every stage but the last; runtime/pipe/engine.py _exec_backward_pass)
    pipe_regather_output: bool = False
    pipe_buffers: bool = False


@dataclass(frozen=True)
class DataParallelCosts:
    """Gradients, their data-parallel reduction and the optimizer's states.

    ``bf16_fp32_grads``: DeepSpeed's BF16_Optimizer (bf16 weights, ZeRO 0/1) accumulates
    gradients in an unsharded fp32 buffer besides the bf16 gradients (+2 bytes per parameter
    over Megatron), and the all-reduce casts that buffer to ``grad_comm_bytes`` after the
    backward (a transient copy, stage_memory.reduce_copy_bytes). ``zero_grad16``: DeepSpeed's
    ZeRO optimizer (and FP16_Optimizer) keeps 16-bit gradients and casts the local gradient
    partition to fp32 for the step: 2 bytes of 16-bit gradient per parameter plus 4 of fp32
    gradient sharded from ZeRO-1 on, beside the 12 optimizer bytes (DeepSpeed's own
    estimators, cost-model.md 4.3; stage_memory.gradient_bytes).
    """

    # Bytes per gradient element on the wire of the data-parallel reduction of 16-bit (and
    # fp8) training; 0 means the gradient buffer's own width (GRAD_BYTES: Megatron-LM reduces
    # its fp32 main_grad). DeepSpeed reduces in ``communication_data_type``, which defaults to
    # the training dtype, fp16 or bf16 (engine.py communication_data_type / allreduce_bucket;
    # BF16_Optimizer's fp32 accumulators are cast to bf16 for the all-reduce; ZeRO 1-3 reduce
    # and gather in the same dtype): 2 bytes. fp32 training stays at 4.
    grad_comm_bytes: float = 0.0
    bf16_fp32_grads: bool = False
    zero_grad16: bool = False
    # fp16 training keeps fp16 main gradients (reduced in fp16) and its optimizer step copies
    # them (or the distributed optimizer's shard) to fp32: Megatron-LM (cost-model.md 4.2: 20
    # and 4 + 16/d bytes); DeepSpeed's ZeRO optimizer does the same through ``zero_grad16``
    fp16_grad_copy: bool = False
    # ZeRO-2 re-gathers the parameters for every micro-batch's forward: PyTorch FSDP
    # SHARD_GRAD_OP reshards after each backward; DeepSpeed stage 2 keeps full parameters
    zero2_regather: bool = False
    # ZeRO-3 keeps only the fp32 flat-parameter shard (PyTorch FSDP: 4 + 4 + 8 = 16 bytes per
    # parameter over d with mixed precision, the 16-bit copy existing only for gathered
    # units); DeepSpeed ZeRO-3 keeps a 16-bit partition beside its fp32 master (18 over d)
    fp32_flat_shard: bool = False


@dataclass(frozen=True)
class MemoryCosts:
    """What the framework allocates beside the model states and activations.

    ``reduce_bucket_bytes`` / ``gather_bucket_bytes``: the gradient-reduce and parameter
    all-gather buckets the engine allocates (DeepSpeed reduce_bucket_size and
    allgather_bucket_size, 5e8 elements each by default, in 16-bit). BF16_Optimizer has no
    reduce bucket: it reduces its fp32 buffer through a cast (stage_memory.reduce_copy_bytes).
    """

    reduce_bucket_bytes: float = 0.0
    gather_bucket_bytes: float = 0.0
    # Gradients live in the param.grad tensors (in the weights' dtype) that autograd allocates
    # during each step's backward, between activation blocks, and zero_grad(set_to_none=True)
    # frees after the step (DeepSpeed's ZeRO optimizer and BF16_Optimizer): they fragment the
    # caching allocator like activations do. Megatron-LM keeps gradients in one contiguous buffer
    # allocated at start-up.
    autograd_grads: bool = False
    # Bytes per logit (per TP rank) the loss keeps from a micro-batch's forward to its backward,
    # and what it allocates on top while it runs. Megatron's vocabulary-parallel cross entropy
    # casts the 16-bit logits to fp32 and turns that copy in place into the softmax it saves
    # (4, Korthikanti 4.3's fp32 logits); the caller holds the 16-bit logits during the
    # forward, the backward adds their 16-bit gradient (2). DeepSpeed's PipelineEngine also
    # keeps the 16-bit logits as the last stage's output buffer (``pipe_buffers``: 2 more,
    # added in stage_memory). llm-foundry's MPT uses flash-attn's fused cross entropy
    # (loss_fn: fused_crossentropy, its default): the 16-bit logits are saved, no fp32 copy.
    logits_saved_bytes: float = 4.0
    logits_transient_bytes: float = 2.0
    # Bytes per logit freed before the loss's backward peak that the caching allocator still
    # holds then (reserved, not allocated): torchtitan frees its 16-bit logits ("del pred")
    # before loss.backward(), whose fp32 buffers are twice as large and cannot reuse them
    logits_cached_bytes: float = 0.0
    # FSDP2's root unit (the parameters not in a block's own unit: torchtitan's embedding,
    # final norm and output layer) stays gathered in 16 bits from its forward into the
    # backward (fully_shard sets no reshard-after-forward on the root: it would all-gather
    # again at once)
    fsdp_root_gathered: bool = False
    # fp8 training keeps Transformer Engine's fp8 weight copies (and transposes) across a
    # step's micro-batches: Megatron-Core passes is_first_microbatch to its TE layers
    fp8_weight_cache: bool = False


_GROUPS = ("host", "kernels", "tp", "pipeline", "dp", "memory")


@dataclass(frozen=True)
class FrameworkCosts:
    """What a training framework adds on top of the kernels (per framework, not per GPU): a
    profile grouped by the phase that reads it (``score(..., framework=)``; default: the
    entry of :data:`FRAMEWORKS` that ``training.framework`` names).

    Fitted on the validation data: DeepSpeed's host cost on vTrain's single-node sweep (714
    runs: small layers are host-bound at ~3.4 ms per layer and micro-batch at tp > 1 and
    ~3.0-3.2 ms at tp = 1, i.e. ~0.78 ms per pass plus ~45 us per TP collective call), its
    element-wise traffic on BLOOM and vTrain, FSDP's on llm-foundry's short-sequence
    runs (where attention is small). Megatron-LM needs none: with its backward TP overlap
    (``tp.async_tp_grad``) Korthikanti et al.'s Table 4 layers are within 2.6% and Table 5's
    iterations within 3.7% with the kernel model alone.
    """

    name: str
    host: HostCosts = HostCosts()  # the layers' host time (layers.host_overhead_s)
    kernels: KernelCosts = KernelCosts()  # the layers' kernels (layers)
    tp: TensorParallelCosts = TensorParallelCosts()  # TP collectives (layers.tp_exposed_s)
    pipeline: PipelineCosts = PipelineCosts()  # p2p and pipe buffers (stages, stage_memory)
    dp: DataParallelCosts = DataParallelCosts()  # gradients, DP, optimizer (data_parallel)
    memory: MemoryCosts = MemoryCosts()  # buffers and the allocator (stage_memory)

    def with_(self, **changes) -> FrameworkCosts:
        """A copy with fields changed, each named as in its group (``serial_p2p=False``)."""
        groups = {}
        for key, value in changes.items():
            owner = [g for g in _GROUPS if key in getattr(self, g).__dataclass_fields__]
            if not owner:
                raise TypeError(f"FrameworkCosts has no field {key!r}")
            groups.setdefault(owner[0], {})[key] = value
        return replace(self, **{g: replace(getattr(self, g), **kw) for g, kw in groups.items()})


FRAMEWORKS: dict[str, FrameworkCosts] = {
    "megatron": FrameworkCosts(
        "megatron", tp=TensorParallelCosts(async_tp_grad=True),
        kernels=KernelCosts(recompute_fused_attention=True, megatron_softmax=True,
                            attention_kernel="cudnn"),
        dp=DataParallelCosts(fp16_grad_copy=True), memory=MemoryCosts(fp8_weight_cache=True)),
    # layer_pass_s + collective_host_s: vTrain's small layers take ~3.4 ms per layer and
    # micro-batch at tp > 1 (4 passes x 0.7825 ms + 6 collectives x 45 us) and ~3.0-3.2 ms at
    # tp = 1 (per-layout fits over the 12-24-layer variants: tp=1 2.95-3.2, tp=2 3.32-3.42 ms,
    # i.e. ~48 us per collective). host_overlap_p = 7: near the crossover vTrain's layers run
    # slower than the larger of the two times (at 1-2 samples per micro-batch, hidden 1024-2048,
    # e.g. 3.9 ms per layer and micro-batch against a 3.7 ms floor); the host's time per layer
    # varies, and E[max(g, H)] = h + 0.4 sigma at g = h for a normal H, which a p of 7
    # (2^(1/7) = 1.10) matches for a spread sigma of ~25% of h. Fitted, and a narrow optimum:
    # the mean Spearman over all sweeps is 0.880 with the plain maximum and 0.882, 0.881,
    # 0.890, 0.889, 0.888, 0.883 at p = 5, 6, 7, 8, 10, 12 (vTrain single node 0.929 -> 0.940
    # at 7); MAPE moves by less than 0.1 point.
    "deepspeed": FrameworkCosts(
        "deepspeed", host=HostCosts(layer_pass_s=0.7825e-3, collective_host_s=45e-6),
        kernels=KernelCosts(elementwise_traffic=1.5, loss_bytes_per_logit=58.0,
                            grad_accum_bytes=6.0, megatron_softmax=True,
                            softmax_in_fp32=True),
        tp=TensorParallelCosts(collective_s=0.05e-3),
        pipeline=PipelineCosts(serial_p2p=True, pipe_regather_output=True, pipe_buffers=True),
        dp=DataParallelCosts(grad_comm_bytes=2.0, bf16_fp32_grads=True, zero_grad16=True),
        memory=MemoryCosts(reduce_bucket_bytes=5e8 * 2, gather_bucket_bytes=5e8 * 2,
                           autograd_grads=True)),
    # PyTorch FSDP as llm-foundry runs it (the data it is fitted on): unfused element-wise ops,
    # flash-attn's fused cross entropy (a plain torch cross entropy on fp32 logits, as in
    # torchtitan, holds 2 + 4 + 4 bytes per logit instead)
    "fsdp": FrameworkCosts(
        "fsdp", kernels=KernelCosts(elementwise_traffic=2.0),
        dp=DataParallelCosts(zero2_regather=True, fp32_flat_shard=True),
        memory=MemoryCosts(logits_saved_bytes=2.0)),
}
# torchtitan (PyTorch FSDP2): llm-foundry's FSDP profile (its kernels and FSDP costs were
# fitted there) with torchtitan's own "selective" recompute, op-level SAC
# (layers._op_sac_rows, memory.op_sac_activation_bytes): derived from its checkpoint policy,
# not fitted. Its loss is torch's cross entropy on an fp32 upcast of the 16-bit logits
# (components/loss.py: ``cross_entropy(pred.flatten(0, 1).float(), ...)``): log-softmax keeps
# its fp32 output (4 bytes per logit) for the backward, which allocates the fp32 gradient of
# that output and of its input (4 + 4) before casting to 16 bits; the 16-bit logits (2) are
# freed before the backward and stay cached. Its root FSDP unit stays gathered (above).
FRAMEWORKS["torchtitan"] = FRAMEWORKS["fsdp"].with_(
    selective_op_sac=True, logits_saved_bytes=4.0, logits_transient_bytes=8.0,
    logits_cached_bytes=2.0, fsdp_root_gathered=True)
FRAMEWORKS["torchtitan"] = replace(FRAMEWORKS["torchtitan"], name="torchtitan")
# torchtitan's element-wise traffic when the run says whether it was compiled (TrainingSpec.
# torch_compile; derived, not fitted). Eager: torchtitan's Llama block (models/llama/model.py,
# 2024) runs RMSNorm in fp32 (x.float(), pow, mean, x * rsqrt, type_as, * weight: 36 bytes
# per element of h against the fused 4), rotary through view_as_complex in fp32 (float(),
# complex multiply, type_as: 20 bytes per element of q and k against 4), repeat_kv copies of
# K and V for GQA and a contiguous copy of the attention output, and SwiGLU as silu then mul
# (10 bytes per element of f against 6); per token of Llama 3 8B that is 627 kB against the
# 188 kB fused minimum of layers.layer_memory_ops (3.33; Llama 3.1 405B 3.34, Llama 2 70B
# 3.30, Llama 2 13B 3.51), the backward's autograd ops taken in the same ratio: 3.3.
# Compiled: Inductor fuses each of those chains into one kernel, the fused minimum (1.0),
# and the float8 casts' amax reduction into the kernel producing the tensor
# (layers.layer_memory_ops).
FRAMEWORKS["torchtitan"] = FRAMEWORKS["torchtitan"].with_(
    eager_elementwise_traffic=3.3, compiled_elementwise_traffic=1.0)
