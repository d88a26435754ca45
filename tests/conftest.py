"""Shared test helpers.

JSON documents: the CLI validates every contract document it prints while the tests run
(PARAPLAN_CHECK_SCHEMA=1, set below); API results are checked with
:func:`assert_valid` (``from conftest import assert_valid``, or the ``assert_valid_doc``
fixture), which checks it against the schema shipped in the package
(``optimizer/schema.json``) and the invariants JSON Schema cannot express.
:func:`run_cli` and :func:`run_cli_json` call ``optimizer.cli.main`` in-process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
DATA = TESTS / "data"
ARGS_65B = ["--model", "65b", "--gpus", "16"]

# Every contract document the CLI prints during the tests (in-process or in a subprocess,
# which inherits the environment) is validated against the shipped schema before it is
# printed (optimizer.cli.common.emit_document); a mismatch makes that command fail.
os.environ["PARAPLAN_CHECK_SCHEMA"] = "1"


def assert_valid(doc: Any, kind: str | None = None) -> str:
    """Fail the test unless ``doc`` validates as ``kind`` ("front", "infeasible", "evaluate",
    "nccl"; ``None`` detects it). Returns the kind. Skips, naming the reason, when the
    ``jsonschema`` test extra is not installed."""
    pytest.importorskip("jsonschema", reason="JSON Schema validation needs the test extra: "
                                             "pip install 'paraplan[test]'")
    from optimizer.output.schemas import SchemaError, validate_document

    try:
        return validate_document(doc, kind)
    except SchemaError as e:
        pytest.fail(f"JSON output does not match the shipped schema: {e}", pytrace=False)


@pytest.fixture
def assert_valid_doc():
    """The :func:`assert_valid` helper as a fixture."""
    return assert_valid


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """Run ``optimize ARGV`` in-process; return (exit code, stdout, stderr)."""
    from optimizer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def run_cli_json(argv: Sequence[str], kind: str | None = None, *,
                 expect_rc: int = 0) -> dict[str, Any]:
    """Run ``optimize ARGV --json``, check the exit code and that stdout is exactly one JSON
    document valid against the schema; return the document."""
    args = list(argv)
    if "--json" not in args:
        args.append("--json")
    rc, out, err = run_cli(args)
    assert rc == expect_rc, f"exit {rc} (expected {expect_rc}); stderr: {err.strip()}"
    doc = json.loads(out)  # exactly one document: json.loads rejects trailing text
    assert_valid(doc, kind)
    return doc


@pytest.fixture(scope="module")
def front_doc() -> dict:
    """``optimize --model 65b --gpus 16 --json``, validated as a front document (computed once
    per test module)."""
    return run_cli_json(ARGS_65B, "front")


@pytest.fixture(scope="module")
def recommended(front_doc) -> dict:
    return front_doc["pareto_front"][front_doc["recommended"]]
