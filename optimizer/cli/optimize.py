"""``optimize [FLAGS]``: search the space and print the Pareto front (or run a study file, or
plan across several GPU counts)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from optimizer.cli.common import emit, emit_document, output_result
from optimizer.cli.options import (
    main_parser,
    space_overrides,
    training_flags,
    trials_per_batch,
)


def _defaults(args: argparse.Namespace) -> tuple[int | None, dict[str, str]]:
    """The sequence length to use and where each training default came from."""
    from optimizer.planning.recipes import recipe_seq_length

    seq, origin = args.seq_length, {}
    if seq is not None:
        origin["seq_length"] = "--seq-length"
    else:
        rec = recipe_seq_length(args.model)
        if rec is not None:
            seq, origin["seq_length"] = rec[0], f"recipe: {rec[1]}"
        else:
            origin["seq_length"] = "paraplan default (2048)"
    origin["global_batch_size"] = ("--global-batch-size" if args.global_batch_size is not None
                                   else "paraplan default (1024)")
    if args.memory_limit_gib is not None:
        origin["memory_limit"] = "--memory-limit-gib"
    else:
        from costmodel.memory_verdict import DEFAULT_MEMORY_FRACTION

        fraction = (DEFAULT_MEMORY_FRACTION if args.memory_fraction is None
                    else args.memory_fraction)
        origin["memory_limit"] = f"--memory-fraction {fraction:g} x HBM"
    return seq, origin


def run(argv: Sequence[str]) -> int:
    if list(argv) == ["--version"]:  # before the parser, which loads the dimension flags
        from optimizer.core.version import tool_version

        emit(f"paraplan {tool_version()}")
        return 0
    args = main_parser().parse_args(argv)
    if args.version:
        from optimizer.core.problem import tool_version

        emit(f"paraplan {tool_version()}")
        return 0
    if args.study:
        from optimizer.cli import studies

        return studies.cli_run(args)
    from costmodel.errors import InputError

    if not args.model:
        raise InputError("--model", "missing", "e.g. optimize --model 65b --gpus 16")
    if args.top_k is not None and args.top_k < 0:
        raise InputError("--top-k", f"must be 0 (all) or a positive count, got {args.top_k}")
    counts = None
    if args.gpus is not None:
        from optimizer.planning.counts import parse_gpu_counts

        counts = parse_gpu_counts(args.gpus, args.gpus_per_node)
    seq, origin = _defaults(args)
    common = dict(seq_length=seq, global_batch_size=args.global_batch_size,
                  training=training_flags(args), memory_limit_gib=args.memory_limit_gib,
                  memory_fraction=args.memory_fraction, sampler=args.sampler,
                  trials=args.trials, seed=args.seed, jobs=args.jobs,
                  batch_size=trials_per_batch(args), space=space_overrides(args) or None,
                  allow_cross_node_tp=args.allow_cross_node_tp)
    progress = not args.quiet and sys.stderr.isatty()
    if counts is not None and (len(counts) > 1 or args.tokens is not None):
        return _run_plan(args, counts, common, origin)
    from optimizer.api import optimize

    result = optimize(args.model, counts[0] if counts else None, cluster=args.cluster,
                      gpu=args.gpu, gpus_per_node=args.gpus_per_node, storage=args.storage,
                      study_name=args.study_name, progress=progress,
                      keep_cloud=bool(args.html), **common)
    doc = result.to_dict()
    doc["inputs"]["defaults_from"] = origin
    if args.html:
        from optimizer.output.html_report import write_html_report

        write_html_report(doc, args.html)
    return output_result(doc, args)


def _run_plan(args: argparse.Namespace, counts, common: dict, origin: dict) -> int:
    from costmodel.errors import InputError
    from optimizer.api import plan

    if args.storage or args.study_name:
        raise InputError("--storage", "a plan runs one search per GPU count and stores none",
                         "give one --gpus to use a storage")
    if args.emit or args.plot:
        raise InputError("--emit" if args.emit else "--plot",
                         "works on one GPU count, not a plan", "give one --gpus")
    result = plan(args.model, counts, tokens=args.tokens, gpu_hour_cost=args.gpu_hour_cost,
                  gpu=args.gpu, gpus_per_node=args.gpus_per_node, cluster=args.cluster,
                  keep_cloud=bool(args.html), **common)
    doc = result.to_dict()
    doc["inputs"]["defaults_from"] = origin
    if args.html:
        from optimizer.output.html_report import write_html_report

        write_html_report(doc, args.html, plan_result=result)
    if args.json:
        emit_document(doc)
    else:
        from optimizer.output.plan_report import render_plan

        emit(render_plan(doc, top_k=args.top_k))
    return 0
