"""The Python API for schedulers: ``optimize(...)`` and ``evaluate(...)`` (contract.md section 3).

Typed, frozen results; no printing, no ``sys.exit``. Bad input raises
:class:`costmodel.errors.InputError`; a search in which nothing fits raises
:class:`costmodel.errors.InfeasibleError` carrying the least-violating candidates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.errors import InfeasibleError, InputError
from costmodel.specs import TrainingSpec
from optimizer.core.problem import (
    GIB,
    SCHEMA_VERSION,
    Problem,
    document_head,
    resolve_problem,
    tool_version,
)
from optimizer.core.results import (
    SAFETY_MARGIN,
    Candidate,
    EvaluateResult,
    OptimizeResult,
    plain,
)

__all__ = ["GIB", "SAFETY_MARGIN", "SCHEMA_VERSION", "Candidate", "EvaluateResult",
           "OptimizeResult", "Problem", "candidates_from", "document_head", "evaluate",
           "exhaustive_study_name", "finish", "optimize", "plan", "recommend", "resolve_problem", "tool_version"]


# ---------------------------------------------------------------------------------------------
def candidates_from(problem: Problem, batch: ConfigBatch, scores, indices,
                    *, with_launch: bool = True) -> tuple[Candidate, ...]:
    """Candidates (metrics, diagnosis, launch) for rows ``indices`` of a scored batch."""
    from optimizer.output.diagnose import diagnose
    from optimizer.planning.intervals import annotate, problem_intervals

    step_iv, mem_iv = problem_intervals(problem)
    out = []
    for i in indices:
        cfg = batch.config(int(i))
        metrics = scores.row(int(i))
        metrics["memory_limit_bytes"] = problem.memory_limit_bytes
        metrics["memory_headroom"] = 1.0 - metrics["peak_memory_bytes"] / problem.memory_limit_bytes
        metrics.update(memory_verdict_fields(problem, metrics["peak_memory_bytes"]))
        annotate(metrics, step_iv, mem_iv)
        launch = {}
        if with_launch:
            from optimizer.launch.flags import launch_bundle

            launch = launch_bundle(problem.model, problem.cluster, problem.training, cfg)
        out.append(Candidate(cfg, MappingProxyType(metrics),
                             tuple(d.message for d in diagnose(problem, cfg, metrics)),
                             MappingProxyType(launch)))
    return tuple(out)


def memory_verdict_fields(problem: Problem, peak_bytes: float) -> dict[str, Any]:
    """The memory verdict of one configuration (costmodel.memory_verdict): ``memory_verdict``
    ("fits", "over the limit", "does not fit") and ``memory_margin``, the share of the GPU's
    memory the limit holds back (the one safety margin)."""
    from costmodel.memory_verdict import verdict

    hbm = problem.cluster.gpu.memory_bytes
    return {"memory_verdict": verdict(peak_bytes, problem.memory_limit_bytes, hbm),
            "memory_margin": max(0.0, 1.0 - problem.memory_limit_bytes / hbm)}


def recommend(front: tuple[Candidate, ...], limit_bytes: float) -> int:
    """Fastest point under the limit (which already holds the one safety margin back), else
    the fastest."""
    safe = [i for i, c in enumerate(front)
            if c.metrics["peak_memory_bytes"] <= (1 - SAFETY_MARGIN) * limit_bytes]
    pool = safe or list(range(len(front)))
    return max(pool, key=lambda i: front[i].metrics["tokens_per_s"])


def optimize(model: Any, gpus: int | None = None, *, cluster: Any = None,
             gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8,
             seq_length: int | None = None, global_batch_size: int | None = None,
             training: TrainingSpec | Mapping | None = None,
             memory_limit_gib: float | None = None, memory_fraction: float | None = None,
             sampler: str = "auto", trials: int = 300, seed: int = 0, jobs: int = 1,
             batch_size: int = 32, space: Mapping[str, Any] | None = None,
             allow_cross_node_tp: bool = False, storage: str | None = None,
             study_name: str | None = None, progress: bool = False,
             keep_cloud: bool = False) -> OptimizeResult:
    """Search the configuration space and return the Pareto front (contract.md section 3).

    ``training``: a :class:`TrainingSpec` or a mapping of its fields (``framework``,
    ``tp_comm_overlap``, ``flash_attention``, ...); ``seq_length`` / ``global_batch_size``
    override the mapping's. ``keep_cloud``: the result also keeps a sample of the dominated
    feasible configurations (``result.cloud``, the document's ``dominated``) for the HTML
    report. ``storage``: the run's trials (Optuna samplers) and its result document are
    stored in the Optuna study ``result.search["study_name"]`` (:func:`_finish_stored`).
    """
    from optimizer import search
    from optimizer.planning.recipes import api_training_defaults

    t0 = time.perf_counter()
    seq_length, origin = api_training_defaults(model, seq_length, global_batch_size, training,
                                               memory_limit_gib, memory_fraction)
    problem = resolve_problem(model=model, gpus=gpus, cluster=cluster, gpu=gpu,
                              gpus_per_node=gpus_per_node, seq_length=seq_length,
                              global_batch_size=global_batch_size, training=training,
                              memory_limit_gib=memory_limit_gib,
                              memory_fraction=memory_fraction,
                              allow_cross_node_tp=allow_cross_node_tp)
    outcome = search.run(problem, space=space, sampler=sampler, trials=trials, seed=seed,
                         jobs=jobs, batch_size=batch_size, storage=storage,
                         study_name=study_name, progress=progress)
    if storage is None:
        return replace(finish(problem, outcome, t0, keep_cloud=keep_cloud),
                       defaults_from=origin)
    return _finish_stored(problem, outcome, t0, storage, study_name, keep_cloud=keep_cloud,
                          defaults_from=origin)


def exhaustive_study_name(fingerprint: str, space: Mapping[str, Any]) -> str:
    """The study name of an exhaustive ``--storage`` run without ``--study-name``: the same for
    the same problem and space (the Optuna samplers' names add the sampler and seed,
    :func:`optimizer.search.optuna_engine.default_study_name`)."""
    import hashlib
    import json

    space_fp = hashlib.sha256(json.dumps(space, sort_keys=True, default=str).encode())
    return f"paraplan-{fingerprint.split(':')[-1][:12]}-{space_fp.hexdigest()[:8]}-exhaustive"


def _finish_stored(problem: Problem, outcome, t0: float, storage: str,
                   study_name: str | None, *, keep_cloud: bool = False,
                   defaults_from: Mapping[str, str] | None = None) -> OptimizeResult:
    """:func:`finish`, and the result document stored in the run's Optuna study (user
    attribute ``result``, :func:`optimizer.storage.save_result`), as a study-file run stores
    it: ``optimize report --storage URL --study-name N`` renders it and a re-run finds the
    study. An Optuna sampler's study already holds the trials; an exhaustive run gets a study
    with no trials (like an exhaustive study file: 400,000 configurations are no trials),
    named :func:`exhaustive_study_name` unless ``study_name`` is given, and refused when that
    study holds another problem or another sampler's trials. When nothing fits, the
    least-violating document is stored and InfeasibleError raised, as without a storage."""
    from optimizer import storage as st

    info = dict(outcome.search_info)
    with st.storage_errors(storage):
        store = st.open_storage(storage)
        attrs: dict[str, Any] = {"fingerprint": problem.fingerprint()}
        check: tuple[str, ...] = ("fingerprint",)
        if outcome.sampler == "exhaustive":
            name = study_name or exhaustive_study_name(attrs["fingerprint"], info["space"])
            info.update(study_name=name, storage=st.redact(storage))
            outcome = replace(outcome, search_info=info)
            attrs.update(st.library_versions(), sampler="exhaustive", space=info["space"],
                         memory_limit_bytes=problem.memory_limit_bytes)
            check = ("fingerprint", "sampler")
        handle = st.open_study(store, info["study_name"], None, attrs, check_attrs=check)
        try:
            result = replace(finish(problem, outcome, t0, keep_cloud=keep_cloud),
                             defaults_from=defaults_from)
        except InfeasibleError as e:
            payload = dict(e.payload) if isinstance(e.payload, Mapping) else {}
            st.save_result(handle, payload)
            raise InfeasibleError(str(e), payload=payload) from None
        st.save_result(handle, result.to_dict())
    return result


CLOUD_MAX = 1500  # dominated points kept for the HTML report's cloud


def _cloud(problem: Problem, outcome, idx, front_idx) -> tuple:
    """Up to CLOUD_MAX dominated feasible points: (tokens/s, peak bytes, short label)."""
    from optimizer.output.report import short_label

    scores = outcome.scores
    rest = np.setdiff1d(idx, front_idx)
    if len(rest) > CLOUD_MAX:
        rest = rest[np.argsort(-scores.tokens_per_s[rest], kind="stable")]
        rest = rest[np.linspace(0, len(rest) - 1, CLOUD_MAX).astype(int)]
    return tuple((float(scores.tokens_per_s[i]), float(scores.peak_memory_bytes[i]),
                  short_label(outcome.batch.config(int(i)).as_dict())) for i in rest)


def finish(problem: Problem, outcome, t0: float, *, keep_cloud: bool = False
           ) -> OptimizeResult:
    """Turn a search outcome into a result; raise InfeasibleError when nothing fits."""
    from optimizer.search.pareto import pareto_mask

    scores = outcome.scores
    feasible = scores.peak_memory_bytes <= problem.memory_limit_bytes
    feasible &= np.isfinite(scores.step_time_s)
    stats = {"configs_evaluated": int(outcome.evaluated),
             "configs_scored": int(len(outcome.batch)),
             "configs_feasible": int(feasible.sum()),
             "valid_space_size": int(outcome.valid_space_size),
             "sampler": outcome.sampler}
    if np.any(outcome.batch.cp > 1):
        # with context parallelism in the space: how many layouts without it fit (0: the
        # sequence needs CP, which the report says)
        stats["configs_feasible_without_cp"] = int((feasible & (outcome.batch.cp == 1)).sum())
    if not feasible.any():
        raise _infeasible(problem, outcome, stats)
    idx = np.flatnonzero(feasible)
    mask = pareto_mask(scores.tokens_per_s[idx], scores.peak_memory_bytes[idx])
    front_idx = idx[mask]
    front_idx = front_idx[np.argsort(-scores.tokens_per_s[front_idx], kind="stable")]
    front = candidates_from(problem, outcome.batch, scores, front_idx)
    cloud = _cloud(problem, outcome, idx, front_idx) if keep_cloud else ()
    rec = recommend(front, problem.memory_limit_bytes)
    try_these, within = _within_error(problem, front, rec)
    stats["wall_s"] = round(time.perf_counter() - t0, 4)
    return OptimizeResult(problem, front, rec, MappingProxyType(dict(outcome.search_info)),
                          MappingProxyType(stats), cloud, try_these, within)


def _within_error(problem: Problem, front: tuple[Candidate, ...], rec: int
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(front points that differ by more than the model's error: "try these", the points
    within the model's error of the recommendation on both objectives)."""
    from optimizer.planning.intervals import epsilon_representatives, problem_intervals

    step_iv, mem_iv = problem_intervals(problem)
    eps_t, eps_m = step_iv.half_width, mem_iv.half_width
    pts = [(c.metrics["tokens_per_s"], c.metrics["peak_memory_bytes"]) for c in front]
    order = sorted(range(len(front)), key=lambda i: (i != rec, -pts[i][0]))  # rec first
    kept = epsilon_representatives([pts[i] for i in order], eps_t, eps_m)
    try_these = tuple(sorted(order[k] for k in kept))
    t0, m0 = pts[rec]
    limit = problem.memory_limit_bytes
    within = tuple(i for i, (t, m) in enumerate(pts) if i != rec
                   and abs(t - t0) <= eps_t * max(t, t0)
                   and abs(m - m0) <= eps_m * max(m, m0) and m <= limit)
    return try_these, within


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
    hbm = problem.cluster.gpu.memory_bytes
    margin = max(0.0, 1.0 - limit / hbm)
    where = (f"over the GPU's {hbm / GIB:.1f} GiB: it does not fit" if need > hbm else
             f"within the GPU's {hbm / GIB:.1f} GiB, but not with the {margin:.0%} safety "
             f"margin (--memory-fraction)")
    msg = (f"memory_limit: no configuration fits {limit / GIB:.1f} GiB per GPU (the GPU's "
           f"memory less a {margin:.0%} safety margin); {scope} is {need / GIB:.1f} GiB, "
           f"{where}. Try {advice}.")
    payload = {
        **document_head(problem),
        "error": {"code": 3, "message": msg, "least_memory_bytes": plain(need),
                  "memory_limit_bytes": limit},
        "least_violating": [c.to_dict() for c in least],
        "stats": plain(stats),
    }
    return InfeasibleError(msg, payload=payload)


def plan(model: Any, gpu_counts, *, tokens: float | None = None,
         gpu_hour_cost: float | None = None, gpu: str = "a100-sxm-80gb",
         gpus_per_node: int = 8, **optimize_kwargs: Any):
    """Plan across cluster sizes: one :func:`optimize` per GPU count (a sequence, or a string
    such as ``"64-1024"`` or ``"64,128,256"``: :func:`optimizer.planning.parse_gpu_counts`),
    with time-to-train, GPU-hours and cost for ``tokens`` training tokens at
    ``gpu_hour_cost`` per GPU-hour. Returns a :class:`optimizer.planning.PlanResult`.
    ``optimize_kwargs`` go to :func:`optimize` (seq_length, global_batch_size, ...)."""
    from optimizer.planning import parse_gpu_counts, run_plan

    if optimize_kwargs.get("cluster") is not None:
        raise InputError("--cluster", "a cluster file fixes the GPU count; planning across "
                         "counts builds the cluster from --gpu and --gpus-per-node",
                         "omit --cluster, or give one --gpus")
    optimize_kwargs.pop("cluster", None)
    counts = parse_gpu_counts(gpu_counts, gpus_per_node) if isinstance(gpu_counts, str | int) \
        else tuple(gpu_counts)

    def search(n: int) -> OptimizeResult:
        return optimize(model, n, gpu=gpu, gpus_per_node=gpus_per_node, **optimize_kwargs)

    return run_plan(search, counts, tokens=tokens, gpu_hour_cost=gpu_hour_cost, gpu=gpu,
                    gpus_per_node=gpus_per_node)


# ---------------------------------------------------------------------------------------------
def evaluate(run: Any, *, memory_limit_gib: float | None = None,
             memory_fraction: float | None = None) -> EvaluateResult:
    """Score ONE configuration (a Run mapping or a path to a run file), full breakdown."""
    from costmodel import loaders
    from costmodel.model import score
    from search_spaces.rules import Context, explain

    if not isinstance(run, Mapping | str | os.PathLike):
        raise InputError("run", f"must be a run mapping or the path of a run file, got "
                         f"{type(run).__name__}")
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

