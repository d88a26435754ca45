"""What every search engine shares: the problem's space, chunked scoring, the outcome record.

Both engines (:mod:`optimizer.search.engine`'s exhaustive enumeration and the Optuna adapter
:mod:`optimizer.search.optuna_engine`) score through :func:`costmodel.model.score` (one
vectorised implementation), so they cannot disagree about a configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from costmodel.batch import ConfigBatch
from search_spaces.space import SearchSpace, default_space, space_from_mapping

CHUNK = 200_000  # configurations per vectorised call (bounds peak memory)


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
    """The space to search: ``space`` (a mapping of restrictions over the problem's default
    space, or a :class:`SearchSpace`). Its values, NCCL settings included, are validated by
    the space itself (each dimension's own grammar)."""
    if isinstance(space, SearchSpace):
        return space
    return space_from_mapping(space, default_space(problem.model, problem.cluster,
                                                   problem.training))


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


def space_json(sp: SearchSpace) -> dict[str, list]:
    return {k: list(v) for k, v in sp.as_dict().items()}
