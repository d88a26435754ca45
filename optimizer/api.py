"""The Python API for schedulers: ``optimize(...)`` and ``evaluate(...)`` (contract.md section 3).

Typed, frozen results; no printing, no ``sys.exit``. Bad input raises
:class:`costmodel.errors.InputError`; a search in which nothing fits raises
:class:`costmodel.errors.InfeasibleError` carrying the least-violating candidates.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from costmodel import COST_MODEL_VERSION
from costmodel.batch import ConfigBatch
from costmodel.errors import InfeasibleError, InputError
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

SCHEMA_VERSION = 1
GIB = 1024**3
SAFETY_MARGIN = 0.05  # the recommended configuration keeps 5% of the limit free


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("paraplan")
    except Exception:  # pragma: no cover - not installed
        return "0+unknown"


def document_head(problem: Problem, **extra_inputs: Any) -> dict[str, Any]:
    """The fields every contract document starts with: schema version, tool, inputs (with the
    problem's fingerprint and any ``extra_inputs``)."""
    inputs = problem.inputs_json()
    inputs.update(extra_inputs)
    inputs["fingerprint"] = problem.fingerprint()
    return {"schema_version": SCHEMA_VERSION,
            "tool": {"name": "paraplan", "version": tool_version(),
                     "cost_model_version": COST_MODEL_VERSION},
            "inputs": inputs}


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """Everything a search needs besides the space: resolved inputs and the memory limit."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    memory_limit_bytes: float
    allow_cross_node_tp: bool = False

    def inputs_json(self) -> dict[str, Any]:
        from optimizer.serialize import cluster_to_dict, model_to_dict

        doc = {
            "model": model_to_dict(self.model),
            "cluster": cluster_to_dict(self.cluster),
            "training": {"seq_length": self.training.seq_length,
                         "global_batch_size": self.training.global_batch_size,
                         "flash_attention": self.training.flash_attention,
                         "overlap_grad_reduce": self.training.overlap_grad_reduce,
                         "dropout": self.training.dropout,
                         "framework": self.training.framework},
            "memory_limit_bytes": self.memory_limit_bytes,
        }
        if self.training.tp_comm_overlap:  # only when set: older fingerprints stay valid
            doc["training"]["tp_comm_overlap"] = True
        return doc

    def fingerprint(self) -> str:
        blob = json.dumps(self.inputs_json(), sort_keys=True).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """One configuration with its predicted metrics, diagnosis and launch artefacts."""

    config: ParallelConfig
    metrics: Mapping[str, Any]
    bottlenecks: tuple[str, ...] = ()
    launch: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.as_dict(), "metrics": _plain(self.metrics),
                "bottlenecks": list(self.bottlenecks), "launch": _plain(self.launch)}


@dataclass(frozen=True)
class OptimizeResult:
    """The Pareto front of throughput versus peak memory, and the recommended point."""

    problem: Problem
    pareto_front: tuple[Candidate, ...]
    recommended_index: int
    search: Mapping[str, Any]
    stats: Mapping[str, Any]

    @property
    def recommended(self) -> Candidate:
        return self.pareto_front[self.recommended_index]

    def to_dict(self) -> dict[str, Any]:
        return {
            **document_head(self.problem, search=_plain(self.search)),
            "pareto_front": [c.to_dict() for c in self.pareto_front],
            "recommended": self.recommended_index,
            "stats": _plain(self.stats),
        }

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
            "metrics": _plain(self.candidate.metrics),
            "bottlenecks": list(self.candidate.bottlenecks),
            "launch": _plain(self.candidate.launch),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def _plain(obj: Any) -> Any:
    """Mappings/tuples/numpy scalars -> JSON-ready Python values."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


# ---------------------------------------------------------------------------------------------
def resolve_problem(*, model: Any, gpus: int | None = None, cluster: Any = None,
                    gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8,
                    seq_length: int | None = None, global_batch_size: int | None = None,
                    training: TrainingSpec | Mapping | None = None,
                    memory_limit_gib: float | None = None, memory_fraction: float = 0.9,
                    allow_cross_node_tp: bool = False) -> Problem:
    """Resolve names, files and mappings into a :class:`Problem` (raises InputError)."""
    from costmodel import hardware, loaders

    model_spec = model if isinstance(model, ModelSpec) else loaders.load_model(model)
    if cluster is not None:
        cluster_spec = cluster if isinstance(cluster, ClusterSpec) else \
            loaders.load_cluster(cluster, default_gpus=gpus)
        if gpus is not None and gpus != cluster_spec.num_gpus:
            raise InputError("gpus", f"{gpus} differs from the cluster's "
                             f"{cluster_spec.num_gpus} GPUs", "omit --gpus or fix the cluster")
    else:
        if gpus is None:
            raise InputError("gpus", "missing", "give --gpus N or --cluster FILE")
        cluster_spec = hardware.default_cluster(gpus, gpus_per_node=gpus_per_node, gpu=gpu)
    if isinstance(training, TrainingSpec):
        train = training
    else:
        tdict = dict(training or {})
        if seq_length is not None:
            tdict["seq_length"] = seq_length
        if global_batch_size is not None:
            tdict["global_batch_size"] = global_batch_size
        from costmodel.errors import check_keys

        check_keys("training", tdict, TrainingSpec.__dataclass_fields__)
        train = TrainingSpec(**tdict)
    hbm = cluster_spec.gpu.memory_bytes
    if memory_limit_gib is not None:
        if isinstance(memory_limit_gib, bool) or not isinstance(memory_limit_gib, int | float) \
                or not 0 < memory_limit_gib < float("inf"):
            raise InputError("memory_limit_gib", f"must be a positive number, got "
                             f"{memory_limit_gib!r}")
        limit = float(memory_limit_gib) * GIB
    else:
        if not (isinstance(memory_fraction, int | float) and 0 < memory_fraction <= 1):
            raise InputError("memory_fraction", f"must be in (0, 1], got {memory_fraction!r}")
        limit = memory_fraction * hbm
    return Problem(model_spec, cluster_spec, train, limit, allow_cross_node_tp)


def candidates_from(problem: Problem, batch: ConfigBatch, scores, indices,
                    *, with_launch: bool = True) -> tuple[Candidate, ...]:
    """Candidates (metrics, diagnosis, launch) for rows ``indices`` of a scored batch."""
    from optimizer.diagnose import diagnose

    out = []
    for i in indices:
        cfg = batch.config(int(i))
        metrics = scores.row(int(i))
        metrics["memory_limit_bytes"] = problem.memory_limit_bytes
        metrics["memory_headroom"] = 1.0 - metrics["peak_memory_bytes"] / problem.memory_limit_bytes
        launch = {}
        if with_launch:
            from optimizer.launch import launch_bundle

            launch = launch_bundle(problem.model, problem.cluster, problem.training, cfg)
        out.append(Candidate(cfg, MappingProxyType(metrics),
                             tuple(d.message for d in diagnose(problem, cfg, metrics)),
                             MappingProxyType(launch)))
    return tuple(out)


def recommend(front: tuple[Candidate, ...], limit_bytes: float) -> int:
    """Fastest point that keeps SAFETY_MARGIN of the limit free, else the fastest."""
    safe = [i for i, c in enumerate(front)
            if c.metrics["peak_memory_bytes"] <= (1 - SAFETY_MARGIN) * limit_bytes]
    pool = safe or list(range(len(front)))
    return max(pool, key=lambda i: front[i].metrics["tokens_per_s"])


def optimize(model: Any, gpus: int | None = None, *, cluster: Any = None,
             gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8,
             seq_length: int | None = None, global_batch_size: int | None = None,
             training: TrainingSpec | Mapping | None = None,
             memory_limit_gib: float | None = None, memory_fraction: float = 0.9,
             sampler: str = "auto", trials: int = 300, seed: int = 0, jobs: int = 1,
             batch_size: int = 32, space: Mapping[str, Any] | None = None,
             allow_cross_node_tp: bool = False, storage: str | None = None,
             study_name: str | None = None, progress: bool = False) -> OptimizeResult:
    """Search the configuration space and return the Pareto front (contract.md section 3).

    ``training``: a :class:`TrainingSpec` or a mapping of its fields (``framework``,
    ``tp_comm_overlap``, ``flash_attention``, ...); ``seq_length`` / ``global_batch_size``
    override the mapping's.
    """
    from optimizer import search

    t0 = time.perf_counter()
    problem = resolve_problem(model=model, gpus=gpus, cluster=cluster, gpu=gpu,
                              gpus_per_node=gpus_per_node, seq_length=seq_length,
                              global_batch_size=global_batch_size, training=training,
                              memory_limit_gib=memory_limit_gib,
                              memory_fraction=memory_fraction,
                              allow_cross_node_tp=allow_cross_node_tp)
    outcome = search.run(problem, space=space, sampler=sampler, trials=trials, seed=seed,
                         jobs=jobs, batch_size=batch_size, storage=storage,
                         study_name=study_name, progress=progress)
    return finish(problem, outcome, t0)


def finish(problem: Problem, outcome, t0: float) -> OptimizeResult:
    """Turn a search outcome into a result; raise InfeasibleError when nothing fits."""
    from optimizer.pareto import pareto_mask

    scores = outcome.scores
    feasible = scores.peak_memory_bytes <= problem.memory_limit_bytes
    feasible &= np.isfinite(scores.step_time_s)
    stats = {"configs_evaluated": int(outcome.evaluated),
             "configs_scored": int(len(outcome.batch)),
             "configs_feasible": int(feasible.sum()),
             "valid_space_size": int(outcome.valid_space_size),
             "sampler": outcome.sampler}
    if not feasible.any():
        raise _infeasible(problem, outcome, stats)
    idx = np.flatnonzero(feasible)
    mask = pareto_mask(scores.tokens_per_s[idx], scores.peak_memory_bytes[idx])
    front_idx = idx[mask]
    front_idx = front_idx[np.argsort(-scores.tokens_per_s[front_idx], kind="stable")]
    front = candidates_from(problem, outcome.batch, scores, front_idx)
    stats["wall_s"] = round(time.perf_counter() - t0, 4)
    return OptimizeResult(problem, front, recommend(front, problem.memory_limit_bytes),
                          MappingProxyType(dict(outcome.search_info)),
                          MappingProxyType(stats))


def _infeasible(problem: Problem, outcome, stats) -> InfeasibleError:
    scores = outcome.scores
    finite = np.isfinite(scores.step_time_s)
    mem = np.where(finite, scores.peak_memory_bytes, np.inf)
    order = np.argsort(mem, kind="stable")[:5]
    least = candidates_from(problem, outcome.batch, scores, order, with_launch=False)
    need = float(mem[order[0]]) if len(order) else float("nan")
    limit = problem.memory_limit_bytes
    advice = ("more GPUs, ZeRO (--zero-stage 1..3), full recompute, a smaller micro-batch, "
              "or a higher --memory-limit-gib")
    if outcome.sampler == "exhaustive":
        scope = "the least memory any configuration needs"
    else:  # a sampler saw only part of the space: say so instead of claiming a minimum
        scope = (f"the least among the {len(outcome.batch)} configurations the "
                 f"{outcome.sampler} sampler scored (of {outcome.valid_space_size} valid)")
        advice = "more --trials or --sampler exhaustive, " + advice
    msg = (f"memory_limit: no configuration fits {limit / GIB:.1f} GiB per GPU; {scope} "
           f"is {need / GIB:.1f} GiB. Try {advice}.")
    payload = {
        **document_head(problem),
        "error": {"code": 3, "message": msg, "least_memory_bytes": _plain(need),
                  "memory_limit_bytes": limit},
        "least_violating": [c.to_dict() for c in least],
        "stats": _plain(stats),
    }
    return InfeasibleError(msg, payload=payload)


# ---------------------------------------------------------------------------------------------
def evaluate(run: Any, *, memory_limit_gib: float | None = None,
             memory_fraction: float = 0.9) -> EvaluateResult:
    """Score ONE configuration (a Run mapping or a path to a run file), full breakdown."""
    from costmodel import loaders
    from costmodel.model import score
    from search_spaces.rules import Context, explain

    r = loaders.load_run(run if isinstance(run, Mapping) else Path(run))
    problem = resolve_problem(model=r.model, cluster=r.cluster, training=r.training,
                              memory_limit_gib=memory_limit_gib,
                              memory_fraction=memory_fraction)
    violations = tuple(explain(Context(r.model, r.cluster, r.training,
                                       allow_cross_node_tp=True), r.parallel))
    if violations:
        rule, reason = violations[0]
        raise InputError(f"parallel ({rule})", reason,
                         "fix the parallel section; `optimize --model ... --gpus ...` lists "
                         "valid layouts")
    batch = ConfigBatch.from_configs([r.parallel])
    scores = score(problem.model, problem.cluster, problem.training, batch)
    cand = candidates_from(problem, batch, scores, [0])[0]
    return EvaluateResult(problem, cand)
