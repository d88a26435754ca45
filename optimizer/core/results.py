"""The typed, frozen results of the Python API: candidates, a front, one evaluation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from costmodel.specs import ParallelConfig
from optimizer.core.problem import Problem, document_head

SAFETY_MARGIN = 0.05  # the recommended configuration keeps 5% of the limit free


@dataclass(frozen=True)
class Candidate:
    """One configuration with its predicted metrics, diagnosis and launch artefacts."""

    config: ParallelConfig
    metrics: Mapping[str, Any]
    bottlenecks: tuple[str, ...] = ()
    launch: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.as_dict(), "metrics": plain(self.metrics),
                "bottlenecks": list(self.bottlenecks), "launch": plain(self.launch)}


@dataclass(frozen=True)
class OptimizeResult:
    """The Pareto front of throughput versus peak memory, and the recommended point."""

    problem: Problem
    pareto_front: tuple[Candidate, ...]
    recommended_index: int
    search: Mapping[str, Any]
    stats: Mapping[str, Any]
    cloud: tuple = ()  # (tokens/s, peak bytes, label) of dominated feasible points, if kept
    try_these: tuple[int, ...] = ()  # the front collapsed by the model's error (epsilon)
    within_error: tuple[int, ...] = ()  # front points indistinguishable from the recommended
    defaults_from: Mapping[str, str] | None = None  # where the training defaults came from

    @property
    def recommended(self) -> Candidate:
        return self.pareto_front[self.recommended_index]

    def to_dict(self) -> dict[str, Any]:
        doc = {
            **document_head(self.problem, search=plain(self.search)),
            "pareto_front": [c.to_dict() for c in self.pareto_front],
            "recommended": self.recommended_index,
            "stats": plain(self.stats),
        }
        if self.defaults_from:
            doc["inputs"]["defaults_from"] = dict(self.defaults_from)
        if self.try_these:
            doc["try_these"] = list(self.try_these)
            doc["within_error_of_recommended"] = list(self.within_error)
        if self.cloud:
            doc["dominated"] = [{"tokens_per_s": t, "peak_memory_bytes": m, "label": lab}
                                for t, m, lab in self.cloud]
        return doc

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


@dataclass(frozen=True)
class EvaluateResult:
    """One configuration scored in full (``optimize evaluate``)."""

    problem: Problem
    candidate: Candidate

    @property
    def metrics(self) -> Mapping[str, Any]:
        return self.candidate.metrics

    def __getitem__(self, key: str) -> Any:
        return self.candidate.metrics[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            **document_head(self.problem),
            "config": self.candidate.config.as_dict(),
            "metrics": plain(self.candidate.metrics),
            "bottlenecks": list(self.candidate.bottlenecks),
            "launch": plain(self.candidate.launch),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def plain(obj: Any) -> Any:
    """Mappings/tuples/numpy scalars -> JSON-ready Python values."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj

