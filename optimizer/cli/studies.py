"""``optimize --study FILE`` and ``optimize report --study FILE`` (study files: contract.md 2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from costmodel.errors import InputError
from optimizer.cli.common import Parser, output_result
from optimizer.cli.options import main_parser
from optimizer.studies import load_study_file, report_study, run_study

_DEFINITION_FLAGS = ("model", "gpus", "cluster", "seq_length", "global_batch_size",
                     "memory_limit_gib", "framework", "batch_size", "tokens",
                     "gpu_hour_cost", "moe_dispatcher")
_DEFAULTED_FLAGS = ("gpu", "gpus_per_node", "memory_fraction", "sampler", "trials", "seed",
                    "trials_per_batch", "allow_cross_node_tp", "tp_comm_overlap",
                    "moe_ep_overlap")


def _check_no_definition_flags(args: argparse.Namespace) -> None:
    """Flags that would change the study's definition are refused with ``--study``: the file
    is the single record of what was searched."""
    defaults = main_parser()
    given = [f for f in _DEFINITION_FLAGS if getattr(args, f, None) is not None]
    given += [f for f in _DEFAULTED_FLAGS
              if hasattr(args, f) and getattr(args, f) != defaults.get_default(f)]
    given += [k[len("space_"):] for k, v in vars(args).items()
              if k.startswith("space_") and v is not None]
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise InputError("--study", f"cannot be combined with {flags}",
                         "the study file defines the search: edit its model, cluster, "
                         "training, space, constraints or search section instead")


def _progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def cli_run(args: argparse.Namespace) -> int:
    """``optimize --study FILE [--json] [--storage URL --study-name N] [--plot PNG]``."""
    _check_no_definition_flags(args)
    study = load_study_file(args.study,
                            allow_external_storage=getattr(args, "allow_external_storage", False))
    from optimizer.storage import storage_errors

    with storage_errors(getattr(args, "storage", None) or study.storage):
        doc = run_study(study, storage_override=getattr(args, "storage", None),
                        study_name_override=getattr(args, "study_name", None),
                        jobs=getattr(args, "jobs", 1) or 1, progress=_progress(args))
    return output_result(doc, args)


def cli_report(argv: Sequence[str]) -> int:
    """``optimize report --study FILE | --from DOC.json | --storage URL [--json] [--plot PNG]
    [--html FILE] [--storage URL --study-name N]``."""
    p = Parser(prog="optimize report",
                description="Render a study's stored Pareto front from its storage alone "
                            "(nothing is recomputed), or a document written by "
                            "`optimize --json` (--from); --html writes a self-contained page.")
    p.add_argument("--study", help="the study file (YAML); this or --from is required")
    p.add_argument("--from", dest="from_doc", metavar="DOC.json",
                   help="a front or plan document written by `optimize ... --json`")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--plot", metavar="PNG", help="write the Pareto plot (needs matplotlib)")
    p.add_argument("--html", metavar="FILE",
                   help="write a self-contained HTML report (front, breakdowns, diagnosis, "
                        "plan); the dominated cloud only when the document carries it "
                        "(documents made with `optimize ... --html`)")
    p.add_argument("--storage", help="read this Optuna storage instead of the file's; "
                   "without --study: the result an `optimize --model ... --storage URL` run "
                   "stored")
    p.add_argument("--study-name", help="read this study instead of the file's study_name "
                   "(without --study: needed when the storage holds several results)")
    p.add_argument("--allow-external-storage", action="store_true",
                   help="accept a study file whose storage lies outside its folder")
    args = p.parse_args(list(argv))
    adhoc = bool(args.storage) and not args.study and not args.from_doc
    if not adhoc and bool(args.study) == bool(args.from_doc):
        raise InputError("--study", "give exactly one of --study FILE, --from DOC.json and "
                         "--storage URL [--study-name N]",
                         "e.g. optimize report --from front.json --html report.html")
    if args.storage and args.from_doc:
        raise InputError("--storage", "cannot be combined with --from DOC.json")
    if adhoc:  # the result an `optimize --model ... --storage URL` run stored
        from optimizer.storage import storage_errors
        from optimizer.studies import report_stored

        with storage_errors(args.storage):
            doc = report_stored(args.storage, args.study_name)
    elif args.from_doc:
        doc = _load_document(args.from_doc)
    else:
        study = load_study_file(args.study,
                                allow_external_storage=args.allow_external_storage)
        from optimizer.storage import storage_errors

        with storage_errors(args.storage or study.storage):
            doc = report_study(study, storage_override=args.storage,
                               study_name_override=args.study_name)
    if args.html:
        from optimizer.output.html_report import write_html_report

        write_html_report(doc, args.html)
    if "plan" in doc:
        if args.plot:
            raise InputError("--plot", "works on a front document, not a plan")
        from optimizer.cli.common import emit, emit_document

        if args.json:
            emit_document(doc)
        elif not args.html:
            from optimizer.output.plan_report import render_plan

            emit(render_plan(doc))
        return 0
    if args.html and not args.json and not args.plot:
        return 0
    return output_result(doc, argparse.Namespace(json=args.json, plot=args.plot, emit=None))


def _load_document(path: str) -> dict:
    """A front or plan document from ``optimize --json`` (InputError if it is neither)."""
    import json
    from pathlib import Path

    from costmodel.safe_io import read_input_bytes

    try:  # a regular file of bounded size: no FIFO, no /dev/zero
        doc = json.loads(read_input_bytes(Path(path), "--from").decode("utf-8"))
    except OSError as e:
        raise InputError("--from", f"cannot read {path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError("--from", f"{path} is not a JSON document: {e}") from None
    if not isinstance(doc, dict) or not ("pareto_front" in doc or "plan" in doc) \
            or "inputs" not in doc:
        raise InputError("--from", f"{path} is not a front or plan document",
                         "write one with optimize --model ... --gpus ... --json > doc.json")
    return doc
