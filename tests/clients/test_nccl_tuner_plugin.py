"""NCCL's example tuner plugin (NCCL 2.30.7 ``plugins/tuner/example``), compiled and driven
the way NCCL drives a v5 tuner: ``init`` once per communicator (nRanks, nNodes) with
``NCCL_TUNER_CONFIG_FILE`` set, then per collective ``getCollInfo`` with NCCL's cost table
(ignored pairs at -1) and ``nChannels = 0`` (NCCL's default); NCCL then takes the argmin over
the table and runs on the returned channel count. For every corpus scenario the collectives
the cost model scores must get the modelled (algorithm, protocol) and channel count, at the
modelled size and at sizes around it (bucket remainders, padding)."""

from __future__ import annotations

import ctypes
import re

import pytest
import realclients as rc
from corpus import FRONT_RUNS, SCENARIOS, bundles, fronts, run_all

from optimizer.launch.tuner import nccl_tuner_csv

ALGOS = ["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"]
PROTOS = ["ll", "ll128", "simple"]
FUNCS = {"broadcast": 0, "reduce": 1, "allgather": 2, "reducescatter": 3, "allreduce": 4}
# ecosystem.md section 2.5: which algorithms NCCL offers per collective (others IGNORE)
SUPPORT = {"allreduce": {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"},
           "allgather": {"ring", "pat", "nvls", "collnet_direct"},
           "reducescatter": {"ring", "pat", "nvls", "collnet_direct"},
           "broadcast": {"ring"}, "reduce": {"ring"}}
_LOGGER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p)
_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                         ctypes.c_size_t, ctypes.c_size_t, _LOGGER, ctypes.c_void_p,
                         ctypes.c_void_p)
_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                        ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                        ctypes.POINTER(ctypes.c_int))
_FINI = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _TunerV5(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("getCollInfo", _GET),
                ("finalize", _FINI)]


@pytest.fixture(scope="module")
def plugin():
    lib = ctypes.CDLL(str(rc.nccl_tuner_plugin()))
    return _TunerV5.in_dll(lib, "ncclTunerPlugin_v5")


def _no_log(*_a):
    return None


_LOG = _LOGGER(_no_log)


def _select(plugin, ctx, coll, nbytes):
    """One getCollInfo as NCCL calls it, then NCCL's pick: (algo, proto, nChannels)."""
    table = (ctypes.c_float * 21)()
    for a, algo in enumerate(ALGOS):
        for p, _ in enumerate(PROTOS):
            ok = algo in SUPPORT[coll] and (algo in ("tree", "ring") or PROTOS[p] == "simple")
            table[a * 3 + p] = 100.0 + a + p if ok else -1.0  # the row's pair is not the cheapest
    n_ch = ctypes.c_int(0)
    assert plugin.getCollInfo(ctx, FUNCS[coll], nbytes, 1, ctypes.cast(table, ctypes.c_void_p),
                              7, 3, 0, ctypes.byref(n_ch)) == 0
    best = min((t, k) for k, t in enumerate(table) if t >= 0)[1]  # NCCL: strict <, in order
    return ALGOS[best // 3], PROTOS[best % 3], n_ch.value


_SIZE = re.compile(r": (\d+) B, predicted")


def _rows(csv: str):
    """(modelled size, fields) per data row (the size is in the comment line above it)."""
    rows, size = [], None
    for line in csv.splitlines():
        if line.startswith("#"):
            m = _SIZE.search(line)
            size = int(m.group(1)) if m else size
        elif line:
            rows.append((size, line.split(",")))
    return rows


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_tuner_csv_selects_what_the_model_scored(plugin, name, tmp_path, monkeypatch):
    _, result = dict((s.name, (s, r)) for s, r in bundles())[name]
    check_tuner(plugin, result, tmp_path, monkeypatch)


@pytest.mark.parametrize("run", list(FRONT_RUNS))
def test_tuner_csv_of_every_front_point(plugin, run, tmp_path, monkeypatch):
    run_all(fronts()[run], lambda case: check_tuner(plugin, case, tmp_path, monkeypatch))


def check_tuner(plugin, result, tmp_path, monkeypatch):
    p = result.problem
    csv = nccl_tuner_csv(p.model, p.cluster, p.training, result.candidate.config)
    # the plugin reads lines in 256-byte pieces: a longer line would be split into two
    assert max(len(line) for line in csv.splitlines()) < 255
    path = tmp_path / "nccl_tuner.conf"
    path.write_text(csv)
    monkeypatch.setenv("NCCL_TUNER_CONFIG_FILE", str(path))
    rows = _rows(csv)
    comms = {(int(f[7]), int(f[6])) for _, f in rows}
    contexts = {}
    try:
        for n, nn in comms:  # NCCL initialises the tuner once per communicator
            ctx = ctypes.c_void_p()
            assert plugin.init(ctypes.byref(ctx), 1, n, nn, _LOG, None, None) == 0
            contexts[(n, nn)] = ctx
        for size, f in rows:
            coll, lo, hi, algo, proto, ch, nn, n = f[0], int(f[1]), int(f[2]), f[3], f[4], \
                int(f[5]), int(f[6]), int(f[7])
            assert lo <= size <= hi and ch >= 1
            for probe in {size, max(lo, int(size * 0.75)), min(hi, int(size * 1.4))}:
                got = _select(plugin, contexts[(n, nn)], coll, probe)
                assert got == (algo, proto, ch), (coll, probe, f)
    finally:
        for ctx in contexts.values():
            plugin.finalize(ctx)


def test_channels_minus_one_would_run_on_one_channel(plugin, tmp_path, monkeypatch):
    """Why the CSV never writes -1: the example plugin then leaves nChannels at 1."""
    path = tmp_path / "nccl_tuner.conf"
    path.write_text("allreduce,0,4294967295,ring,simple,-1,1,8,-1,-1\n")
    monkeypatch.setenv("NCCL_TUNER_CONFIG_FILE", str(path))
    ctx = ctypes.c_void_p()
    assert plugin.init(ctypes.byref(ctx), 1, 8, 1, _LOG, None, None) == 0
    try:
        assert _select(plugin, ctx, "allreduce", 1 << 26) == ("ring", "simple", 1)
    finally:
        plugin.finalize(ctx)
