"""Optuna storages and studies for paraplan: open, check, resume, share (ecosystem.md 1.7-1.9).

``open_storage(spec)`` turns the ``--storage`` string into an Optuna storage:

- ``None``: :class:`optuna.storages.InMemoryStorage` (one process, nothing persisted);
- ``sqlite:///x.db``, ``postgresql[+driver]://...``, ``mysql[+driver]://...`` (any SQLAlchemy
  URL of those dialects): :class:`optuna.storages.RDBStorage` with heartbeats
  (``heartbeat_interval=60`` s, ``grace_period=120`` s), so trials of a killed worker are
  failed by the others (:func:`optuna.storages.fail_stale_trials`);
- ``redis://...`` / ``rediss://...``: ``JournalStorage(JournalRedisBackend(url))`` (a
  ``redis://`` string passed straight to Optuna raises, ecosystem.md 1.7);
- anything else: a journal file path, ``JournalStorage(JournalFileBackend(path))``; parent
  directories are created, and a torn last line (a writer killed in the middle of an append)
  is cut off before the journal is replayed, because Optuna only reports it on a *later*
  replay, once another line follows it (ecosystem.md 1.7, issues #5138/#6036). The journal
  lock is Optuna's symlink lock (``<journal>.lock``, NFS-safe, shared with Optuna's own tools)
  whose link names its holder, so a lock left by a writer killed on this host is broken at
  once instead of after a grace period.

Resuming a killed search. Every trial paraplan asks is tagged with the user attribute
``worker`` = ``host:pid:start-time:run`` of the process (and search) that owns it. At
start-up (and while a worker waits for others) :func:`fail_dead_trials` marks FAIL the
RUNNING trials nobody will ever finish:

- owner on this host whose process is gone (pid not alive, or reused: start time differs),
  or is this process but not a search running now (an earlier, interrupted call);
- journal storages: also every RUNNING trial owned by another host or by nobody. A journal
  file has a **single-writer assumption** per host: several processes on one machine may share
  it (their pids are checked), several machines must not (use an RDB; ecosystem.md 1.7/1.8).
  A worker starting next to a running one may so fail a trial the other has just asked and
  not yet tagged; that worker drops the trial and asks again (optuna_search._loop);
- RDB storages: trials of other hosts are left to Optuna's heartbeat; a RUNNING trial without
  an owner tag (its worker died between ``ask`` and the tag) is failed once it is older than
  the grace period;
- while a worker waits for others, any RUNNING trial older than the grace period whose owner
  cannot be seen alive is failed (so a lost worker never blocks the others for ever).

Failed trials never count: a search stops when the study holds exactly the requested number
of finished (COMPLETE + PRUNED) trials, see :mod:`optimizer.optuna_search`.

A study records its inputs in user attributes (tool, Optuna and numpy versions, input
fingerprint, seed, sampler settings, cost-model version, batch size); re-opening it for a
different problem raises :class:`costmodel.errors.InputError` (field ``study_name``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import json
import os
import socket
import time
import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodel.errors import InputError, did_you_mean
from costmodel.loaders import expand_user

HEARTBEAT_INTERVAL_S = 60
GRACE_PERIOD_S = 120
SQLITE_TIMEOUT_S = 30.0
JOURNAL_LOCK_GRACE_S = 10  # a lock held this long by one holder (of unknown liveness) is broken
RDB_DIALECTS = ("sqlite", "postgresql", "mysql")
REDIS_SCHEMES = ("redis", "rediss", "unix")
WORKER_ATTR = "worker"
RESULT_ATTR = "result"
RESULT_CHUNK = 60_000  # bytes per user attribute (MySQL TEXT holds 64 KiB)
DIRECTIONS = ("maximize", "minimize")
METRIC_NAMES = ("tokens_per_s", "peak_memory_bytes")


def _quiet_optuna() -> None:
    """Silence Optuna's own logging and its experimental-feature warnings (ecosystem 1.14)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


# ---------------------------------------------------------------------------------------------
# storage specs
def storage_kind(spec: str | None) -> str:
    """``"memory"``, ``"rdb"``, ``"redis"`` or ``"journal"`` for a ``--storage`` string.

    Raises InputError (field ``storage``) for an empty string or an unknown URL scheme.
    """
    if spec is None:
        return "memory"
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("storage", f"must be a storage URL or a journal file path, got "
                         f"{spec!r}", "e.g. sqlite:///study.db, postgresql://user@host/db, "
                         "redis://host:6379, or ./study.journal")
    if "://" not in spec:
        return "journal"
    scheme = spec.split("://", 1)[0].lower()
    dialect = scheme.split("+", 1)[0]
    if dialect in RDB_DIALECTS:
        return "rdb"
    if scheme in REDIS_SCHEMES:
        return "redis"
    raise InputError("storage", f"unknown storage URL scheme {scheme!r} in {redact(spec)!r}",
                     did_you_mean(dialect, (*RDB_DIALECTS, "redis"))
                     + "; a plain path means a journal file")


def redact(spec: str | None) -> str | None:
    """The storage string with any password replaced by ``***`` (safe to print and record)."""
    if spec is None or "://" not in spec:
        return spec
    scheme, rest = spec.split("://", 1)
    netloc, sep, tail = rest.partition("/")
    if "@" in netloc:
        cred, host = netloc.rsplit("@", 1)
        if ":" in cred:
            cred = cred.split(":", 1)[0] + ":***"
        netloc = f"{cred}@{host}"
    return f"{scheme}://{netloc}{sep}{tail}"


def open_storage(spec: str | None):
    """An Optuna storage for ``spec`` (see the module docstring). Raises InputError
    (field ``storage``) for bad URLs, unreachable servers, missing drivers, unreadable or
    corrupted journal files."""
    _quiet_optuna()
    kind = storage_kind(spec)
    if kind == "memory":
        from optuna.storages import InMemoryStorage

        return InMemoryStorage()
    if kind == "rdb":
        return _open_rdb(spec)
    if kind == "redis":
        return _open_redis(spec)
    return _open_journal(spec)


def _open_rdb(url: str):
    import sqlalchemy
    from optuna.storages import RDBStorage

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception as e:  # sqlalchemy.exc.ArgumentError and friends
        raise InputError("storage", f"not a valid database URL {redact(url)!r}: {e}",
                         "e.g. sqlite:///study.db or "
                         "postgresql+psycopg2://user:password@host:5432/db") from None
    url = _with_installed_driver(url, parsed)
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        db = parsed.database
        if db and db != ":memory:" and not db.startswith("file:"):
            expand_user(db, "storage").parent.mkdir(parents=True, exist_ok=True)
    else:
        engine_kwargs = {"pool_pre_ping": True}
    last: Exception | None = None
    for attempt in range(4):  # concurrent first use of an empty database can race on DDL
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs,
                              heartbeat_interval=HEARTBEAT_INTERVAL_S,
                              grace_period=GRACE_PERIOD_S)
        except (ImportError, sqlalchemy.exc.NoSuchModuleError) as e:
            raise InputError("storage", f"no database driver for {redact(url)!r}: {e}",
                             "install one, e.g. pip install 'paraplan[postgres]' "
                             "(psycopg2-binary, then postgresql+psycopg2://...) or pymysql "
                             "(mysql+pymysql://...)") from None
        except sqlalchemy.exc.ArgumentError as e:
            raise InputError("storage", f"bad database URL {redact(url)!r}: {e}") from None
        except Exception as e:  # OperationalError, IntegrityError, StorageInternalError...
            last = e
            if "could not connect" in str(e).lower() or "connection refused" in str(e).lower():
                break
            time.sleep(0.2 * (attempt + 1))
    msg = str(getattr(last, "orig", None) or last).strip().splitlines()
    raise InputError("storage", f"cannot open database {redact(url)!r}: "
                     f"{msg[0] if msg else type(last).__name__}",
                     "check that the server is running and the URL, user and database "
                     "are right")


#: Drivers SQLAlchemy may use for a dialect, its default first (SQLAlchemy 2.1: psycopg 3).
_DRIVERS = {"postgresql": (("psycopg", "psycopg"), ("psycopg2", "psycopg2")),
            "mysql": (("mysqldb", "MySQLdb"), ("pymysql", "pymysql"))}


def _with_installed_driver(url: str, parsed) -> str:
    """``postgresql://`` / ``mysql://`` without a driver name use SQLAlchemy's default driver;
    when that is not installed but another known one is, name the installed one."""
    import importlib.util

    if "+" in parsed.drivername or parsed.drivername not in _DRIVERS:
        return url
    for i, (driver, module) in enumerate(_DRIVERS[parsed.drivername]):
        if importlib.util.find_spec(module) is not None:
            if i == 0:
                return url
            scheme, rest = url.split("://", 1)
            return f"{scheme}+{driver}://{rest}"
    return url


def _open_redis(url: str):
    from optuna.storages.journal import JournalRedisBackend, JournalStorage

    try:
        import redis  # noqa: F401
    except ImportError:
        raise InputError("storage", f"{redact(url)!r} needs the redis package",
                         "pip install redis") from None
    try:
        return JournalStorage(JournalRedisBackend(url))
    except Exception as e:
        raise InputError("storage", f"cannot open Redis journal {redact(url)!r}: {e}",
                         "check that the Redis server is reachable") from None


@functools.lru_cache(maxsize=1)
def _owned_lock_class():
    from optuna.storages.journal import JournalFileSymlinkLock

    class OwnedSymlinkLock(JournalFileSymlinkLock):
        """The journal lock of Optuna's ``JournalFileSymlinkLock`` (an atomic ``symlink`` at
        ``<journal>.lock``, NFS-safe, so Optuna's own tools still exclude us), but the link
        points at ``paraplan-lock:host:pid:start:nonce``: a lock left by a killed writer on
        this host is broken at once, one from elsewhere once the same holder has kept it for
        ``grace_period`` seconds (a writer holds it for one append)."""

        def __init__(self, filepath: str, grace_period: int = JOURNAL_LOCK_GRACE_S) -> None:
            super().__init__(filepath, grace_period=grace_period)

        def acquire(self) -> bool:
            import uuid

            me = f"paraplan-lock:{worker_id(uuid.uuid4().hex[:8])}"
            sleep_s, holder, since = 0.0005, None, time.monotonic()
            while True:
                try:
                    os.symlink(me, self._lock_file)
                    self._mine = me
                    return True
                except FileExistsError:
                    pass
                try:
                    target = os.readlink(self._lock_file)
                except OSError:
                    continue  # released meanwhile
                if target != holder:
                    holder, since = target, time.monotonic()
                if _lock_holder_alive(target) is False \
                        or time.monotonic() - since > self.grace_period:
                    self._break(target)
                    continue
                time.sleep(sleep_s)
                sleep_s = min(2 * sleep_s, 0.05)

        def release(self) -> None:
            try:
                os.unlink(self._lock_file)
            except FileNotFoundError:
                pass

        def _break(self, target: str) -> None:
            import uuid

            stale = f"{self._lock_file}.{uuid.uuid4().hex}.stale"
            try:
                os.rename(self._lock_file, stale)
            except OSError:
                return
            try:
                taken = os.readlink(stale)
            except OSError:
                taken = target
            if taken != target:  # a newer holder's link: give it back
                try:
                    os.symlink(taken, self._lock_file)
                except OSError:
                    pass
            os.unlink(stale)

    return OwnedSymlinkLock


def _lock_holder_alive(target: str) -> bool | None:
    """Liveness of the process named by an OwnedSymlinkLock link; None when unknowable."""
    if not target.startswith("paraplan-lock:"):
        return None  # Optuna's own lock (the link points at the journal): grace period only
    try:
        host, pid_text, start, _nonce = target.split(":", 1)[1].rsplit(":", 3)
        return _process_alive(host, int(pid_text), start)
    except ValueError:
        return None


def _open_journal(path_text: str):
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path = expand_user(path_text, "storage")
    if path.is_dir():
        raise InputError("storage", f"{path_text!r} is a directory, not a journal file",
                         f"e.g. {path / 'study.journal'}")
    if path.exists():
        with open(path, "rb") as f:
            head = f.read(16)
        if head.startswith(b"SQLite format 3"):
            raise InputError("storage", f"{path_text!r} is an SQLite database, not a journal",
                             f"use --storage sqlite:///{path}")
        if not _looks_like_journal(path):
            raise InputError("storage", f"{path_text!r} is not an Optuna journal file (its "
                             "first line is not a journal record)", "give a new path for a "
                             "new journal, or a storage URL")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _owned_lock_class()(str(path))
        repair_journal(path, lock)
        return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    except OSError as e:
        raise InputError("storage", f"cannot use journal file {path_text!r}: "
                         f"{e.strerror or e}") from None
    except Exception as e:  # the replay of a corrupted journal (ValueError, AssertionError..)
        raise InputError("storage", f"journal file {path_text!r} is corrupted: "
                         f"{type(e).__name__}: {e}",
                         "use another --storage path, or repair the file") from None


def _looks_like_journal(path: Path) -> bool:
    """Empty, or a first line that is a JSON object with an ``op_code`` (a journal record;
    a torn first line, a journal killed during its first append, also counts)."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    if not first.strip():
        return True
    if not first.endswith(b"\n"):
        return first.lstrip().startswith(b'{"op_code":')
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and "op_code" in record


def repair_journal(path: str | os.PathLike, lock=None) -> int:
    """Cut a torn last line off a journal file; return the number of bytes removed.

    A writer killed during ``append_logs`` can leave a last line without its newline (or an
    unparsable one). Optuna skips such a line while it is last, but once another process
    appends after it, the merged line fails every later replay. The file is truncated to the
    end of its last complete, parsable line, under the journal's lock (``ftruncate`` is one
    atomic system call, so a crash leaves either the old or the repaired file).
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return 0
    if lock is not None:
        lock.acquire()
    try:
        size = path.stat().st_size
        with open(path, "rb+") as f:
            keep = _complete_prefix(f, size)
            if keep < size:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
        return size - keep
    finally:
        if lock is not None:
            lock.release()


def _complete_prefix(f, size: int, window: int = 1 << 20) -> int:
    """Length of the longest prefix of the file that ends with a complete, parsable line
    (only trailing lines are examined: the file's middle is left to Optuna's replay)."""
    while True:
        start = max(0, size - window)
        f.seek(start)
        data = f.read(size - start)
        end = len(data)
        while True:
            nl = data.rfind(b"\n", 0, end)
            if nl < 0:
                break
            prev = data.rfind(b"\n", 0, nl)
            if prev < 0 and start > 0:
                break  # this line begins before the window: widen it
            try:
                json.loads(data[prev + 1:nl])
                return start + nl + 1
            except ValueError:
                end = nl  # an unparsable last line goes too
        if start == 0:
            return 0
        window *= 4


# ---------------------------------------------------------------------------------------------
# studies
def library_versions() -> dict[str, str]:
    import numpy
    import optuna

    from costmodel import COST_MODEL_VERSION
    from optimizer.api import tool_version

    return {"tool_version": tool_version(), "optuna_version": optuna.__version__,
            "numpy_version": numpy.__version__, "cost_model_version": COST_MODEL_VERSION}


def study_exists(storage, study_name: str | None) -> bool:
    """Whether ``storage`` already holds a study called ``study_name``."""
    import optuna

    if study_name is None:
        return False
    return study_name in optuna.get_all_study_names(storage=storage)


def open_study(storage, study_name: str | None, sampler, user_attrs: Mapping[str, Any],
               *, check_attrs: Sequence[str] = ("fingerprint",)):
    """Create or load the study ``study_name`` (``load_if_exists=True``) with two objectives
    (maximise tokens/s, minimise peak memory).

    ``user_attrs`` are recorded on a new study (and on a loaded one that lacks them). When the
    study already exists, each key of ``check_attrs`` it records must equal ``user_attrs``'s
    value, else InputError(field ``study_name``): the study holds a different problem.
    """
    import optuna

    _quiet_optuna()
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


def count_finished(study) -> int:
    """COMPLETE + PRUNED trials of the study (what ``--trials`` counts)."""
    return len(study.get_trials(deepcopy=False, states=finished_states()))


# ---------------------------------------------------------------------------------------------
# workers and dead trials
def _proc_start(pid: int) -> str:
    """The process start time in clock ticks since boot (Linux), '' where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


_ACTIVE_RUNS: set[str] = set()  # run tokens of the searches running in this process


def worker_id(run: str = "") -> str:
    """``host:pid:start-time:run`` of this process and search (the owner tag of its trials).

    ``run`` is a token of one search in this process; while it is registered with
    :func:`begin_run`, trials tagged with it count as alive."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_proc_start(pid)}:{run}"


def begin_run() -> str:
    """Register a search running in this process; returns its token (see :func:`end_run`)."""
    import uuid

    token = uuid.uuid4().hex[:12]
    _ACTIVE_RUNS.add(token)
    return token


def end_run(token: str) -> None:
    _ACTIVE_RUNS.discard(token)


def _process_alive(host: str, pid: int, start: str) -> bool | None:
    """Whether process ``pid`` (started at ``start``) on ``host`` runs; None for another host."""
    if host != socket.gethostname():
        return None
    if pid == os.getpid():
        return not start or start == _proc_start(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = _proc_start(pid)
    return not (start and now and now != start)


def _owner_alive(owner: str) -> bool | None:
    """True/False for an owner tag (:func:`worker_id`) on this host, None for another host."""
    try:
        host, pid_text, start, run = owner.rsplit(":", 3)
        pid = int(pid_text)
    except ValueError:
        return None
    alive = _process_alive(host, pid, start)
    if alive and pid == os.getpid():
        return run in _ACTIVE_RUNS  # this process: alive while that search runs
    return alive


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
    dead = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t._trial_id in own:
            continue
        owner = t.user_attrs.get(WORKER_ATTR)
        alive = _owner_alive(owner) if isinstance(owner, str) else None
        old = (t.datetime_start is not None
               and (now - t.datetime_start).total_seconds() > GRACE_PERIOD_S)
        if alive is False:
            dead.append(t)
        elif alive is None and kind in ("journal", "redis") and (at_startup or old):
            dead.append(t)  # single-writer assumption (module docstring)
        elif alive is None and kind == "rdb" and old and (owner is None or not at_startup):
            dead.append(t)  # untagged, or its host's heartbeat never came: long gone
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


__all__ = [
    "DIRECTIONS", "METRIC_NAMES", "count_finished", "fail_dead_trials", "fail_trials",
    "begin_run", "end_run", "library_versions", "load_result", "open_storage", "open_study", "record_heartbeat",
    "redact", "repair_journal", "save_result", "storage_kind", "study_exists", "worker_id",
]
