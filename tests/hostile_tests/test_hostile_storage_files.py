"""Damaged and foreign storage files (issue 26, defects 5, 6, 7, 11).

- atomic writes refuse existing targets that are not regular files (FIFO, socket, device
  node, directory) and leave them as they were;
- ``optimize report`` never writes: a journal cut by one byte still reports its result, the
  file is byte-identical afterwards;
- repair (when a study is run again) keeps every complete record, drops only a torn last line,
  and backs the file up first; a file that is not a journal all through is refused untouched;
- an SQLite database holding tables that are not Optuna's is refused untouched; corrupted
  SQLite files are a storage error (exit 2);
- a study file's storage resolves relative to the study file; ``..`` and absolute paths that
  leave its folder are refused unless ``--allow-external-storage`` is given; parent folders are
  never created.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import stat
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

STUDY = {"schema_version": 1, "name": "st", "model": "7b",
         "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb"},
         "training": {"seq_length": 2048, "global_batch_size": 256},
         "search": {"sampler": "random", "trials": 12, "batch_size": 4}}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _study(d: Path, **over) -> Path:
    path = d / "s.yaml"
    path.write_text(yaml.safe_dump({**STUDY, **over}))
    return path


# ---- 5. atomic writes -----------------------------------------------------------------------
def _special(kind: str, p: Path):
    if kind == "fifo":
        os.mkfifo(p)
        return None
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        return s
    if kind == "chardev":
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null twin, in tmp
        return None
    if kind == "symlink-to-fifo":
        os.mkfifo(p.with_suffix(".fifo"))
        os.symlink(p.with_suffix(".fifo"), p)
        return None
    raise AssertionError(kind)


def _kind_of(p: Path) -> int:
    return stat.S_IFMT(os.lstat(p).st_mode)


@pytest.mark.parametrize("kind", ["fifo", "socket", "chardev", "symlink-to-fifo"])
def test_plot_refuses_special_targets(kind, tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "front.png"
    keep = _special(kind, target)
    before = _kind_of(target)
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "-q", "--plot", str(target)])
    assert rc == 2, err
    assert err.startswith("error: --plot:") and "regular file" in err
    assert _kind_of(target) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    if keep is not None:
        keep.close()


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_save_cluster_refuses_special_targets(kind, tmp_path):
    from test_hostile_corpus import NCCL_LOG

    (tmp_path / "log.txt").write_text(NCCL_LOG)
    target = tmp_path / "out.yaml"
    _special(kind, target)
    before = _kind_of(target)
    rc, out, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "8",
                            "--nccl-tests", str(tmp_path / "log.txt"), "--save-cluster",
                            str(target)])
    assert rc == 2, err
    assert "--save-cluster" in err and "regular file" in err
    assert _kind_of(target) == before


def test_plot_through_symlink_to_regular_file_keeps_the_link(tmp_path):
    pytest.importorskip("matplotlib")
    real = tmp_path / "real.png"
    real.write_bytes(b"old")
    link = tmp_path / "link.png"
    link.symlink_to(real)
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "-q", "--plot", str(link)])
    assert rc == 0, err
    assert link.is_symlink() and real.read_bytes().startswith(b"\x89PNG")


# ---- 6. journals --------------------------------------------------------------------------------
@pytest.fixture
def journal_study(tmp_path):
    path = _study(tmp_path)
    rc, out, err = run_cli(["--study", str(path), "-q"])
    assert rc == 0, err
    return path, tmp_path / "s.journal"


@pytest.mark.parametrize("cut", [1, 2, 40])
def test_report_never_writes_a_torn_journal(journal_study, cut):
    path, journal = journal_study
    rc, full, err = run_cli(["report", "--study", str(path), "--json"])
    assert rc == 0
    data = journal.read_bytes()
    journal.write_bytes(data[:-cut])
    digest, lock = _sha(journal), Path(str(journal) + ".lock")
    rc, out, err = run_cli(["report", "--study", str(path), "--json"])
    assert _sha(journal) == digest, "report changed the journal"
    assert not lock.exists()
    if cut == 1:  # only the newline is gone: the last record is complete and still counts
        assert rc == 0 and out == full, err
    else:  # the result record itself is torn: say so, do not delete anything
        assert rc == 2 and "study" in err, err
    assert len(err.strip().splitlines()) <= 1


def test_repair_keeps_complete_records_and_backs_up(journal_study):
    path, journal = journal_study
    data = journal.read_bytes()
    lines = data.splitlines(keepends=True)
    journal.write_bytes(data + b'{"op_code": 5, "worker_id": "x", "trial_id"')  # torn append
    rc, out, err = run_cli(["--study", str(path), "--json"])
    assert rc == 0, err
    repaired = journal.read_bytes()
    assert repaired.startswith(data), "a complete record was lost"
    assert len(repaired.splitlines()) >= len(lines)
    backups = [p for p in journal.parent.iterdir() if ".torn" in p.name or p.suffix == ".bak"]
    assert backups, "no backup before the repair"
    assert any(p.read_bytes().endswith(b'"trial_id"') for p in backups)


def test_repair_keeps_a_record_without_its_newline(journal_study):
    path, journal = journal_study
    data = journal.read_bytes()
    journal.write_bytes(data[:-1])
    rc, out, err = run_cli(["--study", str(path), "--json"])
    assert rc == 0, err
    assert journal.read_bytes() == data  # the newline is restored, nothing dropped


@pytest.mark.parametrize("content", [
    b'{"op_code": 0, "worker_id": "w"}\nname,amount\nalice,3\nbob,4\n',
    b'{"op_code": 0}\n' + b"x" * 5000 + b"\n" + b"tail without newline",
])
def test_unrelated_file_that_starts_like_a_journal_is_left_alone(content, tmp_path):
    target = tmp_path / "data.journal"
    target.write_bytes(content)
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "-q", "--sampler", "random",
                            "--trials", "4", "--storage", str(target)])
    assert rc == 2 and "storage" in err, err
    assert target.read_bytes() == content


# ---- 7. SQLite ---------------------------------------------------------------------------------
def _foreign_db(p: Path) -> None:
    con = sqlite3.connect(p)
    con.execute("create table invoices (id integer primary key, amount real)")
    con.execute("insert into invoices(amount) values (42)")
    con.commit()
    con.close()


def test_foreign_sqlite_database_is_refused_untouched(tmp_path):
    db = tmp_path / "accounts.db"
    _foreign_db(db)
    digest = _sha(db)
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "-q", "--sampler", "random",
                            "--trials", "4", "--storage", f"sqlite:///{db}"])
    assert rc == 2 and "storage" in err and "invoices" in err, err
    assert _sha(db) == digest
    con = sqlite3.connect(db)
    names = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    con.close()
    assert names == {"invoices"}


def test_sqlite_storage_reused_by_paraplan_is_accepted(tmp_path):
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    argv = ["--model", "7b", "--gpus", "8", "-q", "--sampler", "random", "--trials", "4",
            "--storage", url]
    assert run_cli(argv)[0] == 0
    assert run_cli(argv)[0] == 0  # Optuna's own tables only: resumed


@pytest.mark.parametrize("damage", ["header", "truncate", "zero-page", "garbage", "half"])
def test_corrupted_sqlite_is_a_storage_error(damage, tmp_path):
    db = tmp_path / "x.db"
    url = f"sqlite:///{db}"
    argv = ["--model", "7b", "--gpus", "8", "-q", "--sampler", "random", "--trials", "4",
            "--storage", url]
    assert run_cli(argv)[0] == 0
    data = bytearray(db.read_bytes())
    if damage == "header":
        data[:16] = b"\xff" * 16
    elif damage == "truncate":
        data = data[:100]
    elif damage == "zero-page":
        data[4096:8192] = b"\x00" * 4096
    elif damage == "garbage":
        data[100:len(data)] = os.urandom(len(data) - 100)
    else:
        data = data[:len(data) // 2]
    db.write_bytes(bytes(data))
    rc, out, err = run_cli(argv)
    assert rc in (0, 2), err  # either it still reads (damage Optuna never touches) or exit 2
    if rc == 2:
        assert "storage" in err and "internal error" not in err


def test_study_storage_paths_stay_beside_the_study(tmp_path):
    sub = tmp_path / "studies"
    sub.mkdir()
    for storage in ("../escape.journal", str(tmp_path / "abs.journal"),
                    "sqlite:///../escape.db", "deeper/missing/x.journal"):
        path = _study(sub, storage=storage)
        rc, out, err = run_cli(["--study", str(path), "-q"])
        assert rc == 2, (storage, err)
        assert "storage" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["studies"]
    assert sorted(p.name for p in sub.iterdir()) == ["s.yaml"]
    path = _study(sub, storage=str(tmp_path / "abs.journal"))
    rc, out, err = run_cli(["--study", str(path), "-q", "--allow-external-storage"])
    assert rc == 0, err
    path = _study(sub, storage="inside.journal")
    assert run_cli(["--study", str(path), "-q"])[0] == 0
    assert (sub / "inside.journal").is_file()


def test_cli_storage_does_not_create_folders(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "x.journal"
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "-q", "--sampler", "random",
                            "--trials", "4", "--storage", str(target)])
    assert rc == 2 and "storage" in err and "does not exist" in err, err
    assert not (tmp_path / "no").exists()


def test_storage_character_device(tmp_path):
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    node = tmp_path / "null"  # a /dev/null twin: never point a test at the real /dev
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    rc, out, err = run_cli([*["--model", "7b", "--gpus", "8", "-q"], "--sampler", "tpe", "--trials", "4", "--storage", str(node)])
    assert node.is_char_device()
    assert rc == 2 and "storage" in err, err
    assert rc == 2 and "storage" in err and "regular file" in err, err
