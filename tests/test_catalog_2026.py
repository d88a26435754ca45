"""The 2026 GPU catalog entries (H800, B300, GB200, GB300, MI325X, MI350X, MI355X; issue 23)
and their cluster presets, including the GB200/GB300 NVL72 racks (72-GPU NVLink domain of 18
hosts of 4 GPUs)."""

from __future__ import annotations

import math

import pytest

from costmodel import hardware as hw
from costmodel.specs import PRECISIONS

NEW_GPUS = ("h800-sxm-80gb", "b300", "gb200", "gb300", "mi325x", "mi350x", "mi355x")
ISSUE_23_GPUS = ("h200-sxm-141gb", "h800-sxm-80gb", "b200", "b300", "gb200", "gb300",
                 "mi300x", "mi325x", "mi350x", "mi355x")
MIB = 2**20


@pytest.mark.parametrize("key", NEW_GPUS)
def test_new_keys_load_with_a_dated_source(key):
    g = hw.get_gpu(key)
    assert g.name == key
    assert "http" in g.source and "2026-12-01" in g.source
    assert all(p in PRECISIONS for p in g.peak_flops_per_s)
    for v in (g.memory_bytes, g.memory_bandwidth_bytes_per_s, g.nvlink_bandwidth_bytes_per_s,
              g.pcie_bandwidth_bytes_per_s):
        assert math.isfinite(v) and v > 0


@pytest.mark.parametrize("key", ISSUE_23_GPUS)
def test_peaks_are_ordered_as_the_datasheets(key):
    g = hw.get_gpu(key)
    p = g.peak_flops_per_s
    # dense Tensor-Core peaks: fp16 = bf16; fp8 = 2 x bf16 (Hopper, Blackwell, CDNA 3/4)
    assert p["fp16"] == p["bf16"]
    assert p["fp8"] == pytest.approx(2 * p["bf16"], rel=2e-4)
    assert p["fp32"] < p["bf16"]
    if "tf32" in p:
        assert p["fp32"] < p["tf32"] < p["bf16"]
        assert p["tf32"] == pytest.approx(p["bf16"] / 2, rel=0.03)
    fp4 = hw.fp4_peak_flops(g)
    if fp4 is not None:
        assert fp4 > p["fp8"]


@pytest.mark.parametrize("key,ratio", [
    # FP4 over FP8, dense: Blackwell 2x; Blackwell Ultra 3x (its FP4 units were enlarged);
    # CDNA 4 MXFP4 2x
    ("b200", 2.0), ("gb200", 2.0), ("b300", 3.0), ("gb300", 3.0), ("mi350x", 2.0),
    ("mi355x", 2.0),
])
def test_fp4_peaks(key, ratio):
    g = hw.get_gpu(key)
    assert hw.fp4_peak_flops(g) == pytest.approx(ratio * g.peak("fp8"), rel=2e-4)
    assert hw.fp4_peak_flops(key) == hw.fp4_peak_flops(g)


@pytest.mark.parametrize("key", ["h100-sxm-80gb", "h200-sxm-141gb", "h800-sxm-80gb", "mi300x",
                                 "mi325x", "a100-sxm-80gb"])
def test_no_fp4_before_blackwell_and_cdna4(key):
    assert hw.fp4_peak_flops(key) is None


@pytest.mark.parametrize("key,precision,tflops", [
    ("h800-sxm-80gb", "bf16", 989.4), ("h800-sxm-80gb", "fp8", 1978.9),
    ("b300", "bf16", 2250.0), ("b300", "fp8", 4500.0),
    ("gb200", "bf16", 2500.0), ("gb200", "fp8", 5000.0), ("gb200", "tf32", 1250.0),
    ("gb300", "bf16", 2500.0), ("gb300", "fp8", 5000.0),
    ("mi325x", "bf16", 1307.4), ("mi325x", "fp8", 2614.9),
    ("mi350x", "bf16", 2306.9), ("mi355x", "bf16", 2516.6), ("mi355x", "fp8", 5033.2),
])
def test_dense_peaks_2026(key, precision, tflops):
    assert hw.get_gpu(key).peak(precision) == pytest.approx(tflops * 1e12)


def test_cdna4_has_no_tf32():
    for key in ("mi350x", "mi355x"):
        assert not hw.get_gpu(key).supports("tf32")
        assert hw.get_gpu(key).supports("fp8")


@pytest.mark.parametrize("key,mib", [
    # the driver's totals as the MLPerf v5.1 system descriptions quote them
    ("b200", 183359), ("b300", 275040), ("gb200", 189471), ("gb300", 284208),
    ("h800-sxm-80gb", 81559), ("mi325x", 256 * 1024), ("mi350x", 288 * 1024),
    ("mi355x", 288 * 1024),
])
def test_memory(key, mib):
    assert hw.get_gpu(key).memory_bytes == mib * MIB


def test_bandwidths_and_counts():
    h100, h800 = hw.get_gpu("h100-sxm-80gb"), hw.get_gpu("h800-sxm-80gb")
    assert h800.nvlink_bandwidth_bytes_per_s == 200e9 < h100.nvlink_bandwidth_bytes_per_s
    assert h800.nvlink_links == 8 and h800.sm_count == h100.sm_count == 132
    for key in ("b300", "gb200", "gb300"):
        g = hw.get_gpu(key)
        assert g.nvlink_bandwidth_bytes_per_s == 900e9 and g.nvlink_links == 18
        assert g.memory_bandwidth_bytes_per_s == 8000e9
        assert g.compute_capability >= 100  # the Blackwell bucket of the model
    assert hw.get_gpu("mi355x").nvlink_bandwidth_bytes_per_s \
        > hw.get_gpu("mi300x").nvlink_bandwidth_bytes_per_s
    assert hw.get_gpu("mi325x").memory_bandwidth_bytes_per_s == 6000e9
    assert hw.get_gpu("mi355x").sm_count == hw.get_gpu("mi350x").sm_count == 256


@pytest.mark.parametrize("alias,key", [
    ("h800", "h800-sxm-80gb"), ("B300", "b300"), ("gb200-nvl72", "gb200"), ("GB300", "gb300"),
    ("mi355", "mi355x"), ("MI325X", "mi325x"),
])
def test_aliases(alias, key):
    assert hw.get_gpu(alias).name == key


# ---- presets ---------------------------------------------------------------------------------
PRESET_GPU = {"dgx-h200": "h200-sxm-141gb", "dgx-h800": "h800-sxm-80gb", "dgx-b200": "b200",
              "dgx-b300": "b300", "gb200-nvl72": "gb200", "gb300-nvl72": "gb300",
              "mi300x-platform": "mi300x", "mi325x-platform": "mi325x",
              "mi350x-platform": "mi350x", "mi355x-platform": "mi355x"}


@pytest.mark.parametrize("name,gpu", sorted(PRESET_GPU.items()))
def test_every_issue_23_gpu_has_a_preset_that_builds(name, gpu):
    c = hw.get_cluster_preset(name, 2)
    assert c.gpu.name == gpu and c.num_nodes == 2
    assert hw.cluster_preset_description(name)
    assert "http" in c.source or "arXiv" in c.source
    intra, inter = hw.default_node_fabric(c.gpu)
    assert (intra, inter) == (c.intra_node, c.inter_node)


@pytest.mark.parametrize("name,nic", [("gb200-nvl72", hw.IB_NDR_BYTES_PER_S),
                                      ("gb300-nvl72", hw.IB_XDR_BYTES_PER_S)])
def test_nvl72_racks(name, nic):
    rack = hw.get_cluster_preset(name, 18)
    assert rack.gpus_per_node == 4 and rack.num_gpus == 72
    assert rack.domain_gpus == 72 and rack.hosts_per_domain == 18 and rack.num_domains == 1
    assert rack.intra_node.fabric == "nvswitch"
    assert rack.inter_node.nics_per_node == 4 and rack.inter_node.nic_bandwidth_bytes_per_s == nic
    two = hw.get_cluster_preset(name, 36)
    assert two.num_gpus == 144 and two.num_domains == 2
    part = hw.get_cluster_preset(name, 4)  # 16 GPUs: 4 hosts of one domain
    assert part.domain_gpus == 72 and part.num_domains == 1
    # a partially used host is not a rack
    assert hw.get_cluster_preset(name, 1, gpus_per_node=2).gpus_per_domain is None


def test_dgx_b300_and_h800():
    b300 = hw.get_cluster_preset("dgx-b300", 2)
    assert b300.inter_node.nics_per_node == 8
    assert b300.inter_node.nic_bandwidth_bytes_per_s == hw.IB_XDR_BYTES_PER_S == 100e9
    assert b300.domain_gpus == 8
    h800 = hw.get_cluster_preset("dgx-h800", 2)
    assert h800.inter_node.nic_bandwidth_bytes_per_s == hw.IB_NDR_BYTES_PER_S
    assert h800.intra_node.bandwidth_bytes_per_s == 200e9


def test_default_cluster_of_an_nvl72_gpu_is_a_rack():
    assert hw.default_host_and_domain(hw.get_gpu("gb200")) == (4, 72)
    assert hw.default_host_and_domain(hw.get_gpu("h100")) == (8, None)
    c = hw.default_cluster(144, gpus_per_node=4, gpu="gb300")
    assert c.domain_gpus == 72 and c.num_domains == 2
    # hosts of another size than the rack's have no multi-host domain
    assert hw.default_cluster(16, gpus_per_node=8, gpu="gb200").gpus_per_domain is None
    # the DGX-like defaults are unchanged
    assert hw.default_cluster(16, gpu="b200").gpus_per_domain is None


def test_score_runs_on_the_new_clusters():
    import numpy as np

    from costmodel.batch import ConfigBatch
    from costmodel.model import score
    from costmodel.models_catalog import get_model
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = get_model("llama3-8b")
    training = TrainingSpec(seq_length=4096, global_batch_size=64)
    for name, nodes in (("gb200-nvl72", 4), ("gb300-nvl72", 4), ("dgx-b300", 2),
                        ("dgx-h800", 2), ("mi355x-platform", 2), ("mi325x-platform", 2)):
        c = hw.get_cluster_preset(name, nodes)
        cfg = ParallelConfig(tp=2, pp=1, dp=c.num_gpus // 2, micro_batch_size=1,
                             precision="bf16", sequence_parallel=True, zero_stage=1)
        s = score(model, c, training, ConfigBatch.from_configs([cfg]))
        assert np.isfinite(s.step_time_s).all() and (s.step_time_s > 0).all(), name


def test_cluster_files_and_preset_names_reach_the_racks():
    from costmodel.loaders import cluster_from_mapping, load_cluster

    c = cluster_from_mapping({"preset": "gb300-nvl72", "num_nodes": 36})
    assert c.gpu.name == "gb300" and c.domain_gpus == 72 and c.num_domains == 2
    assert load_cluster("gb200-nvl72", default_gpus=72).domain_gpus == 72


def test_fp4_peak_and_amd_arch_are_gpu_fields():
    from costmodel import hardware as hw

    b300 = hw.get_gpu("b300")
    assert b300.fp4_dense_peak_flops_per_s == hw.FP4_DENSE_PEAK_FLOPS_PER_S["b300"]
    assert hw.fp4_peak_flops(b300) == hw.fp4_peak_flops("b300") == 13500.0e12
    assert hw.get_gpu("h100-sxm-80gb").fp4_dense_peak_flops_per_s is None
    assert (hw.get_gpu("mi300x").arch, hw.get_gpu("mi355x").arch) == ("gfx942", "gfx950")
    assert hw.get_gpu("b200").arch == ""
