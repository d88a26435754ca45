"""Worker liveness kept by the database server (PostgreSQL): a killed worker on any host is
seen dead at once.

A pid check (:func:`optimizer.storage.workers.owner_alive`) only sees workers on this host;
Optuna's heartbeat sees the others only after its grace period (15 s), so a worker on another
host killed while it held RUNNING trials stalled the others up to 15 s. The server knows
sooner: when a client process dies, its kernel closes its TCP connections and the server ends
those sessions at once, releasing every session-level lock they held.

- :func:`hold_liveness`: each search (its worker tag, ``host:pid:start:run``) takes the session-level
  advisory lock ``pg_advisory_lock(key)``, ``key`` a stable 64-bit hash of the tag
  (:func:`lock_key`), on a dedicated connection held for the life of the search (closed at
  its end, also on exceptions: :class:`Holder` is a context manager). Its tags then carry the
  suffix :data:`LOCK_MARK` (``/pg``): only such a tag is checked on the server, so a tag of
  an older paraplan, or of a search whose lock could not be taken, is never judged by a lock
  nobody took (Optuna's heartbeat still covers it).
- :func:`server_alive`: another worker asks ``pg_try_advisory_xact_lock(key)`` in a short
  transaction of its own pool: acquired means no session holds the lock, the owner is dead
  (the transaction-level lock goes with the transaction); not acquired means alive.

The lock is per search (run tag), not per process: a process running several searches holds
one connection per running search, and a finished search's lock is released with its
connection, as its tags stop counting alive in its own process (``_ACTIVE_RUNS``).

A host that loses power or its network leaves a half-open TCP session behind: the server only
ends it when its TCP keepalive fails. The liveness session sets the server-side keepalive of
its own connection (``tcp_keepalives_idle`` 10 s, ``_interval`` 5 s, ``_count`` 3, PostgreSQL
docs "Connections and Authentication"), so such a lock is gone within 10 + 3 x 5 = 25 s; the
trials are failed sooner by Optuna's heartbeat (grace period 15 s), which stays the fallback:
a lock seen held never spares a trial whose heartbeat stopped.

A live worker's session can end too (a network blip, a server restart, an idle-session timeout,
a keepalive that expired): the server then releases its lock and the other workers would fail
its trials although it is alive. :meth:`Holder.check` sees the session gone (a ``SELECT 1`` on
the liveness connection; the search calls it from its heartbeat thread every half heartbeat
interval, 2.5 s, and before each batch) and reconnects and takes the lock again, waiting at
most :data:`RETAKE_WAIT_S` for it (another worker's check holds the key for the milliseconds
of its own transaction). Should someone else hold the key (it never should: the tag is unique),
the search stops claiming the lock: its later trials are tagged without :data:`LOCK_MARK`
(:attr:`Holder.mark`, heartbeat rule) and it says so once on stderr. A trial failed by another
worker in the gap (at most one check interval plus the reconnection) is dropped by its worker,
which asks again (``optuna_engine._rounds``); it never counts.

MySQL/MariaDB have the same primitive (``GET_LOCK`` / ``IS_USED_LOCK``) but are not wired here
(no MySQL driver in the test environment); SQLite (one host), journal, Redis and in-memory
storages hold nothing (:func:`hold_liveness` returns None).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from typing import Any

from optimizer.storage.workers import LOCK_MARK

KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3
CONNECT_TIMEOUT_S = 10
#: Longest wait for the lock when a lost session is replaced (``lock_timeout``): other workers'
#: checks hold the key only within their own short transaction (:func:`server_alive`).
RETAKE_WAIT_S = 2.0


def lock_key(tag: str) -> int:
    """The signed 64-bit advisory-lock key of a worker tag (without :data:`LOCK_MARK`)."""
    digest = hashlib.blake2b(f"paraplan-worker:{tag}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _rdb(storage) -> Any:
    """The RDBStorage under Optuna's cache wrapper, or None."""
    from optuna.storages import RDBStorage

    storage = getattr(storage, "_backend", storage)
    return storage if isinstance(storage, RDBStorage) else None


def _postgres_engine(storage):
    rdb = _rdb(storage)
    if rdb is None or rdb.engine.dialect.name != "postgresql":
        return None
    return rdb.engine


class Holder:
    """The dedicated connection holding one search's advisory lock; :meth:`close` (or the end
    of a ``with`` block) releases both. :meth:`check` replaces a lost session (module
    docstring). Its methods may be called from several threads (the heartbeat thread and the
    search's): a mutex guards the connection."""

    def __init__(self, engine, connection, tag: str) -> None:
        self._engine = engine
        self._connection = connection
        self._mutex = threading.Lock()
        self._held = True  # whether the search claims liveness by the lock
        self.tag = tag
        self.key = lock_key(tag)
        self.backend_pid = _backend_pid(connection)
        self.reconnects = 0

    @property
    def mark(self) -> str:
        """The suffix of this search's worker tag for new trials: :data:`LOCK_MARK` while it
        claims the lock, "" once it could not take it again (heartbeat rule)."""
        return LOCK_MARK if self._held else ""

    def check(self) -> bool:
        """Whether the lock is held, replacing a lost session first (reconnect, take the lock
        again): cheap (one ``SELECT 1``) while the session lives. False while the server
        cannot be reached (the next check tries again) and once the lock was lost for good
        (someone else holds the key: :attr:`mark` is then "", said once on stderr)."""
        import sqlalchemy

        with self._mutex:
            if self._engine is None or not self._held:
                return False
            if self._connection is not None:
                try:
                    self._connection.execute(sqlalchemy.text("SELECT 1"))
                    return True
                except Exception:  # the session is gone: the server released the lock
                    _close_quietly(self._connection)
                    self._connection = None
            try:
                conn = _connect(self._engine)
            except Exception:
                return False  # the server cannot be reached now: try again next time
            try:
                taken = _take(conn, self.key)
            except Exception:
                taken = None  # the new session failed too: try again next time
            if not taken:
                _close_quietly(conn)
                if taken is False:
                    self._held = False
                    print(f"paraplan: the liveness lock of worker {self.tag} was lost and is "
                          "held by another session; its new trials are judged by their "
                          "heartbeat only", file=sys.stderr, flush=True)
                return False
            self._connection = conn
            self.backend_pid = _backend_pid(conn)
            self.reconnects += 1
            return True

    def close(self) -> None:
        with self._mutex:
            conn, self._connection = self._connection, None
            engine, self._engine = self._engine, None
            try:
                if conn is not None:
                    conn.close()  # ends the session: the server releases the lock
            finally:
                if engine is not None:
                    engine.dispose()

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _connect(engine):
    """An autocommit connection; a server-wide ``idle_session_timeout`` (PostgreSQL 14+)
    would end the idle liveness session of a live worker, so it is switched off for this
    session (older servers do not know the setting: ignored)."""
    import sqlalchemy

    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        conn.execute(sqlalchemy.text("SET idle_session_timeout = 0"))
    except Exception:
        pass
    return conn


def _take(conn, key: int) -> bool:
    """Take the session lock ``key`` on ``conn``, waiting at most :data:`RETAKE_WAIT_S`
    (another worker's check may hold it for its transaction); False if someone holds it."""
    import sqlalchemy
    from sqlalchemy.exc import OperationalError

    try:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
    except OperationalError as exc:
        if getattr(exc.orig, "pgcode", None) == "55P03":  # lock_not_available
            return False
        raise
    return True


def _backend_pid(conn) -> int | None:
    import sqlalchemy

    try:
        return int(conn.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar())
    except Exception:
        return None


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:
        pass


def hold_liveness(storage, tag: str) -> Holder | None:
    """Take ``tag``'s advisory lock on a new, dedicated connection (PostgreSQL storages);
    None for other storages or when the lock cannot be taken (the search then runs with
    heartbeats only, its tags without :data:`LOCK_MARK`)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = _postgres_engine(storage)
    if engine is None:
        return None
    options = (f"-c tcp_keepalives_idle={KEEPALIVE_IDLE_S} "
               f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL_S} "
               f"-c tcp_keepalives_count={KEEPALIVE_COUNT} "
               f"-c lock_timeout={int(RETAKE_WAIT_S * 1000)}")
    own = sqlalchemy.create_engine(engine.url, poolclass=NullPool,
                                   connect_args={"options": options,
                                                 "connect_timeout": CONNECT_TIMEOUT_S,
                                                 "application_name": "paraplan-liveness"})
    conn = None
    try:
        conn = _connect(own)
        if _take(conn, lock_key(tag)):
            return Holder(own, conn, tag)
    except Exception:  # no connection left, a driver without these options: heartbeats only
        pass
    if conn is not None:
        _close_quietly(conn)
    own.dispose()
    return None


def server_alive(storage, owner: str) -> bool | None:
    """Whether the search that wrote tag ``owner`` still holds its lock: True/False for a tag
    with :data:`LOCK_MARK` on a PostgreSQL storage, None otherwise (or if the check fails)."""
    import sqlalchemy

    if not owner.endswith(LOCK_MARK):
        return None
    engine = _postgres_engine(storage)
    if engine is None:
        return None
    try:
        with engine.begin() as conn:  # the xact lock, if taken, ends with this transaction
            free = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_xact_lock(:k)"),
                                {"k": lock_key(owner.removesuffix(LOCK_MARK))}).scalar()
    except Exception:
        return None
    return not free
