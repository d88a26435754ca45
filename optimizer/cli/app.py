"""The ``optimize`` entry point: dispatch to a command, map errors to exit codes (contract.md).

Exit codes: 0 success; 2 bad input or usage (one line naming the field); 3 no configuration
fits the memory limit; 1 an internal error (a bug). Heavy modules (numpy, optuna, networkx,
rich) are imported only by the commands that need them, so the CLI starts fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from optimizer.cli.common import SUBCOMMANDS, emit_document

BUG_URL = "please report it with the command line at the paraplan issue tracker"


def dispatch(argv: Sequence[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        sub, rest = argv[0], list(argv[1:])
        if sub == "evaluate":
            from optimizer.cli import evaluate

            return evaluate.run(rest)
        if sub in ("models", "gpus", "clusters"):
            from optimizer.cli import catalog

            return catalog.run(sub, rest)
        if sub == "report":
            from optimizer.cli import studies

            return studies.cli_report(rest)
        if sub == "nccl":
            from optimizer.cli import nccl

            return nccl.main(rest)
        if sub == "calibrate":
            from optimizer.cli import calibrate

            return calibrate.run(rest)
        if sub == "validate":
            from optimizer.cli import validate

            return validate.main(rest)
    from optimizer.cli import optimize

    return optimize.run(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from costmodel.errors import InfeasibleError, InputError

    try:
        return dispatch(argv)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except InfeasibleError as e:
        print(f"error: {e}", file=sys.stderr)
        if "--json" in argv and e.payload is not None:
            emit_document(e.payload)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as e:  # argparse --help
        return int(e.code or 0)
    except Exception as e:  # a bug: short line, no traceback unless asked
        if os.environ.get("PARAPLAN_DEBUG"):
            raise
        print(f"internal error: {type(e).__name__}: {e} ({BUG_URL}; set PARAPLAN_DEBUG=1 for "
              "the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
