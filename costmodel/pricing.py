"""Pricing: one function turns an op table's kernels into times.

Every op a phase emits (a layer's GEMMs, attention kernels, memory-bound passes, TP
collectives, pipeline transfers) names a :class:`Kernel`: its shape (GEMM m x n x k), its
FLOPs, its HBM bytes, or its message bytes and communication group. :func:`price` times each
kernel once on the configuration's :class:`Device` (roofline of :mod:`costmodel.compute`) or,
for collectives, through NCCL's model (:class:`costmodel.groups.Collectives`), and the rows
that run a kernel read its time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from costmodel import collectives as coll
from costmodel.calibration import FP8_RECIPES, Efficiency
from costmodel.compute import ACT_BYTES, GEMM_BYTES, gemm_time_s, memory_op_time_s
from costmodel.hardware import fp4_peak_flops
from costmodel.specs import PRECISIONS

GEMM, ATTENTION, MEMORY, COLLECTIVE, P2P = "gemm", "attention", "memory", "collective", "p2p"
ALLTOALL = "alltoall"
#: forward throughput of an FP8 fused attention kernel over the 16-bit one:
#: FlashAttention-3 on H100 SXM5 reaches "close to 1.2 PFLOPs/s in FP8" against "up to 740
#: TFLOPs/s" in FP16 (Shah et al. 2024, arXiv:2407.08608, abstract; modern-training.md
#: 7.1): 1200 / 740. Applied to the attention core's forward (and its recomputed forward)
#: where the linears run in fp8 and the recipe asks for FP8 dot-product attention
#: (Transformer Engine ``fp8_dpa``, ``TrainingSpec.fp8_dot_product_attention``); its
#: backward keeps the 16-bit kernel's time (the paper has no FP8 backward figure). The
#: Hopper ratio is used for every GPU (no Blackwell figure at hand).
FP8_ATTENTION_FORWARD_SPEEDUP = 1200.0 / 740.0


@dataclass(frozen=True)
class Device:
    """The GPU as one batch of configurations sees it: peaks of each one's precision."""

    eff: Efficiency
    peak_flops_per_s: np.ndarray  # dense peak of the training precision
    gemm_peak_flops_per_s: np.ndarray  # what the linears run at (fp8: x eff.fp8_gemm_scale)
    attention_peak_flops_per_s: np.ndarray  # 16-bit peak where the precision is fp8
    memory_bandwidth_bytes_per_s: float
    gemm_bytes: np.ndarray  # bytes per GEMM operand element
    act_bytes: np.ndarray  # bytes per activation element
    fp8: np.ndarray
    tensor_cores: np.ndarray  # False for fp32 (CUDA cores)
    sm_count: int
    # the fp8 recipe's cast traffic / delayed scaling's (calibration.FP8_RECIPES)
    cast_scale: float = 1.0
    # the fused attention core's forward speed-up (FP8 dot-product attention; 1 elsewhere)
    attention_forward_speedup: np.ndarray | float = 1.0

    def memop(self, nbytes, kernels=1.0) -> np.ndarray:
        """A memory-bound pass of ``nbytes`` HBM bytes in ``kernels`` launches."""
        return memory_op_time_s(nbytes, mem_bandwidth_bytes_per_s=self.memory_bandwidth_bytes_per_s,
                                eff=self.eff, n_kernels=kernels)

    def gemm(self, m, n, k, peak=None, elem_bytes=None) -> np.ndarray:
        return gemm_time_s(m, n, k,
                           peak_flops_per_s=self.gemm_peak_flops_per_s if peak is None else peak,
                           mem_bandwidth_bytes_per_s=self.memory_bandwidth_bytes_per_s,
                           elem_bytes=self.gemm_bytes if elem_bytes is None else elem_bytes,
                           eff=self.eff, sm_count=self.sm_count,
                           tensor_cores=self.tensor_cores)


def peaks_by_precision(gpu) -> np.ndarray:
    return np.array([gpu.peak_flops_per_s.get(pr, np.nan) for pr in PRECISIONS])


def device_for(gpu, eff: Efficiency, precision: np.ndarray, recipe: str = "delayed",
               fp8_attention: bool = False) -> Device:
    """The device as ``precision`` sees it; where that is fp8, ``recipe`` (TrainingSpec.
    fp8_recipe) sets the linears' peak and cast traffic: NVFP4 runs them at the FP4 peak (x
    ``eff.nvfp4_gemm_scale``) on GPUs that have one, the fp8 recipes at the fp8 peak (x
    ``eff.fp8_gemm_scale``, and for MXFP8 x ``eff.mxfp8_gemm_scale``). ``fp8_attention``
    (TrainingSpec.fp8_dot_product_attention): where the precision is fp8 the fused attention
    core's forward runs :data:`FP8_ATTENTION_FORWARD_SPEEDUP` faster, except with the
    blockwise recipe (TE's FP8 attention is FusedAttention only and not with blockwise
    scaling: modern-training.md 5.2)."""
    peaks = peaks_by_precision(gpu)
    fp8 = precision == PRECISIONS.index("fp8")
    peak = peaks[precision]
    fp4 = fp4_peak_flops(gpu) if recipe == "nvfp4" else None
    low = (np.full(peak.shape, fp4 * eff.nvfp4_gemm_scale) if fp4
           else peak * eff.fp8_gemm_scale)
    if recipe == "mxfp8":  # block-scaled GEMMs: a fraction of the per-tensor fp8 rate
        low = low * eff.mxfp8_gemm_scale
    # the attention core's batched GEMMs (and the output layer) stay in 16-bit when the
    # linears run in fp8 (Transformer Engine keeps dot-product attention in bf16)
    attn_peak = peaks[np.where(fp8, PRECISIONS.index("bf16"), precision)]
    return Device(eff=eff, peak_flops_per_s=peak,
                  gemm_peak_flops_per_s=np.where(fp8, low, peak),
                  attention_peak_flops_per_s=attn_peak,
                  memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                  gemm_bytes=GEMM_BYTES[precision], act_bytes=ACT_BYTES[precision], fp8=fp8,
                  tensor_cores=precision != PRECISIONS.index("fp32"), sm_count=gpu.sm_count,
                  cast_scale=FP8_RECIPES[recipe] / FP8_RECIPES["delayed"],
                  attention_forward_speedup=np.where(fp8 & bool(fp8_attention)
                                                     & (recipe != "blockwise"),
                                                     FP8_ATTENTION_FORWARD_SPEEDUP, 1.0))


class Kernel(NamedTuple):
    """One priced kernel (or collective) of an op table, for every configuration of a batch.

    ``kind`` says how it is priced: ``gemm`` (roofline of an m x k by k x n GEMM at the
    linears' peak, or at the 16-bit peak with ``peak="attention"``), ``attention`` (a fused
    attention kernel: ``flops`` executed at ``eff.attention`` of the 16-bit peak, plus one
    launch; with ``backward_of`` FlashAttention's backward, 2.5x that kernel's time, one
    launch), ``memory`` (``nbytes`` of HBM traffic in ``kernels`` launches), ``collective``
    (``collective`` of ``nbytes`` over the axis ``group``), ``p2p`` (``nbytes`` to the next
    rank of the axis ``group``: a pipeline stage, a context-parallel ring neighbour) or
    ``alltoall`` (``nbytes`` per rank over the axis ``group``, ``collectives.alltoall_time_s``). ``when``: where the kernel runs (elsewhere it takes no time).
    """

    name: str
    kind: str
    m: Any = None
    n: Any = None
    k: Any = None
    peak: str = "gemm"  # "gemm" or "attention" (16-bit peak and activation-width operands)
    flops: Any = None
    nbytes: Any = None
    kernels: Any = 1.0
    collective: str | None = None
    group: str | None = None  # communication axis: "tp", "dp", "pp"
    when: Any = True
    backward_of: str | None = None


@dataclass(frozen=True)
class Axis:
    """A communication axis as the collectives over it see it."""

    ranks: np.ndarray
    nodes: np.ndarray


def _alltoall(system, nbytes, ax: Axis) -> np.ndarray:
    """All-to-all over an axis, once per distinct (ranks, nodes, bytes); 0 on one rank."""
    n = np.broadcast_to(np.asarray(ax.ranks, dtype=np.int64), np.shape(ax.nodes))
    x = np.broadcast_to(np.asarray(nbytes, dtype=float), n.shape)
    nn = np.broadcast_to(np.asarray(ax.nodes, dtype=np.int64), n.shape)
    out = np.zeros(n.shape)
    live = (n > 1) & (x > 0)
    if live.any():
        out[live] = coll.alltoall_time_s(system, x[live], n[live], np.minimum(nn[live], n[live]))
    return out


def price(kernels: Sequence[Kernel], dev: Device, comm=None,
          axes: Mapping[str, Axis] | None = None, system: coll.NcclSystem | None = None
          ) -> dict[str, np.ndarray]:
    """Time of every kernel, in order (a ``backward_of`` kernel follows the one it derives
    from)."""
    times: dict[str, np.ndarray] = {}
    for kern in kernels:
        if kern.kind == GEMM:
            if kern.peak == "attention":
                t = dev.gemm(kern.m, kern.n, kern.k, dev.attention_peak_flops_per_s,
                             dev.act_bytes)
            else:
                t = dev.gemm(kern.m, kern.n, kern.k)
        elif kern.kind == ATTENTION:
            if kern.backward_of is not None:
                # FlashAttention's backward: 2.5x the forward's FLOPs at the backward
                # kernel's own efficiency, one launch
                # (of the 16-bit forward: an FP8 forward leaves the backward's time)
                ko = dev.eff.kernel_overhead_s
                fwd16 = (times[kern.backward_of] - ko) * dev.attention_forward_speedup
                t = 2.5 * fwd16 * dev.eff.attention / dev.eff.attention_backward + ko
            else:
                t = (kern.flops / (dev.eff.attention * dev.attention_peak_flops_per_s
                                   * dev.attention_forward_speedup)
                     + dev.eff.kernel_overhead_s)
        elif kern.kind == MEMORY:
            t = dev.memop(kern.nbytes, kern.kernels)
        elif kern.kind == COLLECTIVE:
            ax = axes[kern.group]
            t = comm.time_s(kern.collective, kern.nbytes, ax.ranks, ax.nodes)
        elif kern.kind == P2P:
            t = coll.p2p_time_s(system or comm.system, kern.nbytes, axes[kern.group].nodes > 1)
        elif kern.kind == ALLTOALL:
            ax = axes[kern.group]
            t = _alltoall(system or comm.system, kern.nbytes, ax)
        else:  # pragma: no cover - a programming error
            raise ValueError(f"unknown kernel kind {kern.kind!r}")
        if kern.when is not True:
            t = np.where(kern.when, t, 0.0)
        times[kern.name] = t
    return times
