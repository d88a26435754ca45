"""``optimize models | gpus | clusters``: list a catalog (a table, or JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from optimizer.cli.common import Parser, emit


def run(kind: str, argv: Sequence[str]) -> int:
    p = Parser(prog=f"optimize {kind}", description=f"List the {kind} catalog.")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from optimizer.output.catalog import listing

    headers, rows = listing(kind)
    if args.json:
        emit(json.dumps([dict(zip(headers, r, strict=True)) for r in rows], indent=2))
    else:
        from optimizer.output.tables import fmt_table

        emit(fmt_table(headers, [[str(c) for c in r] for r in rows]))
    return 0
