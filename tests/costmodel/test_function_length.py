"""No function in costmodel/ is longer than 120 lines (issue 20), except line-by-line ports
of NCCL's tuning code, listed here by name."""

from __future__ import annotations

import ast
from pathlib import Path

import costmodel

MAX_LINES = 120
# NCCL's own tables, ported line by line (src/graph/tuning.cc ncclTopoTuneModel)
PORTS = {("collectives.py", "_pair_tables")}


def _functions():
    root = Path(costmodel.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n_lines = node.end_lineno - node.lineno + 1
                yield path.relative_to(root).as_posix(), node.name, n_lines


def test_no_costmodel_function_is_longer_than_120_lines():
    long = [(f, name, n) for f, name, n in _functions()
            if n > MAX_LINES and (f, name) not in PORTS]
    assert not long, f"functions over {MAX_LINES} lines: {long}"


def test_score_is_a_short_composition():
    from costmodel import model

    lengths = {name: n for f, name, n in _functions() if f == "model.py"}
    assert lengths["score"] <= 15
    assert lengths["run_phases"] <= 45
    assert not hasattr(model, "TIME_KEYS") and not hasattr(model, "MEMORY_KEYS")
