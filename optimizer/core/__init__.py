"""What every optimizer package uses; imports nothing else of the optimizer.

- :mod:`~optimizer.core.problem`: :class:`Problem` (resolved model, cluster, training and
  memory limit), :func:`resolve_problem`, :func:`document_head`, versions;
- :mod:`~optimizer.core.results`: the frozen results of the API (candidates, a front, one
  evaluation);
- :mod:`~optimizer.core.serialize`: specs as JSON-ready dicts (documents, fingerprints);
- :mod:`~optimizer.core.fileio`: atomic file writes;
- :mod:`~optimizer.core.version`: paraplan's version (imports nothing).

Nothing is imported here (fast start-up); import the modules.
"""
