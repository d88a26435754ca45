"""Read nccl-tests results into :class:`~costmodel.collectives.NcclMeasurement` rows.

nccl-tests (NVIDIA/nccl-tests, ``src/common.cu``) prints one table per run [NCCL_TESTS_PERF]::

    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) ...
    #  Rank  0 Group  0 Pid  4321 on  node-a device  0 [0x07] NVIDIA H100 80GB HBM3
    ...
    #                                                  out-of-place          in-place
    #       size   count   type  redop  root   time  algbw  busbw #wrong   time ...
    #        (B) (elements)                    (us) (GB/s) (GB/s)          (us) ...
             8       2  float    sum    -1   36.77   0.00   0.00      0  35.93 ...

Columns: size, count, type, redop, root (absent in old versions), then time (µs), algbw,
busbw (GB/s, 1 GB = 1e9 B) and #wrong (``N/A`` without ``-c``) out-of-place, then the same
in-place. ``size`` is the nccl-tests S of nccl.md §6, which is NCCL's nBytes (AllGather and
ReduceScatter: the total size). The number of ranks and nodes come from the ``Rank ... on
HOST`` lines unless given.

``-J file`` writes JSON (ecosystem.md §2.5). Its schema is not documented in the references
paraplan works from, so the reader is tolerant: it takes every object that has a ``size`` and
finds ``time``/``algbw``/``busbw`` either flat or under an out-of-place / in-place object
(keys compared case- and punctuation-insensitively: ``out_of_place``, ``outOfPlace``, ``oop``;
``in_place``, ``inPlace``, ``ip``). The test name, rank and node counts are read from keys
such as ``collective``/``test``/``name``, ``nranks``/``world_size`` and ``nnodes`` when present;
pass them explicitly otherwise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from costmodel.collectives import NcclMeasurement
from costmodel.errors import InputError, did_you_mean

__all__ = ["TEST_NAMES", "collective_of", "load_nccl_tests", "parse_nccl_tests",
           "parse_nccl_tests_json", "parse_nccl_tests_text"]

# nccl-tests binary stem -> paraplan collective name.
TEST_NAMES: dict[str, str] = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall",
    "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube",
}

_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_TEST_LINE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_NGPUS_LINE = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


def _norm(key: str) -> str:
    return "".join(ch for ch in str(key).lower() if ch.isalnum())


def collective_of(name: str) -> str | None:
    """'all_reduce_perf', 'all_reduce', 'AllReduce', 'x/all_gather_perf.json' -> paraplan
    collective name, or None."""
    stem = _norm(Path(str(name)).name.split(".")[0])
    stem = stem.removesuffix("perf").removesuffix("mpi")
    if stem in TEST_NAMES:
        return TEST_NAMES[stem]
    for key in sorted(TEST_NAMES, key=len, reverse=True):  # longest first: reducescatter
        if key in stem:
            return TEST_NAMES[key]
    return None


def _float(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _int(tok: str) -> int | None:
    try:
        return int(tok)
    except ValueError:
        return None


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())) \
            or value < 1:
        raise InputError(name, f"must be a positive integer, got {value!r}")
    return int(value)


def _finish(collective: str | None, n_ranks: Any, n_nodes: Any,
            found: list[tuple[float, float | None, float | None]], source: str
            ) -> list[NcclMeasurement]:
    where = f" in {source}" if source else ""
    if collective is None:
        raise InputError("collective", f"cannot tell which collective was measured{where}",
                         "pass collective=... (e.g. 'allreduce')")
    ranks = _count("n_ranks", n_ranks)
    if ranks is None:
        raise InputError("n_ranks", f"cannot tell the number of ranks{where}",
                         "pass n_ranks=... (and n_nodes=...)")
    nodes = _count("n_nodes", n_nodes) or 1
    if ranks % nodes:
        raise InputError("n_nodes", f"{ranks} ranks do not spread evenly over {nodes} nodes"
                         f"{where}", "pass n_ranks and n_nodes explicitly")
    if len(found) > MAX_ROWS:
        raise InputError("nccl_tests", f"{len(found)} result rows{where}; at most {MAX_ROWS}",
                         "is this one nccl-tests run?")
    out = []
    for size, time_us, busbw_GBps in found:
        if not (math.isfinite(size) and size >= 0):
            raise InputError("nccl_tests", f"bad message size {size!r}{where}")
        _check_row(size, time_us, busbw_GBps, where)
        t = time_us if time_us is not None and math.isfinite(time_us) and time_us > 0 else None
        b = (busbw_GBps if busbw_GBps is not None and math.isfinite(busbw_GBps)
             and busbw_GBps > 0 else None)
        if t is None and b is None:
            continue
        out.append(NcclMeasurement(
            collective, size, ranks, nodes,
            time_s=None if t is None else t * 1e-6,
            busbw_bytes_per_s=None if b is None else b * 1e9))
    if not out:
        raise InputError("nccl_tests", f"no result rows found{where}")
    return out


#: Rows per file, and the largest bandwidth a measurement may claim (10 TB/s: several times
#: any NVLink/NVSwitch generation's busbw); a row beyond it is a typo or a broken timer.
MAX_ROWS = 100_000
MAX_BANDWIDTH_BYTES_PER_S = 1e13


def _check_row(size: float, time_us: float | None, busbw_GBps: float | None,
               where: str) -> None:
    """A measured row must be physically possible: a positive finite time, a finite
    non-negative busbw, and neither size/time nor busbw above 10 TB/s (a row claiming 1 ps
    for 1 MiB would otherwise be fitted as a 10**18 B/s link)."""
    if time_us is not None and not (math.isfinite(time_us) and time_us > 0):
        raise InputError("nccl_tests", f"row of {size:g} B: time {time_us!r} us is not a "
                         f"positive finite number{where}", "give the unedited nccl-tests output")
    if busbw_GBps is not None and not (math.isfinite(busbw_GBps) and busbw_GBps >= 0):
        raise InputError("nccl_tests", f"row of {size:g} B: busbw {busbw_GBps!r} GB/s is not a "
                         f"finite number{where}", "give the unedited nccl-tests output")
    for what, bw in (("size/time", size / (time_us * 1e-6) if time_us else 0.0),
                     ("busbw", (busbw_GBps or 0.0) * 1e9)):
        if bw > MAX_BANDWIDTH_BYTES_PER_S:
            raise InputError("nccl_tests", f"row of {size:g} B: {what} is {bw / 1e9:.3g} GB/s, "
                             f"beyond any interconnect (at most "
                             f"{MAX_BANDWIDTH_BYTES_PER_S / 1e9:g} GB/s){where}",
                             "check the time column (microseconds) and the size column (bytes)")


def _check_collective(collective: Any) -> str | None:
    if collective is None:
        return None
    if not isinstance(collective, str):
        raise InputError("collective", f"must be a string, got {collective!r}",
                         did_you_mean("", TEST_NAMES))
    c = collective_of(collective)
    if c is None:
        raise InputError("collective", f"unknown nccl-tests collective {collective!r}",
                         did_you_mean(_norm(collective), TEST_NAMES))
    return c


def parse_nccl_tests_text(text: str, *, collective: str | None = None,
                          n_ranks: int | None = None, n_nodes: int | None = None,
                          in_place: bool = False, source: str = "") -> list[NcclMeasurement]:
    """Rows of an nccl-tests text table (out-of-place columns unless ``in_place``)."""
    coll = _check_collective(collective)
    ranks: dict[int, str] = {}
    ngpus: int | None = None
    found: list[tuple[float, float | None, float | None]] = []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if m := _RANK_LINE.match(s):
                ranks[int(m.group(1))] = m.group(2)
            elif (m := _TEST_LINE.match(s)) and coll is None:
                coll = collective_of(m.group(1))
            elif m := _NGPUS_LINE.match(s):
                ngpus = int(m.group(1)) * int(m.group(2))
            continue
        toks = s.split()
        if len(toks) < 12 or _int(toks[0]) is None or _int(toks[1]) is None:
            continue
        rest = toks[4:]
        if len(rest) == 9:  # root column present
            rest = rest[1:]
        if len(rest) != 8:
            continue
        group = rest[4:8] if in_place else rest[0:4]
        wrong = _int(group[3])
        if wrong:
            raise InputError("nccl_tests", f"row of {toks[0]} B reports {wrong} wrong results"
                             f"{' in ' + source if source else ''}: not a valid measurement",
                             "rerun nccl-tests with -c 1 until #wrong is 0")
        found.append((float(toks[0]), _float(group[0]), _float(group[2])))
    if n_ranks is None:
        n_ranks = len(ranks) if ranks else ngpus
    if n_nodes is None and ranks:
        n_nodes = len(set(ranks.values()))
    return _finish(coll, n_ranks, n_nodes, found, source)


def _objects(doc: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in document order (iterative: no recursion limit)."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _get(obj: dict[str, Any], *names: str) -> Any:
    wanted = {_norm(n) for n in names}
    for k, v in obj.items():
        if _norm(k) in wanted:
            return v
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        try:
            return float(v)
        except OverflowError:  # an integer beyond the float range
            return math.inf
    if isinstance(v, str):
        return _float(v)
    return None


def _metrics(obj: dict[str, Any], in_place: bool) -> tuple[float | None, float | None]:
    names = (("inplace", "ip") if in_place else ("outofplace", "oop"))
    sub = _get(obj, *names)
    if isinstance(sub, dict):
        return (_num(_get(sub, "time", "timeus", "time_us")),
                _num(_get(sub, "busbw", "busbwgbps", "bus_bw")))
    prefix = names[0]
    flat_time = _get(obj, f"{prefix}time", f"{prefix}timeus")
    flat_bus = _get(obj, f"{prefix}busbw")
    if flat_time is not None or flat_bus is not None:
        return _num(flat_time), _num(flat_bus)
    if in_place:
        return None, None
    return _num(_get(obj, "time", "timeus", "time_us")), _num(_get(obj, "busbw", "bus_bw"))


def parse_nccl_tests_json(text: str, *, collective: str | None = None,
                          n_ranks: int | None = None, n_nodes: int | None = None,
                          in_place: bool = False, source: str = "") -> list[NcclMeasurement]:
    """Rows of an nccl-tests ``-J`` JSON document (tolerant reader, see the module doc)."""
    where = f" in {source}" if source else ""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("nccl_tests", f"not valid JSON{where}: {exc.msg} at line "
                         f"{exc.lineno}") from None
    except RecursionError:
        raise InputError("nccl_tests", f"JSON nested too deeply{where}") from None
    coll = _check_collective(collective)
    found: list[tuple[float, float | None, float | None]] = []
    for obj in _objects(doc):
        if coll is None:
            name = _get(obj, "collective", "test", "testname", "name", "op")
            if isinstance(name, str):
                coll = collective_of(name)
        if n_ranks is None:
            v = _get(obj, "nranks", "worldsize", "ranks", "nprocs")
            if isinstance(v, int) and not isinstance(v, bool):
                n_ranks = v
        if n_nodes is None:
            v = _get(obj, "nnodes", "nodes")
            if isinstance(v, int) and not isinstance(v, bool):
                n_nodes = v
        size = _num(_get(obj, "size", "bytes", "sizebytes"))
        if size is None:
            continue
        t, bus = _metrics(obj, in_place)
        if t is not None or bus is not None:
            found.append((size, t, bus))
    return _finish(coll, n_ranks, n_nodes, found, source)


def parse_nccl_tests(text: str, **kw: Any) -> list[NcclMeasurement]:
    """Text or JSON, by the first non-blank character."""
    head = text.lstrip()[:1]
    if head in ("{", "["):
        return parse_nccl_tests_json(text, **kw)
    return parse_nccl_tests_text(text, **kw)


def load_nccl_tests(path: str | Path, **kw: Any) -> list[NcclMeasurement]:
    """Read a saved nccl-tests output file; the collective defaults to the one in the file,
    else the file name (``all_reduce_perf.txt``)."""
    from costmodel.safe_io import MAX_LOG_BYTES, read_input_bytes

    p = Path(path)
    try:  # a regular file of at most MAX_LOG_BYTES: no FIFO, no /dev/zero
        text = read_input_bytes(p, "nccl_tests", max_bytes=MAX_LOG_BYTES).decode("utf-8")
    except OSError as exc:
        raise InputError("nccl_tests", f"cannot read {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError("nccl_tests", f"{str(p)!r} is not a text file",
                         "give the saved stdout of an nccl-tests binary or its -J JSON") from None
    kw.setdefault("source", str(p))
    if kw.get("collective") is None:
        try:
            return parse_nccl_tests(text, **kw)
        except InputError as exc:
            guess = collective_of(p.name)
            if exc.field != "collective" or guess is None:
                raise
            kw["collective"] = guess
    return parse_nccl_tests(text, **kw)
