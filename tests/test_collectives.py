"""NCCL's collective cost model (costmodel/collectives.py) against nccl.md.

Reference numbers come from shared/reference/nccl.md: §1.3 (graph results), §10.1 (summary
busbw), §10.2 (stored latency/bandwidth tables and the chosen pair by message size). Systems are
built from GPUSpec/ClusterSpec directly, with the datasheet numbers written out here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel import collectives as C
from costmodel.errors import InputError
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def _gpu(name: str, cc: int, links: int, nvlink: float, pcie: float) -> GPUSpec:
    return GPUSpec(name=name, peak_flops_per_s={"bf16": 1e15}, memory_bytes=80e9,
                   memory_bandwidth_bytes_per_s=2e12, nvlink_bandwidth_bytes_per_s=nvlink,
                   nvlink_links=links, compute_capability=cc, pcie_bandwidth_bytes_per_s=pcie)


# Nominal one-direction bandwidths: NVLink 25 GB/s per link (NVLink5: 50), PCIe Gen4 x16 32 GB/s,
# Gen5 64 GB/s; HDR 200 Gb/s = 25e9 B/s, NDR 400 Gb/s = 50e9 B/s.
A100 = _gpu("a100", 80, 12, 300e9, 32e9)
H100 = _gpu("h100", 90, 18, 450e9, 64e9)
H800 = _gpu("h800", 90, 8, 200e9, 64e9)
B200 = _gpu("b200", 100, 18, 900e9, 64e9)
A100_PCIE = _gpu("a100-pcie", 80, 0, 0.0, 32e9)


def _cluster(gpu: GPUSpec, nodes: int, per_node: int, nics: int, nic: float,
             fabric: str = "nvswitch", oversub: float = 1.0, fabric_inter: str = "infiniband",
             calibration: dict | None = None) -> ClusterSpec:
    return ClusterSpec(name=f"{nodes}x{per_node}-{gpu.name}", num_nodes=nodes,
                       gpus_per_node=per_node, gpu=gpu,
                       intra_node=IntraNodeSpec(fabric, gpu.nvlink_bandwidth_bytes_per_s or 32e9),
                       inter_node=InterNodeSpec(fabric_inter, nics, nic, oversub),
                       calibration=calibration)


SYS = {
    "8xA100": C.nccl_system(_cluster(A100, 1, 8, 8, 25e9)),
    "8xH100": C.nccl_system(_cluster(H100, 1, 8, 8, 50e9)),
    "8xH800": C.nccl_system(_cluster(H800, 1, 8, 8, 50e9)),
    "8xB200": C.nccl_system(_cluster(B200, 1, 8, 8, 50e9)),
    "A100+HDR": C.nccl_system(_cluster(A100, 16, 8, 8, 25e9)),
    "H100+NDR": C.nccl_system(_cluster(H100, 16, 8, 8, 50e9)),
    "1xH100+NDR": C.nccl_system(_cluster(H100, 64, 1, 1, 50e9)),
    "PCIe": C.nccl_system(_cluster(A100_PCIE, 2, 8, 2, 12.5e9, fabric="pcie")),
}


def _label(a: int, p: int) -> str:
    return f"{C.ALGORITHM_DISPLAY[a]}/{C.PROTOCOL_DISPLAY[p]}"


# ---- nccl_system and the graph search (nccl.md §1.1-1.3) -----------------------------------
def test_link_model_values():
    # A100: 12 links x 20 GB/s = 240; H100: 18 x 20.6 = 370.8; B200: 18 x 40.1 = 721.8;
    # PCIe Gen5 x16 = 16 lanes x 240 / 80 = 48 GB/s = 0.75 x 64.
    assert SYS["8xA100"].nvlink_bytes_per_s == pytest.approx(240e9)
    assert SYS["8xH100"].nvlink_bytes_per_s == pytest.approx(370.8e9)
    assert SYS["8xB200"].nvlink_bytes_per_s == pytest.approx(721.8e9)
    assert SYS["H100+NDR"].pcie_bytes_per_s == pytest.approx(48e9)
    # 8 NDR NICs per 8 GPUs -> 50 GB/s per GPU; oversubscription 2 halves it.
    assert SYS["H100+NDR"].nic_bytes_per_s_per_gpu == pytest.approx(50e9)
    over = C.nccl_system(_cluster(H100, 4, 8, 8, 50e9, oversub=2.0))
    assert over.nic_bytes_per_s_per_gpu == pytest.approx(25e9)
    assert SYS["8xA100"].arch == "ampere" and SYS["8xB200"].arch == "blackwell"


def test_platform_flags():
    assert SYS["8xH100"].nvls_supported and SYS["8xB200"].nvls_supported
    assert not SYS["8xA100"].nvls_supported  # sm80
    pcie = SYS["PCIe"]
    assert pcie.intra_fabric == "pcie" and not pcie.nvls_supported
    assert not pcie.ll128_default and SYS["8xA100"].ll128_default
    # A GPU without NVLink on a cluster that claims NVSwitch is PCIe-only.
    fake = C.nccl_system(_cluster(A100_PCIE, 1, 8, 0, 25e9, fabric="nvswitch",
                                  fabric_inter="none"))
    assert fake.intra_fabric == "pcie" and not fake.ll128_default and not fake.has_network


def test_cluster_calibration_keys_are_read():
    s = C.nccl_system(_cluster(A100, 2, 8, 8, 25e9,
                               calibration={"nccl_inter_bw_scale": 0.8, "other_module": 3.0}))
    assert s.calibration == C.NcclCalibration(inter_bw_scale=0.8)


def _g(system: C.NcclSystem, pattern: str, ppn: int, nodes: int) -> tuple[int, float, float]:
    g = system.graph(pattern, ppn, nodes)
    return g.n_channels, g.bw_intra_bytes_per_s / 1e9, g.bw_inter_bytes_per_s / 1e9


@pytest.mark.parametrize("key, nodes, ring, tree, nvls, coll_channels", [
    # 240 / 40 = 6 channels (perfect) -> dup (40 >= 25) -> 12 x 20.
    ("8xA100", 1, (12, 20, 20), (12, 20, 20), (0, 0, 0), 24),
    # floor(370.8/60) = 6 x 60 (360; 50/40/30 give no strictly larger total) -> dup -> 12 x 30.
    # NVLS: 8 heads, 9 x bw <= 370.8 -> 40; bwInter raised while < 80 -> 60 (array top).
    ("8xH100", 1, (12, 30, 30), (12, 30, 30), (8, 40, 60), 24),
    # 164.8: 2x60=120 < 3x50=150 < 4x40=160 -> dup (4 channels is not > 4) -> 8 x 20.
    # NVLS: 9 x bw <= 164.8 -> 15; bwInter 15 -> 20 -> 24 -> 30 (stops at 2 x 15).
    ("8xH800", 1, (8, 20, 20), (8, 20, 20), (8, 15, 30), 16),
    # floor(721.8/90) = 8 x 90 -> dup -> 16 x 45; NVLS 9 x 80 <= 721.8 -> 80 / 90.
    ("8xB200", 1, (16, 45, 45), (16, 45, 45), (8, 80, 90), 32),
    # One NIC per channel, min(PCIe Gen4 24, HDR 25) = 24; 24 < 25: no dup. 2 nodes: the tree
    # raises bwIntra to 30 (8 x 30 x 7/8 = 210 <= 240; 48 would need 336).
    ("A100+HDR", 2, (8, 24, 24), (8, 30, 24), (0, 0, 0), 16),
    ("A100+HDR", 16, (8, 24, 24), (8, 24, 24), (0, 0, 0), 16),
    # min(PCIe Gen5 48, NDR 50) = 48; sm90 with bw < 50 and 8 > 4 channels: no dup.
    # NVLS: 9 x bw <= 370.8 in the inter array -> 40; bwInter 42, 45, 48 (NIC path cap).
    ("H100+NDR", 2, (8, 48, 48), (8, 48, 48), (8, 40, 48), 16),
    ("H100+NDR", 16, (8, 48, 48), (8, 48, 48), (8, 40, 48), 16),
    # nccl.md §10.2 inputs: 1 x 48 ring and tree (no duplication at one GPU per node).
    ("1xH100+NDR", 64, (1, 48, 48), (1, 48, 48), (0, 0, 0), 2),
])
def test_graph_table_rows(key, nodes, ring, tree, nvls, coll_channels):
    s = SYS[key]
    ppn = s.gpus_per_node
    assert _g(s, "ring", ppn, nodes) == pytest.approx(ring)
    assert _g(s, "tree", ppn, nodes) == pytest.approx(tree)
    assert _g(s, "nvls", ppn, nodes) == pytest.approx(nvls)
    assert s.coll_channels(ppn, nodes) == coll_channels


def test_group_uses_only_its_own_nics():
    s = SYS["H100+NDR"]
    # ppn = 2 owns 2 NDR NICs: 2 x 48, then duplicated (48 >= 25, 2 channels) -> 4 x 24.
    assert _g(s, "ring", 2, 4) == pytest.approx((4, 24, 24))
    # ppn = 1 owns one NIC: 1 x 48, never duplicated.
    assert _g(s, "ring", 1, 4) == pytest.approx((1, 48, 48))
    # 4 NICs per 8 GPUs: one GPU owns half a NIC = 25 GB/s -> sm90 inter speed 24.
    half = C.nccl_system(_cluster(H100, 4, 8, 4, 50e9))
    assert _g(half, "ring", 1, 4) == pytest.approx((1, 24, 24))
    # ... and the whole node 4 NICs x 48 -> 4 channels, duplicated to 8 x 24.
    assert _g(half, "ring", 8, 4) == pytest.approx((8, 24, 24))
    # The per-call geometry changes the prediction: ppn=1 on 4 nodes is NIC-bound at 48.
    t1 = C.collective_time_s(s, "allgather", 4 * GiB, 4, 4).time_s
    t8 = C.collective_time_s(s, "allgather", 4 * GiB, 32, 4).time_s
    assert t1 > t8


# ---- the stored table, nccl.md §10.2 -----------------------------------------------------------
# Worked examples of §3.3/3.4 (µs / GB/s):
#  8xA100 AllReduce Ring/LL: busBw = min(llMaxBw 87.7, 0.5 x 12 x 20) = 87.7, x 8/14 = 50.1;
#    L = 6.6 + 14 x 0.6 = 15.0.
#  2x8xH100 AllReduce NVLSTree: intra 40 x 0.85 x 7/8 x 2 = 59.5, inter 48 x 2 = 96, cap 57.7:
#    8 x 57.7 x 16/30 = 246.2; L = 25 + 2 x 1 x 20.9 = 66.8.
#  64x1xH100 AllGather PAT: 48 x 0.75 = 36.0; L = 8 + 6 x 14 / 3.5 + 2.8 x 64 = 211.2.
TABLE_10_2 = {
    ("8xA100", 8, 1, "allreduce"): {
        "Tree/LL": (15.2, 29.1), "Tree/LL128": (31.5, 85.9), "Tree/Simple": (64.4, 110.4),
        "Ring/LL": (15.0, 50.1), "Ring/LL128": (40.6, 126.2), "Ring/Simple": (56.0, 137.1)},
    ("8xA100", 8, 1, "allgather"): {
        "Ring/LL": (10.8, 100.2), "Ring/LL128": (27.3, 252.3), "Ring/Simple": (32.2, 274.3)},
    ("8xH100", 8, 1, "allreduce"): {
        "Tree/LL": (15.2, 43.6), "Tree/LL128": (31.5, 128.8), "Tree/Simple": (64.4, 165.6),
        "Ring/LL": (15.0, 80.6), "Ring/LL128": (40.6, 189.3), "Ring/Simple": (56.0, 205.7),
        "NVLS/Simple": (25.0, 272.0)},
    ("8xH100", 8, 1, "allgather"): {
        "Ring/LL": (10.8, 161.1), "Ring/LL128": (27.3, 378.5), "Ring/Simple": (32.2, 411.4),
        "NVLS/Simple": (25.0, 208.2)},
    ("H100+NDR", 16, 2, "allreduce"): {
        "Tree/LL": (25.2, 19.5), "Tree/LL128": (48.5, 146.8), "Tree/Simple": (92.4, 165.6),
        "Ring/LL": (40.0, 20.8), "Ring/LL128": (75.2, 156.6), "Ring/Simple": (131.6, 204.8),
        "NVLSTree/Simple": (66.8, 246.2)},
    ("H100+NDR", 16, 2, "allgather"): {
        "Ring/LL": (23.3, 41.6), "Ring/LL128": (44.6, 313.2), "Ring/Simple": (70.0, 409.6)},
    ("H100+NDR", 128, 16, "allreduce"): {
        "Tree/LL": (55.2, 10.2), "Tree/LL128": (99.5, 116.0), "Tree/Simple": (176.4, 144.0),
        "Ring/LL": (311.6, 10.3), "Ring/LL128": (559.6, 148.0), "Ring/Simple": (1190.0, 193.5),
        "NVLSTree/Simple": (192.2, 183.4)},
    ("H100+NDR", 128, 16, "allgather"): {
        "Ring/LL": (159.1, 20.6), "Ring/LL128": (286.8, 295.9), "Ring/Simple": (599.2, 387.0)},
    ("A100+HDR", 128, 16, "allreduce"): {
        "Tree/LL": (55.2, 10.2), "Tree/LL128": (99.5, 66.8), "Tree/Simple": (176.4, 71.2),
        "Ring/LL": (311.6, 10.3), "Ring/LL128": (559.6, 80.6), "Ring/Simple": (1190.0, 96.8)},
    ("A100+HDR", 128, 16, "allgather"): {
        "Ring/LL": (159.1, 20.6), "Ring/LL128": (286.8, 161.3), "Ring/Simple": (599.2, 193.5)},
    ("1xH100+NDR", 64, 64, "allreduce"): {
        "Tree/LL": (66.8, 4.7), "Tree/LL128": (116.0, 14.5), "Tree/Simple": (176.4, 18.0),
        "Ring/LL": (636.6, 10.4), "Ring/LL128": (1085.0, 18.6), "Ring/Simple": (1772.4, 24.4)},
    ("1xH100+NDR", 64, 64, "allgather"): {
        "Ring/LL": (321.6, 20.7), "Ring/LL128": (549.5, 37.3), "Ring/Simple": (890.4, 48.8),
        "PAT/Simple": (211.2, 36.0)},
}


@pytest.mark.parametrize("key", list(TABLE_10_2), ids=lambda k: f"{k[0]}-{k[1]}-{k[3]}")
def test_stored_table_matches_nccl_md_10_2(key):
    name, n, nodes, coll = key
    lat, bw = C.tuning_table(SYS[name], coll, n, nodes)
    got = {_label(a, p): (lat[a, p] * 1e6, bw[a, p] / 1e9)
           for a in range(len(C.ALGORITHMS)) for p in range(len(C.PROTOCOLS)) if bw[a, p] > 0}
    expected = TABLE_10_2[key]
    assert set(got) == set(expected)  # the same runnable pairs, no more
    for label, (l_us, b_gbps) in expected.items():
        assert got[label][0] == pytest.approx(l_us, abs=0.051), label  # rounded to 0.1
        assert got[label][1] == pytest.approx(b_gbps, abs=0.051), label


# ---- the chosen pair by message size, nccl.md §10.2 -------------------------------------------
SIZES = (1 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 4 * GiB)
CHOSEN_10_2 = {
    ("8xA100", 8, 1, "allreduce"): [("Ring/LL", 15.0), ("Ring/LL", 16.3), ("Ring/LL", 35.9),
                                    ("Ring/LL128", 173.6), ("Ring/Simple", 2013.3),
                                    ("Ring/Simple", 31373.5)],
    ("8xA100", 8, 1, "allgather"): [("Ring/LL", 10.8), ("Ring/LL", 11.5), ("Ring/LL", 21.3),
                                    ("Ring/Simple", 93.4), ("Ring/Simple", 1010.9),
                                    ("Ring/Simple", 15690.9)],
    ("8xH100", 8, 1, "allreduce"): [("Ring/LL", 15.0), ("Ring/LL", 15.8), ("Ring/LL", 28.0),
                                    ("NVLS/Simple", 86.7), ("NVLS/Simple", 1011.9),
                                    ("NVLS/Simple", 15815.3)],
    ("8xH100", 8, 1, "allgather"): [("Ring/LL", 10.8), ("Ring/LL", 11.2), ("Ring/LL", 17.3),
                                    ("Ring/LL128", 71.6), ("Ring/Simple", 684.6),
                                    ("Ring/Simple", 10471.4)],
    ("H100+NDR", 16, 2, "allreduce"): [("Tree/LL", 25.3), ("Tree/LL", 30.8),
                                       ("Tree/LL128", 60.4), ("NVLSTree/Simple", 134.9),
                                       ("NVLSTree/Simple", 1157.2),
                                       ("NVLSTree/Simple", 17512.8)],
    ("H100+NDR", 16, 2, "allgather"): [("Ring/LL", 23.3), ("Ring/LL", 24.9),
                                       ("Ring/LL128", 47.9), ("Ring/LL128", 98.2),
                                       ("Ring/Simple", 725.4), ("Ring/Simple", 10555.8)],
    ("H100+NDR", 128, 16, "allreduce"): [("Tree/LL", 55.3), ("Tree/LL", 65.9),
                                         ("Tree/LL128", 114.6), ("Tree/LL128", 260.2),
                                         ("NVLSTree/Simple", 1655.6),
                                         ("NVLSTree/Simple", 23606.6)],
    ("H100+NDR", 128, 16, "allgather"): [("Ring/LL", 159.1), ("Ring/LL", 162.3),
                                         ("Ring/LL", 210.1), ("Ring/LL128", 343.5),
                                         ("Ring/LL128", 1193.9), ("Ring/Simple", 11696.6)],
    ("A100+HDR", 128, 16, "allreduce"): [("Tree/LL", 55.3), ("Tree/LL", 65.9),
                                         ("Tree/LL128", 125.7), ("Tree/LL128", 378.8),
                                         ("Ring/LL128", 3888.8), ("Ring/Simple", 46055.7)],
    ("A100+HDR", 128, 16, "allgather"): [("Ring/LL", 159.1), ("Ring/LL", 162.3),
                                         ("Ring/LL", 210.1), ("Ring/LL128", 390.8),
                                         ("Ring/LL128", 1951.4), ("Ring/Simple", 22794.1)],
    ("1xH100+NDR", 64, 64, "allreduce"): [("Tree/LL", 67.0), ("Tree/LL", 89.9),
                                          ("Tree/LL128", 236.5), ("Tree/LL128", 1401.6),
                                          ("Ring/Simple", 13491.4), ("Ring/Simple", 178642.1)],
    ("1xH100+NDR", 64, 64, "allgather"): [("PAT/Simple", 211.2), ("PAT/Simple", 213.0),
                                          ("PAT/Simple", 240.3), ("PAT/Simple", 677.2),
                                          ("Ring/Simple", 6395.4), ("Ring/Simple", 88970.8)],
}


@pytest.mark.parametrize("key", list(CHOSEN_10_2), ids=lambda k: f"{k[0]}-{k[1]}-{k[3]}")
def test_chosen_pair_and_time_by_size(key):
    # e.g. 16x8xA100 AllReduce 4 GiB, Ring/Simple with the plateau (4 GiB / (16 x 128) >= 64):
    # 1190 x 1.4 + 2^32 / (96.756 x 1000) = 1666 + 44389.7 = 46055.7 µs.
    name, n, nodes, coll = key
    r = C.collective_time_s(SYS[name], coll, np.array(SIZES, dtype=float), n, nodes)
    for i, (label, t_us) in enumerate(CHOSEN_10_2[key]):
        assert _label(r.algo_index[i], r.proto_index[i]) == label, SIZES[i]
        assert r.time_s[i] * 1e6 == pytest.approx(t_us, rel=1e-3, abs=0.06), SIZES[i]


def test_ring_plateau_only_multi_node_allreduce_simple():
    # 2x8xH100, forced Ring/Simple at 4 GiB: L = 131.6 x 1.4 = 184.24 since
    # 4 GiB / (16 coll channels x 16 ranks) >= 64; B = 204.8 GB/s.
    r = C.collective_time_s(SYS["H100+NDR"], "allreduce", 4 * GiB, 16, 2, "ring", "simple")
    assert float(r.time_s) * 1e6 == pytest.approx(131.6 * 1.4 + 4 * GiB / 204.8e3, rel=1e-6)
    # Below the threshold (1 KiB / 256 < 64) the latency is plain: 131.6 + 1024/204800.
    r = C.collective_time_s(SYS["H100+NDR"], "allreduce", 1 * KiB, 16, 2, "ring", "simple")
    assert float(r.time_s) * 1e6 == pytest.approx(131.6 + 1024 / 204.8e3, rel=1e-6)


def test_ring_plateau_threshold_inside_a_size_octave():
    # 3 x 8 H100: threshold 64 x 16 coll channels x 24 ranks = 24576 B, inside [16 Ki, 32 Ki).
    # Ring/Simple: B = 8 x 48 x 24/46 = 200.348 GB/s;
    # L = 8.4 + (46 - 4) x max(3.4, 1 x 3) + 4 x 14 = 207.2 µs (x 1.4 at/after the threshold).
    s = SYS["H100+NDR"]
    b = 8 * 48 * 24 / 46 * 1e3  # bytes per µs
    sizes = np.array([20000.0, 24575.0, 24576.0, 30000.0])
    r = C.collective_time_s(s, "allreduce", sizes, 24, 3, "ring", "simple")
    expected = [207.2 + 20000 / b, 207.2 + 24575 / b, 207.2 * 1.4 + 24576 / b,
                207.2 * 1.4 + 30000 / b]
    assert (r.time_s * 1e6).tolist() == pytest.approx(expected, rel=1e-9)


# ---- nccl.md §10.1 summary ----------------------------------------------------------------------
def _busbw_gbps(system, coll, size, n, nodes, algo="auto", proto="auto"):
    alt = C.all_alternatives(system, coll, size, n, nodes, algo, proto)[0]
    return alt.label, alt.busbw_bytes_per_s / 1e9


@pytest.mark.parametrize("name, coll, size, n, nodes, algo, label, busbw", [
    ("8xA100", "allreduce", 4 * GiB, 8, 1, "auto", "Ring/Simple", 240.0),
    ("8xH100", "allreduce", 4 * GiB, 8, 1, "auto", "NVLS/Simple", 475.0),
    ("8xH100", "allgather", 4 * GiB, 8, 1, "auto", "Ring/Simple", 359.0),
    ("H100+NDR", "allreduce", 4 * GiB, 16, 2, "auto", "NVLSTree/Simple", 461.0),
    ("H100+NDR", "allreduce", 4 * GiB, 16, 2, "ring", "Ring/Simple", 382.0),
    ("H100+NDR", "allreduce", 8 * GiB, 32, 4, "auto", "Ring/Simple", 380.0),
    ("H100+NDR", "allreduce", 8 * GiB, 32, 4, "nvlstree", "NVLSTree/Simple", 364.0),
    ("A100+HDR", "allreduce", 8 * GiB, 32, 4, "auto", "Ring/Simple", 190.0),
    ("8xH800", "allreduce", 8 * GiB, 8, 1, "auto", "NVLS/Simple", 178.0),
    ("8xB200", "allreduce", 8 * GiB, 8, 1, "auto", "NVLS/Simple", 720.0),
])
def test_summary_busbw_10_1(name, coll, size, n, nodes, algo, label, busbw):
    # e.g. 8xH100 NVLS: 8 x min(40 x 0.85 x 7/8 x 2, 60) = 476 GB/s busBw; at 4 GiB the 25 µs
    # latency costs 0.2 %. A100+HDR, 4 nodes: 192 busBw, ring latency x1.4 -> ~191.
    got_label, got = _busbw_gbps(SYS[name], coll, size, n, nodes, algo)
    assert got_label == label
    assert got == pytest.approx(busbw, rel=0.01)


# ---- validity and forcing (nccl.md §2, §4, §5) -------------------------------------------------
def _field(excinfo) -> str:
    return excinfo.value.field


def test_tree_cannot_run_allgather():
    with pytest.raises(InputError) as e:
        C.collective_time_s(SYS["8xA100"], "allgather", MiB, 8, 1, algo="tree")
    assert _field(e) == "nccl_algo" and "ring" in str(e.value)


def test_nvls_needs_hopper_nvswitch():
    with pytest.raises(InputError) as e:
        C.collective_time_s(SYS["8xA100"], "allreduce", MiB, 8, 1, algo="nvls")
    assert _field(e) == "nccl_algo"
    r = C.collective_time_s(SYS["8xH100"], "allreduce", MiB, 8, 1, algo="nvls")
    assert r.algo_names()[()] == "nvls"
    # Not on more than one node without CollNet (SHARP); NVLSTree is multi-node only.
    with pytest.raises(InputError):
        C.collective_time_s(SYS["H100+NDR"], "allreduce", MiB, 16, 2, algo="nvls")
    with pytest.raises(InputError):
        C.collective_time_s(SYS["8xH100"], "allreduce", MiB, 8, 1, algo="nvlstree")
    # NCCL_NVLS_ENABLE=0
    off = C.nccl_system(_cluster(H100, 1, 8, 8, 50e9), nvls_enabled=False)
    assert not off.nvls_supported
    assert C.collective_time_s(off, "allreduce", GiB, 8, 1).algo_names()[()] == "ring"


def test_collnet_only_when_enabled():
    with pytest.raises(InputError):
        C.collective_time_s(SYS["H100+NDR"], "allreduce", GiB, 16, 2, algo="collnet")
    on = C.nccl_system(_cluster(H100, 2, 8, 8, 50e9), collnet_enabled=True)
    r = C.collective_time_s(on, "allreduce", GiB, 16, 2, algo="collnet")
    assert r.algo_names()[()] in ("collnetdirect", "collnetchain")
    assert r.proto_names()[()] == "simple"
    # With SHARP, NVLS runs across nodes too.
    assert C.collective_time_s(on, "allreduce", GiB, 16, 2, algo="nvls").algo_names()[()] == "nvls"


def test_pat_only_at_one_gpu_per_node():
    s = SYS["H100+NDR"]
    r = C.collective_time_s(s, "allgather", MiB, 16, 16, algo="pat")
    assert r.algo_names()[()] == "pat" and r.proto_names()[()] == "simple"
    with pytest.raises(InputError) as e:
        C.collective_time_s(s, "allgather", MiB, 16, 2, algo="pat")
    assert _field(e) == "nccl_algo"
    with pytest.raises(InputError):  # never for AllReduce
        C.collective_time_s(s, "allreduce", MiB, 16, 16, algo="pat")
    with pytest.raises(InputError):  # PAT is Simple only
        C.collective_time_s(s, "reducescatter", MiB, 16, 16, algo="pat", proto="ll")


def test_proto_error_names_proto_field():
    with pytest.raises(InputError) as e:
        C.collective_time_s(SYS["8xH100"], "allreduce", MiB, 8, 1, algo="nvls", proto="ll")
    assert _field(e) == "nccl_proto" and "simple" in str(e.value)


def test_ll128_not_default_on_pcie_only_nodes():
    s = SYS["PCIe"]
    _, bw = C.tuning_table(s, "allreduce", 8, 1)
    assert not bw[:, C.LL128].any() and bw[C.RING, C.SIMPLE] > 0
    sizes = np.logspace(0, 33, 200, base=2.0)
    r = C.collective_time_s(s, "allreduce", sizes, 16, 2)
    assert not (r.proto_index == C.LL128).any()
    # Naming LL128 explicitly bypasses the platform check (nccl.md §4.2).
    r = C.collective_time_s(s, "allreduce", MiB, 8, 1, proto="ll128")
    assert r.proto_names()[()] == "ll128"
    # An exclusion list leaves LL128 tri-state: still off here.
    r = C.collective_time_s(s, "allreduce", sizes, 8, 1, proto="^ll")
    assert (r.proto_index == C.SIMPLE).all()


def test_broadcast_and_reduce_are_ring_only():
    with pytest.raises(InputError):
        C.collective_time_s(SYS["8xH100"], "broadcast", MiB, 8, 1, algo="tree")
    r = C.collective_time_s(SYS["8xH100"], "reduce", np.array([1.0 * KiB, 1.0 * GiB]), 8, 1)
    assert list(r.algo_names()) == ["ring", "ring"]
    # sameChannels: L = baseLat + one hop: Ring/LL 6.6 + 0.6 = 7.2 µs; B = 0.5 x 360 capped at
    # llMaxBw 141 (ratio n/nsteps = 1): 1 KiB -> 7.2 + 1024/141000 µs.
    assert float(r.time_s[0]) * 1e6 == pytest.approx(7.2 + 1024 / 141e3, rel=1e-9)


def test_on_invalid_inf_and_valid_pairs():
    s = SYS["H100+NDR"]
    n = np.array([8, 16, 16, 1])
    nodes = np.array([1, 2, 16, 1])
    r = C.collective_time_s(s, "allgather", MiB, n, nodes, algo="pat", on_invalid="inf")
    assert np.isinf(r.time_s[:2]).all() and (r.algo_index[:2] == -1).all()
    assert np.isfinite(r.time_s[2]) and r.algo_names()[2] == "pat"
    assert r.time_s[3] == 0.0  # one rank
    mask = C.valid_pairs(s, "allgather", n, nodes, algo="pat")
    assert mask.tolist() == [False, False, True, True]
    assert C.valid_pairs(s, "allgather", n, nodes).all()
    # Geometries that are not communicators of this cluster: inf, or an error naming n_ranks.
    bad = C.collective_time_s(s, "allreduce", MiB, np.array([8, 12]), np.array([1, 1]),
                              on_invalid="inf")
    assert np.isfinite(bad.time_s[0]) and np.isinf(bad.time_s[1])
    with pytest.raises(InputError) as e:
        C.collective_time_s(s, "allreduce", MiB, 12, 1)  # 12 ranks on one 8-GPU node
    assert _field(e) == "n_ranks"
    with pytest.raises(InputError) as e:
        C.collective_time_s(s, "allreduce", MiB, 12, 8)  # 12 not divisible by 8 nodes
    assert _field(e) == "n_ranks"
    lonely = C.nccl_system(_cluster(H100, 1, 8, 0, 50e9, fabric_inter="none"))
    with pytest.raises(InputError) as e:
        C.collective_time_s(lonely, "allreduce", MiB, 16, 2)
    assert _field(e) == "n_nodes"


def test_one_rank_costs_nothing():
    r = C.collective_time_s(SYS["8xH100"], "allreduce", np.array([0.0, 1.0, 1e9]), 1, 1)
    assert r.time_s.tolist() == [0.0, 0.0, 0.0]
    assert set(r.algo_names()) == {"ring"} and set(r.proto_names()) == {"simple"}
    assert C.collective_time_s(SYS["8xH100"], "allgather", GiB, 1, 1, algo="tree").time_s == 0
    assert C.all_alternatives(SYS["8xH100"], "allreduce", GiB, 1, 1)[0].time_s == 0.0


# ---- NCCL_ALGO / NCCL_PROTO syntax ---------------------------------------------------------
def test_parse_spec_forms():
    assert C.parse_nccl_spec("auto", "algo") == {"*": C.ALGORITHMS}
    assert C.parse_nccl_spec("Ring,TREE", "algo") == {"*": ("tree", "ring")}
    assert C.parse_nccl_spec("^tree", "algo")["*"] == tuple(a for a in C.ALGORITHMS
                                                             if a != "tree")
    assert C.parse_nccl_spec("collnet", "algo")["*"] == ("collnetdirect", "collnetchain")
    spec = C.parse_nccl_spec("ring,tree;allreduce:^tree;broadcast:ring", "algo")
    assert spec["*"] == ("tree", "ring")
    assert "tree" not in spec["allreduce"] and spec["broadcast"] == ("ring",)
    assert C.parse_nccl_spec("^LL128;allreduce:LL128", "proto") == {
        "*": ("ll", "simple"), "allreduce": ("ll128",)}


@pytest.mark.parametrize("spec, kind, field, hint", [
    ("rign", "algo", "nccl_algo", "ring"),
    ("allreduce:tree;allgathr:ring", "algo", "nccl_algo", "allgather"),
    ("ring;tree", "algo", "nccl_algo", "collective"),
    ("simpel", "proto", "nccl_proto", "simple"),
    ("", "proto", "nccl_proto", "auto"),
])
def test_parse_spec_errors(spec, kind, field, hint):
    with pytest.raises(InputError) as e:
        C.parse_nccl_spec(spec, kind)
    assert e.value.field == field and hint in str(e.value)


def test_per_collective_spec_leaves_others_auto():
    s = SYS["8xH100"]
    spec = "allreduce:tree;allgather:ring"
    sizes = np.array([1.0 * KiB, 1.0 * GiB])
    assert set(C.collective_time_s(s, "allreduce", sizes, 8, 1, spec).algo_names()) == {"tree"}
    assert set(C.collective_time_s(s, "allgather", sizes, 8, 1, spec).algo_names()) == {"ring"}
    # ReduceScatter is not mentioned: auto, same as no spec at all.
    a = C.collective_time_s(s, "reducescatter", sizes, 8, 1, spec)
    b = C.collective_time_s(s, "reducescatter", sizes, 8, 1)
    assert np.array_equal(a.time_s, b.time_s) and np.array_equal(a.algo_index, b.algo_index)
    # Excluding NVLS for AllReduce makes 1 GiB go to Ring/Simple (205.7 > 165.6 tree algbw).
    r = C.collective_time_s(s, "allreduce", GiB, 8, 1, "ring,tree,nvls;allreduce:^nvls")
    assert _label(r.algo_index[()], r.proto_index[()]) == "Ring/Simple"


# ---- vectorisation -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["H100+NDR", "A100+HDR", "8xB200", "PCIe"])
@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter", "broadcast"])
def test_vectorised_equals_scalar_and_pairwise(name, coll):
    s = SYS[name]
    rng = np.random.default_rng(7)
    m = 120
    ppn = rng.choice([p for p in (1, 2, 4, 8) if p <= s.gpus_per_node], m)
    nodes = rng.choice([1, 2, 3, 4, 16], m)
    n = ppn * nodes
    # log-uniform sizes plus exact powers of two (tree-correction bucket edges) and 0
    sizes = np.concatenate([2.0 ** rng.uniform(0, 34, m - 20), 2.0 ** rng.integers(0, 34, 19),
                            [0.0]])
    r = C.collective_time_s(s, coll, sizes, n, nodes)
    for i in range(m):
        one = C.collective_time_s(s, coll, float(sizes[i]), int(n[i]), int(nodes[i]))
        assert one.time_s[()] == r.time_s[i]
        assert one.algo_index[()] == r.algo_index[i] and one.proto_index[()] == r.proto_index[i]
        # the fast per-octave selection agrees with evaluating every pair (all_alternatives)
        best = C.all_alternatives(s, coll, float(sizes[i]), int(n[i]), int(nodes[i]))[0]
        assert (best.algo, best.proto) == (r.algo_names()[i], r.proto_names()[i])
        assert best.time_s == pytest.approx(r.time_s[i], rel=1e-12, abs=1e-18)


def test_broadcasting_shapes():
    s = SYS["H100+NDR"]
    sizes = np.array([[1.0 * KiB], [1.0 * GiB]])
    n = np.array([8, 16, 32])
    r = C.collective_time_s(s, "allreduce", sizes, n, n // 8)
    assert r.time_s.shape == (2, 3) and r.algo_index.shape == (2, 3)
    assert r.time_s[1, 2] == C.collective_time_s(s, "allreduce", GiB, 32, 4).time_s
    assert not r.time_s.flags.writeable
    assert C.collective_time_s(s, "allreduce", GiB, 8, 1).time_s.shape == ()


def test_coded_batch_matches_plain_calls():
    s = SYS["H100+NDR"]
    algo_table, proto_table = ("auto", "ring", "allreduce:tree"), ("auto", "simple")
    ac = np.array([0, 1, 2, 1, 0, 2])
    pc = np.array([0, 1, 0, 0, 1, 1])
    sizes = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) * MiB
    r = C.collective_time_s_coded(s, "allreduce", sizes, 16, 2, ac, pc, algo_table, proto_table)
    for i in range(6):
        one = C.collective_time_s(s, "allreduce", sizes[i], 16, 2, algo_table[ac[i]],
                                  proto_table[pc[i]])
        assert r.time_s[i] == one.time_s and r.algo_index[i] == one.algo_index


# ---- alternatives and nccl-tests bandwidths ----------------------------------------------------
def test_busbw_factor():
    # nccl.md §6: 2(n-1)/n, (n-1)/n, 1
    assert C.busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert C.busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert C.busbw_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert C.busbw_factor("broadcast", 8) == 1.0
    assert C.busbw_factor("alltoall", 2) == pytest.approx(0.5)
    assert np.allclose(C.busbw_factor("allreduce", np.array([1, 2, 4])), [0.0, 1.0, 1.5])
    with pytest.raises(InputError):
        C.busbw_factor("allreduse", 8)


def test_all_alternatives_sorted_and_consistent():
    s = SYS["H100+NDR"]
    alts = C.all_alternatives(s, "allreduce", 16 * MiB, 16, 2)
    # Tree x3, Ring x3, NVLSTree: 7 runnable pairs on 2 nodes (no CollNet, no NVLS).
    assert len(alts) == 7
    times = [a.model_time_s for a in alts]
    assert times == sorted(times)
    assert alts[0].label == "NVLSTree/Simple"  # nccl.md §10.2: 134.9 µs at 16 MiB
    for a in alts:
        assert a.algbw_bytes_per_s == pytest.approx(16 * MiB / a.time_s)
        assert a.busbw_bytes_per_s == pytest.approx(a.algbw_bytes_per_s * 30 / 16)
    forced = C.all_alternatives(s, "allreduce", 16 * MiB, 16, 2, algo="ring")
    assert [a.proto for a in forced] and {a.algo for a in forced} == {"ring"}


# ---- calibration -----------------------------------------------------------------------------
def test_calibration_scales_time_not_choice():
    base = SYS["8xA100"]
    cal = C.with_calibration(base, C.NcclCalibration(intra_bw_scale=0.8, latency_scale=2.0))
    # 8xA100 AllReduce 256 MiB Ring/Simple: L = 56 µs, X = 2^28 / 137142.9 = 1957.3 µs
    # -> 2 x 56 + 1957.3 / 0.8.
    r = C.collective_time_s(cal, "allreduce", 256 * MiB, 8, 1)
    assert float(r.time_s) * 1e6 == pytest.approx(2 * 56 + 2**28 / (240e3 * 8 / 14) / 0.8)
    # A huge latency scale would make a low-latency pair faster in reality, but NCCL still
    # picks by its own model: the chosen pair is the uncalibrated one at every size.
    weird = C.with_calibration(base, C.NcclCalibration(latency_scale=50.0))
    sizes = 2.0 ** np.arange(0, 33)
    a = C.collective_time_s(base, "allreduce", sizes, 8, 1)
    b = C.collective_time_s(weird, "allreduce", sizes, 8, 1)
    assert np.array_equal(a.algo_index, b.algo_index) and np.array_equal(a.proto_index,
                                                                         b.proto_index)
    assert (b.time_s > a.time_s).all()
    with pytest.raises(InputError):
        C.NcclCalibration(inter_bw_scale=0.0)


def _synthetic_rows(system):
    rows = []
    for coll, n, nodes in (("allreduce", 8, 1), ("allgather", 8, 1), ("allreduce", 16, 2),
                           ("allgather", 32, 4), ("reducescatter", 128, 16)):
        for size in (8 * KiB, 1 * MiB, 64 * MiB, 1 * GiB):
            t = float(C.collective_time_s(system, coll, size, n, nodes).time_s)
            rows.append(C.NcclMeasurement(coll, size, n, nodes, time_s=t))
    return rows


def test_fit_calibration_recovers_known_scales():
    truth = C.NcclCalibration(intra_bw_scale=0.9, inter_bw_scale=0.75, latency_scale=1.5)
    s = SYS["H100+NDR"]
    rows = _synthetic_rows(C.with_calibration(s, truth))
    cal, before, after = C.fit_calibration(s, rows)
    assert cal.intra_bw_scale == pytest.approx(0.9, rel=1e-6)
    assert cal.inter_bw_scale == pytest.approx(0.75, rel=1e-6)
    assert cal.latency_scale == pytest.approx(1.5, rel=1e-6)
    assert before > 0.05 and after < 1e-9
    # busbw rows (nccl-tests style) give the same fit: t = S x factor / busbw.
    as_busbw = [C.NcclMeasurement(r.collective, r.nbytes, r.n_ranks, r.n_nodes,
                                  busbw_bytes_per_s=r.nbytes * C.busbw_factor(
                                      r.collective, r.n_ranks) / r.time_s) for r in rows]
    cal2, _, _ = C.fit_calibration(s, as_busbw)
    assert cal2.inter_bw_scale == pytest.approx(0.75, rel=1e-6)


def test_fit_calibration_without_multi_node_rows_keeps_inter_scale():
    truth = C.NcclCalibration(intra_bw_scale=0.8)
    s = SYS["8xH100"]
    rows = [(coll, size, 8, 1, float(C.collective_time_s(C.with_calibration(s, truth), coll,
                                                          size, 8, 1).time_s))
            for coll in ("allreduce", "allgather") for size in (64 * KiB, 16 * MiB, GiB)]
    cal, _, after = C.fit_calibration(s, rows)
    assert cal.intra_bw_scale == pytest.approx(0.8, rel=1e-6)
    assert cal.inter_bw_scale == 1.0 and after < 1e-9
    with pytest.raises(InputError):
        C.fit_calibration(s, [("allreduce", 1.0, 1, 1, 1e-6)])  # one rank only


# ---- P2P and all-to-all (nccl.md §7) -----------------------------------------------------------
def test_p2p_time():
    s = SYS["H100+NDR"]
    t = C.p2p_time_s(s, np.array([0.0, GiB, GiB]), np.array([False, False, True]))
    # intra: 6.6 + 0.6 µs + 2^30 / 370.8e9 (NVSwitch path); inter: 6.6 + 2.7 + 1.0 µs +
    # 2^30 / min(PCIe 48e9, NIC share 50e9).
    assert t[0] == 0.0
    assert t[1] == pytest.approx(7.2e-6 + GiB / 370.8e9)
    assert t[2] == pytest.approx(10.3e-6 + GiB / 48e9)
    lonely = C.nccl_system(_cluster(H100, 1, 8, 0, 50e9, fabric_inter="none"))
    with pytest.raises(InputError):
        C.p2p_time_s(lonely, GiB, True)


def test_alltoall_time():
    s = SYS["H100+NDR"]
    # 2 nodes x 8: intra 7/16 x S over 360e9 (ring 12 x 30), inter 8/16 x S over 48e9: the
    # inter part dominates; ceil(15/8) = 2 rounds x 10.3 µs.
    t = C.alltoall_time_s(s, GiB, 16, 2)
    assert float(t) == pytest.approx(2 * 10.3e-6 + 0.5 * GiB / 48e9)
    # one node: 7/8 x S over 360e9 + 1 round x 7.2 µs
    assert float(C.alltoall_time_s(s, GiB, 8, 1)) == pytest.approx(7.2e-6 + 7 / 8 * GiB / 360e9)
    assert float(C.alltoall_time_s(s, GiB, 1, 1)) == 0.0
    vec = C.alltoall_time_s(s, np.array([GiB, GiB]), np.array([16, 8]), np.array([2, 1]))
    assert vec[0] == float(t)


# ---- input errors ----------------------------------------------------------------------------
def test_unknown_collective_and_bad_sizes():
    with pytest.raises(InputError) as e:
        C.collective_time_s(SYS["8xA100"], "allreduse", MiB, 8, 1)
    assert e.value.field == "collective" and "allreduce" in str(e.value)
    with pytest.raises(InputError) as e:
        C.collective_time_s(SYS["8xA100"], "allreduce", -1.0, 8, 1)
    assert e.value.field == "nbytes"
    with pytest.raises(InputError):
        C.collective_time_s(SYS["8xA100"], "allreduce", MiB, 8, 1, on_invalid="nan")
    with pytest.raises(InputError):
        C.collective_time_s(SYS["8xA100"], "allreduce", MiB, 7.5, 1)
    assert math.isfinite(float(C.collective_time_s(SYS["8xA100"], "all_reduce", MiB, 8.0,
                                                   1).time_s))


def test_mixed_one_rank_and_invalid_entries_on_one_gpu_nodes():
    s = SYS["1xH100+NDR"]  # one GPU per node: any multi-rank group spans nodes
    r = C.collective_time_s(s, "allgather", MiB, np.array([1, 64, 8]), np.array([1, 64, 4]),
                            on_invalid="inf")
    assert r.time_s[0] == 0.0 and r.algo_names()[1] == "pat" and np.isinf(r.time_s[2])
    assert C.valid_pairs(s, "allreduce", np.array([1, 64, 8]), np.array([1, 64, 4])).tolist() \
        == [True, True, False]
