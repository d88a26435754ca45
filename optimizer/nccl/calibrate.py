"""Calibrate NCCL's collective model against nccl-tests and store the result with the cluster.

NCCL's tuning model is built to *rank* algorithms and protocols, not to predict absolute times
(nccl.md §12.1): the graph search's speed arrays are quantised and the protocol efficiencies
are constants. nccl-tests on the target system gives the absolute numbers. This module fits
:class:`costmodel.collectives.NcclCalibration` (a latency scale and an intra-/inter-node
bandwidth scale, :func:`costmodel.collectives.fit_calibration`) to nccl-tests rows and writes
it into the cluster's ``calibration:`` mapping, which :func:`costmodel.collectives.nccl_system`
reads (``nccl_intra_bw_scale``, ``nccl_inter_bw_scale``, ``nccl_latency_scale``). Every later
prediction built from that cluster -- ``optimize nccl --cluster FILE`` and the cost model of
``optimize --cluster FILE`` / ``optimize evaluate`` -- then carries the corrections. NCCL's
choice of algorithm and protocol is never calibrated: it stays NCCL's own (nccl.md §12.1).

Errors are reported as mean absolute percentage errors (MAPE) over the measured rows:

* time: ``mean(|t_pred - t_meas| / t_meas)``;
* busbw: ``mean(|busbw_pred - busbw_meas| / busbw_meas)`` with the nccl-tests bus bandwidth
  ``busbw = S x factor / t`` (nccl.md §6), i.e. ``mean(|t_meas / t_pred - 1|)``.

A model 20 % too fast in bus bandwidth (``busbw_meas = 0.8 x busbw_pred``) shows a busbw MAPE
of 25 % and a time MAPE of 20 % before the fit.

The cluster file is written in the loader's short form (:func:`costmodel.loaders.
cluster_from_mapping`) without ``num_nodes``, so like a preset it is sized by ``--gpus``:
the calibration describes a node type and its fabric, not a node count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from costmodel import collectives as coll
from costmodel.errors import InputError
from costmodel.specs import ClusterSpec

__all__ = [
    "NCCL_CALIBRATION_KEYS", "TABLE_COLLECTIVES", "CalibrationResult", "CalibrationRow",
    "calibrate", "calibrated_cluster", "calibration_from_cluster", "cluster_document",
    "cluster_yaml", "describe", "load_measurements", "row_table", "save_cluster",
]

# The keys nccl_system() reads from ClusterSpec.calibration (costmodel/collectives.py).
NCCL_CALIBRATION_KEYS = ("nccl_intra_bw_scale", "nccl_inter_bw_scale", "nccl_latency_scale")
# Collectives in NCCL's cost table: the ones the fit can use (nccl.md §2; P2P and all-to-all
# are outside the table, nccl.md §7).
TABLE_COLLECTIVES = coll.COLLECTIVES


@dataclass(frozen=True)
class CalibrationRow:
    """One measured row next to the model before and after the fit (SI units)."""

    collective: str
    nbytes: float
    n_ranks: int
    n_nodes: int
    measured_time_s: float
    before_time_s: float
    after_time_s: float
    algo: str  # NCCL's pick (uncalibrated, so the same before and after)
    proto: str

    def busbw_bytes_per_s(self, time_s: float) -> float:
        """nccl-tests bus bandwidth of this row at ``time_s`` (nccl.md §6)."""
        return self.nbytes * float(coll.busbw_factor(self.collective, self.n_ranks)) / time_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective, "size_bytes": self.nbytes,
            "n_ranks": self.n_ranks, "n_nodes": self.n_nodes,
            "algo": self.algo, "proto": self.proto,
            "measured_time_s": self.measured_time_s,
            "before_time_s": self.before_time_s, "after_time_s": self.after_time_s,
            "measured_busbw_GBps": self.busbw_bytes_per_s(self.measured_time_s) / 1e9,
            "before_busbw_GBps": self.busbw_bytes_per_s(self.before_time_s) / 1e9,
            "after_busbw_GBps": self.busbw_bytes_per_s(self.after_time_s) / 1e9,
        }


@dataclass(frozen=True)
class CalibrationResult:
    """The fit and its effect. ``calibration`` is what is stored: the fitted scales, and the
    previous value of a bandwidth scale no row constrains (e.g. the inter-node scale when
    every row ran on one node)."""

    calibration: coll.NcclCalibration
    previous: coll.NcclCalibration
    rows: tuple[CalibrationRow, ...]

    @staticmethod
    def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
        return float(np.mean(np.abs(pred - meas) / meas))

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        meas = np.array([r.measured_time_s for r in self.rows])
        before = np.array([r.before_time_s for r in self.rows])
        after = np.array([r.after_time_s for r in self.rows])
        return meas, before, after

    @property
    def time_mape_before(self) -> float:
        meas, before, _ = self._arrays()
        return self._mape(before, meas)

    @property
    def time_mape_after(self) -> float:
        meas, _, after = self._arrays()
        return self._mape(after, meas)

    @property
    def busbw_mape_before(self) -> float:
        # busbw is proportional to 1/t for a row: |b_pred - b_meas| / b_meas = |t_meas/t_pred - 1|
        meas, before, _ = self._arrays()
        return self._mape(1.0 / before, 1.0 / meas)

    @property
    def busbw_mape_after(self) -> float:
        meas, _, after = self._arrays()
        return self._mape(1.0 / after, 1.0 / meas)

    def to_dict(self) -> dict[str, Any]:
        c = self.calibration
        return {
            "scales": {"nccl_intra_bw_scale": c.intra_bw_scale,
                       "nccl_inter_bw_scale": c.inter_bw_scale,
                       "nccl_latency_scale": c.latency_scale},
            "rows_used": len(self.rows),
            "busbw_mape_before": self.busbw_mape_before,
            "busbw_mape_after": self.busbw_mape_after,
            "time_mape_before": self.time_mape_before,
            "time_mape_after": self.time_mape_after,
            "rows": [r.to_dict() for r in self.rows],
        }


# ---- measurements ------------------------------------------------------------------------------
def load_measurements(paths: Sequence[str | Path], *, n_ranks: int | None = None,
                      n_nodes: int | None = None) -> list[coll.NcclMeasurement]:
    """Rows of one or more saved nccl-tests outputs (text table or ``-J`` JSON), via
    :func:`costmodel.nccl_tests.load_nccl_tests`. ``n_ranks``/``n_nodes`` are used only for
    files that do not say (no ``Rank ... on HOST`` lines); without them such a file raises
    :class:`InputError` naming ``n_ranks``."""
    from costmodel.nccl_tests import load_nccl_tests

    out: list[coll.NcclMeasurement] = []
    for path in paths:
        try:
            rows = load_nccl_tests(path)
        except InputError as e:
            if e.field != "n_ranks" or n_ranks is None:
                raise
            rows = load_nccl_tests(path, n_ranks=n_ranks, n_nodes=n_nodes)
        out.extend(rows)
    return out


def _check_table_rows(rows: Iterable[coll.NcclMeasurement]) -> list[coll.NcclMeasurement]:
    kept = [r for r in rows if int(r.n_ranks) > 1]
    for r in kept:
        if r.collective not in TABLE_COLLECTIVES:
            raise InputError("nccl_tests", f"cannot calibrate from {r.collective} rows: the "
                             "fit uses NCCL's cost table, which covers only "
                             + ", ".join(TABLE_COLLECTIVES),
                             "give all_reduce_perf (best), all_gather_perf, reduce_scatter_perf,"
                             " broadcast_perf or reduce_perf output")
    if not kept:
        raise InputError("nccl_tests", "no row with more than one rank to calibrate from")
    return kept


# ---- the fit -----------------------------------------------------------------------------------
def calibrate(system: coll.NcclSystem, measurements: Iterable[Any]) -> CalibrationResult:
    """Fit the NCCL corrections of ``system`` to ``measurements`` (NcclMeasurement rows).

    "before" uses ``system`` as given (with any calibration it already carries), "after" the
    stored calibration. A bandwidth scale is refitted only when rows constrain it (one-node rows:
    intra, multi-node rows: inter); otherwise its previous value is kept.
    """
    rows = _check_table_rows(
        m if isinstance(m, coll.NcclMeasurement) else coll.NcclMeasurement(**m)
        for m in measurements)
    fitted, _, _ = coll.fit_calibration(system, rows)
    prev = system.calibration
    intra_rows = any(int(r.n_nodes) == 1 for r in rows)
    inter_rows = any(int(r.n_nodes) > 1 for r in rows)
    stored = coll.NcclCalibration(
        intra_bw_scale=fitted.intra_bw_scale if intra_rows else prev.intra_bw_scale,
        inter_bw_scale=fitted.inter_bw_scale if inter_rows else prev.inter_bw_scale,
        latency_scale=fitted.latency_scale)
    after_sys = coll.with_calibration(system, stored)
    out = []
    for r in rows:
        b = coll.collective_time_s(system, r.collective, r.nbytes, r.n_ranks, r.n_nodes,
                                   r.algo, r.proto)
        a = coll.collective_time_s(after_sys, r.collective, r.nbytes, r.n_ranks, r.n_nodes,
                                   r.algo, r.proto)
        out.append(CalibrationRow(
            collective=r.collective, nbytes=float(r.nbytes), n_ranks=int(r.n_ranks),
            n_nodes=int(r.n_nodes), measured_time_s=r.measured_time_s,
            before_time_s=float(b.time_s), after_time_s=float(a.time_s),
            algo=str(b.algo_names()[()]), proto=str(b.proto_names()[()])))
    return CalibrationResult(calibration=stored, previous=prev, rows=tuple(out))


def calibration_from_cluster(cluster: ClusterSpec) -> coll.NcclCalibration:
    """The NCCL corrections a cluster carries (identity when none)."""
    return coll.nccl_system(cluster).calibration


def calibrated_cluster(cluster: ClusterSpec, calibration: coll.NcclCalibration) -> ClusterSpec:
    """``cluster`` with the NCCL keys of its ``calibration`` mapping set to ``calibration``;
    keys of other modules are kept."""
    merged = dict(cluster.calibration or {})
    merged.update({"nccl_intra_bw_scale": calibration.intra_bw_scale,
                   "nccl_inter_bw_scale": calibration.inter_bw_scale,
                   "nccl_latency_scale": calibration.latency_scale})
    return replace(cluster, calibration=merged)


# ---- the cluster file --------------------------------------------------------------------------
def _num(x: float) -> float | int:
    """A float written with 12 significant digits (exact round trips for catalog numbers)."""
    v = float(f"{float(x):.12g}")
    return int(v) if v.is_integer() and abs(v) < 1e15 else v


def _gpu_entry(gpu: Any) -> Any:
    from costmodel.hardware import get_gpu

    try:
        if get_gpu(gpu.name) == gpu:
            return gpu.name
    except InputError:
        pass
    return {
        "name": gpu.name,
        "memory_GB": _num(gpu.memory_bytes / 1e9),
        "memory_bandwidth_GBps": _num(gpu.memory_bandwidth_bytes_per_s / 1e9),
        "peak_tflops": {k: _num(v / 1e12) for k, v in gpu.peak_flops_per_s.items()},
        "nvlink_bandwidth_GBps": _num(gpu.nvlink_bandwidth_bytes_per_s / 1e9),
        "nvlink_links": gpu.nvlink_links,
        "sm_count": gpu.sm_count,
        "compute_capability": gpu.compute_capability,
        "pcie_bandwidth_GBps": _num(gpu.pcie_bandwidth_bytes_per_s / 1e9),
        "source": gpu.source or "custom",
    }


_CALIBRATED_SUFFIX = "-nccl-calibrated"


def _file_name(cluster: ClusterSpec) -> str:
    """A node-count-free name: '1x-dgx-a100-80gb' -> 'dgx-a100-80gb-nccl-calibrated',
    '2x8-a100-sxm-80gb' -> '8xa100-sxm-80gb-nccl-calibrated'."""
    name = cluster.name
    if m := re.fullmatch(r"\d+x-(.+)", name):
        name = m.group(1)
    elif m := re.fullmatch(r"\d+x(\d+)-(.+)", name):
        name = f"{m.group(1)}x{m.group(2)}"
    return name if name.endswith(_CALIBRATED_SUFFIX) else name + _CALIBRATED_SUFFIX


def cluster_document(cluster: ClusterSpec) -> dict[str, Any]:
    """``cluster`` as a cluster document in the loader's short form, without ``num_nodes``.

    Raises :class:`InputError` (field ``--save-cluster``) for a cluster given as a graph JSON:
    the graph form has no ``calibration`` key."""
    if cluster.graph_data is not None:
        raise InputError("--save-cluster", f"the cluster {cluster.name!r} is a node-link graph "
                         "JSON, which cannot carry a calibration",
                         "write a cluster YAML (short form) for the same node, or add the "
                         "printed scales under 'calibration:' in one")
    intra, inter = cluster.intra_node, cluster.inter_node
    doc: dict[str, Any] = {
        "name": _file_name(cluster),
        "gpus_per_node": cluster.gpus_per_node,
        "gpu": _gpu_entry(cluster.gpu),
        "intra_node": {"fabric": intra.fabric,
                       "bandwidth_GBps": _num(intra.bandwidth_bytes_per_s / 1e9),
                       "latency_us": _num(intra.latency_s * 1e6)},
        "inter_node": {"fabric": inter.fabric, "nics_per_node": inter.nics_per_node,
                       "nic_bandwidth_Gbps": _num(inter.nic_bandwidth_bytes_per_s * 8 / 1e9),
                       "oversubscription": _num(inter.oversubscription),
                       "latency_us": _num(inter.latency_s * 1e6)},
    }
    if cluster.calibration:
        doc["calibration"] = {str(k): _num(v) for k, v in cluster.calibration.items()}
    if cluster.source:
        doc["source"] = cluster.source
    return doc


def cluster_yaml(cluster: ClusterSpec, header: Sequence[str] = ()) -> str:
    """The YAML text of :func:`cluster_document`, with ``header`` lines as comments."""
    import yaml

    head = "".join(f"# {line}\n" for line in header)
    return head + yaml.safe_dump(cluster_document(cluster), sort_keys=False,
                                 default_flow_style=False, allow_unicode=True)


def save_cluster(cluster: ClusterSpec, path: str | Path, header: Sequence[str] = ()) -> Path:
    """Write :func:`cluster_yaml` to ``path`` atomically (temp file + fsync + rename)."""
    from optimizer.core.fileio import atomic_write_text

    text = cluster_yaml(cluster, header)
    for key in NCCL_CALIBRATION_KEYS:  # a sanity check: what we wrote must read back
        v = (cluster.calibration or {}).get(key, 1.0)
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise InputError(f"calibration.{key}", f"must be a positive number, got {v!r}")
    return atomic_write_text(path, text, field="--save-cluster")


def describe(result: CalibrationResult) -> list[str]:
    """Human lines: the scales and the error before and after."""
    c = result.calibration
    return [
        f"NCCL calibration from {len(result.rows)} nccl-tests row(s): "
        f"intra-node bandwidth x{c.intra_bw_scale:.4g}, inter-node bandwidth "
        f"x{c.inter_bw_scale:.4g}, latency x{c.latency_scale:.4g}",
        f"busbw error (MAPE) before {100 * result.busbw_mape_before:.1f}%, after "
        f"{100 * result.busbw_mape_after:.1f}%; time error before "
        f"{100 * result.time_mape_before:.1f}%, after {100 * result.time_mape_after:.1f}%",
    ]


def row_table(result: CalibrationResult) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the per-row comparison."""
    from optimizer.nccl.predict import format_size

    headers = ["size", "ranks", "nodes", "NCCL pick", "measured busbw", "model before",
               "err before", "model after", "err after"]
    rows = []
    for r in result.rows:
        mb = r.busbw_bytes_per_s(r.measured_time_s) / 1e9
        bb = r.busbw_bytes_per_s(r.before_time_s) / 1e9
        ab = r.busbw_bytes_per_s(r.after_time_s) / 1e9
        label = (f"{coll.ALGORITHM_DISPLAY[coll.ALGORITHMS.index(r.algo)]}/"
                 f"{coll.PROTOCOL_DISPLAY[coll.PROTOCOLS.index(r.proto)]}")
        rows.append([format_size(r.nbytes), str(r.n_ranks), str(r.n_nodes), label,
                     f"{mb:.2f}", f"{bb:.2f}", f"{100 * (bb - mb) / mb:+.1f}%",
                     f"{ab:.2f}", f"{100 * (ab - mb) / mb:+.1f}%"])
    return headers, rows
