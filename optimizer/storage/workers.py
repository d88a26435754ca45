"""Who owns a trial or a journal lock: ``host:pid:start-time:run`` identities and liveness.

A search tags each trial it asks with :func:`worker_id`; :func:`owner_alive` tells whether
the owner of a tag (or of a journal lock link) can still finish it: its process on this host is
alive with the same start time and, for this process, the search is still running
(:func:`begin_run` / :func:`end_run`). ``None`` means "cannot tell" (another host); for
PostgreSQL storages :mod:`optimizer.storage.liveness` tells it from the database server.

Test hook: the environment variable ``PARAPLAN_TEST_HOSTNAME`` (:data:`TEST_HOST_ENV`)
replaces this process's host name in its tags and in its own host comparisons, so that a
worker started with it looks like one on another machine to the other processes (their pid
checks cannot see it). It is for tests and benchmarks only (tests/hostile_tests,
benchmarks/hostile_workers.py ``--other-host``); never set it in production: two hosts with
the same fake name would take each other's pids for their own.
"""

from __future__ import annotations

import os
import socket


def _proc_start(pid: int) -> str:
    """The process start time in clock ticks since boot (Linux), '' where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


TEST_HOST_ENV = "PARAPLAN_TEST_HOSTNAME"


def host_name() -> str:
    """This machine's name in worker tags (:data:`TEST_HOST_ENV` overrides it, tests only)."""
    return os.environ.get(TEST_HOST_ENV) or socket.gethostname()


#: Suffix of a tag's run part when its search holds a server-side liveness lock
#: (:mod:`optimizer.storage.liveness`); the run token is the part before it.
LOCK_MARK = "/pg"

_ACTIVE_RUNS: set[str] = set()  # run tokens of the searches running in this process


def worker_id(run: str = "") -> str:
    """``host:pid:start-time:run`` of this process and search (the owner tag of its trials).

    ``run`` is a token of one search in this process; while it is registered with
    :func:`begin_run`, trials tagged with it count as alive."""
    pid = os.getpid()
    return f"{host_name()}:{pid}:{_proc_start(pid)}:{run}"


def begin_run() -> str:
    """Register a search running in this process; returns its token (see :func:`end_run`)."""
    import uuid

    token = uuid.uuid4().hex[:12]
    _ACTIVE_RUNS.add(token)
    return token


def end_run(token: str) -> None:
    _ACTIVE_RUNS.discard(token)


def _proc_state(pid: int) -> str:
    """The process state letter of ``/proc/<pid>/stat`` (R, S, D, Z, X, ...), '' where
    unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def process_alive(host: str, pid: int, start: str) -> bool | None:
    """Whether process ``pid`` (started at ``start``) on ``host`` runs; None for another host.
    A zombie (exited, not yet reaped by its parent) or a dying process is not alive: it will
    never finish a trial."""
    if host != host_name():
        return None
    if pid == os.getpid():
        return not start or start == _proc_start(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _proc_state(pid) in ("Z", "X", "x"):
        return False
    now = _proc_start(pid)
    return not (start and now and now != start)


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner tag (:func:`worker_id`) on this host, None for another host."""
    try:
        host, pid_text, start, run = owner.rsplit(":", 3)
        pid = int(pid_text)
    except ValueError:
        return None
    alive = process_alive(host, pid, start)
    if alive and pid == os.getpid():
        return run.removesuffix(LOCK_MARK) in _ACTIVE_RUNS  # this process: alive while that search runs
    return alive
