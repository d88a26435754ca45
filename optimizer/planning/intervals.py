"""Error bars: an 80% interval on every step-time (and peak-memory) prediction, from the
validation residuals of comparable published runs.

Residuals are ``log(measured / predicted)`` of the runs ``optimize validate`` re-scores
(shipped in ``residuals.json``, regenerated with ``python -m optimizer.planning.intervals``
from the validation data; see :func:`refresh`). A prediction's runs are *comparable* when they
share the hardware generation (ampere, hopper, blackwell, cdna3, ... from the GPU key), the framework family
(``megatron`` | ``deepspeed`` | ``fsdp``), the scale (one node, or several) and the kind of model
(``dense`` | ``moe``: the MoE mapping misses by more than the dense one, so an MoE problem reads
the MoE runs of its generation, framework and scale, and dense problems never see them). The interval
is the split-conformal one: with ``n`` comparable residuals sorted, the ``floor(0.1 (n+1))``-th
and the ``ceil(0.9 (n+1))``-th, which holds a new exchangeable run with probability >= 80%
and is wider the fewer runs there are. With fewer than 9 comparable runs the class falls back
to a coarser one (generation + framework, then generation, then every run) and the interval is
widened by :data:`FALLBACK_WIDEN` per level (the coarser class is less like the run); an MoE
problem with fewer than 9 MoE runs in its class falls back to the dense classes, one level
coarser each. Rows of a table written before the fourth class element existed are dense.
Peak memory has one pooled class (the runs that published per-GPU peaks).

The interval describes the whole step-time level of a problem: candidates of one problem share
most of their error, so ranks between candidates are surer than the interval suggests; the
front collapse (:func:`epsilon_representatives`) therefore uses the interval's half-width as
the tolerance within which two candidates are "within the model's error of each other".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

LEVEL = 0.80
MIN_RUNS = 9  # the fewest residuals for which the conformal 80% interval exists
FALLBACK_WIDEN = 1.5  # per fallback level, on the log half-widths
RESIDUALS_FILE = "residuals.json"


@dataclass(frozen=True)
class Interval:
    """Multiplicative bounds: measured / predicted lies in ``[low, high]`` with ``LEVEL``."""

    low: float
    high: float
    basis: str  # which runs it comes from, e.g. "a100/deepspeed/multi-node: 113 runs"
    runs: int
    fallback: int = 0  # 0 = the exact class; k = k levels coarser

    @property
    def half_width(self) -> float:
        """Relative half-width of the interval (for tolerances)."""
        return (self.high - self.low) / 2.0


_GENERATIONS = (  # GPU key prefix -> architecture generation
    (("v100",), "volta"),
    (("a100", "a800", "a40", "a10"), "ampere"),
    (("h100", "h200", "h800", "h20", "gh200"), "hopper"),
    (("b100", "b200", "b300", "gb200", "gb300"), "blackwell"),
    (("mi250",), "cdna2"),
    (("mi300", "mi325"), "cdna3"),
    (("mi350", "mi355"), "cdna4"),
)


def generation(gpu_name: str) -> str:
    """The architecture generation of a GPU key (``h200-sxm-141gb`` -> ``hopper``)."""
    head = gpu_name.split("-")[0].lower()
    for prefixes, gen in _GENERATIONS:
        if head.startswith(prefixes):
            return gen
    return head


def scale(num_nodes: int) -> str:
    return "multi-node" if num_nodes > 1 else "single-node"


def kind(moe: bool) -> str:
    return "moe" if moe else "dense"


def class_keys(
    gpu_name: str, framework: str, num_nodes: int, moe: bool = False
) -> list[tuple[str, tuple[str, ...]]]:
    """The comparable classes of a problem, finest first: (model kind, class prefix)."""
    g, s = generation(gpu_name), scale(num_nodes)
    dense = [("dense", k) for k in ((g, framework, s), (g, framework), (g,), ())]
    return [("moe", (g, framework, s)), *dense] if moe else dense


def _class_name(kind_: str, key: tuple[str, ...]) -> str:
    if kind_ == "moe":
        return "/".join((*key, "moe"))
    return "/".join(key) if key else "all runs"


def conformal(residuals: Sequence[float], level: float = LEVEL) -> tuple[float, float] | None:
    """Split-conformal bounds from sorted order statistics (None when too few runs)."""
    v = sorted(residuals)
    n = len(v)
    lo_q = (1 - level) / 2
    kl = math.floor(lo_q * (n + 1) + 1e-9)  # 0.9 x 100 is 90.00000000000001 in floats
    kh = math.ceil((1 - lo_q) * (n + 1) - 1e-9)
    if kl < 1 or kh > n:
        return None
    return v[kl - 1], v[kh - 1]


@lru_cache(maxsize=1)
def residual_table() -> dict[str, Any]:
    text = resources.files("optimizer.planning").joinpath(RESIDUALS_FILE).read_text("utf-8")
    return json.loads(text)


def row_kind(row: Mapping[str, Any]) -> str:
    """``dense`` | ``moe``: the class's fourth element (absent in tables written before it)."""
    c = row["class"]
    return c[3] if len(c) > 3 else "dense"


def _grouped(rows: Sequence[Mapping[str, Any]], kind_: str, key: tuple[str, ...]) -> list[float]:
    n = len(key)
    return [
        r["log_residual"] for r in rows if row_kind(r) == kind_ and tuple(r["class"][:n]) == key
    ]


def step_time_interval(
    gpu_name: str,
    framework: str,
    num_nodes: int,
    moe: bool = False,
    *,
    rows: Sequence[Mapping[str, Any]] | None = None,
) -> Interval:
    """The 80% interval of measured/predicted step time for a problem of this kind."""
    rows = residual_table()["step_time"] if rows is None else rows
    keys = class_keys(gpu_name, framework, num_nodes, moe)
    for level, (kind_, key) in enumerate(keys):
        res = _grouped(rows, kind_, key)
        b = conformal(res)
        if b is None:
            continue
        lo, hi = b
        if level:
            mid = (lo + hi) / 2
            lo, hi = (
                mid + (lo - mid) * FALLBACK_WIDEN**level,
                mid + (hi - mid) * FALLBACK_WIDEN**level,
            )
        name = _class_name(kind_, key)
        if level:
            exact = _class_name(*keys[0])
            name += f" (fewer than {MIN_RUNS} {exact} runs; widened x{FALLBACK_WIDEN**level:.2f})"
        return Interval(math.exp(lo), math.exp(hi), f"{name}: {len(res)} runs", len(res), level)
    return Interval(0.5, 2.0, "no validation runs", 0, len(keys))


def memory_interval(rows: Sequence[float] | None = None) -> Interval:
    res = residual_table()["peak_memory"] if rows is None else rows
    b = conformal(res) or (math.log(0.8), math.log(1.25))
    return Interval(math.exp(b[0]), math.exp(b[1]), f"published peaks: {len(res)} runs", len(res))


def problem_intervals(problem) -> tuple[Interval, Interval]:
    c = problem.cluster
    return (
        step_time_interval(
            c.gpu.name, problem.training.framework, c.num_nodes, problem.model.moe is not None
        ),
        memory_interval(),
    )


def annotate(metrics: dict, step_iv: Interval, mem_iv: Interval) -> None:
    """Add the intervals to one candidate's metrics (in place)."""
    step = metrics["step_time_s"]
    tps = metrics["tokens_per_s"]
    if not (math.isfinite(step) and step > 0):
        return
    metrics["step_time_interval_s"] = [step * step_iv.low, step * step_iv.high]
    metrics["tokens_per_s_interval"] = [tps / step_iv.high, tps / step_iv.low]
    peak = metrics["peak_memory_bytes"]
    metrics["peak_memory_interval_bytes"] = [peak * mem_iv.low, peak * mem_iv.high]
    metrics["interval"] = {
        "level": LEVEL,
        "step_time_basis": step_iv.basis,
        "memory_basis": mem_iv.basis,
    }


def epsilon_representatives(
    points: Sequence[tuple[float, float]], eps_t: float, eps_m: float
) -> list[int]:
    """Collapse a front (tokens/s, peak bytes; fastest first) to the points that differ by
    more than the model's error on at least one objective: a point is dropped when an already
    kept point is within ``eps_t`` (relative) on throughput and ``eps_m`` on memory."""
    kept: list[int] = []
    for i, (t, m) in enumerate(points):
        close = any(
            abs(t - points[k][0]) <= eps_t * max(t, points[k][0])
            and abs(m - points[k][1]) <= eps_m * max(m, points[k][1])
            for k in kept
        )
        if not close:
            kept.append(i)
    return kept


# ---------------------------------------------------------------------------------------------
def collect_residuals(data_dir=None) -> dict[str, Any]:
    """Residuals of the published runs (through optimizer.validation's public functions)."""
    from optimizer.validation import published as P

    path = P.resolve_data_dir(data_dir)
    entries, rows = P.load_data(path)
    col = P.collect_runs(entries, rows)
    # MoE runs (issue 22) carry the class element "moe": MoE problems read them, dense ones
    # never do. Their peaks stay out of the pooled memory class (it is the dense one).
    runs = [r for r in col.runs if r.step_time_s or r.memory_bytes]
    pred, _ = P.predict(runs)
    step, mem = [], []
    for r in runs:
        p = pred.get(r.id)
        if p is None:
            continue
        if r.step_time_s and math.isfinite(p.step_time_s) and p.step_time_s > 0:
            step.append(
                {
                    "id": r.id,
                    "group": r.group,
                    "class": [
                        generation(r.cluster.gpu.name),
                        r.training.framework,
                        scale(r.cluster.num_nodes),
                        kind(r.model.moe is not None),
                    ],
                    "log_residual": round(math.log(r.step_time_s / p.step_time_s), 6),
                }
            )
        if (
            r.memory_bytes
            and r.model.moe is None
            and math.isfinite(p.observed_memory_bytes)
            and not r.oom
        ):
            mem.append(round(math.log(r.memory_bytes / p.observed_memory_bytes), 6))
    from costmodel import COST_MODEL_VERSION

    return {
        "description": "log(measured / predicted) of the published runs optimize validate "
        "re-scores; regenerate with python -m optimizer.planning.intervals",
        "cost_model_version": COST_MODEL_VERSION,
        "data_dir": str(path),
        "step_time": step,
        "peak_memory": mem,
    }


def _inside(row: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> bool:
    g, fw, sc = row["class"][:3]
    iv = step_time_interval(
        g, fw, 2 if sc == "multi-node" else 1, row_kind(row) == "moe", rows=others
    )
    return iv.low <= math.exp(row["log_residual"]) <= iv.high


def coverage(
    rows: Sequence[Mapping[str, Any]], *, leave_one_out: bool = False, leave_group_out: bool = False
) -> dict[str, dict[str, float]]:
    """Per validation group: the share of runs whose measured step time lies inside their
    80% interval: in-sample, with each run's own residual left out (``leave_one_out``), or
    with its whole group left out (``leave_group_out``: the interval comes only from the
    other sources, so the group is runs the table has not seen)."""
    out: dict[str, list[bool]] = {}
    for i, r in enumerate(rows):
        if leave_group_out:
            others = [x for x in rows if x["group"] != r["group"]]
        elif leave_one_out:
            others = [x for j, x in enumerate(rows) if j != i]
        else:
            others = rows
        out.setdefault(r["group"], []).append(_inside(r, others))
    return {g: {"runs": len(v), "inside": sum(v) / len(v)} for g, v in sorted(out.items())}


def refresh(data_dir=None) -> str:
    """Rewrite ``residuals.json`` beside this module; returns its path."""
    from pathlib import Path

    from optimizer.core.fileio import atomic_write_text

    doc = collect_residuals(data_dir)
    path = Path(__file__).with_name(RESIDUALS_FILE)
    atomic_write_text(path, json.dumps(doc, indent=0, sort_keys=True) + "\n")
    residual_table.cache_clear()
    return str(path)


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    import sys

    p = refresh(sys.argv[1] if len(sys.argv) > 1 else None)
    rows = residual_table()["step_time"]
    print(f"wrote {p}: {len(rows)} step-time residuals")
    for name, kw in (
        ("in-sample", {}),
        ("leave-one-out", {"leave_one_out": True}),
        ("group-left-out", {"leave_group_out": True}),
    ):
        for g, c in coverage(rows, **kw).items():
            print(f"{name:14s} {g:40s} {c['runs']:4d} runs  {c['inside']:.1%} inside")
