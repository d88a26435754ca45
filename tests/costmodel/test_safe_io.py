"""costmodel.safe_io: bounded, non-blocking reads of regular files; checked documents."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from costmodel import safe_io
from costmodel.errors import InputError


def test_reads_a_regular_file(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_bytes(b"a: 1\n")
    assert safe_io.read_input_bytes(p, "model") == b"a: 1\n"


@pytest.mark.parametrize("path, words", [("/dev/zero", "character device"),
                                         ("/dev/null", "character device")])
def test_refuses_devices(path, words):
    with pytest.raises(InputError) as e:
        safe_io.read_input_bytes(path, "model")
    assert e.value.field == "model" and words in str(e.value)


def test_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="FIFO"):
        safe_io.read_input_bytes(fifo, "cluster")
    assert time.perf_counter() - t0 < 1


def test_size_bound_before_reading(tmp_path):
    p = tmp_path / "big"
    with open(p, "wb") as f:
        f.truncate(2**40)  # sparse
    with pytest.raises(InputError, match="limited to 16 MiB"):
        safe_io.read_input_bytes(p, "model")
    small = tmp_path / "s"
    small.write_bytes(b"x" * 100)
    with pytest.raises(InputError, match="limited to 10 bytes"):
        safe_io.read_input_bytes(small, "model", max_bytes=10)


def test_missing_and_directory(tmp_path):
    with pytest.raises(InputError, match="not found"):
        safe_io.read_input_bytes(tmp_path / "none", "run")
    with pytest.raises(InputError, match="directory"):
        safe_io.read_input_bytes(tmp_path, "run")


@pytest.mark.parametrize("ch", ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\t"])
def test_control_characters(ch):
    assert safe_io.control_character(f"a{ch}b") == ch
    with pytest.raises(InputError) as e:
        safe_io.check_text("model.name", f"a{ch}b")
    assert e.value.field == "model.name" and "control character" in e.value.message
    assert ch not in str(e.value) or ch == "\t" and False


def test_plain_names_pass():
    for name in ("llama-65b", "Meta-Llama-3-70B", "gpt 3 (175B)", "modèle-é", "$(x) `y`"):
        assert safe_io.check_text("name", name) == name


def test_document_paths_and_shapes():
    with pytest.raises(InputError) as e:
        safe_io.check_document({"a": {"b": ["ok", "x\ny"]}}, "cluster", "c.yaml")
    assert e.value.field == "cluster.a.b[1]"
    with pytest.raises(InputError) as e:
        safe_io.check_document("SECRET=abcdef", "model", ".env")
    assert "SECRET" not in str(e.value) and "must be a mapping" in str(e.value)
    with pytest.raises(InputError):
        safe_io.check_document({"bad\nkey": 1}, "model", "m.yaml")
    assert safe_io.check_document({"description": "two\nlines"}, "study", "s") \
        == {"description": "two\nlines"}


def test_alias_bomb_is_bounded():
    text = "a: &a [" + ",".join(["x"] * 50) + "]\n"
    for prev, cur in zip("abcdefg", "bcdefgh", strict=True):
        text += f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 50) + "]\n"
    doc = yaml.load(text, Loader=safe_io.strict_yaml_loader(yaml.SafeLoader))
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="more than"):
        safe_io.check_document(doc, "model", "bomb.yaml")
    assert time.perf_counter() - t0 < 1


@pytest.mark.parametrize("text", ["n: 1:30", "n: 1:30.5", "n: -2:00"])
def test_base60_numbers_refused(text):
    loader = safe_io.strict_yaml_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    with pytest.raises(yaml.YAMLError, match="base-60"):
        yaml.load(text, Loader=loader)
    assert yaml.load("n: '1:30'", Loader=loader) == {"n": "1:30"}
    assert yaml.load("n: 90", Loader=loader) == {"n": 90}
