"""GEMM and attention scales from a GPU kernel sweep (``benchmarks/gpu/kernel_sweep.py``).

The sweep times bf16 GEMMs and fused causal attention (PyTorch SDPA) at transformer shapes
on one GPU and writes a JSON file (``format: paraplan-kernel-sweep/1``, the GPU's catalog key
under ``gpu``). ``optimize calibrate --kernels SWEEP.json`` prices each record with the cost
model's own kernel formulas (:func:`costmodel.compute.gemm_time_s`; attention at
``Efficiency.attention`` / ``attention_backward`` of the 16-bit peak on the FLOPs a causal
kernel executes) and fits ``eff_gemm_scale`` and ``eff_attention_scale`` by least squares on
log time. They go into the same cluster ``calibration:`` store as ``--runs``; with both, the
kernels fix those two scales and the measured steps fit the rest (host, communication).

A kernel scale describes isolated kernels: end-to-end training GEMMs reach less (the model's
``Efficiency.gemm`` is already fitted to training runs), so the scale is the sweep's ratio to
what the model assumes for the same shapes, and a user whose cuBLAS is faster or slower than
the catalog's GPU sees that ratio move both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.errors import InputError

FORMAT = "paraplan-kernel-sweep/1"
MAX_RECORDS = 100_000


@dataclass(frozen=True)
class Sweep:
    gpu: str  # catalog key
    device: str  # what torch reported
    gemm: tuple[dict, ...]
    attention: tuple[dict, ...]
    path: str = ""


def _pos(where: str, rec: Mapping[str, Any], key: str) -> float:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise InputError(f"{where}.{key}", f"must be a positive number, got {v!r}")
    return float(v)


def load_sweep(path: str | Path) -> Sweep:
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError("--kernels", f"no such file: {str(path)!r}",
                         "the JSON written by benchmarks/gpu/kernel_sweep.py")
    from costmodel.loaders import read_document

    doc = read_document(p, field="--kernels")  # the file limits of docs/limits.md
    if not isinstance(doc, Mapping):
        raise InputError("--kernels", "must be a JSON object")
    if doc.get("format") != FORMAT:
        raise InputError("format", f"{doc.get('format')!r} is not a kernel sweep",
                         f"expected {FORMAT!r} (benchmarks/gpu/kernel_sweep.py)")
    from costmodel.hardware import get_gpu

    gpu = doc.get("gpu")
    if not isinstance(gpu, str):
        raise InputError("gpu", "missing", "the GPU's catalog key (kernel_sweep.py --gpu KEY)")
    get_gpu(gpu)  # an InputError naming 'gpu' when unknown
    recs = doc.get("records")
    if not isinstance(recs, list):
        raise InputError("records", "missing (a list)")
    if len(recs) > MAX_RECORDS:
        raise InputError("records", f"{len(recs):,} records; at most {MAX_RECORDS:,}")
    gemm, attn = [], []
    for i, r in enumerate(recs):
        where = f"records[{i}]"
        if not isinstance(r, Mapping) or "error" in r:
            continue
        if r.get("kind") == "gemm" and r.get("dtype") == "bf16":
            for key in ("m", "n", "k", "time_s"):
                _pos(where, r, key)
            gemm.append(dict(r))
        elif r.get("kind") == "attention" and r.get("dtype", "bf16") == "bf16":
            for key in ("b", "heads", "s", "head_dim", "fwd_s", "fwd_bwd_s"):
                _pos(where, r, key)
            attn.append(dict(r))
    if not gemm and not attn:
        raise InputError("records", "no bf16 GEMM or attention measurement")
    return Sweep(gpu, str(doc.get("device", "")), tuple(gemm), tuple(attn), str(p))


@dataclass(frozen=True)
class KernelFit:
    scales: dict[str, float]  # the fitted ones only (gemm and/or attention)
    records: dict[str, int]
    mape_before: dict[str, float]
    mape_after: dict[str, float]
    cluster: Any = None

    def as_fit_result(self):
        from optimizer.calibrate import EFFICIENCY_PARAMETERS, FitResult

        full = {n: self.scales.get(n, 1.0) for n in EFFICIENCY_PARAMETERS}
        return FitResult(scales=full, previous={n: 1.0 for n in EFFICIENCY_PARAMETERS},
                         fitted=tuple(self.scales), runs=(),
                         sensitivity={n: 1.0 if n in self.scales else 0.0
                                      for n in EFFICIENCY_PARAMETERS},
                         kernels=self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"scales": self.scales, "records": self.records,
                "time_mape_before": self.mape_before, "time_mape_after": self.mape_after}


def _gemm_times(sweep: Sweep, gpu: Any, eff: Any) -> np.ndarray:
    from costmodel.compute import gemm_time_s

    m = np.array([r["m"] for r in sweep.gemm], float)
    n = np.array([r["n"] for r in sweep.gemm], float)
    k = np.array([r["k"] for r in sweep.gemm], float)
    return gemm_time_s(m, n, k, peak_flops_per_s=gpu.peak_flops_per_s["bf16"],
                       mem_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                       elem_bytes=2, eff=eff, sm_count=gpu.sm_count)


def _attention_times(sweep: Sweep, gpu: Any, eff: Any) -> np.ndarray:
    """Forward, then forward + backward, per record: executed causal FLOPs (half the square)
    at the attention fractions of the 16-bit peak, as costmodel/pricing.py prices them."""
    peak = gpu.peak_flops_per_s["bf16"]
    out = []
    for r in sweep.attention:
        fwd_flops = 2.0 * r["b"] * r["heads"] * r["s"] * r["s"] * r["head_dim"]
        fwd = fwd_flops / (eff.attention * peak) + eff.kernel_overhead_s
        bwd = 2.5 * fwd_flops / (eff.attention_backward * peak) + eff.kernel_overhead_s
        out += [fwd, fwd + bwd]
    return np.array(out)


def fit_kernels(sweep: Sweep, cluster: Any = None, *, framework: str = "megatron") -> KernelFit:
    from scipy.optimize import minimize_scalar

    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.hardware import get_gpu

    gpu = get_gpu(sweep.gpu)
    if cluster is not None and cluster.gpu.name != gpu.name:
        raise InputError("--kernels", f"the sweep is of {gpu.name}, the cluster has "
                         f"{cluster.gpu.name}", "sweep the cluster's GPU")
    eff = efficiency_for(gpu.compute_capability, FRAMEWORKS[framework].kernels.attention_kernel)
    scales, counts, before, after = {}, {}, {}, {}
    parts = []
    if sweep.gemm:
        parts.append(("gemm", np.array([r["time_s"] for r in sweep.gemm]),
                      lambda s: _gemm_times(sweep, gpu, replace(eff, gemm=eff.gemm * s))))
    if sweep.attention:
        meas = np.array([t for r in sweep.attention for t in (r["fwd_s"], r["fwd_bwd_s"])])
        parts.append(("attention", meas, lambda s: _attention_times(sweep, gpu, replace(
            eff, attention=eff.attention * s,
            attention_bwd=None if eff.attention_bwd is None else eff.attention_bwd * s))))
    for name, meas, times in parts:
        def loss(x, meas=meas, times=times):
            return float(np.sum((np.log(times(math.exp(x))) - np.log(meas)) ** 2))
        res = minimize_scalar(loss, bounds=(math.log(0.2), math.log(5.0)), method="bounded",
                              options={"xatol": 1e-6})
        s = float(f"{math.exp(res.x):.6g}")
        scales[name] = s
        counts[name] = len(meas)
        before[name] = float(np.mean(np.abs(times(1.0) / meas - 1)))
        after[name] = float(np.mean(np.abs(times(s) / meas - 1)))
    return KernelFit(scales, counts, before, after, cluster)
