"""``optimize [FLAGS]``: search the space and print the Pareto front (or run a study file)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from optimizer.cli.common import emit, output_result
from optimizer.cli.options import main_parser, space_overrides, training_flags


def run(argv: Sequence[str]) -> int:
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
    from optimizer.api import optimize

    result = optimize(args.model, args.gpus, cluster=args.cluster, gpu=args.gpu,
                      gpus_per_node=args.gpus_per_node, seq_length=args.seq_length,
                      global_batch_size=args.global_batch_size,
                      training=training_flags(args),
                      memory_limit_gib=args.memory_limit_gib,
                      memory_fraction=args.memory_fraction, sampler=args.sampler,
                      trials=args.trials, seed=args.seed, jobs=args.jobs,
                      batch_size=args.batch_size, space=space_overrides(args) or None,
                      allow_cross_node_tp=args.allow_cross_node_tp, storage=args.storage,
                      study_name=args.study_name,
                      progress=not args.quiet and sys.stderr.isatty())
    return output_result(result.to_dict(), args)
