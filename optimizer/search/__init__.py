"""Search engines over a problem's space: exact vectorised enumeration and Optuna samplers.

- :mod:`~optimizer.search.base`: what every engine shares (the problem's space, chunked
  scoring through :func:`costmodel.model.score`, the :class:`SearchOutcome` record);
- :mod:`~optimizer.search.engine`: :func:`run`, which checks the request, enumerates the valid
  space and picks the engine (the exhaustive one runs there);
- :mod:`~optimizer.search.optuna_engine`: the Optuna adapter (encoding, batches, storage);
- :mod:`~optimizer.search.pareto`: the Pareto mask and the 2-D hypervolume.

Modules inside this package import each other by module, never through this ``__init__``.
"""

from __future__ import annotations

from optimizer.search.base import CHUNK, SearchOutcome, problem_space, score_batch
from optimizer.search.engine import AUTO_EXHAUSTIVE_MAX, SAMPLERS, run

__all__ = ["AUTO_EXHAUSTIVE_MAX", "CHUNK", "SAMPLERS", "SearchOutcome", "problem_space", "run",
           "score_batch"]
