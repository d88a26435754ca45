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
NCCL_DIMS = {"nccl_algo": "algo", "nccl_proto": "proto"}  # dimension -> grammar kind


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
    space, or a :class:`SearchSpace`), its NCCL settings checked by the cost model's parser."""
    if isinstance(space, SearchSpace):
        sp = space
    else:
        sp = space_from_mapping(space, default_space(problem.model, problem.cluster,
                                                     problem.training))
    check_nccl_settings(sp)
    return sp


def check_nccl_settings(sp: SearchSpace) -> None:
    """Every ``nccl_algo`` / ``nccl_proto`` value of the space through the parser scoring uses,
    so that a value the space's own check lets through (``"allreduce:tree;ring"``: the second
    entry names no collective) is refused here, naming ``space.nccl_algo``, before the space
    is enumerated, not in the middle of scoring."""
    for dim in NCCL_DIMS:
        for value in getattr(sp, dim):
            check_nccl_value(value, dim, f"space.{dim}")


def check_nccl_value(value: str, dim: str, field: str) -> None:
    """Raise InputError naming ``field`` unless the cost model's NCCL grammar
    (:func:`costmodel.nccl_grammar.parse_nccl_setting`, what scoring reads) accepts ``value``
    for ``dim`` (``nccl_algo`` or ``nccl_proto``)."""
    from costmodel.nccl_grammar import parse_nccl_setting

    parse_nccl_setting(value, NCCL_DIMS[dim], field)


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
