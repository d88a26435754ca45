"""The flags of ``optimize`` (the search command): parser, training switches, space restrictions."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from optimizer.cli.common import Parser

SUBCOMMANDS = ("evaluate", "report", "nccl", "models", "gpus", "clusters", "validate")


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


def _space_flags() -> dict[str, tuple[str, Callable, str, str]]:
    """``--flag`` -> (dimension, parser, help, metavar) for every searched dimension, from the
    declarations on ``ParallelConfig`` (costmodel.dimensions): INT, CHOICE and BOOL take a
    comma-separated list, a STRING (NCCL_ALGO / NCCL_PROTO grammar, which has commas) one value."""
    from costmodel.dimensions import BOOL, CHOICE, INT, STRING
    from costmodel.specs import PARALLEL_DIMENSIONS

    parsers = {INT: _csv(int), CHOICE: _csv(str), BOOL: _csv(_bool), STRING: lambda s: (s,)}
    out = {}
    for d in PARALLEL_DIMENSIONS:
        if not d.searched:
            continue
        out[d.flag] = (d.name, parsers[d.kind],
                       f"restrict the {d.name} dimension ({d.help}); valid: {d.valid_text}; "
                       f"default space: {d.default_values_text}",
                       "V" if d.kind == STRING else "V[,V...]")
    return out


SPACE_FLAGS = _space_flags()


def main_parser() -> argparse.ArgumentParser:
    p = Parser(prog="optimize", description="Search DP/TP/PP layouts, micro-batch, precision, "
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
    for flag, (dim, _, text, metavar) in SPACE_FLAGS.items():
        p.add_argument(f"--{flag}", dest=f"space_{dim}", metavar=metavar,
                       help=text.replace("%", "%%"))
    return p


def training_flags(args: argparse.Namespace) -> dict | None:
    """The training-section switches given on the command line (None: the defaults)."""
    out: dict = {}
    if args.framework:
        out["framework"] = args.framework
    if args.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    return out or None


def space_overrides(args: argparse.Namespace) -> dict:
    from costmodel.errors import InputError

    out = {}
    for flag, (dim, parse, _, _) in SPACE_FLAGS.items():
        raw = getattr(args, f"space_{dim}")
        if raw is None:
            continue
        try:
            out[dim] = parse(raw)
        except argparse.ArgumentTypeError as e:
            raise InputError(f"--{flag}", str(e)) from None
    return out
