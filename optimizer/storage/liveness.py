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

MySQL/MariaDB have the same primitive (``GET_LOCK`` / ``IS_USED_LOCK``) but are not wired here
(no MySQL driver in the test environment); SQLite (one host), journal, Redis and in-memory
storages hold nothing (:func:`hold_liveness` returns None).
"""

from __future__ import annotations

import hashlib
from typing import Any

from optimizer.storage.workers import LOCK_MARK

KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3
CONNECT_TIMEOUT_S = 10


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
    of a ``with`` block) releases both."""

    def __init__(self, engine, connection, tag: str) -> None:
        self._engine = engine
        self._connection = connection
        self.tag = tag

    def close(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            try:
                conn.close()  # ends the session: the server releases the lock
            finally:
                self._engine.dispose()

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
               f"-c tcp_keepalives_count={KEEPALIVE_COUNT}")
    own = sqlalchemy.create_engine(engine.url, poolclass=NullPool,
                                   connect_args={"options": options,
                                                 "connect_timeout": CONNECT_TIMEOUT_S,
                                                 "application_name": "paraplan-liveness"})
    conn = None
    try:
        conn = own.connect().execution_options(isolation_level="AUTOCOMMIT")
        taken = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"),
                             {"k": lock_key(tag)}).scalar()
        if taken:
            return Holder(own, conn, tag)
    except Exception:  # no connection left, a driver without these options: heartbeats only
        pass
    if conn is not None:
        conn.close()
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
                                {"k": lock_key(owner[:-len(LOCK_MARK)])}).scalar()
    except Exception:
        return None
    return not free
