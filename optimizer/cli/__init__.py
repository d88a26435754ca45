"""The ``optimize`` command line: a thin layer over the library (contract.md sections 1 and 5).

- :mod:`~optimizer.cli.app`: :func:`main` (the console script), dispatch, exit codes;
- :mod:`~optimizer.cli.common`: the one-line-error parser, printing documents and fronts;
- :mod:`~optimizer.cli.options`: the flags of the search command;
- one module per command: :mod:`~optimizer.cli.optimize` (``optimize [FLAGS]``),
  :mod:`~optimizer.cli.evaluate`, :mod:`~optimizer.cli.catalog` (models, gpus, clusters),
  :mod:`~optimizer.cli.studies` (``--study``, ``report``), :mod:`~optimizer.cli.nccl`,
  :mod:`~optimizer.cli.validate`.

Each command parses its flags, calls the library (:mod:`optimizer.api` and the packages under
it) and prints; heavy modules are imported only by the command that needs them.
"""

from __future__ import annotations

from optimizer.cli.app import main

__all__ = ["main"]
