"""``optimize validate``: the cost model against published training runs (exit 1 on --check).

The harness is :mod:`optimizer.validation.published`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from costmodel.errors import InputError
from optimizer.cli.common import Parser
from optimizer.validation.published import ENV_VAR, THRESHOLDS, finite, format_report, validate


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="optimize validate",
                description="Score the published runs of ../shared/validation with the cost "
                            "model and report step-time, ranking and memory errors.")
    p.add_argument("--data", metavar="DIR",
                   help=f"validation data folder, e.g. ../shared/validation (default: ${ENV_VAR}, "
                        "else the copy shipped in the package)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON document")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a threshold fails (" + ", ".join(
                       f"{k} {v}" for k, v in THRESHOLDS.items()) + ")")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list skipped entries with reasons, sweeps and every run")
    p.add_argument("--worst", type=int, default=10, metavar="N",
                   help="show the N runs with the largest step-time error (default 10)")
    p.add_argument("--include-derived", action="store_true",
                   help="also compare entries whose only step time is derived "
                        "(derived.iteration_time_s, Megatron SC21 Table 1)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``optimize validate``: 0 normally; with ``--check`` 1 when a threshold fails; bad input
    raises :class:`InputError` (the CLI exits 2)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.worst < 0:
        raise InputError("--worst", f"must be >= 0, got {args.worst}")
    res = validate(args.data, include_derived=args.include_derived)
    if args.json:
        print(json.dumps(finite(res), indent=2))
    else:
        print(format_report(res, verbose=args.verbose, worst=args.worst))
    if args.check and not res["passed"]:
        if not args.json:
            print("validation thresholds failed", file=sys.stderr)
        return 1
    return 0
