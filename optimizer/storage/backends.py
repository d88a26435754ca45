"""Opening Optuna storages from a ``--storage`` string (ecosystem.md 1.7-1.8).

``open_storage(spec)`` turns the ``--storage`` string into an Optuna storage:

- ``None``: :class:`optuna.storages.InMemoryStorage` (one process, nothing persisted);
- ``sqlite:///x.db``, ``postgresql[+driver]://...``, ``mysql[+driver]://...`` (any SQLAlchemy
  URL of those dialects): :class:`optuna.storages.RDBStorage` with heartbeats
  (``heartbeat_interval=5`` s, ``grace_period=15`` s, beaten by a thread), so trials of a
  killed worker are failed by the others (:func:`optuna.storages.fail_stale_trials`); on
  PostgreSQL a search's liveness is also kept by the server, seen at once
  (:mod:`optimizer.storage.liveness`);
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

import contextlib
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

HEARTBEAT_INTERVAL_S = 5  # a thread of each worker beats every half interval for its batch
GRACE_PERIOD_S = 15  # a RUNNING RDB trial without a heartbeat this long (any host's) is dead
OWNER_UNSEEN_S = 60  # a RUNNING trial this old whose owner liveness is unknown, no heartbeat
# a RUNNING RDB trial nobody tagged this long: its worker was killed between ask and tag. The
# window is Optuna's create_new_trial, get_trial and sampler.before_trial (TPE samples lazily,
# at the first suggest, after the tag): a few storage round trips. Plus one POLL_S of the
# waiting worker, it stays under the heartbeat interval (it was 15 s: a stall of 15 s)
UNTAGGED_GRACE_S = 4
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


#: Query parameters that carry credentials (libpq's password and sslpassword, and the usual
#: spellings of drivers and proxies); compared case-insensitively.
SECRET_PARAMS = ("password", "passwd", "pwd", "pass", "sslpassword", "secret", "token",
                 "access_token", "api_key", "apikey", "auth", "authtoken")


def _split_url(spec: str) -> tuple[str, str, str, str]:
    """``(scheme, userinfo, rest, query)`` of ``scheme://[userinfo@]rest[?query]``. The user
    information ends at the LAST ``@`` before the query: a password may hold ``/``, ``:``,
    ``@`` or ``#`` (SQLAlchemy and redis-py read it that way)."""
    scheme, after = spec.split("://", 1)
    head, qmark, query = after.partition("?")
    userinfo, at, rest = head.rpartition("@")
    if not at:
        userinfo, rest = "", head
    return scheme, userinfo, rest, query if qmark else ""


def _secrets(spec: str | None) -> list[str]:
    """The password-like values in a storage URL, raw and percent-decoded, longest first."""
    from urllib.parse import unquote

    if not isinstance(spec, str) or "://" not in spec:
        return []
    _, userinfo, _, query = _split_url(spec)
    found = []
    if ":" in userinfo:
        found.append(userinfo.split(":", 1)[1])
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        if eq and unquote(key).strip().lower() in SECRET_PARAMS:
            found.append(value)
    out = {s for v in found if v for s in (v, unquote(v), unquote(v.replace("+", " ")))}
    return sorted((s for s in out if s), key=len, reverse=True)


def redact(spec: str | None) -> str | None:
    """The storage string with every password replaced by ``***`` (safe to print and record):
    the user information's password, whatever characters it holds, and the values of the
    query parameters of :data:`SECRET_PARAMS` (``?password=``, ``&sslpassword=``, ...)."""
    if spec is None or not isinstance(spec, str) or "://" not in spec:
        return spec
    from urllib.parse import unquote

    scheme, userinfo, rest, query = _split_url(spec)
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    pairs = []
    for pair in query.split("&") if query else ():
        key, eq, value = pair.partition("=")
        if eq and unquote(key).strip().lower() in SECRET_PARAMS:
            value = "***"
        pairs.append(f"{key}{eq}{value}")
    out = f"{scheme}://{userinfo + '@' if userinfo else ''}{rest}"
    return out + ("?" + "&".join(pairs) if query else "")


def scrub(text: str, spec: str | None) -> str:
    """``text`` (e.g. a driver's error message) with the passwords of ``spec`` removed."""
    text = str(text)
    if isinstance(spec, str) and "://" in spec:
        text = text.replace(spec, redact(spec) or "")
    for secret in _secrets(spec):
        text = text.replace(secret, "***")
    return text


@contextlib.contextmanager
def storage_errors(spec: str | None):
    """Turn a failing database under a running study (a corrupted SQLite page, a server that
    went away: Optuna's StorageInternalError, SQLAlchemy's DatabaseError) into
    InputError("storage"), exit 2, with any password removed."""
    try:
        yield
    except InputError:
        raise
    except Exception as e:
        import sqlalchemy.exc
        from optuna.exceptions import StorageInternalError

        if not isinstance(e, StorageInternalError | sqlalchemy.exc.SQLAlchemyError):
            raise
        cause = getattr(e, "orig", None) or e.__cause__ or e.__context__ or e
        msg = str(getattr(cause, "orig", None) or cause).strip().splitlines()
        raise InputError("storage", scrub(f"the database of {redact(spec)!r} failed: "
                                          f"{msg[0] if msg else type(e).__name__}", spec),
                         "is the file damaged or the server gone? restore it, or give "
                         "another --storage") from None


def open_storage(spec: str | None, *, read_only: bool = False):
    """An Optuna storage for ``spec`` (see the module docstring). Raises InputError
    (field ``storage``) for bad URLs, unreachable servers, missing drivers, unreadable or
    corrupted journal files, files that are not regular files, and SQLite databases that hold
    tables of something else. No message carries a password (:func:`scrub`).

    ``read_only`` (``optimize report``): nothing is written, repaired, locked or created; a
    journal is replayed from the file as it is (a complete last record without its newline
    counts, a torn one is skipped), an SQLite database is opened with ``mode=ro``."""
    quiet_optuna()
    try:
        kind = storage_kind(spec)
        if kind == "memory":
            from optuna.storages import InMemoryStorage

            return InMemoryStorage()
        if kind == "rdb":
            return _open_rdb(spec, read_only=read_only)
        if kind == "redis":
            return _open_redis(spec)
        return _open_journal(spec, read_only=read_only)
    except InputError as e:
        raise InputError(e.field, scrub(e.message, spec),
                         scrub(e.hint, spec) if e.hint else None) from None


def _open_rdb(url: str, *, read_only: bool = False):
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
    extra: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        db = parsed.database
        if db and db != ":memory:" and not db.startswith("file:"):
            path = expand_user(db, "storage")
            _check_sqlite_file(path, read_only=read_only)
            if read_only:
                from urllib.parse import quote

                url = f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"
                extra = {"skip_table_creation": True, "skip_compatibility_check": True}
    else:
        engine_kwargs = {"pool_pre_ping": True}
        if read_only:
            extra = {"skip_table_creation": True}
    last: Exception | None = None
    for attempt in range(4):  # concurrent first use of an empty database can race on DDL
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs,
                              heartbeat_interval=HEARTBEAT_INTERVAL_S,
                              grace_period=GRACE_PERIOD_S, **extra)
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


def _optuna_tables() -> frozenset[str]:
    from optuna.storages._rdb import models

    return frozenset(models.BaseModel.metadata.tables) | {"alembic_version"}


def _check_sqlite_file(path: Path, *, read_only: bool = False) -> None:
    """An SQLite storage file must be new (in an existing folder), or a regular file holding an
    SQLite database whose tables are all Optuna's: paraplan never adds its tables to a
    database of something else, and never creates folders.

    A writer killed inside a transaction leaves a hot rollback journal, which a ``mode=ro``
    reader cannot roll back ("attempt to write a readonly database"): a search (it writes
    anyway) reads the tables through a read-write connection, which rolls the journal back
    as SQLite does on any open; ``read_only`` (``report``) says so instead of writing."""
    import sqlite3
    import stat as stat_mod

    if not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise InputError("storage", f"directory {parent} does not exist",
                             "create it first (paraplan does not create folders)")
        return
    st_mode = os.stat(path).st_mode
    if stat_mod.S_ISDIR(st_mode):
        raise InputError("storage", f"{path} is a directory, not an SQLite database file")
    if not stat_mod.S_ISREG(st_mode):
        raise InputError("storage", f"{path} is not a regular file (a device, FIFO or socket)",
                         "give the path of an SQLite database file")
    if path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(16)
    if head != b"SQLite format 3\x00":
        raise InputError("storage", f"{path} is not an SQLite database (or its header is "
                         "damaged)", "give a new file name, or the right database")
    def table_names(mode: str) -> set[str]:
        con = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=SQLITE_TIMEOUT_S)
        try:
            return {r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%'")}
        finally:
            con.close()

    try:
        try:
            names = table_names("ro")
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e).lower():
                raise
            if read_only:
                raise InputError("storage", f"SQLite database {path} holds an unfinished "
                                 "transaction of a killed writer (a hot journal), which a "
                                 "read-only reader cannot roll back",
                                 "run the study again (optimize --study FILE recovers it), "
                                 "then report") from None
            names = table_names("rw")
    except sqlite3.DatabaseError as e:
        raise InputError("storage", f"SQLite database {path} is corrupted or unreadable: {e}",
                         "restore it from a backup, or give a new file name") from None
    foreign = sorted(names - _optuna_tables())
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise InputError("storage", f"SQLite database {path} holds tables that are not "
                         f"Optuna's ({shown})", "give paraplan a database file of its own")


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


def _open_journal(path_text: str, *, read_only: bool = False):
    import stat as stat_mod

    from optuna.storages.journal import JournalFileBackend, JournalStorage

    from costmodel.safe_io import check_text

    check_text("storage", path_text, max_chars=4096)
    path = expand_user(path_text, "storage")
    if path.is_dir():
        raise InputError("storage", f"{path_text!r} is a directory, not a journal file",
                         f"e.g. {path / 'study.journal'}")
    if path.exists() and not stat_mod.S_ISREG(os.stat(path).st_mode):
        raise InputError("storage", f"{path_text!r} is not a regular file (a device, FIFO or "
                         "socket)", "give the path of a journal file, or of a new one")
    if not path.exists():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise InputError("storage", f"directory {parent} does not exist",
                             "create it first (paraplan does not create folders)")
        if read_only:
            raise InputError("storage", f"journal file {path_text!r} does not exist")
    if path.exists():
        with open(path, "rb") as f:
            head = f.read(16)
        if head.startswith(b"SQLite format 3"):
            raise InputError("storage", f"{path_text!r} is an SQLite database, not a journal",
                             f"use --storage sqlite:///{path}")
        if not _looks_like_journal(path):
            raise InputError("storage", f"{path_text!r} is not an Optuna journal file (its "
                             "lines are not journal records)", "give a new path for a "
                             "new journal, or a storage URL")
    try:
        if read_only:
            return JournalStorage(_read_only_backend(path))
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


def _is_record(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "op_code" in record


def _looks_like_journal(path: Path, tail: int = 1 << 16) -> bool:
    """Empty, or a journal all through: the first line and every complete line of the last
    ``tail`` bytes are JSON objects with an ``op_code`` (a torn last line, a writer killed in
    an append, is allowed). A file that only *starts* like a journal is not one, and is never
    repaired (cut)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
        if not first.strip():
            return size == len(first)
        if not first.endswith(b"\n"):
            return first.lstrip().startswith(b'{"op_code":') and size == len(first)
        if not _is_record(first):
            return False
        start = max(len(first), size - tail)
        f.seek(start)
        data = f.read(size - start)
    lines = data.split(b"\n")
    if start > len(first):
        lines = lines[1:]  # the window starts inside a line
    complete, last = [x for x in lines[:-1] if x.strip()], lines[-1]
    if complete and not complete[-1].lstrip().startswith(b"{"):
        return False  # the last complete line may be a damaged record (repaired), not text
    if not all(_is_record(line) for line in complete[:-1]):
        return False
    return not last or last.lstrip().startswith(b"{")


def _read_only_backend(path: Path):
    """A journal backend that replays ``path`` as it is and never writes (``report``)."""
    from optuna.storages.journal import BaseJournalBackend

    class ReadOnlyJournal(BaseJournalBackend):
        def read_logs(self, log_number_from: int):
            with open(path, "rb") as f:
                data = f.read()
            lines = data.split(b"\n")
            torn = lines.pop()  # b"" when the file ends with a newline
            for i, line in enumerate(lines):
                if i >= log_number_from:
                    yield json.loads(line)  # a damaged middle line: corrupted (exit 2)
            if torn.strip() and len(lines) >= log_number_from:
                try:
                    record = json.loads(torn)  # complete but its newline lost: it counts
                except ValueError:
                    return  # torn by a killed writer: skipped, as Optuna does
                if isinstance(record, dict):
                    yield record

        def append_logs(self, logs) -> None:
            raise InputError("storage", "opened read-only (optimize report never writes)")

    return ReadOnlyJournal()


def repair_journal(path: str | os.PathLike, lock=None) -> int:
    """Repair the end of a journal file; return the number of bytes removed.

    A writer killed during ``append_logs`` can leave a last line without its newline (or an
    unparsable one). Optuna skips such a line while it is last, but once another process
    appends after it, the merged line fails every later replay. Under the journal's lock:

    - a last line that is a complete record and only lost its newline gets the newline back
      (nothing is dropped);
    - otherwise the file is first copied to ``<journal>.torn-<UTC time>.bak`` and then
      truncated to the end of its last complete, parsable line (``ftruncate`` is one atomic
      system call, so a crash leaves either the old or the repaired file). Every complete
      record before the torn tail is kept.
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return 0
    if lock is not None:
        lock.acquire()
    try:
        size = path.stat().st_size
        with open(path, "rb+") as f:
            f.seek(max(0, size - 1))
            if f.read(1) != b"\n":
                start = max(0, size - (1 << 20))
                f.seek(start)
                tail = f.read(size - start).rsplit(b"\n", 1)[-1]
                if (start == 0 or len(tail) < size - start) and _is_record(tail):
                    f.seek(size)
                    f.write(b"\n")
                    f.flush()
                    os.fsync(f.fileno())
                    return 0
            keep = _complete_prefix(f, size)
            if keep < size:
                _backup(path)
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
        return size - keep
    finally:
        if lock is not None:
            lock.release()


def _backup(path: Path) -> Path:
    """Copy ``path`` beside itself before a repair cuts anything off it."""
    import datetime as dt
    import shutil

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.with_name(f"{path.name}.torn-{stamp}.bak")
    shutil.copy2(path, target)
    return target


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
