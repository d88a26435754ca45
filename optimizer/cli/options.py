"""The flags of ``optimize`` (the search command): parser, training switches, space restrictions."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from optimizer.cli.common import SUBCOMMANDS, Parser

_RANGE_HELP = ("a range A-B means the counts in [A, B] that are a power-of-two number of "
               "full nodes (gpus-per-node x 2^k; below one node, powers of two), A-B:S every "
               "multiple of S in [A, B] that is whole nodes")

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


@functools.cache
def space_flags() -> dict[str, tuple[str, Callable, str, str]]:
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


def __getattr__(name: str) -> Any:
    """``SPACE_FLAGS`` (= :func:`space_flags`), built on first use: importing the CLI loads
    no dimension declarations (``optimize --version`` and ``models`` stay light)."""
    if name == "SPACE_FLAGS":
        return space_flags()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (unless the text already states one)."""

    def _get_help_string(self, action):  # noqa: D401 - argparse hook
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False \
                or action.default == argparse.SUPPRESS or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def main_parser() -> argparse.ArgumentParser:
    p = Parser(prog="optimize", formatter_class=HelpFormatter,
               description="Search DP/TP/PP layouts, micro-batch, precision, "
                "recompute, ZeRO, schedule and NCCL settings for transformer training; print "
                "the Pareto front of tokens/s vs peak memory per GPU. With several --gpus "
                "counts (and --tokens), plan the job: per count the best layout, "
                "time-to-train, GPU-hours and cost. Subcommands: "
                + ", ".join(SUBCOMMANDS) + " (optimize SUBCOMMAND --help).")
    p.add_argument("--model", help="catalog name/alias (65b, llama-65b, llama3-70b, 175b, ...;"
                   " `optimize models` lists them), HF config.json or model YAML; required")
    p.add_argument("--gpus", metavar="N|N,N,..|A-B[:S]",
                   help="total number of GPUs, or several to plan across: a list "
                        "(64,128,256) or a range; " + _RANGE_HELP + "; required without "
                        "--cluster")
    p.add_argument("--gpu", default="a100-sxm-80gb",
                   help="GPU catalog key (`optimize gpus` lists them: v100-sxm-32gb, "
                        "a100-sxm-40gb, a100-sxm-80gb, h100-sxm-80gb, h200-sxm-141gb, b200, "
                        "mi300x, ...)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (1..)")
    p.add_argument("--cluster", help="cluster preset (`optimize clusters`), cluster YAML or "
                   "node-link graph JSON (default: nodes of --gpus-per-node --gpu GPUs on a "
                   "DGX-like fabric)")
    p.add_argument("--seq-length", type=int,
                   help="tokens per sequence (default: the catalog model's pre-training "
                        "recipe where known, e.g. 8192 for Llama 3, else 2048)")
    p.add_argument("--global-batch-size", type=int,
                   help="sequences per optimizer step (default: 1024)")
    p.add_argument("--tokens", type=float, metavar="N",
                   help="training tokens (e.g. 15e12): adds time-to-train, GPU-hours and "
                        "cost per GPU count (default: none; batch-size ramps come later: the "
                        "global batch is fixed for the whole run)")
    p.add_argument("--gpu-hour-cost", type=float, metavar="USD",
                   help="price of one GPU-hour, for the cost column (default: none)")
    p.add_argument("--framework", choices=("megatron", "deepspeed", "fsdp", "torchtitan"),
                   help="training framework whose host costs, fusion and buffers to model "
                        "(default: megatron)")
    p.add_argument("--pipeline-layout", metavar="LAYOUT",
                   help="Megatron-Core's --pipeline-model-parallel-layout, e.g. "
                        "'Et*4|(t*4|)*14tmL': the layers of each virtual pipeline stage "
                        "(E embedding, t layer, m MTP, L loss, | between stages); the search "
                        "keeps the pp x virtual stages it fits (default: none, Megatron's "
                        "split or the searched stage plan)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="Megatron-Core --tp-comm-overlap: TP collectives overlap GEMMs "
                        "(with sequence parallelism; default: off)")
    p.add_argument("--moe-ep-overlap", action="store_true",
                   help="Megatron-Core --overlap-moe-expert-parallel-comm: a MoE layer's EP "
                        "all-to-all overlaps another micro-batch's compute (combined 1F1B; "
                        "priced and emitted where Megatron runs it: ep > 1, pp 1 or "
                        "interleaved, no full or partial recompute; default: off)")
    p.add_argument("--moe-dispatcher", choices=("alltoall", "flex"),
                   help="MoE token dispatcher: alltoall (Megatron's) or flex (DeepEP / "
                        "HybridEP: a token crosses to each remote host once; priced and "
                        "emitted with its backend; default: alltoall)")
    p.add_argument("--memory-limit-gib", type=float,
                   help="per-GPU memory limit in GiB, at most the GPU's memory (default: "
                        "--memory-fraction x HBM)")
    p.add_argument("--memory-fraction", type=float,
                   help="per-GPU memory limit as a fraction of HBM, in (0, 1] (default 0.98: "
                        "the one 2%% safety margin on the predicted peak, allocator reserve "
                        "included); not together with --memory-limit-gib")
    p.add_argument("--sampler", default="auto",
                   help="auto | exhaustive | tpe | nsga2 | random; auto: exhaustive when the valid space is small enough to score in "
                        "about a second, else TPE")
    p.add_argument("--trials", type=int, default=300,
                   help="configurations an Optuna sampler scores (not used by exhaustive)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed")
    p.add_argument("--jobs", type=int, default=1, help="processes for scoring large spaces")
    p.add_argument("--trials-per-batch", type=int, default=32,
                   help="Optuna trials asked and scored together (a search setting, not the "
                        "training batch: that is --global-batch-size)")
    p.add_argument("--batch-size", type=int, default=None, dest="batch_size",
                   help="deprecated alias of --trials-per-batch")
    p.add_argument("--allow-cross-node-tp", action="store_true",
                   help="let tensor parallelism span nodes (default: off)")
    p.add_argument("--storage", help="Optuna storage URL or journal file path (default: "
                   "in memory)")
    p.add_argument("--study-name", help="name of the study in --storage")
    p.add_argument("--study", help="run (or resume) a study file")
    p.add_argument("--allow-external-storage", action="store_true",
                   help="with --study: accept a storage path outside the study file's folder")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--top-k", type=int, default=0, metavar="K",
                   help="show only the K fastest front points in the table (0: all; the "
                        "JSON keeps the whole front)")
    p.add_argument("--plot", metavar="PNG", help="write the Pareto plot (needs matplotlib)")
    p.add_argument("--html", metavar="FILE",
                   help="also write a self-contained HTML report (front with the dominated "
                        "cloud, breakdowns, diagnosis, plan)")
    p.add_argument("--emit", choices=("slurm", "k8s"),
                   help="print an sbatch script or a PyTorchJob for the recommended config")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    for flag, (dim, _, text, metavar) in space_flags().items():
        p.add_argument(f"--{flag}", dest=f"space_{dim}", metavar=metavar,
                       help=text.replace("%", "%%"))
    return p


def trials_per_batch(args: argparse.Namespace) -> int:
    """``--trials-per-batch``, or the deprecated ``--batch-size`` with a warning on stderr."""
    if getattr(args, "batch_size", None) is not None:
        import sys

        print("warning: --batch-size is deprecated (it is the number of Optuna trials per "
              "batch, not the training batch); use --trials-per-batch", file=sys.stderr)
        value, field = args.batch_size, "batch_size"
    else:
        value, field = args.trials_per_batch, "trials_per_batch"
    from costmodel import limits

    limits.check_count(field, value, maximum=limits.MAX_BATCH_SIZE)
    return value


def training_flags(args: argparse.Namespace) -> dict | None:
    """The training-section switches given on the command line (None: the defaults)."""
    out: dict = {}
    if args.framework:
        out["framework"] = args.framework
    if args.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    if getattr(args, "moe_ep_overlap", False):
        out["moe_ep_overlap"] = True
    if getattr(args, "moe_dispatcher", None):
        out["moe_dispatcher"] = args.moe_dispatcher
    if getattr(args, "pipeline_layout", None) is not None:
        out["pipeline_layout"] = args.pipeline_layout
    return out or None


def space_overrides(args: argparse.Namespace) -> dict:
    from costmodel.errors import InputError

    out = {}
    for flag, (dim, parse, _, _) in space_flags().items():
        raw = getattr(args, f"space_{dim}")
        if raw is None:
            continue
        try:
            out[dim] = parse(raw)
        except argparse.ArgumentTypeError as e:
            raise InputError(f"--{flag}", str(e)) from None
    return out
