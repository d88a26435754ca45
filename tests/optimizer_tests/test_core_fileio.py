"""Atomic file writes (optimizer.core.fileio): replace or keep the old content, never a
half-written file or a stray temporary."""

from __future__ import annotations

import pytest

from costmodel.errors import InputError


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    from optimizer.core.fileio import atomic_write_bytes, atomic_write_text

    target = tmp_path / "front.json"
    atomic_write_text(target, "old\n")
    target.chmod(0o600)
    atomic_write_text(target, "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert target.stat().st_mode & 0o777 == 0o600  # permissions of the replaced file kept
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["front.json"]


def test_atomic_write_failure_keeps_old_content(tmp_path, monkeypatch):
    from optimizer.core import fileio

    target = tmp_path / "study.yaml"
    target.write_text("precious\n")

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", boom)
    with pytest.raises(InputError) as e:
        fileio.atomic_write_text(target, "half")
    assert e.value.field == "output" and "No space left" in e.value.message
    assert target.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["study.yaml"]


def test_atomic_write_interrupted_keeps_old_content(tmp_path, monkeypatch):
    from optimizer.core import fileio

    target = tmp_path / "front.png"
    target.write_bytes(b"old")

    def interrupt(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["front.png"]


def test_atomic_write_bad_destinations(tmp_path):
    from optimizer.core.fileio import atomic_write_text

    with pytest.raises(InputError, match="does not exist"):
        atomic_write_text(tmp_path / "no" / "such" / "dir.json", "x", field="--plot")
    assert not (tmp_path / "no").exists()  # nothing created outside the chosen location
    with pytest.raises(InputError, match="is a directory") as e:
        atomic_write_text(tmp_path, "x", field="--plot")
    assert e.value.field == "--plot"
