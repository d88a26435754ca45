"""One paraplan study in an Optuna storage: open and check it, its workers' trials, its result.

Resuming a killed search. Every trial paraplan asks is tagged with the user attribute
``worker`` = ``host:pid:start-time:run`` of the process (and search) that owns it. At
start-up (and while a worker waits for others) :func:`fail_dead_trials` marks FAIL the
RUNNING trials nobody will ever finish:

- owner on this host whose process is gone (pid not alive, or reused: start time differs),
  or is this process but not a search running now (an earlier, interrupted call);
- every storage: a RUNNING trial without an owner tag (its worker died between ``ask`` and
  the tag, which takes milliseconds) once it is older than ``UNTAGGED_GRACE_S`` (4 s: with
  the waiting worker's 0.5 s poll, within the 5 s heartbeat interval). Younger ones are left
  alone even at start-up: they were failed at once on journals, and 8 workers starting
  together on one journal failed each other's just-asked trials (1-3 FAIL trials left);
- journal storages: also every RUNNING trial owned by another host. A journal file has a
  **single-writer assumption** per host: several processes on one machine may share it (their
  pids are checked), several machines must not (use an RDB; ecosystem.md 1.7/1.8). Should a
  trial still be failed under its owner (e.g. one starved past the grace), that worker drops
  it and asks again (optuna_search._loop);
- RDB storages: an owner on this host that is a zombie counts as dead; a dead owner on this
  host is seen at once (its pid), so a worker waiting on a killed one's trials waits one poll
  (0.5 s). PostgreSQL: an owner on another host whose tag ends with ``/pg`` holds a session
  advisory lock for its search (:mod:`optimizer.storage.liveness`); once the lock is free
  (the server ended its session: the process died) its trials are failed, also at start-up,
  so a worker killed on any host is seen within one poll. Other trials of other hosts
  (MySQL, older tags, a host that lost power: a half-open session keeps the lock until its
  keepalive fails, <= 25 s) are left to Optuna's heartbeat (grace 15 s), which always runs
  first: a lock seen held never spares a trial whose heartbeat stopped;
- while a worker waits for others, any RUNNING trial older than the grace period whose owner
  cannot be seen alive is failed (so a lost worker never blocks the others for ever).

Failed trials never count: a search stops when the study holds exactly the requested number
of finished (COMPLETE + PRUNED) trials, see :mod:`optimizer.search.optuna_engine`.

A study records its inputs in user attributes (tool, Optuna and numpy versions, input
fingerprint, seed, sampler settings, cost-model version, batch size); re-opening it for a
different problem raises :class:`costmodel.errors.InputError` (field ``study_name``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from costmodel.errors import InputError
from optimizer.storage.backends import (
    OWNER_UNSEEN_S,
    UNTAGGED_GRACE_S,
    open_storage,
    quiet_optuna,
)
from optimizer.storage.liveness import server_alive
from optimizer.storage.workers import owner_alive

WORKER_ATTR = "worker"
RESULT_ATTR = "result"
RESULT_CHUNK = 60_000  # bytes per user attribute (MySQL TEXT holds 64 KiB)
DIRECTIONS = ("maximize", "minimize")
METRIC_NAMES = ("tokens_per_s", "peak_memory_bytes")


# ---------------------------------------------------------------------------------------------
# studies
def library_versions() -> dict[str, str]:
    import numpy
    import optuna

    from costmodel import COST_MODEL_VERSION
    from optimizer.core.problem import tool_version

    return {"tool_version": tool_version(), "optuna_version": optuna.__version__,
            "numpy_version": numpy.__version__, "cost_model_version": COST_MODEL_VERSION}


def open_study(storage, study_name: str | None, sampler, user_attrs: Mapping[str, Any],
               *, check_attrs: Sequence[str] = ("fingerprint",)):
    """Create or load the study ``study_name`` (``load_if_exists=True``) with two objectives
    (maximise tokens/s, minimise peak memory).

    ``user_attrs`` are recorded on a new study (and on a loaded one that lacks them). When the
    study already exists, each key of ``check_attrs`` it records must equal ``user_attrs``'s
    value, else InputError(field ``study_name``): the study holds a different problem.
    """
    import optuna

    quiet_optuna()
    try:
        study = optuna.create_study(storage=storage, sampler=sampler, study_name=study_name,
                                    directions=list(DIRECTIONS), load_if_exists=True)
    except ValueError as e:  # e.g. an existing single-objective study of that name
        raise InputError("study_name", f"study {study_name!r} cannot be used: {e}",
                         "use another --study-name") from None
    if [d.name.lower() for d in study.directions] != list(DIRECTIONS):
        raise InputError("study_name", f"study {study_name!r} has directions "
                         f"{[d.name.lower() for d in study.directions]}, not {list(DIRECTIONS)}",
                         "use another --study-name")
    existing = study.user_attrs
    for key in check_attrs:
        if key in existing and key in user_attrs and existing[key] != user_attrs[key]:
            raise InputError("study_name", f"study {study_name!r} in this storage holds a "
                             f"different problem ({key} {existing[key]!r} != "
                             f"{user_attrs[key]!r})", "use another --study-name, or the "
                             "inputs the study was created with")
    for key, value in user_attrs.items():
        if key not in existing:
            study.set_user_attr(key, value)
    if not study.metric_names:
        study.set_metric_names(list(METRIC_NAMES))
    return study


def finished_states():
    from optuna.trial import TrialState

    return (TrialState.COMPLETE, TrialState.PRUNED)


#: Trial user attribute: ``False`` on a trial that does not count against ``--trials`` (a
#: configuration the study had already scored, or one asked beyond the budget by a concurrent
#: worker). Such trials are told with their real values (the sampler learns from them), so
#: none is left FAIL; the search counts the others.
COUNTED_ATTR = "counted"


def is_counted(trial) -> bool:
    return trial.user_attrs.get(COUNTED_ATTR, True) is not False


def count_finished(study) -> int:
    """COMPLETE + PRUNED trials of the study that count (what ``--trials`` counts)."""
    return sum(is_counted(t) for t in study.get_trials(deepcopy=False,
                                                        states=finished_states()))


#: The trial system attribute optuna-dashboard 0.21 reads a trial's constraints from
#: (``serialize_frozen_trial``: ``system_attrs.get("constraints", [])``, a list, Optuna's form
#: before 5.0). Optuna 5's ``Trial.set_constraint`` stores ``constraints:NAME`` instead, which
#: the dashboard never reads: it would draw every over-limit trial as feasible.
DASHBOARD_CONSTRAINTS_ATTR = "constraints"


def set_constraint(trial, key: str, value: float) -> None:
    """Set a trial's constraint (feasible iff ``value <= 0``) in both forms: Optuna 5's
    ``constraints:KEY`` (``Trial.set_constraint``, what Optuna's samplers and ``best_trials``
    read) and the list ``constraints`` that optuna-dashboard 0.21 reads. Optuna 5 reads the
    list too, as constraint ``"0"``, so ``FrozenTrial.constraints`` holds the value under
    both names; feasibility is the same under either reader. Call it before ``tell``."""
    trial.set_constraint(key, value)
    trial.storage.set_trial_system_attr(trial._trial_id, DASHBOARD_CONSTRAINTS_ATTR,
                                        [float(value)])


# ---------------------------------------------------------------------------------------------
# dead trials
def fail_trials(study, trials: Iterable) -> int:
    """Mark ``trials`` FAIL (skipping those another process finished first); return how many."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    n = 0
    for t in trials:
        try:
            if study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                n += 1
        except UpdateFinishedTrialError:
            pass
    return n


def fail_dead_trials(study, kind: str, *, at_startup: bool, own: Iterable[int] = ()) -> int:
    """Fail RUNNING trials that no live process will finish (rules in the module docstring).

    ``kind`` is :func:`storage_kind`'s answer; ``own`` are trial ids this process is working on.
    Returns the number of trials failed.
    """
    from optuna.storages import fail_stale_trials
    from optuna.trial import TrialState

    if kind == "memory":
        return 0
    if kind == "rdb":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fail_stale_trials(study)  # Optuna's heartbeat: other hosts' dead workers
    own = set(own)
    now = _dt.datetime.now()

    def age(t) -> float:
        return (now - t.datetime_start).total_seconds() if t.datetime_start else 0.0

    seen: dict[str, bool | None] = {}  # owner tag -> liveness, one check per owner

    def liveness(owner: str) -> bool | None:
        if owner not in seen:
            alive = owner_alive(owner)
            if alive is None and kind == "rdb":  # another host: ask the server (PostgreSQL)
                alive = server_alive(study._storage, owner)
            seen[owner] = alive
        return seen[owner]

    dead = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t._trial_id in own:
            continue
        owner = t.user_attrs.get(WORKER_ATTR)
        alive = liveness(owner) if isinstance(owner, str) else None
        old = (t.datetime_start is not None
               and (now - t.datetime_start).total_seconds() > OWNER_UNSEEN_S)
        if alive is False:
            dead.append(t)
        elif owner is None and age(t) > UNTAGGED_GRACE_S:
            dead.append(t)  # untagged: its worker died between ask and tag (that takes ms)
        elif owner is not None and alive is None and kind in ("journal", "redis") \
                and (at_startup or old):
            dead.append(t)  # another host's: single-writer assumption (module docstring)
        elif alive is None and kind == "rdb" and old and not at_startup:
            dead.append(t)  # its host's heartbeat never came: long gone
    return fail_trials(study, dead)


def record_heartbeat(study, trial) -> None:
    """Record one heartbeat for ``trial`` when the storage has heartbeats (RDB)."""
    from optuna.storages._heartbeat import is_heartbeat_enabled

    storage = study._storage
    if is_heartbeat_enabled(storage):
        storage.record_heartbeat(trial._trial_id)


# ---------------------------------------------------------------------------------------------
# the result document
def save_result(study, doc: Mapping[str, Any]) -> None:
    """Store the front document (``optimize --json``) in the study's user attribute
    ``result``; documents over 60 kB are stored zlib-compressed in chunks
    (``result`` then says ``{"encoding": "zlib+base64", "chunks": n}``)."""
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) <= RESULT_CHUNK:
        study.set_user_attr(RESULT_ATTR, json.loads(text))
        return
    blob = base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    chunks = [blob[i:i + RESULT_CHUNK] for i in range(0, len(blob), RESULT_CHUNK)]
    for i, chunk in enumerate(chunks):
        study.set_user_attr(f"{RESULT_ATTR}_chunk_{i}", chunk)
    study.set_user_attr(RESULT_ATTR, {"encoding": "zlib+base64", "chunks": len(chunks)})


def load_result(storage, study_name: str) -> dict | None:
    """The front document saved by :func:`save_result`, or None (no study, or no result yet).

    ``storage`` is a storage object or a ``--storage`` string."""
    import optuna

    if storage is None or isinstance(storage, str):
        storage = open_storage(storage)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return None
    attrs = study.user_attrs
    doc = attrs.get(RESULT_ATTR)
    if isinstance(doc, dict) and doc.get("encoding") == "zlib+base64":
        blob = "".join(attrs[f"{RESULT_ATTR}_chunk_{i}"] for i in range(int(doc["chunks"])))
        return json.loads(zlib.decompress(base64.b64decode(blob)))
    return doc
