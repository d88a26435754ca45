"""``optimize nccl``: one collective through NCCL's own cost model (contract.md section 1).

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
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.errors import InputError, did_you_mean

__all__ = ["COLLECTIVE_NAMES", "SWEEP_SIZES", "Prediction", "format_size", "main",
           "nccl_document", "parse_collective", "parse_size", "predict", "sweep"]

COLLECTIVE_NAMES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                    "alltoall", "sendrecv")
_COLLECTIVE_ALIASES = {n: n for n in COLLECTIVE_NAMES} | {"bcast": "broadcast",
                                                          "a2a": "alltoall", "p2p": "sendrecv"}
DISPLAY = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
           "broadcast": "Broadcast", "reduce": "Reduce", "alltoall": "AllToAll",
           "sendrecv": "SendRecv"}
P2P_COLLECTIVES = ("alltoall", "sendrecv")
# NCCL_P2P_LL_THRESHOLD default (nccl.md §11): P2P messages up to 16 KiB per peer use LL.
P2P_LL_THRESHOLD_BYTES = 16384
# --sweep: 1 KiB to 4 GiB in x4 steps (contains every nccl.md §10.2 column).
SWEEP_SIZES = tuple(1024 * 4**k for k in range(12))
# Crossovers: a geometric grid of this many points per octave, then bisection in whole bytes.
_GRID_PER_OCTAVE = 32

_UNITS = {"": 1, "b": 1,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_MAX_SIZE_BYTES = 2**50


# ---- input parsing -----------------------------------------------------------------------------
def parse_size(text: Any, field: str = "--size") -> int:
    """Bytes from ``1GiB``, ``256MiB``, ``64KB`` (SI), ``8G`` (nccl-tests, binary), ``1e9`` or
    plain bytes. Raises :class:`InputError` naming ``field`` for anything else, for fractions of
    a byte and for sizes outside 1 B .. 1 PiB."""
    hint = "e.g. 1GiB, 256MiB, 64KiB, 64KB (= 64000), 8G (nccl-tests, = 8GiB), 1e9 or 1048576"
    if isinstance(text, bool):
        raise InputError(field, f"not a size: {text!r}", hint)
    if isinstance(text, int | float):
        value, unit = float(text), ""
    elif isinstance(text, str) and (m := _SIZE_RE.match(text)):
        value, unit = float(m.group(1)), m.group(2).lower()
    else:
        raise InputError(field, f"not a size: {text!r}", hint)
    if unit not in _UNITS:
        raise InputError(field, f"unknown unit {unit!r} in {text!r}",
                         did_you_mean(unit, [u for u in _UNITS if u]) + "; " + hint)
    nbytes = value * _UNITS[unit]
    if not math.isfinite(nbytes) or nbytes < 1 or nbytes > _MAX_SIZE_BYTES:
        raise InputError(field, f"{text!r} is out of range", "sizes are 1 B .. 1 PiB")
    whole = round(nbytes)
    if abs(nbytes - whole) > 1e-6 * max(1.0, nbytes):
        raise InputError(field, f"{text!r} is {nbytes:g} bytes, not a whole number of bytes",
                         hint)
    return int(whole)


def parse_collective(text: Any, field: str = "--collective") -> str:
    """A collective name (``all_reduce``, ``AllReduce``, ``all-reduce`` ...) -> canonical."""
    key = "".join(ch for ch in str(text).lower() if ch.isalnum()) if isinstance(text, str) else ""
    key = key.removesuffix("perf")
    if key not in _COLLECTIVE_ALIASES:
        raise InputError(field, f"unknown collective {text!r}",
                         did_you_mean(key or str(text), COLLECTIVE_NAMES))
    return _COLLECTIVE_ALIASES[key]


def format_size(nbytes: float) -> str:
    """``1073741824`` -> ``1 GiB``, ``1536`` -> ``1.5 KiB``, ``1e9`` -> ``953.7 MiB``."""
    n = float(nbytes)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


# ---- predictions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """One (algorithm, protocol) for one call; SI units."""

    algo: str
    proto: str
    label: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"algo": self.algo, "proto": self.proto, "label": self.label,
                "time_s": self.time_s, "algbw_GBps": self.algbw_bytes_per_s / 1e9,
                "busbw_GBps": self.busbw_bytes_per_s / 1e9}


@dataclass(frozen=True)
class Prediction:
    """NCCL's choice and every runnable alternative (NCCL's preference order) for one call."""

    collective: str
    nbytes: int
    n_ranks: int
    n_nodes: int
    algo: str
    proto: str
    alternatives: tuple[Choice, ...]

    @property
    def chosen(self) -> Choice:
        return self.alternatives[0]


def _p2p_proto(collective: str, nbytes: float, n_ranks: int) -> str:
    per_peer = nbytes / n_ranks if collective == "alltoall" else nbytes
    return "ll" if per_peer <= P2P_LL_THRESHOLD_BYTES else "simple"


def _refield(e: InputError) -> InputError:
    names = {"nccl_algo": "--algo", "nccl_proto": "--proto", "nbytes": "--size",
             "nbytes_per_rank": "--size", "collective": "--collective", "n_ranks": "--gpus",
             "gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "gpu": "--gpu",
             "nccl_tests": "--nccl-tests", "measurements": "--nccl-tests"}
    if e.field in names:
        return InputError(names[e.field], e.message, e.hint)
    return e


def predict(system: Any, collective: str, nbytes: float, n_ranks: int, n_nodes: int,
            algo: str = "auto", proto: str = "auto") -> Prediction:
    """NCCL's choice and the alternatives for one call on ``system`` (an NcclSystem)."""
    from costmodel import collectives as coll

    c = parse_collective(collective)
    if n_ranks < 2:
        raise InputError("--gpus", f"a collective needs at least 2 ranks, got {n_ranks}")
    if c in P2P_COLLECTIVES:
        for flag, value in (("--algo", algo), ("--proto", proto)):
            if value.strip().lower() != "auto":
                raise InputError(flag, f"{value!r} does not apply to {c}: point-to-point "
                                 "operations are outside NCCL's algorithm table (nccl.md §7)",
                                 "leave it at auto")
        if c == "alltoall":
            t = float(coll.alltoall_time_s(system, nbytes, n_ranks, n_nodes))
        else:
            t = float(coll.p2p_time_s(system, nbytes, n_nodes > 1))
        algbw = nbytes / t
        p = _p2p_proto(c, nbytes, n_ranks)
        alt = Choice("p2p", p, f"P2P/{'LL' if p == 'll' else 'Simple'}", t, algbw,
                     algbw * float(coll.busbw_factor(c, n_ranks)))
        return Prediction(c, int(nbytes), n_ranks, n_nodes, algo, proto, (alt,))
    alts = coll.all_alternatives(system, c, float(nbytes), n_ranks, n_nodes, algo, proto)
    out = tuple(Choice(a.algo, a.proto, a.label, a.time_s, a.algbw_bytes_per_s,
                       a.busbw_bytes_per_s) for a in alts)
    return Prediction(c, int(nbytes), n_ranks, n_nodes, algo, proto, out)


def _choices(system: Any, collective: str, sizes: Sequence[float], n_ranks: int, n_nodes: int,
             algo: str, proto: str) -> list[str]:
    """NCCL's pick (``algo/proto``) per size, vectorised."""
    import numpy as np

    from costmodel import collectives as coll

    if collective in P2P_COLLECTIVES:
        return [f"p2p/{_p2p_proto(collective, s, n_ranks)}" for s in sizes]
    r = coll.collective_time_s(system, collective, np.asarray(sizes, dtype=float), n_ranks,
                               n_nodes, algo, proto)
    return [f"{a}/{p}" for a, p in zip(r.algo_names(), r.proto_names(), strict=True)]


def _label(key: str) -> str:
    from costmodel import collectives as coll

    a, p = key.split("/")
    ad = "P2P" if a == "p2p" else coll.ALGORITHM_DISPLAY[coll.ALGORITHMS.index(a)]
    return f"{ad}/{coll.PROTOCOL_DISPLAY[coll.PROTOCOLS.index(p)]}"


def crossovers(system: Any, collective: str, n_ranks: int, n_nodes: int, algo: str = "auto",
               proto: str = "auto", lo_bytes: int = SWEEP_SIZES[0],
               hi_bytes: int = SWEEP_SIZES[-1]) -> list[tuple[int, str, str]]:
    """Where NCCL's pick changes between ``lo_bytes`` and ``hi_bytes``: ``(first size in bytes
    with the new pick, old pick, new pick)``, picks as ``algo/proto``. A geometric grid of 32
    points per octave finds the changes; bisection on whole bytes makes each one exact."""
    octaves = math.log2(hi_bytes / lo_bytes)
    n = max(2, int(math.ceil(octaves * _GRID_PER_OCTAVE)) + 1)
    grid = sorted({int(round(lo_bytes * 2 ** (octaves * i / (n - 1)))) for i in range(n)}
                  | {lo_bytes, hi_bytes})
    picks = _choices(system, collective, grid, n_ranks, n_nodes, algo, proto)
    out = []
    for i in range(1, len(grid)):
        if picks[i] == picks[i - 1]:
            continue
        lo, hi = grid[i - 1], grid[i]  # pick(lo) = old, pick(hi) = new
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _choices(system, collective, [mid], n_ranks, n_nodes, algo, proto)[0] \
                    == picks[i - 1]:
                lo = mid
            else:
                hi = mid
        new = _choices(system, collective, [hi], n_ranks, n_nodes, algo, proto)[0]
        out.append((hi, picks[i - 1], new))
    return out


def sweep(system: Any, collective: str, n_ranks: int, n_nodes: int, algo: str = "auto",
          proto: str = "auto", sizes: Sequence[int] = SWEEP_SIZES) -> list[Prediction]:
    """One :class:`Prediction` per size (NCCL's choice first)."""
    return [predict(system, collective, s, n_ranks, n_nodes, algo, proto) for s in sizes]


# ---- the cluster and the communicator ---------------------------------------------------------
def _nodes_for(n_ranks: int, per_node: int) -> int:
    if n_ranks <= per_node:
        return 1
    if n_ranks % per_node:
        lo = n_ranks // per_node * per_node
        raise InputError("--gpus", f"{n_ranks} GPUs do not fill nodes of {per_node}",
                         f"use 2..{per_node} (one node) or a multiple of {per_node}, e.g. {lo} "
                         f"or {lo + per_node}")
    return n_ranks // per_node


def resolve_cluster(cluster_ref: str | None, gpu: str, gpus_per_node: int, n_nodes: int) -> Any:
    """The cluster the communicator runs on: ``n_nodes`` full nodes. ``cluster_ref`` (preset,
    YAML or graph JSON) wins over ``gpu``/``gpus_per_node``; a file that fixes its own node
    count is used as written (the communicator is a subset of it)."""
    from costmodel import hardware, loaders

    if cluster_ref is None:
        return hardware.default_cluster(n_nodes * gpus_per_node, gpus_per_node=gpus_per_node,
                                        gpu=gpu)
    base = loaders.load_cluster(cluster_ref)
    try:
        cluster = loaders.load_cluster(cluster_ref, default_gpus=n_nodes * base.gpus_per_node)
    except InputError as e:
        if e.field != "gpus":
            raise
        cluster = base
    if n_nodes > cluster.num_nodes:
        raise InputError("--gpus", f"the communicator needs {n_nodes} nodes but the cluster "
                         f"{cluster.name!r} has {cluster.num_nodes}",
                         "use fewer GPUs or a cluster file without num_nodes")
    return cluster


def _per_node(args: argparse.Namespace) -> int:
    if args.cluster is None:
        return args.gpus_per_node
    from costmodel import loaders

    return loaders.load_cluster(args.cluster).gpus_per_node


# ---- documents and text ------------------------------------------------------------------------
def nccl_document(pred: Prediction, cluster: Any, *, extra_inputs: dict | None = None,
                  extra: dict | None = None) -> dict[str, Any]:
    """The ``optimize nccl --json`` document (contract.md section 4)."""
    from costmodel import collectives as coll
    from optimizer.api import SCHEMA_VERSION, tool_version
    from optimizer.serialize import cluster_to_dict

    inputs = {"collective": pred.collective, "size_bytes": pred.nbytes, "gpus": pred.n_ranks,
              "nodes": pred.n_nodes, "ranks_per_node": pred.n_ranks // pred.n_nodes,
              "algo": pred.algo, "proto": pred.proto, "nccl_version": coll.NCCL_VERSION,
              "cluster": cluster_to_dict(cluster)}
    inputs.update(extra_inputs or {})
    doc = {"schema_version": SCHEMA_VERSION,
           "tool": {"name": "paraplan", "version": tool_version()},
           "inputs": inputs,
           "chosen": pred.chosen.to_dict(),
           "alternatives": [a.to_dict() for a in pred.alternatives]}
    doc.update(extra or {})
    return doc


def _fmt_us(t_s: float) -> str:
    return f"{t_s * 1e6:.1f}"


def _header(pred: Prediction, cluster: Any) -> str:
    ppn = pred.n_ranks // pred.n_nodes
    where = (f"{pred.n_ranks} GPUs = {pred.n_nodes} node{'s' if pred.n_nodes > 1 else ''} x "
             f"{ppn} of {cluster.name}")
    force = "" if (pred.algo, pred.proto) == ("auto", "auto") else \
        f", NCCL_ALGO={pred.algo} NCCL_PROTO={pred.proto}"
    return f"{DISPLAY[pred.collective]} of {format_size(pred.nbytes)} ({pred.nbytes} B), " \
           f"{where}{force}"


def render_prediction(pred: Prediction, cluster: Any) -> str:
    from costmodel import collectives as coll
    from optimizer.report import _fmt_table

    c = pred.chosen
    lines = [_header(pred, cluster) + f" (NCCL {coll.NCCL_VERSION} model)",
             f"NCCL's choice: {c.label}: {_fmt_us(c.time_s)} us, algbw "
             f"{c.algbw_bytes_per_s / 1e9:.2f} GB/s, busbw {c.busbw_bytes_per_s / 1e9:.2f} GB/s",
             ""]
    rows = [[str(i + 1), a.label, _fmt_us(a.time_s), f"{a.algbw_bytes_per_s / 1e9:.2f}",
             f"{a.busbw_bytes_per_s / 1e9:.2f}",
             "chosen" if i == 0 else f"+{100 * (a.time_s / c.time_s - 1):.1f}%"]
            for i, a in enumerate(pred.alternatives)]
    table = _fmt_table(["#", "algo/proto", "time us", "algbw GB/s", "busbw GB/s", "vs chosen"],
                       rows, title="Runnable alternatives, NCCL's preference order")
    return "\n".join(lines) + "\n" + table


def render_sweep(preds: Sequence[Prediction], cross: Sequence[tuple[int, str, str]],
                 cluster: Any) -> str:
    from optimizer.report import _fmt_table

    rows = []
    prev = None
    for p in preds:
        c = p.chosen
        key = f"{c.algo}/{c.proto}"
        rows.append([format_size(p.nbytes), c.label, _fmt_us(c.time_s),
                     f"{c.algbw_bytes_per_s / 1e9:.2f}", f"{c.busbw_bytes_per_s / 1e9:.2f}",
                     "" if prev is None or key == prev else "<- changes"])
        prev = key
    first = preds[0]
    title = (f"NCCL's choice by message size: {DISPLAY[first.collective]}, "
             f"{first.n_ranks} GPUs = {first.n_nodes} x {first.n_ranks // first.n_nodes} of "
             f"{cluster.name}")
    out = _fmt_table(["size", "NCCL's choice", "time us", "algbw GB/s", "busbw GB/s", ""],
                     rows, title=title)
    if cross:
        out += "Crossovers (first size with the new choice):\n"
        out += "".join(f"  {_label(a)} -> {_label(b)} at {format_size(s)} ({s} B)\n"
                       for s, a, b in cross)
    else:
        out += "No crossover: one choice at every size.\n"
    return out


# ---- the command -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    from optimizer.cli import _Parser

    p = _Parser(prog="optimize nccl",
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


def _emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _names_ll128(proto: str) -> bool:
    """True when an NCCL_PROTO value enables LL128 by name (which bypasses NCCL's platform
    check, nccl.md §4.2), in any of its per-collective entries."""
    for entry in proto.split(";"):
        body = entry.split(":", 1)[-1].strip().lower()
        if not body.startswith("^") and "ll128" in [t.strip() for t in body.split(",")]:
            return True
    return False


def _warnings(system: Any, proto: str) -> list[str]:
    from optimizer.launch import LL128_WARNING

    return [LL128_WARNING] if _names_ll128(proto) and not system.ll128_default else []


def _tuner_csv(args: argparse.Namespace) -> int:
    from costmodel import loaders
    from optimizer.launch import nccl_tuner_csv

    run = loaders.load_run(args.tuner_csv)
    try:
        text = nccl_tuner_csv(run.model, run.cluster, run.training, run.parallel)
    except InputError as e:  # a forced pair NCCL cannot run: the run file's field
        if e.field in ("nccl_algo", "nccl_proto"):
            raise InputError(f"parallel.{e.field}", e.message, e.hint) from None
        raise
    _emit(text)
    return 0


def _run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    if args.tuner_csv:
        return _tuner_csv(args)
    if args.save_cluster and not args.nccl_tests:
        raise InputError("--save-cluster", "needs --nccl-tests FILE (the measurements to fit)")
    if args.gpus is not None and args.gpus < 1:
        raise InputError("--gpus", f"must be >= 1, got {args.gpus}")
    if args.gpus_per_node < 1:
        raise InputError("--gpus-per-node", f"must be >= 1, got {args.gpus_per_node}")
    per_node = _per_node(args)

    measurements = []
    if args.nccl_tests:
        from optimizer.calibrate import load_measurements

        gpus_nodes = _nodes_for(args.gpus, per_node) if args.gpus else None
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
        n_nodes = _nodes_for(n_ranks, per_node)
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
    system = coll.nccl_system(cluster)

    calibration_doc = None
    if measurements:
        from optimizer import calibrate

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
            from optimizer.report import _fmt_table

            headers, rows = calibrate.row_table(result)
            text = _fmt_table(headers, rows, title="nccl-tests vs the model (busbw GB/s)")
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
            _emit(render_sweep(preds, cross, cluster))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        from optimizer.cli import emit_document

        emit_document(nccl_document(pred, cluster, extra=extra))
    elif not args.sweep or args.size is not None:
        _emit(render_prediction(pred, cluster))
    return 0


def main(argv: Sequence[str]) -> int:
    """``optimize nccl ARGV``; errors propagate as InputError (the CLI maps them to exit 2)."""
    try:
        return _run(list(argv))
    except InputError as e:
        raise _refield(e) from None
