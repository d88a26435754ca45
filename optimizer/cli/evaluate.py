"""``optimize evaluate RUN``: score one configuration (a run file), full breakdown."""

from __future__ import annotations

from collections.abc import Sequence

from optimizer.cli.common import Parser, emit, emit_document


def run(argv: Sequence[str]) -> int:
    p = Parser(prog="optimize evaluate", description="Score one configuration (a run file).")
    p.add_argument("run", help="run file (YAML/JSON): model, cluster, training, parallel")
    p.add_argument("--json", action="store_true")
    p.add_argument("--memory-limit-gib", type=float)
    p.add_argument("--memory-fraction", type=float)
    args = p.parse_args(argv)
    from optimizer.api import evaluate

    res = evaluate(args.run, memory_limit_gib=args.memory_limit_gib,
                   memory_fraction=args.memory_fraction)
    doc = res.to_dict()
    if args.json:
        emit_document(doc)
    else:
        from optimizer.output.report import render_evaluation

        emit(render_evaluation(doc))
    return 0
