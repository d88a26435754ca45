"""What every command shares: the one-line-error parser and printing documents and fronts."""

from __future__ import annotations

import argparse
import json
import os
import sys

#: ``optimize``'s subcommands (the entry point dispatches on them; the search's help lists
#: them). Here, not in ``cli.options``, so that dispatching imports no dimension declarations.
SUBCOMMANDS = ("evaluate", "report", "nccl", "models", "gpus", "clusters", "validate",
               "calibrate")


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str):  # type: ignore[override]
        from costmodel.errors import InputError

        raise InputError("", f"{self.prog}: {message}", f"see '{self.prog} --help'")


def emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def emit_document(doc: dict) -> None:
    """Print one contract document (contract.md section 4) as JSON on stdout.

    With PARAPLAN_CHECK_SCHEMA=1 (the test suite sets it) the document is first validated
    against the shipped JSON Schema, so every JSON output of every test is checked.
    """
    if os.environ.get("PARAPLAN_CHECK_SCHEMA") == "1":
        from optimizer.output.schemas import validate_document

        validate_document(doc)
    emit(json.dumps(doc, indent=2))


def output_result(doc: dict, args: argparse.Namespace) -> int:
    """Print a front document (JSON or human), write the plot, emit scheduler files."""
    if getattr(args, "plot", None):
        from optimizer.output.plot import plot_front

        plot_front(doc, args.plot)
    if getattr(args, "emit", None):
        from optimizer.launch.files import emit_for_doc

        emit(emit_for_doc(doc, args.emit))
        return 0
    if args.json:
        emit_document(doc)
    else:
        from optimizer.output.report import render_front

        emit(render_front(doc, top_k=getattr(args, "top_k", 0) or 0))
    return 0
