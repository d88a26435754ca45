"""The search entry point: check the request, enumerate the valid space, pick the engine.

``sampler="auto"`` scores the whole valid space exactly (vectorised, here) when it has at most
:data:`AUTO_EXHAUSTIVE_MAX` configurations, else runs Optuna's TPE through
:mod:`optimizer.search.optuna_engine`. The Optuna path follows the deterministic batch
recipe of ecosystem.md 1.9: ask a fixed-size batch of trials from the seeded sampler,
score the batch in one vectorised call, tell the results in trial order. The memory limit is
a constraint set with ``Trial.set_constraint`` (feasible iff <= 0), never a penalty.
"""

from __future__ import annotations

from typing import Any

from costmodel.errors import InputError, did_you_mean
from optimizer.search.base import SearchOutcome, problem_space, score_batch, space_json
from search_spaces.enumerate import enumerate_valid
from search_spaces.rules import Context

SAMPLERS = ("auto", "exhaustive", "tpe", "nsga2", "random")
AUTO_EXHAUSTIVE_MAX = 400_000  # valid configurations that score in about a second


def check_settings(*, sampler: Any, trials: Any, seed: Any, jobs: Any = 1,
                   batch_size: Any = 32, storage: Any = None, study_name: Any = None,
                   space: Any = None, prefix: str = "") -> None:
    """Every search setting, checked before anything is enumerated or stored (InputError
    naming ``prefix + field``): the sampler's name, counts within :mod:`costmodel.limits`, a
    seed in 0..2**32-1, a study name only together with a storage."""
    from collections.abc import Mapping

    from costmodel import limits
    from costmodel.safe_io import check_text
    from search_spaces.space import SearchSpace

    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise InputError(prefix + "sampler", f"unknown sampler {str(sampler)[:40]!r}",
                         did_you_mean(str(sampler), SAMPLERS))
    limits.check_count(prefix + "trials", trials, maximum=limits.MAX_TRIALS)
    limits.check_count(prefix + "batch_size", batch_size, maximum=limits.MAX_BATCH_SIZE)
    limits.check_count(prefix + "jobs", jobs, maximum=limits.MAX_JOBS)
    limits.check_seed(prefix + "seed", seed)
    if space is not None and not isinstance(space, Mapping | SearchSpace):
        raise InputError(prefix + "space", f"must be a mapping of dimension -> values, got "
                         f"{type(space).__name__}")
    if storage is not None and not isinstance(storage, str):
        raise InputError("storage", f"must be a storage URL or a path, got "
                         f"{type(storage).__name__}")
    if study_name is not None:
        if not isinstance(study_name, str) or not study_name.strip():
            raise InputError("study_name", "must be a non-empty string")
        check_text("study_name", study_name, max_chars=512)
        if storage is None:
            raise InputError("study_name", "given without a storage: an in-memory study "
                             "cannot be shared or resumed", "add --storage URL (or drop "
                             "--study-name)")


def _check_layout_fits_something(problem, ctx, sp) -> None:
    """An empty space that the explicit pipeline layout alone empties: say so, naming the
    layout's stage count (the generic message lists the rules that reject the most)."""
    layout = problem.training.pipeline_layout
    if layout is None:
        return
    from dataclasses import replace

    from costmodel.pipeline_layout import layout_stages

    free = replace(ctx, training=replace(problem.training, pipeline_layout=None))
    if len(enumerate_valid(free, sp)) == 0:
        return
    n = int(layout_stages(layout))
    raise InputError("training.pipeline_layout",
                     f"{layout!r} has {n} stages and fits no configuration of the space: it "
                     f"needs pp > 1 and pp x virtual stages = {n}, with pp dividing the "
                     f"{problem.cluster.num_gpus} GPUs and the other rules holding",
                     "choose a layout whose stage count the GPU count allows, or widen "
                     "--pp / --virtual-stages")


def run(problem, *, space=None, sampler: str = "auto", trials: int = 300, seed: int = 0,
        jobs: int = 1, batch_size: int = 32, storage: str | None = None,
        study_name: str | None = None, progress: bool = False) -> SearchOutcome:
    """Run the chosen sampler over the problem's space."""
    check_settings(sampler=sampler, trials=trials, seed=seed, jobs=jobs, batch_size=batch_size,
                   storage=storage, study_name=study_name, space=space)
    ctx = Context(problem.model, problem.cluster, problem.training,
                  allow_cross_node_tp=problem.allow_cross_node_tp)
    sp = problem_space(problem, space)
    valid = enumerate_valid(ctx, sp)
    if len(valid) == 0:
        _check_layout_fits_something(problem, ctx, sp)
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
                              "seed": seed, "space": space_json(sp)})
    from optimizer.search import optuna_engine

    return optuna_engine.run(problem, ctx, sp, valid_count=len(valid), sampler=chosen,
                             requested=sampler, trials=trials, seed=seed,
                             batch_size=batch_size, storage=storage, study_name=study_name,
                             progress=progress, valid=valid)
