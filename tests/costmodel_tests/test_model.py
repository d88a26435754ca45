"""costmodel.model: score() is a short composition of phase calls (issue 20), and no function
of the phase modules is over 120 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import costmodel

MAX_LINES = 120
PHASE_MODULES = ("model.py", "groups.py", "shard.py", "pricing.py", "layers.py", "stages.py",
                 "schedule.py", "data_parallel.py", "stage_memory.py", "metrics.py", "trace.py",
                 "compute.py", "memory.py", "calibration.py")


def _functions(name: str):
    path = Path(costmodel.__file__).parent / name
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_no_phase_function_is_longer_than_120_lines():
    long = [(f, name, n) for f in PHASE_MODULES for name, n in _functions(f) if n > MAX_LINES]
    assert not long, f"functions over {MAX_LINES} lines: {long}"


def test_score_is_a_short_composition_of_phases():
    from costmodel import model

    lengths = dict(_functions("model.py"))
    assert lengths["score"] <= 15
    assert lengths["run_phases"] <= 60
    assert not hasattr(model, "TIME_KEYS") and not hasattr(model, "MEMORY_KEYS")
    assert not hasattr(model, "_layer_terms")


def test_callers_names_stay_importable_from_model():
    from costmodel.model import (  # noqa: F401
        Scores,
        grad_wire_bytes,
        score,
        softmax_falls_back,
        uses_bf16_optimizer,
    )
