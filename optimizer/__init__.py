"""paraplan's optimizer: search, Python API, CLI, reports and study files.

``from optimizer import optimize, evaluate`` (contract.md section 3). The names are resolved
lazily so that importing the package (and starting the CLI) stays fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["optimize", "evaluate", "OptimizeResult", "EvaluateResult", "Candidate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from optimizer import api

        return getattr(api, name)
    raise AttributeError(f"module 'optimizer' has no attribute {name!r}")
