"""paraplan's optimizer: search, Python API, CLI, reports and study files.

``from optimizer import optimize, evaluate`` (contract.md section 3). The names are resolved
lazily so that importing the package (and starting the CLI) stays fast.

How it is organised, from the bottom up (no import cycles between modules, nor between
these packages; tests/test_import_graph.py):

- :mod:`optimizer.core`: what every package uses: the resolved problem, the result records
  (candidates, fronts, evaluations), specs as JSON-ready dicts, atomic file writes;
- :mod:`optimizer.launch`: launch flags, scheduler scripts, the NCCL tuner CSV;
- :mod:`optimizer.nccl`: one collective through NCCL's own model; calibration to nccl-tests;
- :mod:`optimizer.output`: tables, reports, plots, the JSON schema, diagnosis;
- :mod:`optimizer.storage`: Optuna storages, workers, stored studies and results;
- :mod:`optimizer.search`: the engines (exhaustive, the Optuna adapter) and the Pareto front;
- :mod:`optimizer.api`: the library facade, ``optimize`` / ``evaluate`` (search -> front);
- :mod:`optimizer.studies`: study files, run and reported through the API and the storage;
- :mod:`optimizer.validation`: the cost model against published training runs;
- :mod:`optimizer.cli`: the ``optimize`` command, a thin layer over all of the above.
"""

from __future__ import annotations

from typing import Any

__all__ = ["optimize", "evaluate", "OptimizeResult", "EvaluateResult", "Candidate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from optimizer import api

        return getattr(api, name)
    raise AttributeError(f"module 'optimizer' has no attribute {name!r}")
