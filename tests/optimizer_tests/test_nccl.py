"""``optimize nccl`` and its library (optimizer.nccl): sizes, collectives, forcing, JSON,
--sweep, calibration (the tuner CSV is test_launch_tuner.py).

Hand calculations use NCCL 2.30.7's constants (nccl.md §3.1) and the graphs of nccl.md §10.2:
8xA100 ring graph 12 channels x 20 GB/s (busBw 240), 8xH100 12 x 30 (360), NVLS algbw 272.0.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import DATA, run_cli, run_cli_json

from costmodel import collectives as coll
from costmodel.errors import InputError
from costmodel.hardware import default_cluster
from costmodel.loaders import load_cluster
from optimizer.nccl.predict import crossovers, format_size, parse_collective, parse_size

GIB = 2**30


def _nccl(*args: str, kind: str = "nccl") -> dict:
    return run_cli_json(["nccl", *args], kind)


# ---- sizes and names -----------------------------------------------------------------------
@pytest.mark.parametrize("text, nbytes", [
    ("1GiB", 2**30), ("256MiB", 256 * 2**20), ("64KiB", 65536),
    ("64KB", 64_000),                 # SI: 64 x 1000
    ("1GB", 10**9), ("8G", 8 * 2**30),  # nccl-tests' -e 8G is binary
    ("1e9", 10**9), ("1048576", 1048576), (" 4 MiB ", 4 * 2**20), ("1.5KiB", 1536),
    ("2k", 2048), ("7", 7),
])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["abc", "1GX", "-5", "0", "1.5", "", "1e30", "GiB", "1 2"])
def test_parse_size_rejects_junk(text):
    with pytest.raises(InputError) as e:
        parse_size(text)
    assert e.value.field == "--size"


def test_size_junk_exits_2_naming_size():
    rc, out, err = run_cli(["nccl", "--collective", "allreduce", "--size", "lots", "--gpus", "8"])
    assert rc == 2 and out == ""
    assert err.startswith("error: --size:") and "1GiB" in err


@pytest.mark.parametrize("text, name", [
    ("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("AllGather", "allgather"),
    ("reduce-scatter", "reducescatter"), ("bcast", "broadcast"), ("all_to_all", "alltoall"),
    ("sendrecv_perf", "sendrecv"), ("reduce", "reduce"),
])
def test_parse_collective(text, name):
    assert parse_collective(text) == name


def test_unknown_collective_suggests():
    rc, _, err = run_cli(["nccl", "--collective", "alreduce", "--size", "1GiB", "--gpus", "8"])
    assert rc == 2 and "--collective" in err and "did you mean 'allreduce'" in err


def test_format_size():
    assert format_size(2**30) == "1 GiB"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(100) == "100 B"


# ---- each collective ---------------------------------------------------------------------------
def _check_bandwidths(doc: dict, factor: float) -> None:
    size = doc["inputs"]["size_bytes"]
    assert doc["chosen"] == doc["alternatives"][0]
    times = [a["time_s"] for a in doc["alternatives"]]
    for a in doc["alternatives"]:
        # nccl.md §6: algbw = S / t, busbw = algbw x factor (GB = 1e9 B)
        assert a["algbw_GBps"] == pytest.approx(size / a["time_s"] / 1e9, rel=1e-12)
        assert a["busbw_GBps"] == pytest.approx(a["algbw_GBps"] * factor, rel=1e-12)
    assert times[0] == min(times)  # uncalibrated: NCCL's choice is the fastest


def test_allreduce_8xa100_1gib():
    doc = _nccl("--collective", "allreduce", "--size", "1GiB", "--gpus", "8")
    c = doc["chosen"]
    assert (c["algo"], c["proto"]) == ("ring", "simple")
    # Ring/Simple: L = 8.4 + 14 x 3.4 = 56.0 us; B = 240 x 8/14 = 137.14 GB/s;
    # T = 56.0 + 2^30 / 137142.86 = 56.0 + 7829.4 = 7885.4 us; busbw = 2^30/T x 14/8 = 238.3
    assert c["time_s"] * 1e6 == pytest.approx(7885.4, abs=0.1)
    assert c["busbw_GBps"] == pytest.approx(238.3, abs=0.05)
    _check_bandwidths(doc, 2 * 7 / 8)
    labels = [(a["algo"], a["proto"]) for a in doc["alternatives"]]
    # A100 has no NVLS, one node has no NVLSTree/CollNet/PAT: Tree and Ring x 3 protocols
    assert sorted(labels) == sorted((a, p) for a in ("tree", "ring")
                                    for p in ("ll", "ll128", "simple"))
    assert doc["inputs"]["gpus"] == 8 and doc["inputs"]["nodes"] == 1


def test_allgather_16xh100():
    doc = _nccl("--collective", "allgather", "--size", "256MiB", "--gpus", "16", "--gpu", "h100")
    _check_bandwidths(doc, 15 / 16)
    assert doc["inputs"]["nodes"] == 2
    # nccl.md §10.2, 2 x 8xH100 AllGather at 256 MiB: Ring/Simple 725.4 us
    assert (doc["chosen"]["algo"], doc["chosen"]["proto"]) == ("ring", "simple")
    assert doc["chosen"]["time_s"] * 1e6 == pytest.approx(725.4, abs=0.1)


def test_reducescatter_matches_allgather_table():
    doc = _nccl("--collective", "reducescatter", "--size", "1GiB", "--gpus", "8")
    _check_bandwidths(doc, 7 / 8)
    # AllGather/ReduceScatter Ring/Simple, 8xA100: L = 32.2 us, B = 240 x 8/7 = 274.29 GB/s;
    # T = 32.2 + 2^30 / 274285.7 = 32.2 + 3914.7 = 3946.9 us
    assert doc["chosen"]["time_s"] * 1e6 == pytest.approx(3946.9, abs=0.1)


@pytest.mark.parametrize("name", ["broadcast", "reduce"])
def test_broadcast_reduce(name):
    doc = _nccl("--collective", name, "--size", "1GiB", "--gpus", "8")
    _check_bandwidths(doc, 1.0)
    c = doc["chosen"]
    # Ring/Simple: L = 8.4 + 3.4 (one hop) = 11.8 us; B = 240 x 8/8 = 240 GB/s;
    # T = 11.8 + 2^30 / 240000 = 11.8 + 4473.9 = 4485.7 us; busbw = algbw (factor 1)
    assert (c["algo"], c["proto"]) == ("ring", "simple")
    assert c["time_s"] * 1e6 == pytest.approx(4485.7, abs=0.1)
    assert {a["algo"] for a in doc["alternatives"]} == {"ring"}


def test_alltoall_two_nodes():
    doc = _nccl("--collective", "alltoall", "--size", "1GiB", "--gpus", "16")
    _check_bandwidths(doc, 15 / 16)
    c = doc["chosen"]
    assert (c["algo"], c["proto"]) == ("p2p", "simple") and len(doc["alternatives"]) == 1
    # nccl.md §7: 8/16 of S leaves the node over the GPU's NIC share min(PCIe 24, 25) = 24 GB/s:
    # 2^29 / 24e9 = 22369.6 us; 2 rounds of 8 peers x (6.6 + 2.7 + 1.0) us = 20.6 us -> 22390.2
    assert c["time_s"] * 1e6 == pytest.approx(22390.2, abs=0.1)


def test_sendrecv_one_node():
    doc = _nccl("--collective", "sendrecv", "--size", "1GiB", "--gpus", "2")
    _check_bandwidths(doc, 1.0)
    # NVSwitch path 12 x 20 = 240 GB/s, latency 6.6 + 0.6 = 7.2 us: 7.2 + 4473.9 = 4481.1 us
    assert doc["chosen"]["time_s"] * 1e6 == pytest.approx(4481.1, abs=0.1)
    small = _nccl("--collective", "sendrecv", "--size", "16KiB", "--gpus", "2")
    assert small["chosen"]["proto"] == "ll"  # NCCL_P2P_LL_THRESHOLD = 16 KiB


def test_text_output_is_plain_table():
    rc, out, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus",
                            "8"])
    assert rc == 0 and err == ""
    assert "\x1b" not in out  # not a TTY: no rich markup
    assert "NCCL's choice: Ring/Simple: 7885.4 us" in out
    assert "busbw 238.30 GB/s" in out
    assert out.count("Tree/") == 3 and out.count("Ring/") == 4  # 6 rows + the choice line


def test_too_few_gpus_and_ragged_nodes():
    rc, _, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "1"])
    assert rc == 2 and "--gpus" in err
    rc, _, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus",
                          "12"])
    assert rc == 2 and "--gpus" in err and "8 or 16" in err


# ---- forcing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, field, reason", [
    (["--algo", "nvls"], "--algo", "runnable here: ring, tree"),            # no NVLS on A100
    (["--collective", "allgather", "--algo", "tree"], "--algo", "runnable here"),  # AR only
    (["--gpu", "h100", "--algo", "nvls", "--proto", "ll"], "--proto",
     "runnable with that algorithm: simple"),                              # NVLS is Simple only
    (["--collective", "allgather", "--algo", "pat"], "--algo", "runnable here"),  # 1 GPU/node
    (["--algo", "rnig"], "--algo", "did you mean 'ring'"),
    (["--collective", "alltoall", "--proto", "simple"], "--proto", "point-to-point"),
])
def test_forced_invalid_pairs_exit_2(args, field, reason):
    argv = ["nccl", "--size", "1GiB", "--gpus", "8", *args]
    if "--collective" not in args:
        argv += ["--collective", "allreduce"]
    rc, out, err = run_cli(argv)
    assert rc == 2 and out == ""
    assert err.startswith(f"error: {field}:"), err
    assert reason in err


def test_forcing_restricts_the_table():
    doc = _nccl("--collective", "allreduce", "--size", "1GiB", "--gpus", "8", "--algo", "tree")
    assert {a["algo"] for a in doc["alternatives"]} == {"tree"}
    assert doc["inputs"]["algo"] == "tree"
    # per-collective NCCL_ALGO syntax (NCCL >= 2.24): the allreduce entry applies
    doc = _nccl("--collective", "allreduce", "--size", "1GiB", "--gpus", "8", "--algo",
                "allreduce:tree;allgather:ring", "--proto", "^ll")
    assert {(a["algo"], a["proto"]) for a in doc["alternatives"]} == {("tree", "ll128"),
                                                                     ("tree", "simple")}


def test_ll128_forced_on_pcie_warns():
    rc, out, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus",
                            "8", "--cluster", "pcie-roce-a100", "--proto", "ll128"])
    assert rc == 0 and "Ring/LL128" in out
    assert "warning:" in err and "data corruption" in err


# ---- --sweep: nccl.md §10.2 rows ---------------------------------------------------------------
# (size, NCCL's choice, predicted time in us) at 1 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB, 4 GiB
TABLE_10_2 = {
    ("allreduce", "a100-sxm-80gb", 8): [
        ("ring", "ll", 15.0), ("ring", "ll", 16.3), ("ring", "ll", 35.9),
        ("ring", "ll128", 173.6), ("ring", "simple", 2013.3), ("ring", "simple", 31373.5)],
    ("allgather", "a100-sxm-80gb", 8): [
        ("ring", "ll", 10.8), ("ring", "ll", 11.5), ("ring", "ll", 21.3),
        ("ring", "simple", 93.4), ("ring", "simple", 1010.9), ("ring", "simple", 15690.9)],
    ("allreduce", "h100-sxm-80gb", 8): [
        ("ring", "ll", 15.0), ("ring", "ll", 15.8), ("ring", "ll", 28.0),
        ("nvls", "simple", 86.7), ("nvls", "simple", 1011.9), ("nvls", "simple", 15815.3)],
    ("allgather", "h100-sxm-80gb", 8): [
        ("ring", "ll", 10.8), ("ring", "ll", 11.2), ("ring", "ll", 17.3),
        ("ring", "ll128", 71.6), ("ring", "simple", 684.6), ("ring", "simple", 10471.4)],
    ("allreduce", "a100-sxm-80gb", 128): [  # 16 x (8xA100 + 8xHDR): Tree small, Ring large
        ("tree", "ll", 55.3), ("tree", "ll", 65.9), ("tree", "ll128", 125.7),
        ("tree", "ll128", 378.8), ("ring", "ll128", 3888.8), ("ring", "simple", 46055.7)],
}
TABLE_SIZES = (2**10, 2**16, 2**20, 2**24, 2**28, 2**32)


@pytest.mark.parametrize("key", list(TABLE_10_2), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_sweep_matches_nccl_md_10_2(key):
    collective, gpu, gpus = key
    doc = _nccl("--collective", collective, "--gpus", str(gpus), "--gpu", gpu, "--sweep")
    rows = {r["size_bytes"]: r for r in doc["sweep"]}
    assert sorted(rows) == [1024 * 4**k for k in range(12)]  # 1 KiB .. 4 GiB, x4
    for size, (algo, proto, t_us) in zip(TABLE_SIZES, TABLE_10_2[key], strict=True):
        r = rows[size]
        assert (r["algo"], r["proto"]) == (algo, proto), format_size(size)
        assert r["time_s"] * 1e6 == pytest.approx(t_us, abs=0.06), format_size(size)
    # without --size the document's chosen/alternatives are for the largest sweep size
    assert doc["inputs"]["size_bytes"] == 4 * GIB


def test_sweep_crossovers_8xa100_and_8xh100():
    a100 = _nccl("--collective", "allreduce", "--gpus", "8", "--sweep")["crossovers"]
    # Ring/LL: L = 6.6 + 14 x 0.6 = 15.0 us, B = min(87.7, 0.5 x 240) x 8/14 = 50.114 GB/s;
    # Ring/LL128: L = 14.0 + 14 x 1.9 = 40.6 us, B = min(0.92 x 240, 240) x 8/14 = 126.171;
    # Ring/Simple: L = 56.0 us, B = 137.143. Equal times at
    # 25.6 / (1/50114.3 - 1/126171.4) = 2128250.4 B and 15.4 / (1/126171.4 - 1/137142.9)
    # = 24288000.x B: the first whole byte with the new choice is just above each.
    assert [(c["from"], c["to"]) for c in a100] == [("ring/ll", "ring/ll128"),
                                                    ("ring/ll128", "ring/simple")]
    assert abs(a100[0]["size_bytes"] - 2128250.4) < 2
    assert abs(a100[1]["size_bytes"] - 24288000.5) < 2
    h100 = _nccl("--collective", "allreduce", "--gpus", "8", "--gpu", "h100",
                 "--sweep")["crossovers"]
    # Ring/LL: B = min(141.0, 0.5 x 360) x 8/14 = 80.571; NVLS/Simple: L = 25.0, B = 272.0:
    # 10.0 / (1/80571.4 - 1/272000) = 1144836 B (nccl.md §10.1: LL up to 1 MiB, NVLS from 2)
    assert [(c["from"], c["to"]) for c in h100] == [("ring/ll", "nvls/simple")]
    assert abs(h100[0]["size_bytes"] - 1144836) < 2


def test_crossover_sizes_are_exact_boundaries():
    sys8 = coll.nccl_system(default_cluster(8))
    for size, old, new in crossovers(sys8, "allreduce", 8, 1):
        before = coll.collective_time_s(sys8, "allreduce", size - 1, 8, 1)
        after = coll.collective_time_s(sys8, "allreduce", size, 8, 1)
        assert f"{before.algo_names()[()]}/{before.proto_names()[()]}" == old
        assert f"{after.algo_names()[()]}/{after.proto_names()[()]}" == new


def test_sweep_text():
    rc, out, _ = run_cli(["nccl", "--collective", "allreduce", "--gpus", "8", "--gpu", "h100",
                          "--sweep"])
    assert rc == 0
    assert "Ring/LL -> NVLS/Simple at 1.092 MiB (1144836 B)" in out
    assert out.count("<- changes") == 1


# ---- calibration -------------------------------------------------------------------------------
def _nccl_tests_text(system, collective: str, n_ranks: int, hosts: int, scale: float,
                     sizes=tuple(1024 * 4**k for k in range(12)), rank_lines: bool = True
                     ) -> str:
    """A synthetic nccl-tests text table whose busbw is ``scale`` x the model's (uncalibrated)
    prediction, formatted like all_<...>_perf (time us %.2f, GB/s %.2f)."""
    test = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
            "alltoall": "alltoall_perf"}[collective]
    lines = [f"# Collective test starting: {test}",
             f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 4(factor)",
             "#"]
    if rank_lines:
        ppn = n_ranks // hosts
        lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r} on node-{r // ppn} device {r % ppn} "
                  "[0x07] NVIDIA GPU" for r in range(n_ranks)]
    lines += ["#       size    count   type  redop  root    time   algbw   busbw #wrong"
              "    time   algbw   busbw #wrong",
              "#        (B) (elements)                     (us)  (GB/s)  (GB/s)"
              "            (us)  (GB/s)  (GB/s)"]
    factor = float(coll.busbw_factor(collective, n_ranks))
    for s in sizes:
        if collective == "alltoall":
            t = float(coll.alltoall_time_s(system, s, n_ranks, hosts)) / scale
        else:
            t = float(coll.collective_time_s(system, collective, s, n_ranks, hosts).time_s) / scale
        alg = s / t / 1e9
        cols = f"{t * 1e6:10.2f} {alg:7.2f} {alg * factor:7.2f}      0"
        lines.append(f"{s:12d} {s // 4:10d}  float    sum    -1 {cols} {cols}")
    lines.append("# Avg bus bandwidth    : 1.0")
    return "\n".join(lines) + "\n"


@pytest.fixture
def slow_a100_file(tmp_path):
    """8xA100 AllReduce measured 20 % below the model's busbw."""
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(_nccl_tests_text(coll.nccl_system(default_cluster(8)), "allreduce", 8, 1,
                                     0.8))
    return path


def _assert_same_fabric(a, b) -> None:
    """Fabric fields equal; latencies to 1e-12 relative (the loader reads ``latency_us`` as
    ``x * 1e-6``, so 5 us comes back as 4.9999999999999996e-06)."""
    from dataclasses import asdict

    for x, y in ((a.intra_node, b.intra_node), (a.inter_node, b.inter_node)):
        dx, dy = asdict(x), asdict(y)
        assert dx.pop("latency_s") == pytest.approx(dy.pop("latency_s"), rel=1e-12)
        assert dx == dy


def test_calibration_round_trip(tmp_path, slow_a100_file):
    out_yaml = tmp_path / "calibrated.yaml"
    doc = _nccl("--nccl-tests", str(slow_a100_file), "--save-cluster", str(out_yaml))
    cal = doc["calibration"]
    # busbw 0.8 x the model: |1 - 0.8| / 0.8 = 25 % busbw error, |1.25 - 1| / 1.25 = 20 % time
    assert cal["busbw_mape_before"] == pytest.approx(0.25, abs=0.002)
    assert cal["time_mape_before"] == pytest.approx(0.20, abs=0.002)
    assert cal["busbw_mape_after"] < 0.002 and cal["time_mape_after"] < 0.002
    # every time is 1.25 x: latency x1.25 and bandwidth x0.8; no 2-node row: inter stays 1
    assert cal["scales"]["nccl_intra_bw_scale"] == pytest.approx(0.8, rel=2e-3)
    assert cal["scales"]["nccl_latency_scale"] == pytest.approx(1.25, rel=2e-3)
    assert cal["scales"]["nccl_inter_bw_scale"] == 1.0
    assert cal["rows_used"] == 12
    # the prediction in the same document (the largest row, 4 GiB) is calibrated
    assert doc["inputs"]["size_bytes"] == 4 * GIB
    assert doc["chosen"]["busbw_GBps"] == pytest.approx(0.8 * 239.57, rel=2e-3)

    # the file: written atomically (no temp file left), the loader's format, reloadable
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    text = out_yaml.read_text()
    assert text.startswith("# Cluster written by 'optimize nccl --save-cluster'")
    assert "before 25.0%, after 0.0%" in text
    cluster = load_cluster(out_yaml, default_gpus=16)
    assert cluster.num_nodes == 2  # sized by --gpus: no num_nodes in the file
    base = default_cluster(16)
    assert cluster.gpu == base.gpu
    _assert_same_fabric(cluster, base)
    assert cluster.calibration["nccl_intra_bw_scale"] == pytest.approx(0.8, rel=2e-3)

    # later predictions with --cluster OUT.yaml shift by the fitted factor (1/1.25 = 0.8)
    plain = _nccl("--collective", "allreduce", "--size", "1GiB", "--gpus", "8")
    fitted = _nccl("--collective", "allreduce", "--size", "1GiB", "--gpus", "8", "--cluster",
                   str(out_yaml))
    assert fitted["chosen"]["busbw_GBps"] == pytest.approx(0.8 * plain["chosen"]["busbw_GBps"],
                                                           rel=2e-3)
    assert (fitted["chosen"]["algo"], fitted["chosen"]["proto"]) == ("ring", "simple")
    assert fitted["inputs"]["cluster"]["calibration"]["nccl_latency_scale"] == \
        pytest.approx(1.25, rel=2e-3)


def test_calibrated_cluster_drives_the_main_search(tmp_path, slow_a100_file):
    out_yaml = tmp_path / "calibrated.yaml"
    run_cli_json(["nccl", "--nccl-tests", str(slow_a100_file), "--save-cluster",
                  str(out_yaml)], "nccl")
    # tp 2: the two backward all-reduces hidden behind the weight-gradient GEMMs stay shorter
    # than those GEMMs, so their exposed share is linear in the collective time too
    one = ["--model", "7b", "--gpus", "8", "--tp", "2", "--pp", "1", "--micro-batch-size", "1",
           "--precision", "bf16", "--recompute", "none", "--sequence-parallel", "false",
           "--zero-stage", "0", "--schedule", "1f1b"]
    plain = run_cli_json(one, "front")
    fitted = run_cli_json([*one, "--cluster", str(out_yaml)], "front")
    tp_plain = plain["pareto_front"][0]["metrics"]["time_breakdown_s"]["tp_comm"]
    tp_fitted = fitted["pareto_front"][0]["metrics"]["time_breakdown_s"]["tp_comm"]
    # one-node TP all-reduces: latency x1.25, bandwidth term / 0.8 -> every call x1.25
    assert tp_plain > 0
    assert tp_fitted / tp_plain == pytest.approx(1.25, rel=2e-3)


def test_calibration_text_mode_prints_errors_to_stderr(slow_a100_file):
    rc, out, err = run_cli(["nccl", "--nccl-tests", str(slow_a100_file), "--collective",
                            "allreduce", "--size", "1GiB"])
    assert rc == 0
    assert "busbw error (MAPE) before 25.0%, after 0.0%" in err
    assert "nccl-tests vs the model" in err and "+25.0%" in err
    assert "MAPE" not in out and "NCCL's choice: Ring/Simple" in out


def test_inter_node_fit_keeps_the_intra_scale(tmp_path, slow_a100_file):
    first = tmp_path / "a.yaml"
    _nccl("--nccl-tests", str(slow_a100_file), "--save-cluster", str(first))
    # two nodes, busbw at half the model: inter-node bandwidth x0.5, latency x2
    two = tmp_path / "two.txt"
    two.write_text(_nccl_tests_text(coll.nccl_system(default_cluster(16)), "allreduce", 16, 2,
                                    0.5))
    second = tmp_path / "b.yaml"
    doc = _nccl("--nccl-tests", str(two), "--cluster", str(first), "--save-cluster",
                str(second))
    scales = doc["calibration"]["scales"]
    assert scales["nccl_inter_bw_scale"] == pytest.approx(0.5, rel=2e-3)
    assert scales["nccl_latency_scale"] == pytest.approx(2.0, rel=2e-3)
    assert scales["nccl_intra_bw_scale"] == pytest.approx(0.8, rel=2e-3)  # kept from a.yaml
    assert doc["inputs"]["nodes"] == 2 and doc["inputs"]["gpus"] == 16
    assert load_cluster(second).calibration["nccl_intra_bw_scale"] == pytest.approx(0.8,
                                                                                   rel=2e-3)


def test_save_cluster_is_atomic(tmp_path, slow_a100_file, monkeypatch):
    target = tmp_path / "cluster.yaml"
    target.write_text("previous content\n")
    import optimizer.core.fileio as fileio

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", boom)
    rc, out, err = run_cli(["nccl", "--nccl-tests", str(slow_a100_file), "--save-cluster",
                            str(target)])
    assert rc == 2 and "--save-cluster" in err
    assert target.read_text() == "previous content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all_reduce_perf.txt", "cluster.yaml"]


def test_nccl_tests_json_input(tmp_path):
    system = coll.nccl_system(default_cluster(8))
    rows = []
    for s in (2**20, 2**26, 2**30):
        t = float(coll.collective_time_s(system, "allreduce", s, 8, 1).time_s) / 0.8
        rows.append({"size": s, "out_of_place": {"time": t * 1e6}})
    path = tmp_path / "ar.json"
    path.write_text(json.dumps({"collective": "all_reduce", "nranks": 8, "results": rows}))
    doc = _nccl("--nccl-tests", str(path))
    assert doc["calibration"]["rows_used"] == 3
    assert doc["calibration"]["busbw_mape_before"] == pytest.approx(0.25, abs=1e-6)
    assert doc["calibration"]["busbw_mape_after"] < 1e-6


def test_nccl_tests_without_ranks_needs_gpus(tmp_path):
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(_nccl_tests_text(coll.nccl_system(default_cluster(8)), "allreduce", 8, 1,
                                     0.8, rank_lines=False).replace("nGpus 1", "nGpus 0"))
    rc, _, err = run_cli(["nccl", "--nccl-tests", str(path)])
    assert rc == 2 and err.startswith("error: --nccl-tests:") and "--gpus" in err
    doc = _nccl("--nccl-tests", str(path), "--gpus", "8")
    assert doc["calibration"]["busbw_mape_before"] == pytest.approx(0.25, abs=0.002)


def test_alltoall_rows_cannot_calibrate(tmp_path):
    path = tmp_path / "alltoall_perf.txt"
    path.write_text(_nccl_tests_text(coll.nccl_system(default_cluster(8)), "alltoall", 8, 1,
                                     1.0, sizes=(2**20, 2**24)))
    rc, _, err = run_cli(["nccl", "--nccl-tests", str(path)])
    assert rc == 2 and "--nccl-tests" in err and "all_reduce_perf" in err


def test_save_cluster_needs_measurements_and_a_short_form(tmp_path, slow_a100_file):
    rc, _, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "8",
                          "--save-cluster", str(tmp_path / "x.yaml")])
    assert rc == 2 and "--save-cluster" in err and "--nccl-tests" in err
    graph = load_cluster(DATA / "cluster_graph.json")  # 2 nodes x 4 A100, a node-link graph
    measured = tmp_path / "all_reduce_perf.txt"
    measured.write_text(_nccl_tests_text(coll.nccl_system(graph), "allreduce", 4, 1, 0.8))
    rc, _, err = run_cli(["nccl", "--nccl-tests", str(measured), "--cluster",
                          str(DATA / "cluster_graph.json"), "--save-cluster",
                          str(tmp_path / "x.yaml")])
    assert rc == 2 and err.startswith("error: --save-cluster:") and "graph" in err
    assert not (tmp_path / "x.yaml").exists()
    # without --save-cluster the same fit works on the graph cluster
    doc = _nccl("--nccl-tests", str(measured), "--cluster", str(DATA / "cluster_graph.json"))
    assert doc["calibration"]["busbw_mape_before"] == pytest.approx(0.25, abs=0.002)


def test_inline_gpu_cluster_round_trips(tmp_path):
    from optimizer.nccl.calibrate import calibrated_cluster, save_cluster

    src = load_cluster(DATA / "cluster-inline-gpu.yaml")
    cal = coll.NcclCalibration(intra_bw_scale=0.9, inter_bw_scale=0.7, latency_scale=1.1)
    path = save_cluster(calibrated_cluster(src, cal), tmp_path / "c.yaml")
    back = load_cluster(path, default_gpus=src.num_gpus)
    assert back.gpu == src.gpu
    _assert_same_fabric(back, src)
    assert coll.nccl_system(back).calibration == cal
    assert back.name == "custom-4x4-nccl-calibrated"


def test_no_stray_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "8"])
    assert os.listdir(tmp_path) == []
