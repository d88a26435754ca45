"""Search engines: exact vectorised enumeration, and Optuna multi-objective samplers.

Both score through :func:`costmodel.model.score` (one vectorised implementation), so they
cannot disagree about a configuration. The Optuna path follows the deterministic batch
recipe of ecosystem.md 1.9: ask a fixed-size batch of trials from the seeded sampler,
score the batch in one vectorised call, tell the results in trial order. The memory limit is
a constraint set with ``Trial.set_constraint`` (feasible iff <= 0), never a penalty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.errors import InputError, did_you_mean
from search_spaces.enumerate import enumerate_valid
from search_spaces.rules import Context, check
from search_spaces.space import (
    SearchSpace,
    batch_from_choices,
    default_space,
    space_from_mapping,
)

SAMPLERS = ("auto", "exhaustive", "tpe", "nsga2", "random")
AUTO_EXHAUSTIVE_MAX = 400_000  # valid configurations that score in about a second
CHUNK = 200_000  # configurations per vectorised call (bounds peak memory)
CONSTRAINT_KEY = "memory_over_limit"


@dataclass(frozen=True)
class SearchOutcome:
    """The scored configurations of a search (the optimizer turns them into a front)."""

    batch: ConfigBatch
    scores: Any  # costmodel.model.Scores
    evaluated: int  # configurations scored (trials told, repeats excluded)
    valid_space_size: int
    sampler: str
    search_info: Mapping[str, Any] = field(default_factory=dict)


def problem_space(problem, space: Mapping[str, Any] | SearchSpace | None) -> SearchSpace:
    base = default_space(problem.model, problem.cluster, problem.training)
    if isinstance(space, SearchSpace):
        return space
    return space_from_mapping(space, base)


def score_batch(problem, batch: ConfigBatch, jobs: int = 1):
    """Score a batch in chunks; with jobs > 1 and a large batch, chunks run on joblib workers."""
    from costmodel.model import Scores, score

    n = len(batch)
    if n <= CHUNK or jobs == 1:
        parts = [score(problem.model, problem.cluster, problem.training,
                       batch.take(slice(i, i + CHUNK))) for i in range(0, max(n, 1), CHUNK)]
    else:
        from joblib import Parallel, delayed

        parts = Parallel(n_jobs=jobs, return_as="list")(
            delayed(score)(problem.model, problem.cluster, problem.training,
                           batch.take(slice(i, i + CHUNK))) for i in range(0, n, CHUNK))
    return Scores.concat(parts)


def run(problem, *, space=None, sampler: str = "auto", trials: int = 300, seed: int = 0,
        jobs: int = 1, batch_size: int = 32, storage: str | None = None,
        study_name: str | None = None, progress: bool = False) -> SearchOutcome:
    """Run the chosen sampler over the problem's space."""
    if sampler not in SAMPLERS:
        raise InputError("sampler", f"unknown sampler {sampler!r}", did_you_mean(sampler, SAMPLERS))
    for name, value in (("trials", trials), ("batch_size", batch_size), ("jobs", jobs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(name, f"must be a positive integer, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError("seed", f"must be an integer, got {seed!r}")
    ctx = Context(problem.model, problem.cluster, problem.training,
                  allow_cross_node_tp=problem.allow_cross_node_tp)
    sp = problem_space(problem, space)
    valid = enumerate_valid(ctx, sp)
    if len(valid) == 0:
        from search_spaces.enumerate import rejected_by_rule
        from search_spaces.rules import RULES_BY_NAME

        counts = sorted(((n, r) for r, n in rejected_by_rule(ctx, sp).items() if n),
                        reverse=True)
        why = "; ".join(f"{RULES_BY_NAME[r].name}: {RULES_BY_NAME[r].reason}"
                        for _, r in counts[:3])
        raise InputError("space", f"no configuration satisfies the validity rules for this "
                         f"model and GPU count ({why})", "check --gpus against the model's "
                         "heads and layers, or widen the restricted dimensions")
    chosen = sampler
    if sampler == "auto":
        chosen = "exhaustive" if len(valid) <= AUTO_EXHAUSTIVE_MAX else "tpe"
    if chosen == "exhaustive":
        scores = score_batch(problem, valid, jobs)
        return SearchOutcome(valid, scores, len(valid), len(valid), "exhaustive",
                             {"sampler": "exhaustive", "requested_sampler": sampler,
                              "seed": seed, "space": _space_json(sp)})
    from optimizer import optuna_search

    return optuna_search.run(problem, ctx, sp, valid_count=len(valid), sampler=chosen,
                             requested=sampler, trials=trials, seed=seed,
                             batch_size=batch_size, storage=storage, study_name=study_name,
                             progress=progress, valid=valid)


def valid_mask(ctx: Context, batch: ConfigBatch) -> np.ndarray:
    return check(ctx, batch)


def batch_from_params(params: list[dict[str, Any]], world: int, sp: SearchSpace) -> ConfigBatch:
    return batch_from_choices(params, world, space=sp)


def _space_json(sp: SearchSpace) -> dict[str, list]:
    return {k: list(v) for k, v in sp.as_dict().items()}
