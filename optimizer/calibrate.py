"""Fit per-cluster efficiency scales to the user's measured steps (``optimize calibrate``).

A runs file lists a few measured training steps in the run-file format (``optimize evaluate``:
``model``, ``cluster``, ``training``, ``parallel``) plus ``measured: {step_time_s,
peak_memory_gib}``. :func:`fit` adjusts the scales of
:data:`costmodel.cluster_calibration.EFFICIENCY_PARAMETERS` (GEMM, attention, host,
communication) in three steps: each run's sensitivity ``d log t / d log s`` to each scale (a
5% step; scales no run depends on, below ``MIN_SENSITIVITY``, are dropped); the subset of
scales to fit, chosen by leave-one-out error on a surrogate built from those sensitivities
(:func:`select_parameters`: "no change" unless a subset predicts left-out runs better by
``SELECTION_MARGIN``), so three runs cannot over-fit four scales; then a soft-L1 fit of log
step time with the real cost model over the chosen scales, with a pull towards 1
(``prior_weight``). The selection is plain cross-validated model selection (e.g. Hastie,
Tibshirani, Friedman, *The Elements of Statistical Learning*, 2nd ed., sec. 7.10). The scales
are stored in the cluster file's ``calibration:`` mapping beside NCCL's, and every later
``optimize`` / ``evaluate`` on that cluster file applies them (costmodel.model.run_phases).

Peak memory, when given, is reported (before = after: none of the four scales moves memory).

Runs file::

    cluster: my-cluster.yaml        # optional: the default for runs without a cluster section
    runs:
      - name: 8b-tp1                # optional
        model: llama3-8b
        training: {seq_length: 8192, global_batch_size: 128}
        parallel: {tp: 1, pp: 1, dp: 8, micro_batch_size: 1}
        measured: {step_time_s: 4.2, peak_memory_gib: 61}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.cluster_calibration import EFFICIENCY_PARAMETERS, scales_of
from costmodel.errors import InputError

MAX_RUNS = 10_000  # measured steps in one runs file
MIN_SENSITIVITY = 0.01  # |d log t / d log scale| below this on every run: not fitted
PRIOR_WEIGHT = 0.3  # residual weight of log(scale), a pull towards 1: with 3 runs of the
# published groups and the selection below, 0.3 held out best of 0.1, 0.3, 0.5, 1 and 3
# (benchmarks/calibrate_groups.py; tuned on those same groups)
SCALE_BOUNDS = (0.2, 5.0)  # fitted scales stay within these (then flagged)
SENSITIVITY_STEP = 0.05  # relative step on a scale for d log t / d log s
SELECTION_MARGIN = 0.2  # a subset must beat the best held-out error so far by this share
# (0, 0.1 and 0.2 tried on the published groups; 0.2 made the fewest groups worse)
ROBUST_SCALE = 0.05  # soft-L1 scale on log residuals (0: plain least squares; 0.05 and 0.1
# tried: 0.05 keeps one far-off run of three from pulling the fit, e.g. dense GB200's 128-GPU run)
LOO_MAX_FOLDS = 10  # leave-one-out up to this many runs, then this many folds
_MEASURED_KEYS = ("step_time_s", "peak_memory_gib")
_RUN_ITEM_KEYS = ("model", "cluster", "training", "parallel", "name", "measured")
_FILE_KEYS = ("runs", "cluster", "schema_version")


@dataclass(frozen=True)
class Observation:
    """One measured step: the run's specs and what was measured."""

    name: str
    model: Any
    cluster: Any
    training: Any
    parallel: Any
    step_time_s: float
    peak_memory_bytes: float | None = None


@dataclass(frozen=True)
class RunResidual:
    name: str
    measured_s: float
    before_s: float
    after_s: float
    measured_memory_bytes: float | None = None
    predicted_memory_bytes: float | None = None

    @property
    def error_before(self) -> float:
        return self.before_s / self.measured_s - 1.0

    @property
    def error_after(self) -> float:
        return self.after_s / self.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "measured_step_time_s": self.measured_s,
             "predicted_before_s": self.before_s, "predicted_after_s": self.after_s,
             "error_before": self.error_before, "error_after": self.error_after,
             "log_residual_before": math.log(self.before_s / self.measured_s),
             "log_residual_after": math.log(self.after_s / self.measured_s)}
        if self.measured_memory_bytes is not None:
            d["measured_peak_memory_bytes"] = self.measured_memory_bytes
            d["predicted_peak_memory_bytes"] = self.predicted_memory_bytes
            d["memory_error"] = (self.predicted_memory_bytes / self.measured_memory_bytes - 1.0
                                 if self.predicted_memory_bytes else None)
        return d


@dataclass(frozen=True)
class Candidate:
    """One parameter subset the selection tried, with its held-out error."""

    parameters: tuple[str, ...]
    held_out_error: float


@dataclass(frozen=True)
class FitResult:
    scales: dict[str, float]  # every parameter (1 where not fitted)
    previous: dict[str, float]  # the scales the clusters carried before
    fitted: tuple[str, ...]  # the parameters the fit moved
    sensitivity: dict[str, float]  # max |d log t / d log scale| over the runs, at the start
    runs: tuple[RunResidual, ...]
    at_bound: tuple[str, ...] = field(default=())
    kernels: dict[str, Any] | None = None  # the kernel sweep's fit (optimize calibrate --kernels)
    candidates: tuple[Candidate, ...] = ()  # the subsets the selection tried (fit(select=True))

    @staticmethod
    def _mape(errs: Sequence[float]) -> float:
        return float(np.mean(np.abs(errs))) if len(errs) else 0.0

    @property
    def mape_before(self) -> float:
        return self._mape([r.error_before for r in self.runs])

    @property
    def mape_after(self) -> float:
        return self._mape([r.error_after for r in self.runs])

    @property
    def rms_log_before(self) -> float:
        if not self.runs:
            return 0.0
        return float(np.sqrt(np.mean([math.log(r.before_s / r.measured_s) ** 2
                                      for r in self.runs])))

    @property
    def rms_log_after(self) -> float:
        if not self.runs:
            return 0.0
        return float(np.sqrt(np.mean([math.log(r.after_s / r.measured_s) ** 2
                                      for r in self.runs])))

    def calibration_keys(self) -> dict[str, float]:
        """The ``calibration:`` entries to store (scales that differ from 1)."""
        return {EFFICIENCY_PARAMETERS[n][0]: float(f"{v:.6g}") for n, v in self.scales.items()
                if v != 1.0}

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": [{"name": n, "key": EFFICIENCY_PARAMETERS[n][0],
                            "scales": EFFICIENCY_PARAMETERS[n][1],
                            "value": self.scales[n], "previous": self.previous[n],
                            "fitted": n in self.fitted, "at_bound": n in self.at_bound,
                            "sensitivity": self.sensitivity[n]}
                           for n in EFFICIENCY_PARAMETERS],
            "calibration": self.calibration_keys(),
            "runs": [r.to_dict() for r in self.runs],
            "step_time_mape_before": self.mape_before,
            "step_time_mape_after": self.mape_after,
            "rms_log_residual_before": self.rms_log_before,
            "rms_log_residual_after": self.rms_log_after,
            "selection": [{"parameters": list(c.parameters),
                           "held_out_error": c.held_out_error} for c in self.candidates],
            **({"kernels": self.kernels} if self.kernels else {}),
        }


# ---- input --------------------------------------------------------------------------------------
def _positive(field_name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise InputError(field_name, f"must be a positive number, got {value!r}")
    return float(value)


def load_runs(path: str | Path) -> list[Observation]:
    """The runs file at ``path`` (see the module docstring); every error an InputError naming
    the field (``runs[2].measured.step_time_s``)."""
    from costmodel import limits, loaders
    from costmodel.loaders import read_document

    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError("--runs", f"no such file: {str(path)!r}",
                         "a YAML or JSON file with a 'runs:' list")
    doc = read_document(p, field="--runs")
    if isinstance(doc, list):
        doc = {"runs": doc}
    if not isinstance(doc, Mapping):
        raise InputError("--runs", f"must be a mapping with a 'runs:' list, got "
                         f"{type(doc).__name__}")
    unknown = [k for k in doc if k not in _FILE_KEYS]
    if unknown:
        raise InputError(str(unknown[0]), "unknown key", f"valid: {', '.join(_FILE_KEYS)}")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise InputError("runs", "missing or empty", "a list of runs, each in the run-file "
                         "format plus 'measured: {step_time_s: ...}'")
    if len(runs) > MAX_RUNS:
        raise InputError("runs", f"{len(runs):,} runs; at most {MAX_RUNS:,}")
    default_cluster = doc.get("cluster")
    out: list[Observation] = []
    for i, item in enumerate(runs):
        where = f"runs[{i}]"
        if not isinstance(item, Mapping):
            raise InputError(where, f"must be a mapping, got {type(item).__name__}")
        bad = [k for k in item if k not in _RUN_ITEM_KEYS]
        if bad:
            raise InputError(f"{where}.{bad[0]}", "unknown key",
                             f"valid: {', '.join(_RUN_ITEM_KEYS)}")
        measured = item.get("measured")
        if not isinstance(measured, Mapping):
            raise InputError(f"{where}.measured", "missing (a mapping)",
                             "measured: {step_time_s: 1.23, peak_memory_gib: 60}")
        bad = [k for k in measured if k not in _MEASURED_KEYS]
        if bad:
            raise InputError(f"{where}.measured.{bad[0]}", "unknown key",
                             f"valid: {', '.join(_MEASURED_KEYS)}")
        if "step_time_s" not in measured:
            raise InputError(f"{where}.measured.step_time_s", "missing",
                             "the measured time of one optimizer step, in seconds")
        step = _positive(f"{where}.measured.step_time_s", measured["step_time_s"])
        mem = measured.get("peak_memory_gib")
        mem_b = None if mem is None else _positive(f"{where}.measured.peak_memory_gib",
                                                    mem) * 2**30
        run_doc = {k: v for k, v in item.items() if k not in ("measured",)}
        run_doc.setdefault("cluster", default_cluster)
        if run_doc["cluster"] is None:
            raise InputError(f"{where}.cluster", "missing",
                             "give it here or once at the top of the file ('cluster:')")
        try:
            run = loaders.load_run(run_doc, base_dir=p.parent)
            limits.check_problem_inputs(run.model, run.cluster, run.training)
            _check_layout(run)
        except InputError as e:
            raise InputError(f"{where}.{e.field}" if e.field else where, e.message,
                             e.hint) from None
        out.append(Observation(str(item.get("name") or f"run{i}"), run.model, run.cluster,
                               run.training, run.parallel, step, mem_b))
    _same_hardware(out)
    return out


def _check_layout(run: Any) -> None:
    """The validity rules ``optimize evaluate`` applies (field ``parallel (rule)``)."""
    from search_spaces.rules import Context, explain

    violations = tuple(explain(Context(run.model, run.cluster, run.training,
                                       allow_cross_node_tp=True), run.parallel))
    if violations:
        rule, reason = violations[0]
        raise InputError(f"parallel ({rule})", reason, "fix the run's parallel section")


def _hardware_key(cluster: Any) -> tuple:
    return (cluster.gpu, cluster.gpus_per_node, cluster.intra_node, cluster.inter_node,
            cluster.domain_gpus)


def _same_hardware(obs: Sequence[Observation]) -> None:
    first = _hardware_key(obs[0].cluster)
    for i, o in enumerate(obs[1:], 1):
        if _hardware_key(o.cluster) != first:
            raise InputError(f"runs[{i}].cluster", "differs from runs[0]'s node type (GPU, GPUs "
                             "per node or fabric)", "calibrate one cluster at a time; the "
                             "runs may differ in node count only")


# ---- the fit ------------------------------------------------------------------------------------
def _with_scales(cluster: Any, scales: Mapping[str, float]) -> Any:
    cal = {k: v for k, v in dict(cluster.calibration or {}).items()
           if k not in {key for key, _ in EFFICIENCY_PARAMETERS.values()}}
    for name, (key, _) in EFFICIENCY_PARAMETERS.items():
        v = float(scales.get(name, 1.0))
        if v != 1.0:
            cal[key] = v
    return replace(cluster, calibration=cal or None)


def predict(obs: Sequence[Observation], scales: Mapping[str, float]
            ) -> tuple[np.ndarray, np.ndarray]:
    """(step times, peak memory) of every observation with its cluster carrying ``scales``;
    one ``score`` call per (model, cluster, training)."""
    from costmodel.batch import ConfigBatch
    from costmodel.model import score

    groups: dict[tuple, list[int]] = {}
    for i, o in enumerate(obs):
        groups.setdefault((o.model, _with_scales(o.cluster, scales), o.training), []).append(i)
    t = np.empty(len(obs))
    mem = np.empty(len(obs))
    for (model, cluster, training), idx in groups.items():
        sc = score(model, cluster, training,
                   ConfigBatch.from_configs([obs[i].parallel for i in idx]))
        t[idx] = np.asarray(sc.step_time_s, dtype=float)
        mem[idx] = np.asarray(sc.peak_memory_bytes, dtype=float)
    return t, mem


def sensitivity_matrix(obs: Sequence[Observation], previous: Mapping[str, float],
                       t0: np.ndarray, step: float = SENSITIVITY_STEP) -> np.ndarray:
    """``J[i, k] = d log t_i / d log s_k`` at ``previous``, by a forward step of ``step``
    (5%) on each scale; shape (runs, parameters in EFFICIENCY_PARAMETERS order)."""
    cols = []
    for n in EFFICIENCY_PARAMETERS:
        s = dict(previous)
        s[n] = previous[n] * (1.0 + step)
        t1, _ = predict(obs, s)
        cols.append(np.log(t1 / t0) / math.log1p(step))
    return np.stack(cols, axis=1)


def surrogate_log_ratio(jac: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """``log(t(s) / t(previous))`` of each run for log-scale steps ``dx`` (one per column of
    ``jac``), from the sensitivities alone: a parameter with ``J < 0`` scales a share ``|J|``
    of the step as ``1/s`` (a throughput), one with ``J > 0`` a share ``J`` as ``s`` (host
    time), the rest of the step stays: ``t/t0 = 1 + sum_k |J_k| (exp(sign(J_k) dx_k) - 1)``
    (exact for a sum of such terms; the cost model's overlaps make it an approximation)."""
    ratio = 1.0 + np.sum(np.abs(jac) * np.expm1(np.sign(jac) * dx[None, :]), axis=1)
    return np.log(np.maximum(ratio, 1e-6))


def robust_residual(r: np.ndarray, scale: float | None = None) -> np.ndarray:
    """``r`` mapped so that its square is the soft-L1 loss ``2 c^2 (sqrt(1 + (r/c)^2) - 1)``
    (quadratic within ``c``, linear beyond: one run far off pulls the fit less); ``r`` itself
    when ``scale`` is None."""
    c = ROBUST_SCALE if scale is None else scale
    if not c:
        return r
    return np.sign(r) * c * np.sqrt(2.0 * (np.sqrt(1.0 + (r / c) ** 2) - 1.0))


def _surrogate_fit(jac: np.ndarray, err: np.ndarray, x_prev: np.ndarray, prior_weight: float
                   ) -> np.ndarray:
    """The log-scale steps minimising ``sum (log ratio + err)^2 + w sum (x_prev + dx)^2`` on
    the surrogate (``err = log predicted - log measured`` at ``previous``)."""
    from scipy.optimize import least_squares

    lo, hi = (math.log(b) for b in SCALE_BOUNDS)
    w = math.sqrt(prior_weight)

    def res(dx: np.ndarray) -> np.ndarray:
        return np.concatenate([robust_residual(surrogate_log_ratio(jac, dx) + err),
                               w * (x_prev + dx)])

    x0 = np.zeros(len(x_prev))
    sol = least_squares(res, x0, bounds=(lo - x_prev - 1e-12, hi - x_prev + 1e-12),
                        xtol=1e-10, ftol=1e-12, gtol=1e-12, max_nfev=200)
    return sol.x


def held_out_error(jac: np.ndarray, err: np.ndarray, x_prev: np.ndarray, prior_weight: float,
                   folds: int = LOO_MAX_FOLDS) -> float:
    """Mean |predicted / measured - 1| of each run predicted from a surrogate fit on the others
    (leave-one-out; ``folds``-fold cross-validation, runs ``i % folds``, beyond ``folds`` runs).
    With no columns it is the error of no change."""
    n = len(err)
    if jac.shape[1] == 0:
        return float(np.mean(np.abs(np.expm1(err))))
    k = min(n, folds)
    out = np.empty(n)
    for f in range(k):
        test = np.arange(n) % k == f
        dx = _surrogate_fit(jac[~test], err[~test], x_prev, prior_weight)
        out[test] = np.abs(np.expm1(surrogate_log_ratio(jac[test], dx) + err[test]))
    return float(np.mean(out))


def select_parameters(jac: np.ndarray, err: np.ndarray, names: Sequence[str],
                      x_prev: np.ndarray, prior_weight: float,
                      margin: float = SELECTION_MARGIN
                      ) -> tuple[tuple[str, ...], tuple[Candidate, ...]]:
    """The subset of ``names`` (columns of ``jac``) to fit: every subset of at most ``runs - 1``
    parameters, the empty one (no change) included, scored by its held-out error
    (:func:`held_out_error`); a subset replaces the best so far only when its error is below
    the best's by more than ``margin`` (relative), smaller subsets tried first, so that no
    change wins ties and a parameter is fitted only when it predicts runs it was not fitted
    on. Returns (chosen, every candidate)."""
    from itertools import combinations

    n = len(err)
    cands = [Candidate((), held_out_error(jac[:, :0], err, x_prev[:0], prior_weight))]
    best = cands[0]
    if n < 2:
        return (), tuple(cands)
    for size in range(1, min(len(names), n - 1) + 1):
        for sub in combinations(range(len(names)), size):
            idx = list(sub)
            c = Candidate(tuple(names[i] for i in idx),
                          held_out_error(jac[:, idx], err, x_prev[idx], prior_weight))
            cands.append(c)
            if c.held_out_error < best.held_out_error * (1.0 - margin):
                best = c
    return best.parameters, tuple(cands)


def fit(obs: Sequence[Observation], *, parameters: Sequence[str] | None = None,
        prior_weight: float = PRIOR_WEIGHT, select: bool = True) -> FitResult:
    """Least squares on log step time over the scales in ``parameters`` (default: all) that
    the runs depend on; with ``select`` (the default) only the subset of them chosen by
    held-out error (:func:`select_parameters`; none when nothing predicts held-out runs
    better than no change, and with a single run the one parameter it depends on most)."""
    from scipy.optimize import least_squares

    if not obs:
        raise InputError("runs", "missing or empty")
    names = list(parameters or EFFICIENCY_PARAMETERS)
    for n in names:
        if n not in EFFICIENCY_PARAMETERS:
            raise InputError("--params", f"unknown parameter {n!r}",
                             f"valid: {', '.join(EFFICIENCY_PARAMETERS)}")
    previous = scales_of(obs[0].cluster.calibration)
    meas = np.log([o.step_time_s for o in obs])
    t0, mem0 = predict(obs, previous)
    if not np.all(np.isfinite(t0) & (t0 > 0)):
        bad = int(np.flatnonzero(~(np.isfinite(t0) & (t0 > 0)))[0])
        raise InputError(f"runs[{bad}]", "the model cannot score this run "
                         "(no finite step time)", "check its parallel layout")
    order = list(EFFICIENCY_PARAMETERS)
    jac_all = sensitivity_matrix(obs, previous, t0)
    sens = {n: float(np.max(np.abs(jac_all[:, k]))) for k, n in enumerate(order)}
    free = [n for n in names if sens[n] >= MIN_SENSITIVITY]
    cols = [order.index(n) for n in free]
    x_prev = np.array([math.log(previous[n]) for n in free])
    candidates: tuple[Candidate, ...] = ()
    if select and len(obs) == 1:
        free = sorted(free, key=lambda n: -sens[n])[:1]
    elif select and free:
        chosen, candidates = select_parameters(jac_all[:, cols], np.log(t0) - meas, free,
                                               x_prev, prior_weight)
        free = list(chosen)
    x_prev = np.array([math.log(previous[n]) for n in free])

    lo, hi = (math.log(b) for b in SCALE_BOUNDS)

    def scales_at(x: np.ndarray) -> dict[str, float]:
        s = dict(previous)
        s.update({n: float(math.exp(v)) for n, v in zip(free, x, strict=True)})
        return s

    def residuals(x: np.ndarray) -> np.ndarray:
        t, _ = predict(obs, scales_at(x))
        return np.concatenate([robust_residual(np.log(t) - meas),
                               math.sqrt(prior_weight) * x])

    scales = dict(previous)
    if free:
        res = least_squares(residuals, np.clip(x_prev, lo + 1e-9, hi - 1e-9),
                            bounds=(lo, hi), diff_step=1e-3, xtol=1e-10, ftol=1e-12,
                            gtol=1e-12, max_nfev=200)
        scales = scales_at(res.x)
    t1, _ = predict(obs, scales)
    at_bound = tuple(n for n in free if not (SCALE_BOUNDS[0] * 1.001 < scales[n]
                                             < SCALE_BOUNDS[1] / 1.001))
    scales = {n: float(f"{v:.6g}") for n, v in scales.items()}
    rows = tuple(RunResidual(o.name, o.step_time_s, float(t0[i]), float(t1[i]),
                             o.peak_memory_bytes,
                             float(mem0[i]) if o.peak_memory_bytes is not None else None)
                 for i, o in enumerate(obs))
    return FitResult(scales=scales, previous=previous,
                     fitted=tuple(n for n in free if scales[n] != previous[n]),
                     sensitivity=sens, runs=rows, at_bound=at_bound,
                     candidates=candidates)


# ---- storing ------------------------------------------------------------------------------------
def calibrated_cluster(cluster: Any, result: FitResult) -> Any:
    """``cluster`` with the fitted scales in its calibration (NCCL's keys kept)."""
    return _with_scales(cluster, result.scales)


def save_cluster(cluster: Any, result: FitResult, path: str | Path,
                 header: Sequence[str] = ()) -> Path:
    """Write the cluster file (node-count free, as ``optimize nccl --save-cluster`` does) with
    the fitted scales beside any NCCL calibration; returns the path."""
    import yaml

    from optimizer.core.fileio import atomic_write_text
    from optimizer.nccl.calibrate import cluster_document

    doc = cluster_document(calibrated_cluster(cluster, result))
    doc["name"] = str(doc["name"]).removesuffix("-nccl-calibrated") + "-calibrated"
    head = "".join(f"# {line}\n" for line in header)
    text = head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False,
                                 allow_unicode=True)
    return atomic_write_text(path, text, field="--save-cluster")


def describe(result: FitResult) -> list[str]:
    fitted = ", ".join(f"{n} x{result.scales[n]:.3f}" for n in result.fitted) or "none"
    lines = []
    if result.kernels:
        k = result.kernels
        lines.append("kernel sweep: " + ", ".join(
            f"{n} x{v:.3f} ({k['records'][n]} timings, time MAPE "
            f"{100 * k['time_mape_before'][n]:.1f}% -> {100 * k['time_mape_after'][n]:.1f}%)"
            for n, v in k["scales"].items()))
    lines += [f"efficiency calibration from {len(result.runs)} measured step(s): {fitted}",
             f"step-time MAPE {100 * result.mape_before:.1f}% -> {100 * result.mape_after:.1f}%"
             f"; RMS log residual {result.rms_log_before:.3f} -> {result.rms_log_after:.3f}"]
    from_kernels = set((result.kernels or {}).get("scales", {}))
    idle = [n for n in EFFICIENCY_PARAMETERS if n not in result.fitted and n not in from_kernels]
    if result.candidates:
        best = min(result.candidates, key=lambda c: c.held_out_error)
        none = result.candidates[0]
        chosen = next((c for c in result.candidates if set(c.parameters) == set(result.fitted)),
                      None)
        lines.append(
            f"chosen by left-out error over {len(result.candidates)} parameter subsets: "
            f"no change {100 * none.held_out_error:.1f}%"
            + (f", chosen {'+'.join(chosen.parameters) or 'none'} "
               f"{100 * chosen.held_out_error:.1f}%" if chosen is not None and chosen.parameters
               else "")
            + (f", lowest {'+'.join(best.parameters) or 'none'} "
               f"{100 * best.held_out_error:.1f}%" if best is not chosen else "")
            + f" (a larger subset must beat the best by {100 * SELECTION_MARGIN:.0f}%)")
    if idle and result.runs:
        lines.append("not fitted (the runs barely depend on them, left-out runs do not "
                     "confirm them, or not asked): "
                     + ", ".join(f"{n} (sensitivity {result.sensitivity[n]:.3f})" for n in idle))
    if result.at_bound:
        lines.append("warning: at the bound " f"{SCALE_BOUNDS}: {', '.join(result.at_bound)} "
                     "(the model misses something these runs do; check the run files)")
    return lines


def tables(result: FitResult) -> tuple[tuple[list[str], list[list[str]]],
                                         tuple[list[str], list[list[str]]]]:
    """(parameters table, runs table) for the printed report."""
    p_rows = [[n, EFFICIENCY_PARAMETERS[n][0], f"{result.previous[n]:.3f}",
               f"{result.scales[n]:.3f}", f"{result.sensitivity[n]:.3f}",
               "yes" if n in result.fitted else "no"] for n in EFFICIENCY_PARAMETERS]
    has_mem = any(r.measured_memory_bytes is not None for r in result.runs)
    head = ["run", "measured s", "before s", "err before", "after s", "err after"]
    if has_mem:
        head += ["mem GiB", "pred GiB"]
    r_rows = []
    for r in result.runs:
        row = [r.name, f"{r.measured_s:.4g}", f"{r.before_s:.4g}", f"{100 * r.error_before:+.1f}%",
               f"{r.after_s:.4g}", f"{100 * r.error_after:+.1f}%"]
        if has_mem:
            row += (["-", "-"] if r.measured_memory_bytes is None else
                    [f"{r.measured_memory_bytes / 2**30:.1f}",
                     f"{(r.predicted_memory_bytes or 0) / 2**30:.1f}"])
        r_rows.append(row)
    return ((["parameter", "key", "before", "after", "sensitivity", "fitted"], p_rows),
            (head, r_rows))
