"""Opening Optuna storages from a ``--storage`` string (ecosystem.md 1.7-1.8).

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

The studies inside a storage (open, check, resume, the workers' trials, the stored result) are
:mod:`optimizer.storage.study`'s.
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from costmodel.errors import InputError, did_you_mean
from costmodel.loaders import expand_user
from optimizer.storage.workers import process_alive, worker_id

HEARTBEAT_INTERVAL_S = 60
GRACE_PERIOD_S = 120
SQLITE_TIMEOUT_S = 30.0
JOURNAL_LOCK_GRACE_S = 10  # a lock held this long by one holder (of unknown liveness) is broken
RDB_DIALECTS = ("sqlite", "postgresql", "mysql")
REDIS_SCHEMES = ("redis", "rediss", "unix")


def quiet_optuna() -> None:
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
    quiet_optuna()
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
        return process_alive(host, int(pid_text), start)
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
