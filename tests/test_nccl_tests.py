"""Parsing nccl-tests output (costmodel/nccl_tests.py) into measurement rows."""

from __future__ import annotations

import json

import pytest

from costmodel import collectives as C
from costmodel.errors import InputError
from costmodel.nccl_tests import (
    collective_of,
    load_nccl_tests,
    parse_nccl_tests,
    parse_nccl_tests_json,
    parse_nccl_tests_text,
)
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

# Two nodes x 2 GPUs, all_reduce_perf as printed by nccl-tests 2.13+ (root column present).
TEXT = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41001 on     node-a device  0 [0x07] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41002 on     node-a device  1 [0x0f] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  52001 on     node-b device  0 [0x07] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  52002 on     node-b device  1 [0x0f] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    40.00    0.00    0.00      0    39.00    0.00    0.00      0
     1048576        262144     float     sum      -1    80.00   13.11   19.66      0    79.00   13.27   19.91      0
   134217728      33554432     float     sum      -1   2000.0   67.11  100.66    N/A   1990.0   67.45  101.17    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 40.1234
#
"""

# Older nccl-tests: no root column, no "Collective test starting" line.
OLD_TEXT = """\
# nThread 1 nGpus 8 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
        1024           256     float     sum    15.00    0.07    0.12  0e+00    14.00    0.07    0.13  0e+00
        2048           512     float     sum    16.00    0.13    0.22  0e+00    15.50    0.13    0.23  0e+00
"""


def test_text_table_rows_ranks_and_nodes():
    rows = parse_nccl_tests_text(TEXT)
    assert [r.nbytes for r in rows] == [8.0, 1048576.0, 134217728.0]
    r = rows[1]
    assert (r.collective, r.n_ranks, r.n_nodes) == ("allreduce", 4, 2)  # 4 Rank lines, 2 hosts
    assert r.time_s == pytest.approx(80e-6) and r.busbw_bytes_per_s == pytest.approx(19.66e9)
    # the #wrong column may read N/A (run without -c): still a row
    assert rows[2].time_s == pytest.approx(2000e-6)


def test_in_place_columns():
    rows = parse_nccl_tests_text(TEXT, in_place=True)
    assert rows[1].time_s == pytest.approx(79e-6) and rows[1].busbw_bytes_per_s == \
        pytest.approx(19.91e9)


def test_old_format_needs_collective_and_uses_ngpus():
    with pytest.raises(InputError) as e:
        parse_nccl_tests_text(OLD_TEXT)
    assert e.value.field == "collective"
    rows = parse_nccl_tests_text(OLD_TEXT, collective="all_gather_perf")
    assert rows[0].collective == "allgather"
    assert rows[0].n_ranks == 8 and rows[0].n_nodes == 1  # nThread 1 x nGpus 8, one process
    assert rows[1].time_s == pytest.approx(16e-6)


def test_explicit_geometry_wins():
    rows = parse_nccl_tests_text(TEXT, n_ranks=16, n_nodes=2)
    assert rows[0].n_ranks == 16 and rows[0].n_nodes == 2


@pytest.mark.parametrize("name, expected", [
    ("all_reduce_perf", "allreduce"), ("reduce_scatter_perf", "reducescatter"),
    ("logs/all_gather_perf.json", "allgather"), ("broadcast_perf_mpi", "broadcast"),
    ("reduce_perf", "reduce"), ("alltoall_perf", "alltoall"), ("sendrecv", "sendrecv"),
    ("ReduceScatter", "reducescatter"), ("nothing_here", None),
])
def test_collective_of(name, expected):
    assert collective_of(name) == expected


def test_json_nested_and_flat():
    nested = {"nccl_tests_version": "2.17", "test": "all_reduce_perf", "nranks": 16,
              "nnodes": 2,
              "results": [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum",
                           "root": -1,
                           "out_of_place": {"time": 50.0, "algbw": 20.97, "busbw": 39.3,
                                            "wrong": 0},
                           "in_place": {"time": 49.0, "algbw": 21.4, "busbw": 40.1}}]}
    rows = parse_nccl_tests(json.dumps(nested))
    assert len(rows) == 1
    assert (rows[0].collective, rows[0].n_ranks, rows[0].n_nodes) == ("allreduce", 16, 2)
    assert rows[0].time_s == pytest.approx(50e-6)
    assert parse_nccl_tests_json(json.dumps(nested), in_place=True)[0].time_s == \
        pytest.approx(49e-6)
    flat = [{"size": 4096, "outOfPlaceTime": 12.5, "outOfPlaceBusBw": 0.6},
            {"size": 8192, "outOfPlaceTime": 13.0, "outOfPlaceBusBw": 1.1}]
    rows = parse_nccl_tests(json.dumps(flat), collective="allgather", n_ranks=8)
    assert [r.nbytes for r in rows] == [4096.0, 8192.0] and rows[1].time_s == pytest.approx(13e-6)
    with pytest.raises(InputError) as e:
        parse_nccl_tests("{not json")
    assert e.value.field == "nccl_tests"


def test_load_uses_file_name_for_the_collective(tmp_path):
    p = tmp_path / "reduce_scatter_perf.txt"
    p.write_text(OLD_TEXT)
    rows = load_nccl_tests(p)
    assert rows[0].collective == "reducescatter"
    with pytest.raises(InputError) as e:
        load_nccl_tests(tmp_path / "missing.txt")
    assert e.value.field == "nccl_tests"
    with pytest.raises(InputError) as e:
        parse_nccl_tests_text(TEXT, collective="allreduse")
    assert e.value.field == "collective"


def test_parsed_rows_feed_fit_calibration():
    # Build "measurements" that are the model at 1/0.8 of the inter-node bandwidth, print them
    # as an nccl-tests table, parse it back and fit.
    gpu = GPUSpec(name="h100", peak_flops_per_s={"bf16": 1e15}, memory_bytes=80e9,
                  memory_bandwidth_bytes_per_s=3e12, nvlink_bandwidth_bytes_per_s=450e9,
                  nvlink_links=18, compute_capability=90, pcie_bandwidth_bytes_per_s=64e9)
    cluster = ClusterSpec(name="2x8", num_nodes=2, gpus_per_node=8, gpu=gpu,
                          intra_node=IntraNodeSpec("nvswitch", 450e9),
                          inter_node=InterNodeSpec("infiniband", 8, 50e9))
    system = C.nccl_system(cluster)
    truth = C.with_calibration(system, C.NcclCalibration(inter_bw_scale=0.8))
    lines = ["# Collective test starting: all_gather_perf"]
    for size in (1 << 20, 1 << 24, 1 << 28, 1 << 30):
        t_us = float(C.collective_time_s(truth, "allgather", size, 16, 2).time_s) * 1e6
        algbw = size / t_us / 1e3
        lines.append(f"{size} {size // 64} float none -1 {t_us:.4f} {algbw:.2f} "
                     f"{algbw * 15 / 16:.2f} 0 {t_us:.4f} {algbw:.2f} {algbw * 15 / 16:.2f} 0")
    rows = parse_nccl_tests("\n".join(lines), n_ranks=16, n_nodes=2)
    cal, before, after = C.fit_calibration(system, rows)
    assert cal.inter_bw_scale == pytest.approx(0.8, rel=1e-4)
    assert after < 1e-4 < before
