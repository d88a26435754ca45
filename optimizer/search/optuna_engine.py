"""The Optuna path of the search: TPE, NSGA-II or random sampling over the valid space.

Encoding (ecosystem.md 1.2, 1.5). Every trial proposes a configuration that satisfies every
validity rule, by construction: the parameters are drawn in a fixed order
(:data:`PARAM_ORDER`), and each parameter's choices are the values that still occur among the
valid configurations (:func:`search_spaces.enumerate.enumerate_valid`) consistent with the
choices already made. A parameter with one choice left is not suggested; a parameter whose
choices are the full list keeps its plain name (``layout``, ``micro_batch_size``, ...); a
restricted list gets its own name that spells the list (``schedule[1f1b,interleaved_v2]``), so
every name has one fixed categorical choice list for the whole study, as Optuna requires.
``tp`` and ``pp`` travel together as one categorical ``layout`` (``"tp4_pp2"``; ``dp`` is
derived), and ``schedule`` with ``virtual_stages`` as one (``"1f1b"``, ``"interleaved_v2"``).
The lists depend only on the inputs, so they are the same in every process and on resume.

Batches (ecosystem.md 1.9). Trials are asked ``batch_size`` at a time from the seeded sampler,
decoded, the configurations not scored before are scored in ONE vectorised
:func:`costmodel.model.score` call (through :func:`optimizer.search.base.score_batch`), and the
trials are told in order with ``(tokens_per_s, peak_memory_bytes)`` and the constraint
``memory_over_limit = (peak - limit) / limit`` (feasible iff <= 0). Same seed, batch size,
inputs and versions give the same study and the same front.

Budget. The search ends when the study holds ``min(trials, valid configurations)`` counted
finished (COMPLETE + PRUNED) trials, counting trials from a previous (killed) run and from
other workers sharing the study: before each batch a worker asks at most
``min(batch_size, trials - finished) - running``, so the whole study never has more than
``batch_size`` trials in flight and N workers adapt like one process with that batch. That
count is read before asking and races, so each trial just asked is checked by its number
(:func:`_admitted`): past the in-flight cap or the budget it is withdrawn before proposing
anything (PRUNED, no parameters, ``counted: false``) and the worker waits. A trial naming a configuration that a lower-numbered trial
already claimed (a duplicate), or one whose predecessors (by trial number, which Optuna
assigns in creation order under a lock) already hold the whole budget, is still scored (from
the cache) and told, tagged ``counted: false`` (:data:`optimizer.storage.COUNTED_ATTR`): it
informs the sampler, never consumes the budget, and no FAIL trial is left behind, so
concurrent workers never overshoot. Trials left RUNNING by dead processes are failed
(:func:`optimizer.storage.fail_dead_trials`).

Polish. For TPE and NSGA-II the last :data:`POLISH_FRACTION` of the budget is a local search
around the current front: its unscored neighbours (one or two parameters changed, nearest
steps first, :func:`polish_candidates`; a quarter of them ranked by an additive surrogate of
the scored points, the rest shared among the front points in proportion to their hypervolume
contributions), recomputed every batch, are enqueued
(``study.enqueue_trial``) and asked like any trial, so they are in the study, count against
``trials`` and inform the sampler. In benchmarks (benchmarks/bench_search.py) plain TPE with
300 trials missed the 0.99 hypervolume ratio on some seeds (min 0.94 on 65b/16, where 10 of
1245 valid configurations fit; 0.975 on 175b/1024); with the polish every seed reached it.
In the larger spaces (cp, ZeRO with pipelines, partial recompute) a polish that dealt the
neighbours round-robin left 175b/128 at 0.975 on one seed of eight (0.976 on another of
sixteen with the contribution shares alone); with a quarter of each batch ranked by the
surrogate and steps that skip parameters fixed by the others, the minimum over seeds 0-15 is
0.9966 (65b/16), 0.9988 (13b/32) and 0.9950 (175b/128). The spaces grew again
(recompute_modules, VP 9-24): with 32-trial polish rounds 65b/16 fell to 0.9845 on seed 0
(in budget, before the final polish); the polish now asks at most :data:`POLISH_BATCH` trials
a round (more rounds for the local search to walk) over TPE's last 0.6 of the budget, and
the minimum over seeds 0-7 is 0.9961, 0.9984 and 0.9964.
Random sampling stays a pure baseline.

Seeds. A worker's identity is the number of the first trial it asks (unique: Optuna numbers
trials under a lock). A lone process on a fresh study (first trial 0) uses ``seed`` as is
(reproducible); every other worker, including ones that start together on an empty study,
a late worker or a resumed search, seeds its sampler from (seed, that number)
(:func:`worker_seed`), so no two workers replay one random stream (ecosystem 1.9:
distributed workers need distinct seeds), and a resume is reproducible.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.dimensions import Dimension, OptunaParam, joint_order, joint_tokens, optuna_params
from costmodel.errors import InputError
from costmodel.specs import PARALLEL_DIMENSIONS
from optimizer import storage as st
from optimizer.search.base import SearchOutcome, score_batch
from search_spaces.enumerate import enumerate_valid
from search_spaces.rules import Context
from search_spaces.space import SearchSpace

#: Trial parameters (name, member dimensions) in the order they are drawn, from the dimension
#: declarations (costmodel.dimensions.OptunaParam): the layout first (it decides most of the
#: rest).
PARAMS: tuple[tuple[OptunaParam, tuple[Dimension, ...]], ...] = optuna_params(
    PARALLEL_DIMENSIONS)
PARAM_ORDER: tuple[str, ...] = tuple(p.name for p, _ in PARAMS)
SAMPLER_NAMES = ("tpe", "nsga2", "random")
CONSTRAINT_KEY = "memory_over_limit"  # Trial.set_constraint key: feasible iff <= 0
POLL_S = 0.5  # wait between checks while other workers hold the rest of the budget

#: Sampler settings; TPE's were chosen with benchmarks/bench_search.py (hypervolume ratio).
#: The whole first batch is asked before any trial is told, so TPE's start-up phase lasts
#: max(n_startup_trials, batch_size) trials.
TPE_SETTINGS: dict[str, Any] = {"multivariate": True, "group": True, "constant_liar": True,
                                "n_startup_trials": 20, "n_ei_candidates": 24}
NSGA2_POPULATION = 50
#: Share of the trials spent, at the end, on the unscored neighbours of the current front
#: (enqueued as fixed trials). 0.4 from benchmarks: 0.2 left 175b/1024 below 0.99 on 3 of 8
#: seeds, 0.3 on none but with a lower minimum; 0.4 and 0.5 reached >= 0.999 everywhere.
#: TPE's 0.6 with :data:`POLISH_BATCH` rounds, from the larger spaces (see there); NSGA-II's
#: 0.4 was not measured again.
POLISH_FRACTION: dict[str, float] = {"tpe": 0.6, "nsga2": 0.4, "random": 0.0}
#: Share of each polish batch given to the neighbours an additive surrogate of the scored
#: configurations ranks highest (:func:`_surrogate_picks`); the rest is dealt by hypervolume
#: contribution. From benchmarks/bench_search.py (TPE-300, seeds 0-15 on 65b/16, 13b/32 and
#: 175b/128; the worst seed's hypervolume ratio per problem), with the steps that skip forced
#: parameters (:meth:`Encoding.steps`): 0.125 0.9966/0.9984/0.9947, 0.25 0.9966/0.9988/0.9950,
#: 0.5 0.9964/0.9986/0.9936. With steps that counted forced values, the share mattered
#: (175b/128 0.979 at 0.125, 0.995 at 0.25, 0.978 at 0.375); 1 (the surrogate alone, trusting
#: the model too far) 0.978.
SURROGATE_SHARE = 0.25
#: Most trials in flight (the whole study) during the polish, whatever ``batch_size``: a local
#: search walks one round of neighbours at a time, so it needs rounds more than width. On the
#: larger spaces (recompute_modules, VP 9-24; 65b/16 7750 valid configurations) TPE-300 with
#: 32-trial rounds and fraction 0.4 spent its ~120 polish trials in 4 rounds; on seed 0 the
#: front at the polish's start (ZeRO-3, tp2 pp4, interleaved v5-v20) was 3-5 moves from the
#: exact one (ZeRO-0 tp8 pp2 / tp4 pp4 / tp2 pp8, 1f1b) and the in-budget ratio was 0.9845.
#: Worst of seeds 0-7 on 65b/16 (benchmarks/bench_search.py, in budget), batch x TPE fraction:
#: 32 x 0.4 0.9845, 16 x 0.4 0.9898, 8 x 0.4 0.9871, 32 x 0.5 0.9898, 16 x 0.5 0.9932,
#: 8 x 0.5 0.9932, 32 x 0.6 0.9918, 16 x 0.6 0.9961, 8 x 0.6 0.9961; 16 x 0.6 on 13b/32
#: 0.9984 (was 0.9987) and 175b/128 0.9964 (was 0.9933); 16 x 0.5 0.9986 and 0.9968.
POLISH_BATCH = 16


# ---------------------------------------------------------------------------------------------
# encoding
@dataclass(frozen=True)
class Encoding:
    """Valid configurations as token codes per parameter (see the module docstring).

    ``codes[p][i]`` is the index into ``tokens[p]`` of valid configuration ``i``'s value of
    parameter ``p``; ``tokens[p]`` is the global choice list of ``p`` (valid values only, in
    the space's order).
    """

    valid: ConfigBatch
    tokens: Mapping[str, tuple[Any, ...]]
    codes: Mapping[str, np.ndarray]

    @classmethod
    def build(cls, valid: ConfigBatch, space: SearchSpace) -> Encoding:
        n = len(valid)
        raw: dict[str, list[Any]] = {}  # each valid configuration's token
        order: dict[str, list[Any]] = {}  # every token of the space, in the space's order
        for param, members in PARAMS:
            raw[param.name] = joint_tokens(param, members, [
                d.decode_column(getattr(valid, d.name),
                                getattr(valid, d.table_name) if d.table_name else ())
                for d in members])
            order[param.name] = joint_order(param, [getattr(space, d.name) for d in members])
        tokens: dict[str, tuple[Any, ...]] = {}
        codes: dict[str, np.ndarray] = {}
        for p in PARAM_ORDER:
            present = set(raw[p])
            toks = tuple(dict.fromkeys(t for t in order[p] if t in present))
            index = {t: i for i, t in enumerate(toks)}
            tokens[p] = toks
            codes[p] = np.fromiter((index[t] for t in raw[p]), dtype=np.int64, count=n)
        return cls(valid, tokens, codes)

    def walk(self, choose: Callable[[str, tuple[Any, ...]], Any]) -> int:
        """Draw one configuration: for each parameter in order, ``choose(name, choices)``
        picks a token among the ones still possible (only called with two or more choices).
        Returns the index of the configuration in ``valid``."""
        alive = np.ones(len(self.valid), dtype=bool)
        for p in PARAM_ORDER:
            toks = self.tokens[p]
            here = np.flatnonzero(np.bincount(self.codes[p][alive], minlength=len(toks)))
            if len(here) == 1:
                code = int(here[0])
            else:
                choices = tuple(toks[i] for i in here)
                token = choose(param_name(p, choices, toks), choices)
                code = toks.index(token)
            alive &= self.codes[p] == code
        (row,) = np.flatnonzero(alive)
        return int(row)

    def decode(self, params: Mapping[str, Any]) -> int | None:
        """The valid configuration a finished trial's parameters name, or None if they name
        none (a trial written with another encoding)."""
        def pick(name: str, choices: tuple[Any, ...]) -> Any:
            if params.get(name) not in choices:
                raise KeyError(name)
            return params[name]

        try:
            return self.walk(pick)
        except (KeyError, ValueError):
            return None

    def params_for(self, row: int) -> dict[str, Any]:
        """The trial parameters that name valid configuration ``row`` (for
        ``study.enqueue_trial``, e.g. to seed a study with a known recipe)."""
        out: dict[str, Any] = {}

        def pick(name: str, choices: tuple[Any, ...]) -> Any:
            p = name.split("[", 1)[0]
            token = self.tokens[p][int(self.codes[p][row])]
            out[name] = token
            return token

        self.walk(pick)
        return out

    def steps(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For every valid configuration, compared with configuration ``row``: the number of
        parameters whose values differ; the number of those that are a choice at both
        configurations (:attr:`chosen`); the step distance over the latter (the layout counts
        |log2 tp ratio| + |log2 pp ratio|, every other parameter its distance in its ordered
        choice list); and the first of the latter (index into :data:`PARAM_ORDER`).

        A parameter the earlier parameters fix at either end (ZeRO at dp = 1, the schedule at
        pp = 1) is no step: tp8 pp16 (dp 1) -> tp8 pp8 ZeRO-1 is one step (the layout), as
        near as tp8 pp8 ZeRO-0. Counting the forced ZeRO value made that move two steps, and
        the ZeRO-1 middle of 175b/128's front went unreached on some seeds."""
        codes = np.stack([self.codes[p] for p in PARAM_ORDER])
        differ = codes != codes[:, row:row + 1]
        both = self.chosen & self.chosen[:, row:row + 1]
        dist = np.abs(codes - codes[:, row:row + 1]).astype(float)
        for i, (param, members) in enumerate(PARAMS):
            if param.log_steps:
                logs = [np.log2(getattr(self.valid, d.name)) for d in members]
                dist[i] = sum(np.abs(lg - lg[row]) for lg in logs)
        moved = differ & both
        return (differ.sum(axis=0), moved.sum(axis=0), np.where(both, dist, 0.0).sum(axis=0),
                moved.argmax(axis=0))

    @cached_property
    def chosen(self) -> np.ndarray:
        """``chosen[i, r]``: parameter ``PARAM_ORDER[i]`` is a choice at valid configuration
        ``r``, i.e. the valid configurations that agree with ``r`` on the parameters before
        it take two or more of its values (:meth:`walk` suggests it). One ``np.unique`` per
        parameter over the prefixes, computed once."""
        n = len(self.valid)
        out = np.zeros((len(PARAM_ORDER), n), dtype=bool)
        prefix = np.zeros(n, dtype=np.int64)  # id of the configuration's earlier choices
        for i, p in enumerate(PARAM_ORDER):
            width = len(self.tokens[p])
            pairs, prefix_next = np.unique(prefix * width + self.codes[p], return_inverse=True)
            values_per_prefix = np.bincount(pairs // width, minlength=int(prefix.max()) + 1)
            out[i] = values_per_prefix[prefix] > 1
            prefix = prefix_next.reshape(-1).astype(np.int64)
        return out

    def description(self) -> dict[str, list]:
        """The global choice lists (recorded in the study, compared on resume). A ``new``
        dimension's parameter whose only choice is its default is left out
        (``Dimension.in_fingerprint``), so adding ``cp`` renames no existing study."""
        return {p: list(self.tokens[p]) for p in PARAM_ORDER
                if _in_fingerprint(p, self.tokens[p])}


def _in_fingerprint(param: str, tokens: Sequence[Any]) -> bool:
    members = next(m for p, m in PARAMS if p.name == param)
    return not (len(members) == 1 and not members[0].in_fingerprint(tokens))


def param_name(param: str, choices: Sequence[Any], all_choices: Sequence[Any]) -> str:
    """``param`` when ``choices`` is the full list, else ``param[c1,c2,...]``."""
    if len(choices) == len(all_choices):
        return param
    return f"{param}[{','.join(_tok(c) for c in choices)}]"


def _tok(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ---------------------------------------------------------------------------------------------
# samplers
def make_sampler(name: str, seed: int, trials: int):
    """``(sampler, settings)`` for ``tpe``, ``nsga2`` or ``random`` (explicit, ecosystem 1.1)."""
    import optuna

    st.quiet_optuna()
    if name == "tpe":
        settings = dict(TPE_SETTINGS)
        settings["n_startup_trials"] = min(settings["n_startup_trials"], max(1, trials // 5))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.TPESampler(seed=seed, **settings)
        return sampler, {"class": "TPESampler", **settings}
    if name == "nsga2":
        settings = {"population_size": max(2, min(NSGA2_POPULATION, trials // 4))}
        return (optuna.samplers.NSGAIISampler(seed=seed, **settings),
                {"class": "NSGAIISampler", **settings})
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed), {"class": "RandomSampler"}
    raise InputError("sampler", f"{name!r} is not an Optuna sampler here",
                     "tpe, nsga2 or random")


def default_study_name(fingerprint: str, space_fp: str, sampler: str, seed: int) -> str:
    """A study name that is the same for the same problem, space, sampler and seed, so
    re-running a command with ``--storage`` resumes its study."""
    return f"paraplan-{fingerprint.split(':')[-1][:12]}-{space_fp[:8]}-{sampler}-s{seed}"


def _space_fingerprint(enc: Encoding) -> str:
    import hashlib
    import json

    blob = json.dumps(enc.description(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


# ---------------------------------------------------------------------------------------------
class _Progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self._bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def update(self, done: int, feasible: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done,
                             description=f"trials ({feasible} feasible)")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@dataclass
class _Scored:
    """The configurations scored so far: rows of ``valid`` and their Scores, in order."""

    rows: list[int]
    parts: list[Any]
    position: dict[int, int]  # valid row -> index into the concatenation
    tokens: list[float]
    peaks: list[float]

    @classmethod
    def empty(cls) -> _Scored:
        return cls([], [], {}, [], [])

    def add(self, problem, valid: ConfigBatch, new_rows: Sequence[int]) -> None:
        """Score ``new_rows`` (not scored before) in one vectorised call."""
        if not new_rows:
            return
        scores = score_batch(problem, valid.take(np.asarray(new_rows, dtype=np.int64)))
        tps = np.where(np.isfinite(scores.tokens_per_s), scores.tokens_per_s, 0.0)
        for j, r in enumerate(new_rows):
            self.position[r] = len(self.rows)
            self.rows.append(r)
            self.tokens.append(float(tps[j]))
            self.peaks.append(float(scores.peak_memory_bytes[j]))
        self.parts.append(scores)

    def feasible(self, limit: float) -> int:
        return sum(p <= limit for p in self.peaks)

    def values(self, row: int) -> tuple[float, float]:
        i = self.position[row]
        return self.tokens[i], self.peaks[i]


def _concat_scores(parts: Sequence[Any]):
    from costmodel.model import Scores

    return Scores.concat(parts)


# ---------------------------------------------------------------------------------------------
def run(problem, ctx: Context, sp: SearchSpace, *, valid_count: int, sampler: str,
        requested: str, trials: int, seed: int, batch_size: int, storage: str | None,
        study_name: str | None, progress: bool, user_attrs: Mapping[str, Any] | None = None,
        valid: ConfigBatch | None = None) -> SearchOutcome:
    """Run an Optuna multi-objective search (see the module docstring) and return the unique
    configurations its study scored, from every run and worker of the study.

    ``valid`` (optional) is ``enumerate_valid(ctx, sp)`` when the caller already has it.
    ``user_attrs`` are extra study attributes recorded when the study is created.
    """
    with st.storage_errors(storage):
        return _run(problem, ctx, sp, valid_count=valid_count, sampler=sampler,
                    requested=requested, trials=trials, seed=seed, batch_size=batch_size,
                    storage=storage, study_name=study_name, progress=progress,
                    user_attrs=user_attrs, valid=valid)


def _run(problem, ctx: Context, sp: SearchSpace, *, valid_count: int, sampler: str,
         requested: str, trials: int, seed: int, batch_size: int, storage: str | None,
         study_name: str | None, progress: bool, user_attrs: Mapping[str, Any] | None = None,
         valid: ConfigBatch | None = None) -> SearchOutcome:
    if sampler not in SAMPLER_NAMES:
        raise InputError("sampler", f"unknown Optuna sampler {sampler!r}", "tpe, nsga2, random")
    if valid is None:
        valid = enumerate_valid(ctx, sp)
    if len(valid) == 0:
        raise InputError("space", "no configuration satisfies the validity rules")
    enc = Encoding.build(valid, sp)
    space_fp = _space_fingerprint(enc)
    fingerprint = problem.fingerprint()
    opt_sampler, settings = make_sampler(sampler, seed, trials)
    polish = POLISH_FRACTION.get(sampler, 0.0)
    settings = {**settings, "polish_fraction": polish, "polish_batch": POLISH_BATCH}
    name = study_name or default_study_name(fingerprint, space_fp, sampler, seed)
    kind = st.storage_kind(storage)
    store = st.open_storage(storage)
    attrs = {**st.library_versions(), "fingerprint": fingerprint,
             "space_fingerprint": space_fp, "space": enc.description(), "seed": seed,
             "sampler": sampler, "sampler_settings": settings, "batch_size": batch_size,
             "trials": trials, "memory_limit_bytes": problem.memory_limit_bytes,
             **dict(user_attrs or {})}
    study = st.open_study(store, name, opt_sampler, attrs,
                          check_attrs=("fingerprint", "space_fingerprint"))
    st.fail_dead_trials(study, kind, at_startup=True)
    sampler_seed = seed
    n_before = len(study.get_trials(deepcopy=False))
    joined = n_before > 0
    if joined:  # resuming, or a late worker: do not replay the first run's random stream
        sampler_seed = worker_seed(seed, n_before)
        study.sampler, _ = make_sampler(sampler, sampler_seed, trials)

    def reseed(first_number: int) -> None:
        """After this worker's first ``ask``: its identity is that trial's number (unique:
        Optuna numbers trials under a lock), so workers that started together on an empty
        study get distinct sampler streams; a lone process (first trial 0) keeps ``seed``."""
        nonlocal sampler_seed
        new = seed if first_number == 0 else worker_seed(seed, first_number)
        if new != sampler_seed:
            sampler_seed = new
            study.sampler, _ = make_sampler(sampler, sampler_seed, trials)

    limit = float(problem.memory_limit_bytes)
    scored = _Scored.empty()
    scored.add(problem, valid, _study_rows(study, enc))  # a resumed or shared study
    token = st.begin_run()
    me = st.worker_id(token)
    bar = _Progress(progress, trials, "trials")
    holder = None
    try:
        # the server-side liveness of this search (PostgreSQL): its tags say they hold it
        # (tagged with st.LOCK_MARK while the lock is held: holder.mark)
        holder = st.hold_liveness(store, me)
        _loop(study, enc, problem, scored, kind=kind, trials=min(trials, int(valid_count)),
              batch_size=batch_size, limit=limit, me=me, bar=bar,
              polish=polish, reseed=reseed, fill_seed=lambda: sampler_seed, holder=holder)
    finally:
        bar.close()
        st.end_run(token)
        if holder is not None:
            holder.close()

    # the union of every configuration the study scored (this run, earlier runs, other workers)
    if holder is not None:  # the tag of its last trials (without the mark if the lock was lost)
        me += holder.mark
    final = final_polish(study, enc, problem, limit, scored, me=me) \
        if polish else []
    polished = set(final)  # in their canonical order at the end, whichever worker added them
    unique = [r for r in _study_rows(study, enc) if r not in polished]
    in_budget = len(unique)  # the counted search's configurations come first
    unique += [r for r in final if np.isfinite(scored.values(r)[1])]
    scored.add(problem, valid, [r for r in unique if r not in scored.position])
    if unique:
        take = np.array([scored.position[r] for r in unique], dtype=np.int64)
        scores = _concat_scores(scored.parts)
        scores = _take_scores(scores, take)
        batch = valid.take(np.array(unique, dtype=np.int64))
    else:  # every trial was failed by other workers: nothing scored
        batch = valid.take(np.array([], dtype=np.int64))
        scores = score_batch(problem, valid.take(np.array([0], dtype=np.int64)))
        scores = _take_scores(scores, np.array([], dtype=np.int64))
    import optuna

    info = {"sampler": sampler, "requested_sampler": requested, "seed": seed,
            "trials": trials, "batch_size": batch_size, "study_name": name,
            "storage": st.redact(storage) if storage is not None else None,
            "optuna_version": optuna.__version__, "sampler_settings": settings,
            "sampler_seed": sampler_seed, "resumed": joined,
            "finished_trials": st.count_finished(study), "final_polish_configs": len(final),
            "search_configs": in_budget}
    return SearchOutcome(batch, scores, len(unique), int(valid_count), sampler, info)


def worker_seed(seed: int, identity: int) -> int:
    """The sampler seed of the worker whose first trial is number ``identity`` (> 0): derived
    from the study seed and that number, the same on every machine and every resume."""
    return int(np.random.SeedSequence([seed, identity]).generate_state(1)[0])


def _study_rows(study, enc: Encoding) -> list[int]:
    """The distinct valid configurations of the study's COMPLETE trials, in trial order."""
    from optuna.trial import TrialState

    rows = (enc.decode(t.params)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return list(dict.fromkeys(r for r in rows if r is not None))


def _take_scores(scores, index: np.ndarray):
    from costmodel.model import Scores

    out = {}
    for name in Scores.__dataclass_fields__:
        v = getattr(scores, name)
        out[name] = {k: a[index] for k, a in v.items()} if isinstance(v, dict) else v[index]
    return Scores(**out)


def _loop(study, enc: Encoding, problem, scored: _Scored, *, kind: str, trials: int,
          batch_size: int, limit: float, me: str, bar: _Progress, polish: float,
          reseed: Callable[[int], None] = lambda n: None,
          fill_seed: Callable[[], int] = lambda: 0, holder: st.Holder | None = None) -> None:
    """Ask, score and tell batches until the study holds ``trials`` counted finished trials.

    ``me`` is this search's worker tag; ``holder`` its liveness lock (PostgreSQL), kept alive
    by the heartbeat thread and before each batch, whose :attr:`~optimizer.storage.Holder.mark`
    ends the tag of each new trial.

    A trial whose configuration a lower-numbered trial already claimed (scored, or being
    scored by another worker) is a duplicate, and one asked beyond the budget by concurrent
    workers is over budget: both are scored (from the cache) and told with their real values,
    tagged ``counted: false`` (:data:`optimizer.storage.COUNTED_ATTR`), so they never consume
    the budget and none is left FAIL. When a whole batch brings nothing new (the sampler keeps
    proposing known configurations), the next batch is seeded with unscored configurations
    drawn at random (deterministically) so the search always progresses.
    """
    polish_from = trials - int(round(polish * trials))
    rows_of: dict[int, int | None] = {}  # trial number -> configuration (finished trials)
    first = True
    stale = 0
    heart = _Heartbeat(study, holder) if kind == "rdb" else None
    try:
        _rounds(study, enc, problem, scored, kind=kind, trials=trials, batch_size=batch_size,
                limit=limit, me=me, bar=bar, polish_from=polish_from, reseed=reseed,
                fill_seed=fill_seed, rows_of=rows_of, first=first, stale=stale, heart=heart,
                holder=holder)
    finally:
        if heart is not None:
            heart.stop()


def _rounds(study, enc: Encoding, problem, scored: _Scored, *, kind: str, trials: int,
            batch_size: int, limit: float, me: str, bar: _Progress, polish_from: int,
            reseed: Callable[[int], None], fill_seed: Callable[[], int],
            rows_of: dict[int, int | None], first: bool, stale: int,
            heart: _Heartbeat | None, holder: st.Holder | None = None) -> None:
    """The rounds of :func:`_loop` (ask, claim, score, tell), with ``heart`` beating for
    the trials in flight.

    A trial of this worker that another worker failed meanwhile (it judged the owner dead:
    a lost liveness session, a starved heartbeat) is dropped wherever that shows (setting an
    attribute raises UpdateFinishedTrialError; ``tell`` skips a finished trial): FAIL trials
    never count, so the next rounds ask again."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    shared = kind != "memory"
    while True:
        everything = study.get_trials(deepcopy=False)
        finished = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) and st.is_counted(t)
                       for t in everything)
        running = sum(t.state == TrialState.RUNNING for t in everything)
        # every worker polishes around the whole study's front, not its own share of it:
        # add the configurations other workers scored (from the cache after the first time)
        scored.add(problem, enc.valid, _others_rows(everything, enc, scored, rows_of))
        bar.update(min(finished, trials), scored.feasible(limit))
        if finished >= trials:
            _settle(study, kind, problem, enc, scored, rows_of)
            return
        # at most batch_size trials in flight in the whole study, whatever the number of
        # workers: 8 workers asking a batch each at once would claim a 200-trial budget in
        # one round of blind proposals, with no sampler update and no polish in between
        k = min(batch_size - running, trials - finished - running)
        if finished >= polish_from:  # a local search: more, smaller rounds
            k = min(k, POLISH_BATCH - running)
        if k <= 0:  # other workers hold the rest of the budget: wait for them (or their death)
            time.sleep(POLL_S)
            st.fail_dead_trials(study, kind, at_startup=False)
            continue
        waiting = {enc.decode(t.system_attrs.get("fixed_params", {})) for t in everything
                   if t.state == TrialState.WAITING}
        if finished >= polish_from:
            for row in polish_candidates(enc, scored, limit, max(0, k - len(waiting)), waiting):
                study.enqueue_trial(enc.params_for(row), user_attrs={"origin": "polish"})
                waiting.add(row)
        if stale and len(waiting) < k:  # never more waiting trials than this batch asks
            for row in _unscored(enc, scored, waiting, k - len(waiting),
                                 fill_seed() + len(everything)):
                study.enqueue_trial(enc.params_for(row), user_attrs={"origin": "fill"})

        # 1. ask k trials from the seeded sampler, in order, and decode them
        if holder is not None:
            holder.check()  # a lost liveness session is replaced before tagging new trials
        tag = me if holder is None else me + holder.mark
        batch: list[tuple[Any, int]] = []
        seen = len(everything)  # trials numbered below this were in `everything`
        withdrawn = False
        beat = time.monotonic()
        for _ in range(k):
            with warnings.catch_warnings():  # "Heartbeat ... supposed to be used with optimize"
                warnings.simplefilter("ignore", UserWarning)
                trial = study.ask()
            if heart is not None:
                heart.add(trial)
            if first:
                reseed(trial.number)
                first = False

            def choose(name: str, choices: tuple[Any, ...], trial=trial) -> Any:
                return trial.suggest_categorical(name, list(choices))

            try:
                if shared:
                    st.record_heartbeat(study, trial)
                    trial.set_user_attr(st.WORKER_ATTR, tag)
                    if not _admitted(study, trial, batch, trials, batch_size, seen):
                        # other workers asked first: past the in-flight cap or the budget.
                        # Withdrawn before it proposes anything (no params, not counted,
                        # not FAIL), and this batch ends here
                        trial.set_user_attr(st.COUNTED_ATTR, False)
                        trial.set_user_attr("origin", "withdrawn")
                        study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
                        withdrawn = True
                        break
                batch.append((trial, enc.walk(choose)))
                if shared and time.monotonic() - beat > st.HEARTBEAT_INTERVAL_S / 2:
                    beat = _beat(study, batch)  # asking a batch can outlast the grace period
            except UpdateFinishedTrialError:
                # a worker starting on the same journal failed it while it was still untagged
                # (storage.fail_dead_trials: untagged RUNNING trials are a killed run's at
                # start-up): FAIL, not counted; the next round asks again
                continue

        if withdrawn and not batch:  # the cap is full: wait for the others, as for k <= 0
            if heart is not None:
                heart.clear()
            time.sleep(POLL_S)
            continue

        # 2. duplicates, and (concurrent workers) trials beyond the budget: not counted
        counted, extra = _claim(study, enc, batch, rows_of)
        if shared:
            counted, over = _within_budget(study, counted, trials)
            extra += over
        for trial, _row in extra:
            try:
                trial.set_user_attr(st.COUNTED_ATTR, False)
            except UpdateFinishedTrialError:
                pass
        stale = 0 if counted else stale + 1

        # 3. score the configurations not seen before, in one vectorised call
        new = list(dict.fromkeys(r for _, r in batch if r not in scored.position))
        if shared:
            _beat(study, batch)
        scored.add(problem, enc.valid, new)
        if shared:
            _beat(study, batch)

        # 4. tell in trial order (every trial: the sampler learns from each)
        for trial, row in sorted(batch, key=lambda x: x[0].number):
            tps, peak = scored.values(row)
            try:
                if not np.isfinite(peak):
                    study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
                    continue
                st.set_constraint(trial, CONSTRAINT_KEY, (peak - limit) / limit)
                study.tell(trial, [tps, peak], skip_if_finished=True)
            except UpdateFinishedTrialError:
                pass  # another process failed it (it thought the owner dead): not counted
        if heart is not None:
            heart.clear()


def _admitted(study, trial, batch: list[tuple[Any, int]], trials: int, batch_size: int,
              seen: int) -> bool:
    """Whether a trial just asked may propose a configuration: the counted trials numbered
    below it (Optuna numbers trials under a lock, so they all exist now) leave room both in
    the budget (fewer than ``trials``) and in flight (fewer than ``batch_size`` RUNNING).

    ``k = batch_size - running`` read before asking is racy: 8 workers starting together
    each read 0 and asked a whole batch, and the 200 lowest-numbered of those blind start-up
    proposals held the GPT-3 study's budget (recommendation 0.97-0.99x one process). The
    trial number is a ticket: the lowest unfinished one is always admitted, so the search
    progresses, and the admitted trials never exceed the cap or the budget. When nobody
    else asked since ``seen`` (a lone worker), the answer is known without reading."""
    from optuna.trial import TrialState

    n = trial.number
    if n == seen + len(batch):  # every trial below n is one we knew of or our own
        return True
    inflight = budget = 0
    for t in study.get_trials(deepcopy=False):
        if t.number >= n or t.state == TrialState.FAIL or not st.is_counted(t):
            continue
        budget += 1  # a WAITING (enqueued) trial below n holds its place, as in _within_budget
        inflight += t.state == TrialState.RUNNING
    return inflight < batch_size and budget < trials


def _others_rows(everything, enc: Encoding, scored: _Scored, rows_of: dict[int, int | None]
                 ) -> list[int]:
    """The configurations of the study's COMPLETE trials that ``scored`` lacks (other
    workers' results), decoding each finished trial once (``rows_of`` caches it)."""
    from optuna.trial import TrialState

    out = []
    for t in everything:
        if t.state != TrialState.COMPLETE:
            continue
        if t.number not in rows_of:
            rows_of[t.number] = enc.decode(t.params)
        row = rows_of[t.number]
        if row is not None and row not in scored.position:
            out.append(row)
    return list(dict.fromkeys(out))


def _settle(study, kind: str, problem, enc: Encoding, scored: _Scored,
            rows_of: dict[int, int | None]) -> None:
    """Once the budget is held: wait for the trials other workers still have in flight
    (over-budget or duplicate asks, told uncounted within a batch's scoring time), failing
    those of dead workers, so that every worker's front is that of the whole study and the
    first worker to finish does not recommend from a part of it."""
    from optuna.trial import TrialState

    if kind == "memory":
        return
    deadline = time.monotonic() + st.OWNER_UNSEEN_S
    while time.monotonic() < deadline:
        if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            break
        time.sleep(POLL_S)
        st.fail_dead_trials(study, kind, at_startup=False)
    scored.add(problem, enc.valid,
               _others_rows(study.get_trials(deepcopy=False), enc, scored, rows_of))


class _Heartbeat:
    """A thread that records a heartbeat for this worker's trials in flight every half
    heartbeat interval (RDB storages), whatever the worker is doing, and checks its liveness
    lock (``holder``, PostgreSQL), replacing a lost session (storage.liveness).

    How soon other workers see this one dead: on PostgreSQL by its lock first (the server
    releases it when the process dies, so its trials are failed within the others' next
    0.5 s poll, on any host); the heartbeat is the fallback, for tags without the lock mark
    (other RDBs, a lock lost for good, older workers) and for a half-open session that still
    holds the lock (a host that lost power): a trial whose beats stopped for the grace period
    (15 s) is failed whatever the lock says. Beating from a thread keeps live trials fresh
    under load (asking and scoring a batch on loaded cores outlasted a 20 s grace period),
    which is what lets the grace period be 15 s."""

    def __init__(self, study, holder: st.Holder | None = None) -> None:
        import threading

        self._study = study
        self._holder = holder
        self._trials: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paraplan-heartbeat",
                                        daemon=True)
        self._thread.start()

    def add(self, trial) -> None:
        with self._lock:
            self._trials.append(trial)

    def clear(self) -> None:
        with self._lock:
            self._trials = []

    def _run(self) -> None:
        while not self._stop.wait(st.HEARTBEAT_INTERVAL_S / 2):
            with self._lock:
                trials = list(self._trials)
            try:
                _beat(self._study, [(t, 0) for t in trials])
            except Exception:  # a lost connection: the worker's own calls will report it
                pass
            if self._holder is not None:
                try:
                    self._holder.check()
                except Exception:  # never kill the thread: the next tick tries again
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _beat(study, batch: list[tuple[Any, int]]) -> float:
    """Record a heartbeat for every trial of the batch (RDB storages): under load, asking
    and scoring a batch can take longer than the grace period, and other workers would fail
    the first trials as stale. Returns the time of the beat."""
    from optuna.exceptions import UpdateFinishedTrialError

    for trial, _ in batch:
        try:
            st.record_heartbeat(study, trial)
        except UpdateFinishedTrialError:
            pass
    return time.monotonic()


def _claim(study, enc: Encoding, batch: list[tuple[Any, int]], rows_of: dict[int, int | None]
           ) -> tuple[list[tuple[Any, int]], list[tuple[Any, int]]]:
    """Split ``batch`` into (counted, duplicates): a trial is a duplicate when a trial with a
    lower number, finished and counted or still running, names the same configuration."""
    from optuna.trial import TrialState

    mine = {t.number for t, _ in batch}
    owner: dict[int, int] = {}
    for t in study.get_trials(deepcopy=False):
        if t.number in mine or t.state in (TrialState.FAIL, TrialState.WAITING) \
                or not st.is_counted(t):
            continue
        if t.number in rows_of:
            row = rows_of[t.number]
        else:
            row = enc.decode(t.params)  # a running trial's params may be incomplete: None
            if t.state != TrialState.RUNNING:
                rows_of[t.number] = row
        if row is not None and owner.get(row, t.number) >= t.number:
            owner[row] = t.number
    counted, dup = [], []
    for trial, row in sorted(batch, key=lambda x: x[0].number):
        if owner.get(row, trial.number) < trial.number:
            dup.append((trial, row))
        else:
            owner[row] = trial.number
            counted.append((trial, row))
    return counted, dup


def _unscored(enc: Encoding, scored: _Scored, exclude: set, k: int, seed: int) -> list[int]:
    """Up to ``k`` valid configurations not scored yet, drawn at random from ``seed``."""
    taken = set(scored.position) | {r for r in exclude if r is not None}
    free = np.setdiff1d(np.arange(len(enc.valid)), np.fromiter(taken, dtype=np.int64,
                                                                count=len(taken)))
    if len(free) == 0:
        return []
    rng = np.random.default_rng(seed)
    return [int(r) for r in rng.choice(free, size=min(k, len(free)), replace=False)]


def polish_candidates(enc: Encoding, scored: _Scored, limit: float, k: int,
                      exclude: set = frozenset()) -> list[int]:
    """Up to ``k`` unscored valid configurations next to the current front.

    The front is that of the feasible scored configurations (of all scored ones when none is
    feasible). A neighbour of a front point differs in the values of one or two parameters;
    each point's neighbours are ordered by their step distance (:meth:`Encoding.steps`: one
    step = the next value of an ordered parameter, e.g. micro-batch 2 -> 4, recompute
    selective -> full, tp x2 or pp x2; a parameter the others fix at either end is no step),
    then by the number of parameters changed, then by the first one in :data:`PARAM_ORDER`
    (a Pareto local search: Paquete, Chiarandini and Stuetzle 2004).

    :data:`SURROGATE_SHARE` of the places go to the neighbours (of any front point, at any
    step distance) that an additive model of the scored configurations predicts to add the
    most hypervolume (:func:`_surrogate_picks`): it reaches a corner several steps away along
    a line the scored points already show, e.g. 175b/128's leanest layouts (tp8 pp16 ZeRO-0
    -> tp8 pp1..4 ZeRO-3, 2-4 steps) or 65b/16's fastest (partial recompute 0 -> 8 layers).
    The other places are shared among the front points in proportion to each point's own
    hypervolume contribution (the area only it dominates; selection by contribution as in
    SMS-EMOA, Beume, Naujoks and Emmerich 2007), by the highest-averages rule: the next place
    goes to the point with the largest ``contribution / (places + 1)``, ties to the larger
    contribution; each takes its nearest neighbours first. A point that alone covers a wide
    gap of the front gets many neighbours tried, a point in a dense cluster few. Dealing the
    places round-robin instead gave a 17-point front ~7 neighbours each; on 175b/128 (seed 4)
    the layout + ZeRO move that opens the front's middle (tp8 pp16 ZeRO-0 -> tp8 pp8 ZeRO-1)
    was the 16th neighbour of the point spanning the gap, never reached, and TPE-300 kept
    0.975 of the exact hypervolume. Deterministic.
    """
    from optimizer.search.pareto import hypervolume_2d

    if k <= 0 or not scored.rows:
        return []
    tps = np.asarray(scored.tokens)
    mem = np.asarray(scored.peaks)
    front, feasible = _front_of(tps, mem, limit)
    ref = limit
    if not feasible:
        finite = mem[np.isfinite(mem)]
        ref = float(finite.max()) * 1.01 if len(finite) else limit
    total = hypervolume_2d(tps[front], mem[front], ref)
    gain = [total - hypervolume_2d(np.delete(tps[front], j), np.delete(mem[front], j), ref)
            for j in range(len(front))]
    by_gain = sorted(range(len(front)), key=lambda j: -gain[j])
    taken = set(scored.position) | {r for r in exclude if r is not None}
    lists = []
    nearest: dict[int, float] = {}  # neighbour -> its step distance to the nearest front point
    for j in by_gain:
        differ, changed, steps, first = enc.steps(scored.rows[int(front[j])])
        near = np.flatnonzero((differ >= 1) & (differ <= 2))
        near = near[np.lexsort((near, first[near], changed[near], steps[near]))]
        lists.append([int(r) for r in near if int(r) not in taken])
        for r in lists[-1]:
            nearest[r] = min(nearest.get(r, np.inf), float(steps[r]))
    out: list[int] = []
    if feasible and nearest:
        out = _surrogate_picks(enc, scored, limit, nearest, int(round(SURROGATE_SHARE * k)))
        taken.update(out)
    return out + _deal(lists, [max(gain[j], 0.0) for j in by_gain], k - len(out), taken)


#: Ridge penalty of the surrogate's least-squares fit (one-hot features; keeps the values a
#: few scored configurations take from swinging the fit)
SURROGATE_RIDGE = 1e-2


def _design(enc: Encoding, rows: np.ndarray) -> np.ndarray:
    """Features of the additive surrogate for valid configurations ``rows``: an intercept,
    one indicator per parameter value (the first value of each parameter is the baseline),
    and log2 of each member of a log-stepped parameter (the layout's tp and pp)."""
    cols = [np.ones((len(rows), 1))]
    for param, members in PARAMS:
        n = len(enc.tokens[param.name])
        if n > 1:
            cols.append(np.eye(n)[enc.codes[param.name][rows]][:, 1:])
        if param.log_steps:
            cols += [np.log2(getattr(enc.valid, d.name)[rows]).reshape(-1, 1) for d in members]
    return np.hstack(cols)


def _surrogate_picks(enc: Encoding, scored: _Scored, limit: float,
                     candidates: Mapping[int, float], k: int) -> list[int]:
    """Up to ``k`` of ``candidates`` (row -> step distance) with the largest predicted
    hypervolume gain over the scored feasible front, ties to the nearer, then the lower row.

    The prediction is an additive model in log space, log tokens/s and log peak memory each
    a sum of one term per parameter value (:func:`_design`), fitted by ridge least squares
    on the scored configurations: throughput is a product of efficiencies and memory is
    dominated by one term divided by the sharding degrees, so logs are close to additive.
    It only ranks configurations that are then scored exactly; a candidate predicted over
    the limit, or inside the front, gains nothing and is not picked."""
    from optimizer.search.pareto import hypervolume_2d, pareto_mask

    if k <= 0:
        return []
    rows = np.asarray(scored.rows, dtype=np.int64)
    tps = np.asarray(scored.tokens)
    mem = np.asarray(scored.peaks)
    fit = np.isfinite(mem) & (mem > 0) & (tps > 0)
    if fit.sum() < 2:
        return []
    x = _design(enc, rows[fit])
    ridge = SURROGATE_RIDGE * np.eye(x.shape[1])
    ridge[0, 0] = 0.0  # the intercept is not shrunk
    w = np.linalg.solve(x.T @ x + ridge, x.T @ np.log(np.stack([tps[fit], mem[fit]], axis=1)))
    cand = np.fromiter(candidates, dtype=np.int64, count=len(candidates))
    pred = np.exp(_design(enc, cand) @ w)
    ok = np.flatnonzero(mem <= limit)
    front = ok[pareto_mask(tps[ok], mem[ok])]
    ft, fm = tps[front], mem[front]
    base = hypervolume_2d(ft, fm, limit)
    gain = np.array([hypervolume_2d(np.append(ft, t), np.append(fm, m), limit) - base
                     if m <= limit else 0.0 for t, m in pred])
    dist = np.array([candidates[int(r)] for r in cand])
    order = np.lexsort((cand, dist, -gain))
    return [int(cand[i]) for i in order[:k] if gain[i] > 0]


def _deal(lists: list[list[int]], weight: Sequence[float], k: int, taken: set) -> list[int]:
    """Up to ``k`` distinct rows from ``lists`` (each in its own order, rows in ``taken``
    skipped), list ``i`` getting places in proportion to ``weight[i]`` by the
    highest-averages rule (next place: largest ``weight / (places + 1)``, ties to the lower
    index); a list that runs dry drops out and its share goes to the others."""
    places = [0] * len(lists)
    live = [i for i, lst in enumerate(lists) if lst]
    out: list[int] = []
    while live and len(out) < k:
        i = max(live, key=lambda j: (weight[j] / (places[j] + 1), -j))
        lst = lists[i]
        while lst and lst[0] in taken:
            lst.pop(0)
        if not lst:
            live.remove(i)
            continue
        r = lst.pop(0)
        taken.add(r)
        out.append(r)
        places[i] += 1
    return out


#: Trial user attribute ``origin`` of the trials :func:`final_polish` adds.
FINAL_POLISH = "final-polish"
FINAL_POLISH_CHUNK = 4  # trials added between two reads (other workers' are skipped)


def _front_of(tps: np.ndarray, mem: np.ndarray, limit: float) -> tuple[np.ndarray, bool]:
    """Indexes (ascending) of the front the polish works from: that of the points within
    ``limit``, else of all finite ones; and whether any point is within ``limit``."""
    from optimizer.search.pareto import pareto_mask

    ok = mem <= limit
    feasible = bool(ok.any())
    if not feasible:
        ok = np.isfinite(mem)
    idx = np.flatnonzero(ok)
    return (idx[pareto_mask(tps[idx], mem[idx])] if len(idx) else idx), feasible


def _front_rows(members: Sequence[int], cache: _Scored, limit: float) -> list[int]:
    """The rows of ``members`` on the front of :func:`polish_candidates` (that of the
    feasible ones, else of all finite ones), in ``members``' order."""
    vals = np.array([cache.values(r) for r in members], dtype=float).reshape(-1, 2)
    front, _ = _front_of(vals[:, 0], vals[:, 1], limit)
    return [members[int(j)] for j in front]


def final_polish_rows(enc: Encoding, problem, limit: float, known: Sequence[int],
                      cache: _Scored) -> list[int]:
    """The local optimum around the front of the configurations ``known``: every valid
    configuration one parameter away from a front point (any step along that parameter's
    choices) is scored, and again around the new front, until every front point's
    one-parameter neighbours are all scored. Returns the rows added, in the order found;
    ``cache`` holds (and receives) the scores, so nothing is scored twice.

    A pure function of the set ``known`` (its order, e.g. of exact ties, and the cache's
    other rows play no part), so every
    worker of a study computes the same rows from the same finished study, and the answer
    no longer depends on how the trials were split between workers or on which worker
    finished last. Measured (benchmarks/workers_scaling.py, GPT-3 175B on 1024 A100s, 3396
    valid configurations): ~170-220 configurations added after a 200-trial TPE search,
    ~280-370 after a 60-trial one;
    from the 200 trials alone 1 process reached 0.9866x the exhaustive optimum on seed 4
    and 8 workers 0.9919x on one run, with the final polish both 1.0."""
    members = sorted(set(known))
    cache.add(problem, enc.valid, [r for r in members if r not in cache.position])
    inside = set(members)
    added: list[int] = []
    while True:
        new: set[int] = set()
        for row in _front_rows(members, cache, limit):
            # one step: one parameter that is a choice at both ends moves (plus any the
            # others force, e.g. ZeRO opening at dp > 1), as the search polish counts it
            differ, moved, _, _ = enc.steps(row)
            new.update(int(r) for r in np.flatnonzero((differ >= 1) & (moved <= 1)))
        fresh = sorted(new - inside)
        if not fresh:
            return added
        cache.add(problem, enc.valid, [r for r in fresh if r not in cache.position])
        members.extend(fresh)
        inside.update(fresh)
        added.extend(fresh)


def _frozen(enc: Encoding, row: int, scored: _Scored, limit: float, me: str):
    """A finished, uncounted trial naming configuration ``row`` with its scores (what
    ``tell`` would store: the values, both forms of the memory constraint; PRUNED when the
    peak is not finite)."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    params: dict[str, Any] = {}
    dists: dict[str, Any] = {}

    def pick(name: str, choices: tuple[Any, ...]) -> Any:
        token = enc.tokens[name.split("[", 1)[0]][int(enc.codes[name.split("[", 1)[0]][row])]
        params[name] = token
        dists[name] = CategoricalDistribution(list(choices))
        return token

    enc.walk(pick)
    attrs = {st.COUNTED_ATTR: False, "origin": FINAL_POLISH, st.WORKER_ATTR: me}
    tps, peak = scored.values(row)
    if not np.isfinite(peak):
        return optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params=params,
                                         distributions=dists, user_attrs=attrs)
    c = (peak - limit) / limit
    return optuna.trial.create_trial(values=[tps, peak], params=params, distributions=dists,
                                     user_attrs=attrs, constraints={CONSTRAINT_KEY: c},
                                     system_attrs={st.DASHBOARD_CONSTRAINTS_ATTR: [c]})


def _search_rows(study, enc: Encoding, *, final: bool = False,
                 states: tuple = ()) -> list[int]:
    """The distinct configurations of the study's trials in ``states`` (default: finished,
    COMPLETE and PRUNED), those of the final polish only when ``final`` (a resumed study's
    earlier final polish is not an input of the new one)."""
    rows = (enc.decode(t.params) for t in study.get_trials(
        deepcopy=False, states=states or st.finished_states())
        if final or t.user_attrs.get("origin") != FINAL_POLISH)
    return list(dict.fromkeys(r for r in rows if r is not None))


def final_polish(study, enc: Encoding, problem, limit: float, cache: _Scored,
                 me: str = "") -> list[int]:
    """After the search (every worker's trials finished, :func:`_settle`): the
    configurations :func:`final_polish_rows` finds around the front of all the study's
    other trials. Those on the final front are added to the study as finished, uncounted
    trials (``origin: final-polish``, ``counted: false``), so the study's front is the
    result's (the dashboard, ``report``, a resumed run); the others are only scored (an
    RDB storage takes ~0.2 s per added trial). Every worker computes the same rows; a
    worker adds the front points still missing, a few at a time, starting at a point of
    the list that depends on ``me``, so concurrent workers share the writing. Returns the
    rows, in :func:`final_polish_rows`' order."""
    import zlib

    known = _search_rows(study, enc)
    rows = final_polish_rows(enc, problem, limit, known, cache)
    added = set(rows)
    store = [r for r in _front_rows(sorted({*known, *rows}), cache, limit) if r in added]
    if not store:
        return rows
    chunks = [store[i:i + FINAL_POLISH_CHUNK]
              for i in range(0, len(store), FINAL_POLISH_CHUNK)]
    start = zlib.crc32(me.encode()) % len(chunks)
    for chunk in chunks[start:] + chunks[:start]:
        present = set(_search_rows(study, enc, final=True))
        study.add_trials([_frozen(enc, r, cache, limit, me) for r in chunk
                          if r not in present])
    return rows


def _within_budget(study, batch: list[tuple[Any, int]], trials: int
                   ) -> tuple[list[tuple[Any, int]], list[tuple[Any, int]]]:
    """Split ``batch`` into (kept, over budget): a trial is kept when its predecessors leave
    room in the budget. Over-budget trials are not failed: the caller tells them, uncounted.

    Optuna numbers trials in creation order under a lock (RDB: the study row is locked;
    journal: log order), so every trial numbered below one of ours is visible now. A trial is
    over budget when the non-FAIL trials numbered below it (not counting ours already found
    over budget) number ``trials`` or more; this never lets the finished trials exceed
    ``trials``, whatever the interleaving of workers.
    """
    from optuna.trial import TrialState

    mine = {t.number for t, _ in batch}
    claims = sorted(t.number for t in study.get_trials(deepcopy=False)
                    if t.state != TrialState.FAIL and st.is_counted(t) and t.number not in mine)
    keep, drop = [], []
    for trial, row in sorted(batch, key=lambda x: x[0].number):
        before = int(np.searchsorted(claims, trial.number)) + len(keep)
        (keep if before < trials else drop).append((trial, row))
    return keep, drop


__all__ = ["Encoding", "PARAM_ORDER", "make_sampler", "param_name", "run"]
