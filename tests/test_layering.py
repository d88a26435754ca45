"""Dependency direction: costmodel <- search_spaces <- optimizer; costmodel and search_spaces
never import optuna or joblib (checked statically and at run time)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"optuna", "joblib"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_forbidden_imports_in_source():
    bad = {}
    for pkg in ("costmodel", "search_spaces"):
        for f in (ROOT / pkg).rglob("*.py"):
            hit = _imports(f) & (FORBIDDEN | {"optimizer"})
            if hit:
                bad[str(f.relative_to(ROOT))] = sorted(hit)
    assert bad == {}


def test_costmodel_does_not_import_search_spaces():
    bad = [str(f.relative_to(ROOT)) for f in (ROOT / "costmodel").rglob("*.py")
           if "search_spaces" in _imports(f)]
    assert bad == []


def test_importing_every_module_loads_neither_optuna_nor_joblib():
    mods = [f"{pkg}.{f.stem}" if f.stem != "__init__" else pkg
            for pkg in ("costmodel", "search_spaces") for f in (ROOT / pkg).glob("*.py")]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "from costmodel.batch import ConfigBatch\n"
            "from costmodel.hardware import default_cluster\n"
            "from costmodel.models_catalog import get_model\n"
            "from costmodel.model import score\n"
            "from costmodel.specs import ParallelConfig, TrainingSpec\n"
            "score(get_model('7b'), default_cluster(8), TrainingSpec(),"
            " ConfigBatch.from_configs([ParallelConfig(tp=2, dp=4)]))\n"
            "bad = sorted(m for m in ('optuna', 'joblib') if m in sys.modules)\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
