"""Optuna storages and the paraplan studies in them (ecosystem.md 1.7-1.9).

- :mod:`~optimizer.storage.backends`: ``--storage`` string -> Optuna storage (in-memory, RDB
  with heartbeats, Redis journal, journal file with a torn-line repair and an owned lock);
- :mod:`~optimizer.storage.workers`: worker identities (``host:pid:start-time:run``) and
  whether their owner is alive;
- :mod:`~optimizer.storage.liveness`: a search's liveness kept by the database server
  (PostgreSQL advisory locks), so a worker killed on another host is seen dead at once;
- :mod:`~optimizer.storage.study`: open and check a study, fail the trials of dead workers,
  store and load the result document.

The names below are the package's interface (the Optuna adapter uses them as ``st.NAME``);
modules inside the package import each other by module.
"""

from __future__ import annotations

from optimizer.storage.backends import (
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    OWNER_UNSEEN_S,
    open_storage,
    quiet_optuna,
    redact,
    repair_journal,
    storage_errors,
    storage_kind,
)
from optimizer.storage.liveness import Holder, hold_liveness
from optimizer.storage.study import (
    COUNTED_ATTR,
    DASHBOARD_CONSTRAINTS_ATTR,
    DIRECTIONS,
    METRIC_NAMES,
    RESULT_ATTR,
    WORKER_ATTR,
    count_finished,
    fail_dead_trials,
    fail_trials,
    finished_states,
    is_counted,
    library_versions,
    load_result,
    open_study,
    record_heartbeat,
    save_result,
    set_constraint,
)
from optimizer.storage.workers import LOCK_MARK, begin_run, end_run, worker_id

__all__ = [
    "COUNTED_ATTR", "LOCK_MARK", "DASHBOARD_CONSTRAINTS_ATTR", "DIRECTIONS", "GRACE_PERIOD_S",
    "HEARTBEAT_INTERVAL_S", "METRIC_NAMES", "OWNER_UNSEEN_S", "RESULT_ATTR", "WORKER_ATTR",
    "begin_run", "count_finished", "end_run", "fail_dead_trials", "fail_trials",
    "Holder", "finished_states", "hold_liveness", "is_counted", "library_versions", "load_result", "open_storage", "open_study",
    "quiet_optuna", "record_heartbeat", "redact", "repair_journal", "save_result",
    "set_constraint", "storage_errors", "storage_kind", "worker_id",
]
