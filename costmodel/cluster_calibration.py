"""Per-cluster efficiency scales fitted from the user's own measured steps.

``optimize calibrate --runs RUNS.yaml`` (:mod:`optimizer.calibrate`) fits these and stores them
in the cluster file's ``calibration:`` mapping beside NCCL's scales (``nccl_*``, read by
:func:`costmodel.collectives.nccl_system`); :func:`costmodel.model.run_phases` applies them on
top of the architecture's :class:`~costmodel.calibration.Efficiency` and the framework's
profile whenever the cluster carries them. Each is a multiplier, 1 = uncalibrated:

- ``eff_gemm_scale``: the GEMMs' achieved fraction of peak (``Efficiency.gemm``; fp8 and NVFP4
  GEMMs follow, being fractions of it);
- ``eff_attention_scale``: the fused attention kernels' fraction of peak, forward and backward;
- ``eff_host_scale``: host-side time: the framework's per-layer dispatch and per-collective
  host cost, the per-kernel launch overhead and the per-step overhead;
- ``eff_comm_scale``: NCCL's achieved bandwidth on every link class (on top of any
  ``nccl_intra_bw_scale`` / ``nccl_inter_bw_scale``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from costmodel.calibration import Efficiency, FrameworkCosts

# name -> (key in cluster.calibration, what it scales)
EFFICIENCY_PARAMETERS: dict[str, tuple[str, str]] = {
    "gemm": ("eff_gemm_scale", "GEMM throughput (fraction of the Tensor-Core peak)"),
    "attention": ("eff_attention_scale", "fused attention throughput, forward and backward"),
    "host": ("eff_host_scale", "host time: per-layer dispatch, kernel launch, per-step"),
    "comm": ("eff_comm_scale", "NCCL bandwidth, intra- and inter-node"),
}
EFFICIENCY_KEYS: tuple[str, ...] = tuple(k for k, _ in EFFICIENCY_PARAMETERS.values())


def scales_of(calibration: Mapping[str, Any] | None) -> dict[str, float]:
    """``{parameter name: scale}`` for the efficiency keys a cluster's calibration carries
    (absent keys are 1)."""
    raw = dict(calibration or {})
    return {name: float(raw.get(key, 1.0)) for name, (key, _) in EFFICIENCY_PARAMETERS.items()}


def is_calibrated(calibration: Mapping[str, Any] | None) -> bool:
    return any(v != 1.0 for v in scales_of(calibration).values())


def apply_scales(eff: Efficiency, fw: FrameworkCosts, system: Any,
                 scales: Mapping[str, float]) -> tuple[Efficiency, FrameworkCosts, Any]:
    """``(efficiency, framework, nccl system)`` with the scales applied; unchanged objects
    when every scale is 1 (so an uncalibrated cluster scores bit for bit as before)."""
    g = float(scales.get("gemm", 1.0))
    a = float(scales.get("attention", 1.0))
    h = float(scales.get("host", 1.0))
    c = float(scales.get("comm", 1.0))
    if g != 1.0:
        eff = replace(eff, gemm=eff.gemm * g)
    if a != 1.0:
        eff = replace(eff, attention=eff.attention * a,
                      attention_bwd=None if eff.attention_bwd is None else eff.attention_bwd * a)
    if h != 1.0:
        eff = replace(eff, kernel_overhead_s=eff.kernel_overhead_s * h,
                      step_overhead_s=eff.step_overhead_s * h)
        fw = replace(fw, host=replace(fw.host, layer_pass_s=fw.host.layer_pass_s * h,
                                      collective_host_s=fw.host.collective_host_s * h))
    if c != 1.0:
        cal = system.calibration
        system = replace(system, calibration=replace(
            cal, intra_bw_scale=cal.intra_bw_scale * c, inter_bw_scale=cal.inter_bw_scale * c))
    return eff, fw, system
