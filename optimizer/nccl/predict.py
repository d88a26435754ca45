"""One collective through NCCL's own cost model: sizes, predictions, sweeps, crossovers.

The library behind ``optimize nccl`` (contract.md section 1). What the command computes and
prints -- the pick, the alternatives with algbw/busbw as nccl-tests defines them, what
``--size`` means per collective, the size syntax, the errors -- is described once, in the
docstring of the command's module :mod:`optimizer.cli.nccl`; the output is
:mod:`optimizer.output.nccl_report`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.errors import InputError, did_you_mean

__all__ = ["COLLECTIVE_NAMES", "DISPLAY", "SWEEP_SIZES", "Choice", "Prediction", "crossovers",
           "format_size", "label", "names_ll128", "nodes_for", "parse_collective", "parse_size",
           "predict", "refield", "resolve_cluster", "sweep"]

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


def refield(e: InputError) -> InputError:
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


def label(key: str) -> str:
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
def nodes_for(n_ranks: int, per_node: int) -> int:
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


def names_ll128(proto: str) -> bool:
    """True when an NCCL_PROTO value enables LL128 by name (which bypasses NCCL's platform
    check, nccl.md §4.2), in any of its per-collective entries."""
    for entry in proto.split(";"):
        body = entry.split(":", 1)[-1].strip().lower()
        if not body.startswith("^") and "ll128" in [t.strip() for t in body.split(",")]:
            return True
    return False
