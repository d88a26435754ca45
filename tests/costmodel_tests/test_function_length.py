"""No function in costmodel/ longer than 120 lines (issue 20), except line-by-line ports of
NCCL's tuning code, marked by a comment line ``# port: NCCL <file>:<function>`` directly above
their ``def`` (or above their first decorator)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 120
PORT_MARK = "# port: NCCL "


def _long_functions(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        size = node.end_lineno - node.lineno + 1
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        marked = first >= 2 and lines[first - 2].strip().startswith(PORT_MARK)
        if size > MAX_LINES and not marked:
            out.append(f"{path.name}:{node.lineno} {node.name} ({size} lines)")
    return out


FILES = sorted((ROOT / "costmodel").rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT / "costmodel")))
def test_no_function_longer_than_120_lines(path):
    assert _long_functions(path) == []


def test_the_port_mark_exempts_exactly_the_marked_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    f = tmp_path / "m.py"
    f.write_text(f"# port: NCCL src/graph/tuning.cc:ncclTopoTuneModel\ndef tuned():\n{body}\n\n\n"
                 f"def plain():\n{body}\n")
    assert _long_functions(f) == [f"m.py:{MAX_LINES + 5} plain ({MAX_LINES + 1} lines)"]
