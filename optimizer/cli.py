"""The ``optimize`` command line: a thin layer over :mod:`optimizer.api` (contract.md).

Exit codes: 0 success; 2 bad input or usage (one line naming the field); 3 no configuration
fits the memory limit; 1 an internal error (a bug). Heavy modules (numpy, optuna, networkx,
rich) are imported only by the commands that need them, so the CLI starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

SUBCOMMANDS = ("evaluate", "report", "nccl", "models", "gpus", "clusters", "validate")
BUG_URL = "please report it with the command line at the paraplan issue tracker"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str):  # type: ignore[override]
        from costmodel.errors import InputError

        raise InputError("", f"{self.prog}: {message}", f"see '{self.prog} --help'")


def _csv(kind: Callable):
    def parse(text: str):
        items = [x.strip() for x in text.split(",") if x.strip()]
        try:
            return tuple(kind(x) for x in items)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list, got {text!r}") from None
    return parse


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on", "y"):
        return True
    if t in ("0", "false", "no", "off", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


SPACE_FLAGS = {  # flag -> (dimension, parser)
    "tp": ("tp", _csv(int)), "pp": ("pp", _csv(int)),
    "micro-batch-size": ("micro_batch_size", _csv(int)),
    "precision": ("precision", _csv(str)), "recompute": ("recompute", _csv(str)),
    "sequence-parallel": ("sequence_parallel", _csv(_bool)),
    "zero-stage": ("zero_stage", _csv(int)), "schedule": ("schedule", _csv(str)),
    "virtual-stages": ("virtual_stages", _csv(int)),
    "nccl-algo": ("nccl_algo", lambda s: (s,)), "nccl-proto": ("nccl_proto", lambda s: (s,)),
}


def _main_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="optimize", description="Search DP/TP/PP layouts, micro-batch, precision, "
                "recompute, ZeRO, schedule and NCCL settings for transformer training; print "
                "the Pareto front of tokens/s vs peak memory per GPU. Subcommands: "
                + ", ".join(SUBCOMMANDS) + " (optimize SUBCOMMAND --help).")
    p.add_argument("--model", help="catalog name/alias (65b, llama-65b, 175b, ...), HF "
                   "config.json or model YAML")
    p.add_argument("--gpus", type=int, help="total number of GPUs")
    p.add_argument("--gpu", default="a100-sxm-80gb", help="GPU catalog key")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--cluster", help="cluster preset, cluster YAML or node-link graph JSON")
    p.add_argument("--seq-length", type=int)
    p.add_argument("--global-batch-size", type=int)
    p.add_argument("--framework", choices=("megatron", "deepspeed", "fsdp"),
                   help="training framework whose host costs, fusion and buffers to model "
                        "(default megatron)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="Megatron-Core --tp-comm-overlap: TP collectives overlap GEMMs "
                        "(with sequence parallelism)")
    p.add_argument("--memory-limit-gib", type=float)
    p.add_argument("--memory-fraction", type=float, default=0.9)
    p.add_argument("--sampler", default="auto",
                   help="auto | exhaustive | tpe | nsga2 | random")
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="processes for scoring large spaces")
    p.add_argument("--batch-size", type=int, default=32, help="trials asked per batch")
    p.add_argument("--allow-cross-node-tp", action="store_true")
    p.add_argument("--storage", help="Optuna storage URL or journal file path")
    p.add_argument("--study-name")
    p.add_argument("--study", help="run (or resume) a study file")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--plot", metavar="PNG", help="write the Pareto plot (needs matplotlib)")
    p.add_argument("--emit", choices=("slurm", "k8s"),
                   help="print an sbatch script or a PyTorchJob for the recommended config")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--version", action="store_true")
    for flag, (dim, _) in SPACE_FLAGS.items():
        p.add_argument(f"--{flag}", dest=f"space_{dim}", metavar="V[,V...]",
                       help=f"restrict the {dim} dimension")
    return p


def _training_flags(args: argparse.Namespace) -> dict | None:
    """The training-section switches given on the command line (None: the defaults)."""
    out: dict = {}
    if args.framework:
        out["framework"] = args.framework
    if args.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    return out or None


def _space_overrides(args: argparse.Namespace) -> dict:
    from costmodel.errors import InputError

    out = {}
    for flag, (dim, parse) in SPACE_FLAGS.items():
        raw = getattr(args, f"space_{dim}")
        if raw is None:
            continue
        try:
            out[dim] = parse(raw)
        except argparse.ArgumentTypeError as e:
            raise InputError(f"--{flag}", str(e)) from None
    return out


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def emit_document(doc: dict) -> None:
    """Print one contract document (contract.md section 4) as JSON on stdout.

    With PARAPLAN_CHECK_SCHEMA=1 (the test suite sets it) the document is first validated
    against the shipped JSON Schema, so every JSON output of every test is checked.
    """
    if os.environ.get("PARAPLAN_CHECK_SCHEMA") == "1":
        from optimizer.schemas import validate_document

        validate_document(doc)
    _emit(json.dumps(doc, indent=2))


def cmd_main(argv: Sequence[str]) -> int:
    args = _main_parser().parse_args(argv)
    if args.version:
        from optimizer.api import tool_version

        _emit(f"paraplan {tool_version()}")
        return 0
    if args.study:
        from optimizer import studies

        return studies.cli_run(args)
    from costmodel.errors import InputError

    if not args.model:
        raise InputError("--model", "missing", "e.g. optimize --model 65b --gpus 16")
    from optimizer.api import optimize

    result = optimize(args.model, args.gpus, cluster=args.cluster, gpu=args.gpu,
                      gpus_per_node=args.gpus_per_node, seq_length=args.seq_length,
                      global_batch_size=args.global_batch_size,
                      training=_training_flags(args),
                      memory_limit_gib=args.memory_limit_gib,
                      memory_fraction=args.memory_fraction, sampler=args.sampler,
                      trials=args.trials, seed=args.seed, jobs=args.jobs,
                      batch_size=args.batch_size, space=_space_overrides(args) or None,
                      allow_cross_node_tp=args.allow_cross_node_tp, storage=args.storage,
                      study_name=args.study_name,
                      progress=not args.quiet and sys.stderr.isatty())
    return output_result(result.to_dict(), args)


def output_result(doc: dict, args: argparse.Namespace) -> int:
    """Print a front document (JSON or human), write the plot, emit scheduler files."""
    if getattr(args, "plot", None):
        from optimizer.plot import plot_front

        plot_front(doc, args.plot)
    if getattr(args, "emit", None):
        from optimizer.launch_files import emit_for_doc

        _emit(emit_for_doc(doc, args.emit))
        return 0
    if args.json:
        emit_document(doc)
    else:
        from optimizer.report import render_front

        _emit(render_front(doc))
    return 0


def cmd_evaluate(argv: Sequence[str]) -> int:
    p = _Parser(prog="optimize evaluate", description="Score one configuration (a run file).")
    p.add_argument("run", help="run file (YAML/JSON): model, cluster, training, parallel")
    p.add_argument("--json", action="store_true")
    p.add_argument("--memory-limit-gib", type=float)
    p.add_argument("--memory-fraction", type=float, default=0.9)
    args = p.parse_args(argv)
    from optimizer.api import evaluate

    res = evaluate(args.run, memory_limit_gib=args.memory_limit_gib,
                   memory_fraction=args.memory_fraction)
    doc = res.to_dict()
    if args.json:
        emit_document(doc)
    else:
        from optimizer.report import render_evaluation

        _emit(render_evaluation(doc))
    return 0


def cmd_catalog(kind: str, argv: Sequence[str]) -> int:
    p = _Parser(prog=f"optimize {kind}", description=f"List the {kind} catalog.")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from optimizer.catalog_listing import listing

    headers, rows = listing(kind)
    if args.json:
        _emit(json.dumps([dict(zip(headers, r, strict=True)) for r in rows], indent=2))
    else:
        from optimizer.report import _fmt_table

        _emit(_fmt_table(headers, [[str(c) for c in r] for r in rows]))
    return 0


def dispatch(argv: Sequence[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        sub, rest = argv[0], list(argv[1:])
        if sub == "evaluate":
            return cmd_evaluate(rest)
        if sub in ("models", "gpus", "clusters"):
            return cmd_catalog(sub, rest)
        if sub == "report":
            from optimizer import studies

            return studies.cli_report(rest)
        if sub == "nccl":
            from optimizer import nccl_cli

            return nccl_cli.main(rest)
        if sub == "validate":
            from optimizer import validate

            return validate.main(rest)
    return cmd_main(argv)


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
