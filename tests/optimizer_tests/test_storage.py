"""Storages and studies: opening, checking, resuming a killed search, torn journals, result
documents, and several workers sharing one study in PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import numpy as np
import optuna
import pytest
from conftest import ROOT
from optuna.storages import InMemoryStorage, JournalStorage, RDBStorage
from optuna.trial import TrialState

from costmodel.errors import InputError
from optimizer import search
from optimizer import storage as st
from optimizer.api import resolve_problem
from optimizer.search import optuna_engine as osr
from optimizer.search.pareto import pareto_mask
from optimizer.storage import backends
from optimizer.storage import study as st_study
from search_spaces.enumerate import enumerate_valid
from search_spaces.rules import Context

PG_URL = os.environ.get("PARAPLAN_TEST_POSTGRES",
                        "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("PARAPLAN_TEST_REDIS", "redis://127.0.0.1:6379/0")
CLI = [sys.executable, "-m", "optimizer.cli"]


@pytest.fixture(scope="module")
def p7():
    problem = resolve_problem(model="7b", gpus=8)
    ctx = Context(problem.model, problem.cluster, problem.training)
    sp = search.problem_space(problem, None)
    return problem, ctx, sp, enumerate_valid(ctx, sp)


def _run(p, storage, name, trials, **kw):
    problem, ctx, sp, valid = p
    args = {"valid_count": len(valid), "sampler": "tpe", "requested": "tpe",
            "trials": trials, "seed": 0, "batch_size": 16, "storage": storage,
            "study_name": name, "progress": False, "valid": valid}
    args.update(kw)
    return osr.run(problem, ctx, sp, **args)


def _states(storage, name):
    study = optuna.load_study(study_name=name, storage=st.open_storage(storage)
                              if isinstance(storage, str) else storage)
    # trials tagged counted: false (a repeated configuration, or asked beyond the budget by a
    # concurrent worker) are told but do not count against --trials
    return [t.state for t in study.get_trials() if st.is_counted(t)], study


def _finished(states):
    return sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states)


def _front_from_study(study, limit):
    """(tokens/s, peak bytes) of the front of the study's COMPLETE feasible trials."""
    vals = np.array([t.values for t in study.get_trials(states=(TrialState.COMPLETE,))])
    vals = np.unique(vals, axis=0)
    ok = vals[vals[:, 1] <= limit]
    front = ok[pareto_mask(ok[:, 0], ok[:, 1])]
    return sorted((round(a, 3), round(b)) for a, b in front)


def _front_of_doc(doc):
    return sorted((round(c["metrics"]["tokens_per_s"], 3), round(c["metrics"]["peak_memory_bytes"]))
                  for c in doc["pareto_front"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------------------------------
# open_storage, redact
def test_storage_kinds_and_objects(tmp_path):
    assert isinstance(st.open_storage(None), InMemoryStorage)
    db = tmp_path / "sub" / "x.db"
    with pytest.raises(InputError, match="does not exist"):  # folders are never created
        st.open_storage(f"sqlite:///{db}")
    assert not db.parent.exists()
    db.parent.mkdir()
    assert isinstance(st.open_storage(f"sqlite:///{db}"), RDBStorage)
    assert db.exists()
    journal = tmp_path / "deeper" / "dir" / "s.journal"
    with pytest.raises(InputError, match="does not exist"):
        st.open_storage(str(journal))
    journal.parent.mkdir(parents=True)
    assert isinstance(st.open_storage(str(journal)), JournalStorage)
    assert journal.exists()
    assert st.storage_kind("postgresql+psycopg2://u@h/db") == "rdb"
    assert st.storage_kind("mysql+pymysql://u:p@h/db") == "rdb"
    assert st.storage_kind("redis://localhost:6379") == "redis"
    assert st.storage_kind("studies/x.journal") == "journal"


@pytest.mark.parametrize("spec, words", [
    ("", "storage URL or a journal file path"),
    ("ftp://host/x", "unknown storage URL scheme 'ftp'"),
    ("postgresq://u@h/db", "did you mean"),
])
def test_bad_storage_strings_name_the_field(spec, words):
    with pytest.raises(InputError) as e:
        st.open_storage(spec)
    assert e.value.field == "storage"
    assert words in str(e.value).lower() or words in str(e.value)


def test_directory_and_sqlite_file_are_not_journals(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        st.open_storage(str(tmp_path))
    db = tmp_path / "x.db"
    st.open_storage(f"sqlite:///{db}")
    with pytest.raises(InputError, match="sqlite:///"):
        st.open_storage(str(db))


def test_a_file_that_is_not_a_journal_is_refused_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    with pytest.raises(InputError, match="not an Optuna journal"):
        st.open_storage(str(notes))
    assert notes.read_text() == "hello\n"  # the torn-line repair never touched it
    bad = tmp_path / "bad.journal"
    bad.write_text('{"op_code":99}\n')  # a record Optuna cannot replay
    with pytest.raises(InputError, match="is corrupted"):
        st.open_storage(str(bad))


def test_plain_postgresql_url_uses_an_installed_driver(monkeypatch):
    import importlib.util

    import sqlalchemy

    installed = {"psycopg2", "pymysql"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name in installed else None)

    def fix(url):
        return backends._with_installed_driver(url, sqlalchemy.engine.make_url(url))

    # SQLAlchemy 2.1's default PostgreSQL driver is psycopg (3); only psycopg2 is "installed"
    assert fix("postgresql://u:p@h/db") == "postgresql+psycopg2://u:p@h/db"
    assert fix("mysql://u@h/db") == "mysql+pymysql://u@h/db"
    assert fix("postgresql+asyncpg://u@h/db") == "postgresql+asyncpg://u@h/db"  # as written
    installed.add("psycopg")
    assert fix("postgresql://u:p@h/db") == "postgresql://u:p@h/db"


def test_unreachable_database_is_an_input_error():
    with pytest.raises(InputError) as e:
        st.open_storage("postgresql+psycopg2://u:secret@127.0.0.1:1/db")
    assert e.value.field == "storage"
    assert "secret" not in str(e.value) and "u:***@127.0.0.1:1" in str(e.value)


def test_redact_hides_only_the_password():
    assert st.redact("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert st.redact("postgresql://u@h/db") == "postgresql://u@h/db"
    assert st.redact("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert st.redact("runs/a:b.journal") == "runs/a:b.journal"
    assert st.redact(None) is None


# ---------------------------------------------------------------------------------------------
# studies
def test_study_records_its_inputs_and_refuses_another_problem(p7, tmp_path):
    path = str(tmp_path / "f.journal")
    _run(p7, path, "f", 16)
    _, study = _states(path, "f")
    attrs = study.user_attrs
    for key in ("tool_version", "optuna_version", "numpy_version", "cost_model_version",
                "fingerprint", "seed", "sampler_settings", "batch_size"):
        assert key in attrs, key
    assert attrs["fingerprint"] == p7[0].fingerprint()
    assert attrs["optuna_version"] == optuna.__version__
    other = resolve_problem(model="7b", gpus=8, memory_limit_gib=40)
    problem, ctx, sp, valid = p7
    with pytest.raises(InputError) as e:
        osr.run(other, ctx, sp, valid_count=len(valid), sampler="tpe", requested="tpe",
                trials=16, seed=0, batch_size=16, storage=path, study_name="f",
                progress=False, valid=valid)
    assert e.value.field == "study_name"
    assert "different problem" in str(e.value)


def test_default_study_name_resumes_the_same_command(p7, tmp_path):
    path = str(tmp_path / "d.journal")
    a = _run(p7, path, None, 20)
    b = _run(p7, path, None, 30)  # same command, more trials: continues the study
    assert a.search_info["study_name"] == b.search_info["study_name"]
    states, _ = _states(path, a.search_info["study_name"])
    assert _finished(states) == 30
    assert b.search_info["resumed"] is True and a.search_info["resumed"] is False


# ---------------------------------------------------------------------------------------------
# dead trials
def test_fail_dead_trials_rules(p7, tmp_path, monkeypatch):
    path = str(tmp_path / "r.journal")
    store = st.open_storage(path)
    study = st.open_study(store, "r", optuna.samplers.RandomSampler(seed=0), {})
    host = socket.gethostname()
    token = st.begin_run()
    owners = {
        "me": st.worker_id(token),                 # a search running in this process: kept
        "earlier": st.worker_id("0ld"),            # this process, a search no longer running
        "dead": f"{host}:{_dead_pid()}:1:x",       # same host, process gone: failed
        "elsewhere": "other-host:123:456:x",       # journal at startup: single writer, failed
    }
    ids = {}
    for key, owner in owners.items():
        t = study.ask()
        t.set_user_attr(st.WORKER_ATTR, owner)
        ids[key] = t.number
    ids["untagged"] = study.ask().number          # young: its worker may be tagging it
    # during a run (not at startup) only provably dead owners are failed
    assert st.fail_dead_trials(study, "journal", at_startup=False) == 2
    assert st.fail_dead_trials(study, "journal", at_startup=True) == 1
    states = {t.number: t.state for t in study.get_trials()}
    assert states[ids["me"]] == states[ids["untagged"]] == TrialState.RUNNING
    from optimizer.storage import study as st_study

    monkeypatch.setattr(st_study, "UNTAGGED_GRACE_S", 0)  # untagged past the grace: dead
    assert st.fail_dead_trials(study, "journal", at_startup=False) == 1
    states = {t.number: t.state for t in study.get_trials()}
    for key in ("earlier", "dead", "elsewhere", "untagged"):
        assert states[ids[key]] == TrialState.FAIL, key
    st.end_run(token)
    assert st.fail_dead_trials(study, "journal", at_startup=False) == 1  # now "me" is gone


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_rdb_leaves_other_hosts_to_the_heartbeat(tmp_path):
    store = st.open_storage(f"sqlite:///{tmp_path / 'h.db'}")
    study = st.open_study(store, "h", optuna.samplers.RandomSampler(seed=0), {})
    t1 = study.ask()
    t1.set_user_attr(st.WORKER_ATTR, "other-host:1:2:x")
    st.record_heartbeat(study, t1)
    t2 = study.ask()  # untagged but young: its worker may be between ask and tag
    t3 = study.ask()
    t3.set_user_attr(st.WORKER_ATTR, f"{socket.gethostname()}:{_dead_pid()}:1:x")
    assert st.fail_dead_trials(study, "rdb", at_startup=True) == 1
    states = {t.number: t.state for t in study.get_trials()}
    assert states[t1.number] == states[t2.number] == TrialState.RUNNING
    assert states[t3.number] == TrialState.FAIL


def test_resume_fails_abandoned_trials_and_fills_the_budget_exactly(p7, tmp_path):
    path = str(tmp_path / "a.journal")
    _run(p7, path, "a", 40)
    # a killed worker left RUNNING trials: 3 with a dead owner, 2 untagged (killed between
    # ask and tag), one of them with a parameter already written
    store = st.open_storage(path)
    study = optuna.load_study(study_name="a", storage=store)
    owner = f"{socket.gethostname()}:{_dead_pid()}:1:x"
    for _ in range(3):
        study.ask().set_user_attr(st.WORKER_ATTR, owner)
    study.ask()
    study.ask().suggest_categorical("layout", list(osr.Encoding.build(p7[3], p7[2])
                                                   .tokens["layout"]))
    out = _run(p7, path, "a", 120)
    states, study = _states(path, "a")
    assert _finished(states) == 120
    assert states.count(TrialState.FAIL) == 5
    assert states.count(TrialState.RUNNING) == 0
    assert out.search_info["finished_trials"] == 120
    stored = len({tuple(sorted(t.params.items()))
                  for t in study.get_trials(states=(TrialState.COMPLETE,))})
    # plus the final polish's configurations that are not on the final front (not stored)
    assert stored <= out.evaluated <= stored + out.search_info["final_polish_configs"]


def test_sigkilled_cli_search_resumes_to_exactly_the_requested_trials(tmp_path):
    journal = tmp_path / "k.journal"
    args = [*CLI, "--model", "7b", "--gpus", "8", "--sampler", "tpe", "--trials", "120",
            "--storage", str(journal), "--study-name", "s", "--json"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    told = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists():
            text = journal.read_bytes()
            told = text.count(b'"values":[')  # COMPLETE records
            if told >= 24:
                break
        time.sleep(0.005)
    assert proc.poll() is None, "the search finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    states, _ = _states(str(journal), "s")
    assert 0 < _finished(states) < 120

    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    states, study = _states(str(journal), "s")
    assert _finished(states) == 120
    assert states.count(TrialState.RUNNING) == 0
    limit = doc["inputs"]["memory_limit_bytes"]
    assert _front_of_doc(doc) == _front_from_study(study, limit)
    assert doc["inputs"]["search"]["resumed"] is True


# ---------------------------------------------------------------------------------------------
# torn journals
def test_repair_journal_cuts_only_a_torn_or_unparsable_tail(tmp_path):
    path = tmp_path / "j.journal"
    good = b'{"op_code":0,"a":1}\n{"op_code":2,"b":2}\n'
    path.write_bytes(good)
    assert st.repair_journal(path) == 0 and path.read_bytes() == good
    path.write_bytes(good + b'{"op_code":4,"tr')  # writer killed mid-line
    assert st.repair_journal(path) == len(b'{"op_code":4,"tr')
    assert path.read_bytes() == good
    path.write_bytes(good + b'{"op_code":4,"tr}\n')  # complete but unparsable last line
    assert st.repair_journal(path) == len(b'{"op_code":4,"tr}\n')
    assert path.read_bytes() == good
    path.write_bytes(b'{"op_c')
    assert st.repair_journal(path) == 6 and path.read_bytes() == b""


def test_search_continues_after_a_torn_last_line(p7, tmp_path):
    path = tmp_path / "t.journal"
    _run(p7, str(path), "t", 24)
    data = path.read_bytes()
    path.write_bytes(data[:-12])  # tear the last line (the last trial's COMPLETE record)
    out = _run(p7, str(path), "t", 48)  # appends after the repaired end
    assert out.search_info["finished_trials"] == 48
    states, _ = _states(str(path), "t")  # a third replay still loads
    assert _finished(states) == 48
    for line in path.read_bytes().splitlines():  # no merged lines
        json.loads(line)


def test_journal_lock_of_a_killed_writer_is_broken_at_once(tmp_path):
    path = tmp_path / "l.journal"
    os.symlink(f"paraplan-lock:{socket.gethostname()}:{_dead_pid()}:1:x", f"{path}.lock")
    t0 = time.monotonic()
    st.open_study(st.open_storage(str(path)), "l", None, {"a": 1})  # writes take the lock
    assert time.monotonic() - t0 < backends.JOURNAL_LOCK_GRACE_S / 2
    assert not os.path.lexists(f"{path}.lock")


def test_journal_lock_of_a_live_writer_waits_for_the_grace_period(tmp_path):
    path = str(tmp_path / "m.journal")
    os.symlink(f"paraplan-lock:{st.worker_id('x')}", f"{path}.lock")  # this process: alive
    lock = backends._owned_lock_class()(path)
    lock.grace_period = 1
    t0 = time.monotonic()
    lock.acquire()
    assert time.monotonic() - t0 >= 0.9
    assert os.readlink(f"{path}.lock").startswith("paraplan-lock:")
    lock.release()


# ---------------------------------------------------------------------------------------------
# result documents
def test_save_and_load_result(tmp_path):
    path = str(tmp_path / "res.journal")
    store = st.open_storage(path)
    study = st.open_study(store, "res", None, {})
    assert st.load_result(path, "res") is None
    assert st.load_result(path, "no-such-study") is None
    small = {"schema_version": 1, "pareto_front": [{"config": {"tp": 2}}]}
    st.save_result(study, small)
    assert st.load_result(path, "res") == small
    rng = np.random.default_rng(0)
    big = {"pareto_front": [{"x": rng.random(40).tolist()} for _ in range(200)]}
    assert len(json.dumps(big)) > st_study.RESULT_CHUNK
    st.save_result(study, big)
    assert st.load_result(st.open_storage(path), "res") == big
    assert study.user_attrs["result"]["encoding"] == "zlib+base64"


# ---------------------------------------------------------------------------------------------
# several workers on one PostgreSQL study
def _postgres_or_skip():
    try:
        import psycopg2
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install 'paraplan[postgres]')")
    try:
        conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test",
                                connect_timeout=3)
        conn.close()
    except Exception as e:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 (user postgres, db test) is unreachable: "
                    f"{str(e).strip().splitlines()[0]}")


def _redis_or_skip():
    try:
        import redis
    except ImportError:
        pytest.skip("redis is not installed (pip install 'paraplan[redis]')")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as e:
        pytest.skip(f"Redis at {REDIS_URL} is unreachable: {str(e).strip().splitlines()[0]}")


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_two_workers_share_one_study(backend):
    # two `optimize` processes on one study in a shared storage: PostgreSQL (RDB storage) or
    # Redis (Optuna's journal on a Redis list)
    url = {"postgres": PG_URL, "redis": REDIS_URL}[backend]
    {"postgres": _postgres_or_skip, "redis": _redis_or_skip}[backend]()
    name = f"pytest-{uuid.uuid4().hex[:12]}"
    args = [*CLI, "--model", "7b", "--gpus", "8", "--sampler", "tpe", "--trials", "120",
            "--batch-size", "8", "--storage", url, "--study-name", name, "--json"]
    try:
        procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=180) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
        docs = [json.loads(out) for out, _ in outs]
        states, study = _states(url, name)
        assert _finished(states) == 120  # exactly the budget, whatever the interleaving
        assert states.count(TrialState.RUNNING) == 0
        limit = docs[0]["inputs"]["memory_limit_bytes"]
        expected = _front_from_study(study, limit)
        assert _front_of_doc(docs[0]) == _front_of_doc(docs[1]) == expected
        # both processes asked trials (a trial the other's start-up sweep failed before it
        # was tagged has no owner: FAIL, not counted; a polish trial one worker enqueued
        # that nobody asked before the budget was reached stays WAITING, owned by no one)
        workers = {t.user_attrs.get(st.WORKER_ATTR) for t in study.get_trials()
                   if t.state not in (TrialState.FAIL, TrialState.WAITING)}
        assert len(workers) == 2 and None not in workers
    finally:
        try:
            optuna.delete_study(study_name=name, storage=st.open_storage(url))
        except Exception:
            pass


def test_sqlite_with_a_hot_journal_is_recovered_by_a_search_and_refused_by_report(tmp_path):
    """A writer SIGKILLed inside a transaction leaves a hot rollback journal; a mode=ro reader
    cannot roll it back ("attempt to write a readonly database"). A search's open rolls it
    back (the uncommitted rows vanish, the committed study stays); a read-only open says so
    and writes nothing."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    optuna.create_study(study_name="s", storage=st.open_storage(url))
    killer = ("import os, signal, sqlite3, sys\n"
              "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "con.execute('PRAGMA journal_mode=DELETE'); con.execute('PRAGMA cache_size=1')\n"
              "con.execute('BEGIN IMMEDIATE')\n"
              "for i in range(3000):\n"
              "    con.execute('INSERT INTO study_user_attributes (study_id, key, value_json) "
              "VALUES (1, ?, ?)', (f'k{i}', 'x' * 200))\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", killer, str(db)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    journal = tmp_path / "s.db-journal"
    assert journal.exists() and journal.stat().st_size > 0  # the hot journal
    before = db.read_bytes()
    with pytest.raises(InputError, match="hot journal"):
        st.open_storage(url, read_only=True)
    assert db.read_bytes() == before and journal.exists()  # the read-only open wrote nothing
    study = optuna.load_study(study_name="s", storage=st.open_storage(url))
    assert study.user_attrs == {}  # rolled back: none of the uncommitted rows
    assert not journal.exists()
