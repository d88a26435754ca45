"""Planning across cluster sizes: per GPU count the best layout, its throughput, the time to
train a token budget, the GPU-hours and the cost, and the front of time-to-train vs cost.

One search per GPU count (each through :func:`optimizer.api.optimize`, so each count gets the
sampler's auto mode: exhaustive when the valid space is small). The global batch and sequence
length stay fixed across counts; batch-size ramps (a smaller batch early in training, as Llama
3 and GPT-3 did) are a later step and are not modelled.

The plan's pick: on the front of (time-to-train, GPU-hours), the fastest count whose GPU-hours
are within :data:`COST_SLACK` of the cheapest count's.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from costmodel import COST_MODEL_VERSION
from costmodel.errors import InfeasibleError, InputError
from optimizer.core.problem import SCHEMA_VERSION, tool_version

COST_SLACK = 0.10  # the pick may spend up to 10% more GPU-hours than the cheapest count


@dataclass(frozen=True)
class PlanEntry:
    """One GPU count: its search result (None when nothing fits) and the derived plan figures."""

    gpus: int
    result: Any  # OptimizeResult | None
    figures: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class PlanResult:
    inputs: Mapping[str, Any]
    entries: tuple[PlanEntry, ...]
    front: tuple[int, ...]  # indices of entries on the time-to-train vs GPU-hours front
    pick: int | None
    stats: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        from optimizer.core.results import plain

        inputs = dict(self.inputs)
        inputs["fingerprint"] = "sha256:" + hashlib.sha256(
            json.dumps(plain(inputs), sort_keys=True, default=str).encode()).hexdigest()
        plan = []
        for e in self.entries:
            row = {"gpus": e.gpus, **plain(e.figures)}
            if e.ok:
                row["recommended"] = e.result.recommended.to_dict()
                row["front_size"] = len(e.result.pareto_front)
            plan.append(row)
        return {"schema_version": SCHEMA_VERSION,
                "tool": {"name": "paraplan", "version": tool_version(),
                         "cost_model_version": COST_MODEL_VERSION},
                "inputs": plain(inputs),
                "plan": plan,
                "plan_front": list(self.front),
                "plan_pick": self.pick,
                "stats": plain(self.stats)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def _check_tokens(tokens: Any) -> float | None:
    if tokens is None:
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int | float) \
            or not 0 < tokens < float("inf"):
        raise InputError("tokens", f"must be a positive number of training tokens, got "
                         f"{tokens!r}", "e.g. --tokens 15e12")
    return float(tokens)


def _check_price(price: Any) -> float | None:
    if price is None:
        return None
    if isinstance(price, bool) or not isinstance(price, int | float) \
            or not 0 <= price < float("inf"):
        raise InputError("gpu_hour_cost", f"must be a non-negative price per GPU-hour, got "
                         f"{price!r}", "e.g. --gpu-hour-cost 2.5")
    return float(price)


def figures_for(result, gpus: int, tokens: float | None, price: float | None) -> dict:
    """tokens/s, tokens/s/GPU, step time, time-to-train, GPU-hours and cost of a result's
    recommended configuration."""
    rec = result.recommended
    m = rec.metrics
    tps = float(m["tokens_per_s"])
    tr = result.problem.training
    out: dict[str, Any] = {
        "status": "ok",
        "num_nodes": result.problem.cluster.num_nodes,
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / gpus,
        "step_time_s": float(m["step_time_s"]),
        "mfu": float(m["mfu"]),
        "peak_memory_bytes": float(m["peak_memory_bytes"]),
        "memory_limit_bytes": float(result.problem.memory_limit_bytes),
        "configs_evaluated": int(result.stats.get("configs_evaluated", 0)),
        "time_to_train_s": None, "steps": None, "gpu_hours": None, "cost": None,
        "time_to_train_interval_s": None,
    }
    iv = m.get("tokens_per_s_interval")
    if iv:
        out["tokens_per_s_interval"] = list(iv)
    if tokens is not None:
        t = tokens / tps
        out["time_to_train_s"] = t
        if iv:
            out["time_to_train_interval_s"] = [tokens / iv[1], tokens / iv[0]]
        out["steps"] = int(-(-tokens // tr.tokens_per_step))
        out["gpu_hours"] = gpus * t / 3600.0
        if price is not None:
            out["cost"] = out["gpu_hours"] * price
    return out


def plan_front(entries: Sequence[PlanEntry]) -> tuple[int, ...]:
    """Entries not dominated on (time per token, GPU-hours per token): faster or cheaper."""
    pts = [(i, 1.0 / e.figures["tokens_per_s"], 1.0 / e.figures["tokens_per_s_per_gpu"])
           for i, e in enumerate(entries) if e.ok]
    keep = []
    for i, t, c in pts:
        dominated = any((t2 <= t and c2 <= c) and (t2 < t or c2 < c) for _, t2, c2 in pts)
        if not dominated:
            keep.append(i)
    return tuple(sorted(keep, key=lambda i: entries[i].gpus))


def pick_entry(entries: Sequence[PlanEntry], front: Sequence[int]) -> int | None:
    if not front:
        return None
    cheapest = min(1.0 / entries[i].figures["tokens_per_s_per_gpu"] for i in front)
    ok = [i for i in front
          if 1.0 / entries[i].figures["tokens_per_s_per_gpu"] <= (1 + COST_SLACK) * cheapest]
    return max(ok, key=lambda i: entries[i].figures["tokens_per_s"])


def run_plan(search: Callable[[int], Any], gpu_counts: Sequence[int], *,
             tokens: float | None = None, gpu_hour_cost: float | None = None,
             gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8) -> PlanResult:
    """One ``search(n)`` per GPU count (an :class:`~optimizer.core.results.OptimizeResult`, or
    InfeasibleError when nothing fits); see the module docstring. The Python API's
    :func:`optimizer.api.plan` calls it with :func:`optimizer.api.optimize`."""
    tokens = _check_tokens(tokens)
    price = _check_price(gpu_hour_cost)
    counts = tuple(sorted(set(int(n) for n in gpu_counts)))
    if not counts:
        raise InputError("gpus", "no GPU count to plan for", "e.g. --gpus 64-1024")
    t0 = time.perf_counter()
    entries = []
    invalid: list[InputError] = []
    first_problem = None
    for n in counts:
        try:
            res = search(n)
        except InputError as e:
            # a GPU count the space has no valid layout for (an explicit pipeline layout's
            # stage count, the heads, ...): that count is left out, the others are planned;
            # when every count fails, the error is the input's (exit 2)
            if e.field not in ("space", "training.pipeline_layout"):
                raise
            entries.append(PlanEntry(n, None, MappingProxyType({
                "status": "infeasible", "message": f"no valid configuration: {e}",
                "least_memory_bytes": None, "memory_limit_bytes": None,
                "time_to_train_s": None, "gpu_hours": None, "cost": None})))
            invalid.append(e)
            continue
        except InfeasibleError as e:
            err = (e.payload or {}).get("error", {})
            entries.append(PlanEntry(n, None, MappingProxyType({
                "status": "infeasible", "message": str(e),
                "least_memory_bytes": err.get("least_memory_bytes"),
                "memory_limit_bytes": err.get("memory_limit_bytes"),
                "time_to_train_s": None, "gpu_hours": None, "cost": None})))
            continue
        first_problem = first_problem or res.problem
        entries.append(PlanEntry(n, res, MappingProxyType(figures_for(res, n, tokens, price))))
    front = plan_front(entries)
    pick = pick_entry(entries, front)
    inputs: dict[str, Any] = {"gpu_counts": list(counts), "tokens": tokens,
                              "gpu_hour_cost": price, "gpu": gpu,
                              "gpus_per_node": gpus_per_node}
    if first_problem is not None:
        full = first_problem.inputs_json()
        inputs.update(model=full["model"], training=full["training"],
                      memory_limit_bytes=full["memory_limit_bytes"])
        inputs["gpu"] = full["cluster"]["gpu"]["name"]
    stats = {"wall_s": round(time.perf_counter() - t0, 4),
             "configs_evaluated": sum(int(e.figures.get("configs_evaluated", 0))
                                      for e in entries),
             "counts_feasible": sum(e.ok for e in entries)}
    if invalid and len(invalid) == len(entries):
        raise invalid[0]
    if not any(e.ok for e in entries):
        msgs = "; ".join(f"{e.gpus} GPUs: {e.figures['message']}" for e in entries[:3])
        raise InfeasibleError(f"no GPU count in {list(counts)} fits: {msgs}")
    return PlanResult(MappingProxyType(inputs), tuple(entries), front, pick,
                      MappingProxyType(stats))
