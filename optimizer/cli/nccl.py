"""``optimize nccl``: one collective through NCCL's own cost model (contract.md section 1).

The library behind it: :mod:`optimizer.nccl.predict` (sizes, predictions, sweeps),
:mod:`optimizer.nccl.calibrate` (nccl-tests fits), :mod:`optimizer.output.nccl_report`.

::

    optimize nccl --collective allreduce --size 1GiB --gpus 16 [--gpu KEY] [--gpus-per-node 8]
                  [--cluster FILE|PRESET] [--algo A] [--proto P] [--json]
    optimize nccl --collective allreduce --gpus 8 --sweep            # NCCL's pick by size
    optimize nccl --nccl-tests all_reduce_perf.txt [--save-cluster OUT.yaml] ...   # calibrate
    optimize nccl --tuner-csv RUN.yaml                   # NCCL example tuner plugin CSV

Prints NCCL's choice of algorithm and protocol (the least predicted time over the pairs
``NCCL_ALGO``/``NCCL_PROTO`` leave, nccl.md §4) and every runnable alternative with its time,
algorithm bandwidth and bus bandwidth as nccl-tests defines them (nccl.md §6: ``algbw = S / t``,
``busbw = algbw x factor``, GB/s = 1e9 B/s). ``--size`` is the nccl-tests ``S``: NCCL's nBytes
for AllReduce, Broadcast, Reduce; the *total* (gathered) size for AllGather and ReduceScatter;
the per-rank total for AllToAll; the per-rank message for SendRecv. AllToAll and SendRecv are
point-to-point operations outside NCCL's table (nccl.md §7): one alternative, labelled
``p2p``, with NCCL's P2P protocol (LL up to ``NCCL_P2P_LL_THRESHOLD`` = 16 KiB per peer, else
Simple), and ``--algo``/``--proto`` do not apply to them.

Sizes: plain bytes (``1048576``, ``1e9``), SI units (``64KB`` = 64 000 B, ``1GB`` = 1e9 B),
binary units (``64KiB``, ``256MiB``, ``1GiB``) and the nccl-tests suffixes ``K``/``M``/``G``
(binary, as in ``all_reduce_perf -e 8G``). The communicator is ``--gpus`` ranks on full nodes
of ``--gpus-per-node`` (``--gpus`` below one node: one node).

Bad input raises :class:`costmodel.errors.InputError` naming the flag (exit 2); forcing a pair
NCCL cannot run is an error as in NCCL >= 2.24, with NCCL's reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from costmodel.errors import InputError
from optimizer.cli.common import Parser, emit, emit_document
from optimizer.nccl.predict import (
    SWEEP_SIZES,
    crossovers,
    names_ll128,
    nodes_for,
    parse_collective,
    parse_size,
    predict,
    refield,
    resolve_cluster,
    sweep,
)
from optimizer.output.nccl_report import nccl_document, render_prediction, render_sweep
from optimizer.output.tables import fmt_table


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="optimize nccl",
                description="One NCCL collective through NCCL's own cost model: the "
                "algorithm/protocol NCCL picks and every runnable alternative with time, algbw "
                "and busbw (nccl-tests definitions). Also: --sweep (the pick by message size), "
                "--nccl-tests (calibrate against measurements), --tuner-csv (NCCL's example "
                "tuner plugin CSV for a run file).")
    p.add_argument("--collective", help="allreduce, allgather, reducescatter, broadcast, reduce, "
                   "alltoall or sendrecv")
    p.add_argument("--size", help="nccl-tests S: 1GiB, 256MiB, 64KB (SI), 8G (binary), 1e9, "
                   "bytes; AllGather/ReduceScatter: the total gathered size")
    p.add_argument("--gpus", type=int, help="ranks in the communicator")
    p.add_argument("--gpu", default="a100-sxm-80gb", help="GPU catalog key (without --cluster)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--cluster", help="cluster preset, cluster YAML or graph JSON")
    p.add_argument("--algo", default="auto", help="NCCL_ALGO syntax: ring, tree, nvls, "
                   "nvlstree, collnetdirect, collnetchain, pat, ^tree, allreduce:tree;...")
    p.add_argument("--proto", default="auto", help="NCCL_PROTO syntax: ll, ll128, simple, ...")
    p.add_argument("--sweep", action="store_true",
                   help="NCCL's choice from 1 KiB to 4 GiB (x4 steps) and the crossovers")
    p.add_argument("--nccl-tests", action="append", metavar="FILE",
                   help="nccl-tests output (text or -J JSON) to calibrate against; repeatable")
    p.add_argument("--save-cluster", metavar="OUT.yaml",
                   help="with --nccl-tests: write the cluster YAML with the fitted calibration")
    p.add_argument("--tuner-csv", metavar="RUN.yaml",
                   help="print NCCL's example tuner plugin CSV for a run file's configuration")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return p


def _per_node(args: argparse.Namespace) -> int:
    if args.cluster is None:
        return args.gpus_per_node
    from costmodel import loaders

    return loaders.load_cluster(args.cluster).gpus_per_node


def _warnings(system: Any, proto: str) -> list[str]:
    from optimizer.launch.flags import LL128_WARNING

    return [LL128_WARNING] if names_ll128(proto) and not system.ll128_default else []


def _tuner_csv(args: argparse.Namespace) -> int:
    from costmodel import limits, loaders
    from optimizer.launch.tuner import nccl_tuner_csv

    run = loaders.load_run(args.tuner_csv)
    limits.check_problem_inputs(run.model, run.cluster, run.training)
    try:
        text = nccl_tuner_csv(run.model, run.cluster, run.training, run.parallel)
    except InputError as e:  # a forced pair NCCL cannot run: the run file's field
        if e.field in ("nccl_algo", "nccl_proto"):
            raise InputError(f"parallel.{e.field}", e.message, e.hint) from None
        raise
    emit(text)
    return 0


def _run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    if args.tuner_csv:
        return _tuner_csv(args)
    if args.save_cluster and not args.nccl_tests:
        raise InputError("--save-cluster", "needs --nccl-tests FILE (the measurements to fit)")
    from costmodel import limits

    if args.gpus is not None:
        limits.check_count("--gpus", args.gpus, maximum=limits.MAX_GPUS)
    limits.check_count("--gpus-per-node", args.gpus_per_node,
                       maximum=limits.MAX_GPUS_PER_NODE)
    per_node = _per_node(args)

    measurements = []
    if args.nccl_tests:
        from optimizer.nccl.calibrate import load_measurements

        gpus_nodes = nodes_for(args.gpus, per_node) if args.gpus else None
        try:
            measurements = load_measurements(args.nccl_tests, n_ranks=args.gpus,
                                             n_nodes=gpus_nodes)
        except InputError as e:
            if e.field == "n_ranks":
                raise InputError("--nccl-tests", e.message, "the file has no 'Rank ... on "
                                 "HOST' lines: give --gpus N (and --gpus-per-node)") from None
            if e.field in ("collective", "n_nodes", "nccl_tests"):
                raise InputError("--nccl-tests", e.message, e.hint) from None
            raise

    # What to predict: the flags, else the largest measured row.
    collective = parse_collective(args.collective) if args.collective else None
    ref_row = None
    if measurements:
        pool = [m for m in measurements if collective is None or m.collective == collective]
        if pool:
            ref_row = max(pool, key=lambda m: (m.nbytes, m.n_ranks))
        collective = collective or measurements[0].collective
    if collective is None:
        raise InputError("--collective", "missing",
                         "e.g. optimize nccl --collective allreduce --size 1GiB --gpus 8")
    if args.size is not None:
        size = parse_size(args.size)
    elif args.sweep:
        size = SWEEP_SIZES[-1]
    elif ref_row is not None:
        size = int(ref_row.nbytes)
    else:
        raise InputError("--size", "missing", "e.g. --size 1GiB (or --sweep)")
    if args.gpus is not None:
        n_ranks = args.gpus
        n_nodes = nodes_for(n_ranks, per_node)
    elif ref_row is not None:
        n_ranks, n_nodes = int(ref_row.n_ranks), int(ref_row.n_nodes)
    elif args.cluster is not None:
        from costmodel import loaders

        whole = loaders.load_cluster(args.cluster)
        n_ranks, n_nodes = whole.num_gpus, whole.num_nodes
    else:
        raise InputError("--gpus", "missing", "give --gpus N (or --cluster FILE)")
    if n_ranks < 2:
        raise InputError("--gpus", f"a collective needs at least 2 ranks, got {n_ranks}")

    from costmodel import collectives as coll

    nodes_needed = max([n_nodes] + [int(m.n_nodes) for m in measurements])
    cluster = resolve_cluster(args.cluster, args.gpu, per_node, nodes_needed)
    from costmodel import limits

    limits.check_cluster(cluster)
    system = coll.nccl_system(cluster)

    calibration_doc = None
    if measurements:
        from optimizer.nccl import calibrate

        result = calibrate.calibrate(system, measurements)
        cluster = calibrate.calibrated_cluster(cluster, result.calibration)
        system = coll.nccl_system(cluster)
        calibration_doc = result.to_dict()
        if args.save_cluster:
            files = ", ".join(args.nccl_tests)
            path = calibrate.save_cluster(cluster, args.save_cluster, header=[
                "Cluster written by 'optimize nccl --save-cluster' (paraplan); sized by "
                "--gpus (no num_nodes).",
                f"NCCL calibration fitted to {files}:",
                *calibrate.describe(result)])
            calibration_doc["saved_cluster"] = str(path)
        if not args.json:
            headers, rows = calibrate.row_table(result)
            text = fmt_table(headers, rows, title="nccl-tests vs the model (busbw GB/s)")
            lines = calibrate.describe(result)
            if args.save_cluster:
                lines.append(f"wrote {calibration_doc['saved_cluster']}")
            print(text + "\n".join(lines), file=sys.stderr)

    warnings = _warnings(system, args.proto)
    pred = predict(system, collective, size, n_ranks, n_nodes, args.algo, args.proto)
    extra: dict[str, Any] = {}
    if calibration_doc is not None:
        extra["calibration"] = calibration_doc
    if warnings:
        extra["warnings"] = warnings
    if args.sweep:
        preds = sweep(system, collective, n_ranks, n_nodes, args.algo, args.proto)
        cross = crossovers(system, collective, n_ranks, n_nodes, args.algo, args.proto)
        if args.json:
            extra["sweep"] = [{"size_bytes": p.nbytes, **p.chosen.to_dict()} for p in preds]
            extra["crossovers"] = [{"size_bytes": s, "from": a, "to": b} for s, a, b in cross]
        else:
            emit(render_sweep(preds, cross, cluster))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        emit_document(nccl_document(pred, cluster, extra=extra))
    elif not args.sweep or args.size is not None:
        emit(render_prediction(pred, cluster))
    return 0


def main(argv: Sequence[str]) -> int:
    """``optimize nccl ARGV``; errors propagate as InputError (the CLI maps them to exit 2)."""
    try:
        return _run(list(argv))
    except InputError as e:
        raise refield(e) from None
