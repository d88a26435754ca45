#!/usr/bin/env python
"""The cost model against published training runs (issue 3): a thin wrapper around
:func:`optimizer.cli.validate.main`, the same as ``optimize validate``.

    python benchmarks/validate.py [--data DIR] [--json] [--check] [--verbose] [--worst N]

Exit codes: 0 done; 1 ``--check`` and a threshold failed; 2 bad input (missing data folder,
bad option).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costmodel.errors import InputError  # noqa: E402
from optimizer.cli.validate import main  # noqa: E402

if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
