"""The import graph of costmodel/, search_spaces/ and optimizer/, computed from the source.

Every ``import`` counts, at module level or inside a function (a lazy import is a runtime
dependency all the same): ``import a.b`` is an edge to ``a.b``; ``from a import n`` an edge to
``a.n`` when that is a module, else to ``a`` (a package's ``__init__`` is a node);
relative imports are resolved against the importing module's package. Other top-level names
(``optuna``, ``numpy``, ...) are nodes too, without out-edges.

Checked: no cycle anywhere; the layering costmodel <- search_spaces <- optimizer, with
neither optuna nor joblib below the optimizer (also at run time); nothing but the CLI and the
``python -m optimizer`` entry imports :mod:`optimizer.cli` (the CLI is a thin layer on top).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "search_spaces", "optimizer")
FORBIDDEN = {"optuna", "joblib"}  # never below the optimizer
LAYERS = {  # package -> top-level names its modules must not import
    "costmodel": {"search_spaces", "optimizer"} | FORBIDDEN,
    "search_spaces": {"optimizer"} | FORBIDDEN,
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _target(name: str, known: set[str]) -> str:
    """The deepest known module ``name`` names (itself or a parent package); other names
    stand for their top-level package."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return parts[0]


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules ``module`` (source ``path``) imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {_target(a.name, known) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                if node.module:
                    base += node.module.split(".")
                source = ".".join(base)
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.add(sub if sub in known else _target(source, known))
    out.discard(module)
    return out


def import_graph(root: Path = ROOT, packages=PACKAGES) -> nx.DiGraph:
    mods = source_modules(root, packages)
    known = set(mods)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for mod, path in mods.items():
        g.add_edges_from((mod, dep) for dep in imports_of(mod, path, known))
    return g


def cycles(g: nx.DiGraph) -> list[list[str]]:
    """One shortest cycle through each group of mutually importing modules (each strongly
    connected component with more than one module), closed: ``[a, b, a]``."""
    out = []
    for comp in nx.strongly_connected_components(g):
        if len(comp) < 2:
            continue
        sub = g.subgraph(comp)
        start = min(comp)
        best = min((nx.shortest_path(sub, nxt, start) for nxt in sub.successors(start)),
                   key=len)
        out.append([start, *best])
    return sorted(out)


def _report(cyc: list[list[str]]) -> str:
    return "import cycles (one per group of mutually importing modules):\n" + "\n".join(
        "  " + " -> ".join(c) for c in cyc)


GRAPH = import_graph()


# ---------------------------------------------------------------------------------------------
def test_graph_sees_every_package_and_lazy_imports():
    mods = set(source_modules())
    assert {"costmodel", "search_spaces", "optimizer", "optimizer.api"} <= mods
    assert len(mods) > 40
    # a function-level import counts: the CLI imports the API only inside its command
    assert nx.has_path(GRAPH, "optimizer.cli", "optimizer.api")
    assert nx.has_path(GRAPH, "optimizer.cli", "costmodel.model")


def test_no_import_cycles():
    cyc = cycles(GRAPH)
    assert cyc == [], _report(cyc)


def test_an_injected_cycle_is_found(tmp_path):
    """The checker itself: two modules that import each other (one lazily, through a
    ``from package import submodule``) and a package whose ``__init__`` re-exports a module
    that imports the package back."""
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from demo.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from demo import a\n    return a\n")
    (pkg / "sub" / "__init__.py").write_text("from .x import y\nLIMIT = 2\n")
    (pkg / "sub" / "x.py").write_text("from demo.sub import LIMIT, z\ny = LIMIT\n")
    (pkg / "sub" / "z.py").write_text("import os\n")
    (pkg / "c.py").write_text("from . import a\nfrom .sub import z\n")
    g = import_graph(tmp_path, ("demo",))
    found = {frozenset(c) for c in cycles(g)}
    assert found == {frozenset({"demo.a", "demo.b"}), frozenset({"demo.sub", "demo.sub.x"})}
    assert set(g.successors("demo.c")) == {"demo.a", "demo.sub.z"}  # submodules, not __init__
    assert set(g.successors("demo.sub.x")) == {"demo.sub", "demo.sub.z"}
    assert set(g.successors("demo.sub.z")) == {"os"}


def subpackage_graph(g: nx.DiGraph, package: str = "optimizer") -> nx.DiGraph:
    """``g`` condensed to ``package``'s direct children (``optimizer.search``, ...; a module
    directly in ``package`` is its own node; the package's ``__init__`` and ``__main__`` are
    left out, they only name the facade and the entry point)."""
    def node(mod: str) -> str | None:
        parts = mod.split(".")
        if parts[0] != package or len(parts) < 2 or parts[1] in ("__main__",):
            return None
        return ".".join(parts[:2])

    h = nx.DiGraph()
    for a, b in g.edges:
        na, nb = node(a), node(b)
        if na and nb and na != nb:
            h.add_edge(na, nb)
    return h


def test_no_cycles_between_the_optimizer_sub_packages():
    """The sub-packages are layers: core at the bottom, the CLI on top (optimizer/__init__)."""
    h = subpackage_graph(GRAPH)
    assert {"optimizer.core", "optimizer.search", "optimizer.cli"} <= set(h)
    cyc = cycles(h)
    assert cyc == [], _report(cyc)
    assert not any(d != "optimizer.core" and d.startswith("optimizer.")
                   for d in h.successors("optimizer.core"))


def test_no_forbidden_imports_in_source():
    """costmodel imports neither search_spaces nor optimizer nor optuna/joblib;
    search_spaces does not import optimizer nor optuna/joblib."""
    bad = {}
    for mod in GRAPH:
        top = mod.split(".")[0]
        if top in LAYERS:
            hit = sorted(d for d in GRAPH.successors(mod) if d.split(".")[0] in LAYERS[top])
            if hit:
                bad[mod] = hit
    assert bad == {}


def test_costmodel_does_not_import_search_spaces():
    """Not even through another package (transitively)."""
    bad = [m for m in GRAPH if m.split(".")[0] == "costmodel"
           and any(d.split(".")[0] == "search_spaces" for d in nx.descendants(GRAPH, m))]
    assert bad == []


def test_only_the_cli_imports_the_cli():
    entry = {"optimizer.__main__"}
    bad = sorted(m for m, d in GRAPH.edges
                 if d.startswith("optimizer.cli") and not m.startswith("optimizer.cli")
                 and m not in entry)
    assert bad == []


def test_importing_every_module_loads_neither_optuna_nor_joblib():
    mods = sorted(m for m in source_modules() if m.split(".")[0] in LAYERS)
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


def test_cli_start_up_loads_no_dimension_declarations():
    """``import optimizer.cli`` and ``optimize --version`` stay light: the space flags are
    built on first use (cli.options.space_flags), SUBCOMMANDS live in cli.common."""
    import os
    import subprocess
    import sys

    code = ("import sys; from optimizer.cli import main; import optimizer.cli.app; "
            "assert 'costmodel.specs' not in sys.modules, 'import'; "
            "main(['--version']); assert 'costmodel.specs' not in sys.modules, '--version'; "
            "from optimizer.cli.options import SPACE_FLAGS; assert 'nccl-algo' in SPACE_FLAGS")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
