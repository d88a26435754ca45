"""GPU catalog, cluster presets and model catalog (costmodel.hardware, costmodel.models_catalog)."""

from __future__ import annotations

import pytest

from costmodel.errors import InputError
from costmodel.hardware import (
    IB_HDR_BYTES_PER_S,
    IB_NDR_BYTES_PER_S,
    cluster_preset_description,
    default_cluster,
    default_node_fabric,
    get_cluster_preset,
    get_gpu,
    gpu_aliases,
    list_cluster_presets,
    list_gpus,
    split_gpus,
)
from costmodel.models_catalog import catalog_params, get_model, list_models
from costmodel.specs import PRECISIONS, GPUSpec

CONTRACT_GPUS = ("v100-sxm-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb",
                 "h100-sxm-80gb", "h100-pcie-80gb", "h200-sxm-141gb", "b200", "mi300x")


# ==== GPUs ==================================================================================
def test_every_required_gpu_key_is_in_the_catalog_with_a_dated_source():
    assert set(CONTRACT_GPUS) <= set(list_gpus())
    for key in list_gpus():
        g = get_gpu(key)
        assert g.name == key
        # accessed 2026-11-29, or transcribed 2026-12-01 (hardware.TRANSCRIBED)
        assert ("2026-11-29" in g.source or "2026-12-01" in g.source) and "http" in g.source


@pytest.mark.parametrize("alias,key", [
    ("a100", "a100-sxm-80gb"), ("A100", "a100-sxm-80gb"), ("a100-40gb", "a100-sxm-40gb"),
    ("h100", "h100-sxm-80gb"), ("H100_SXM_80GB", "h100-sxm-80gb"), ("h200", "h200-sxm-141gb"),
    ("v100", "v100-sxm-32gb"), ("h100-pcie", "h100-pcie-80gb"), (" b200 ", "b200"),
])
def test_gpu_aliases_and_spelling_variants(alias, key):
    assert get_gpu(alias).name == key


def test_gpu_aliases_listed():
    assert "a100" in gpu_aliases("a100-sxm-80gb")
    assert "a100" not in gpu_aliases("a100-sxm-40gb")


def test_unknown_gpu_names_field_and_suggests():
    with pytest.raises(InputError) as e:
        get_gpu("h100-sxm-80")
    assert e.value.field == "gpu"
    assert "h100-sxm-80gb" in e.value.hint
    with pytest.raises(InputError) as e:
        get_gpu(80)
    assert e.value.field == "gpu"


@pytest.mark.parametrize("key,precision,flops", [
    # dense Tensor-Core peaks = datasheet sparse / 2 (ecosystem.md section 5)
    ("a100-sxm-80gb", "bf16", 312e12), ("a100-sxm-80gb", "tf32", 156e12),
    ("a100-sxm-80gb", "fp32", 19.5e12), ("h100-sxm-80gb", "bf16", 989.4e12),
    ("h100-sxm-80gb", "fp8", 1978.9e12), ("h100-sxm-80gb", "fp32", 66.9e12),
    ("h100-pcie-80gb", "bf16", 756e12), ("v100-sxm-32gb", "fp16", 125e12),
    ("v100-sxm-32gb", "fp32", 15.7e12), ("h200-sxm-141gb", "bf16", 989.4e12),
    ("b200", "bf16", 2250e12), ("mi300x", "bf16", 1307.4e12),
])
def test_dense_peaks(key, precision, flops):
    assert get_gpu(key).peak(precision) == flops


def test_precision_support_follows_the_hardware():
    v100 = get_gpu("v100-sxm-32gb")
    assert not v100.supports("bf16") and not v100.supports("tf32") and not v100.supports("fp8")
    for key in ("a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb"):
        assert not get_gpu(key).supports("fp8") and get_gpu(key).supports("bf16")
    for key in ("h100-sxm-80gb", "h100-pcie-80gb", "h200-sxm-141gb", "b200", "mi300x"):
        assert all(get_gpu(key).supports(p) for p in PRECISIONS)


def test_tensor_peaks_exceed_fp32_and_fp8_doubles_bf16():
    for key in list_gpus():
        g = get_gpu(key)
        half = g.peak("bf16") if g.supports("bf16") else g.peak("fp16")
        assert half > 4 * g.peak("fp32")
        if g.supports("fp8"):
            # FP8 is twice BF16 on every part that has it (H100 1978.9 vs 989.4, +-0.1)
            assert g.peak("fp8") == pytest.approx(2 * g.peak("bf16"), rel=1e-3)


@pytest.mark.parametrize("key,links,per_link", [
    # one-direction NVLink per GPU = links x per-link one-direction rate
    ("v100-sxm-32gb", 6, 25e9),   # NVLink2: 6 x 25 = 150 GB/s (300 bidirectional)
    ("a100-sxm-80gb", 12, 25e9),  # NVLink3: 12 x 25 = 300 GB/s (600 bidirectional)
    ("h100-sxm-80gb", 18, 25e9),  # NVLink4: 18 x 25 = 450 GB/s (900 bidirectional)
    ("b200", 18, 50e9),           # NVLink5: 18 x 50 = 900 GB/s (1.8 TB/s bidirectional)
])
def test_nvlink_one_direction(key, links, per_link):
    g = get_gpu(key)
    assert g.nvlink_links == links
    assert g.nvlink_bandwidth_bytes_per_s == links * per_link


def test_memory_bandwidth_sm_and_arch():
    a = get_gpu("a100-sxm-80gb")
    # nvidia-smi totals: A100 80GB 81920 MiB = 80 GiB; H200 143771 MiB
    assert (a.memory_bytes, a.memory_bandwidth_bytes_per_s) == (80 * 2**30, 2039e9)
    assert get_gpu("a100-sxm-40gb").memory_bandwidth_bytes_per_s == 1555e9
    assert get_gpu("h200-sxm-141gb").memory_bytes == 143771 * 2**20
    assert [get_gpu(k).sm_count for k in ("v100", "a100", "h100", "h100-pcie", "h200", "b200",
                                          "mi300x")] == [80, 108, 132, 114, 132, 148, 304]
    assert [get_gpu(k).compute_capability for k in ("v100", "a100", "h100", "b200")] == \
        [70, 80, 90, 100]
    assert get_gpu("a100").pcie_bandwidth_bytes_per_s == 32e9  # Gen4 x16
    assert get_gpu("h100").pcie_bandwidth_bytes_per_s == 64e9  # Gen5 x16
    assert get_gpu("v100").pcie_bandwidth_bytes_per_s == 16e9  # Gen3 x16


def test_pcie_cards_have_no_nvlink_fabric():
    for key in ("a100-pcie-80gb", "h100-pcie-80gb"):
        assert get_gpu(key).nvlink_bandwidth_bytes_per_s == 0
        assert get_gpu(key).nvlink_links == 0


# ==== cluster presets =======================================================================
def test_required_presets_exist_and_describe_themselves():
    names = list_cluster_presets()
    for n in ("dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "pcie-roce-a100"):
        assert n in names
        assert cluster_preset_description(n)
        assert "2026-11-29" in get_cluster_preset(n).source  # the presets named here


def test_dgx_a100_preset_numbers():
    c = get_cluster_preset("dgx-a100-80gb", 2)
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus) == (2, 8, 16)
    assert c.name == "2x-dgx-a100-80gb"
    assert c.gpu.name == "a100-sxm-80gb"
    assert c.intra_node.fabric == "nvswitch"
    assert c.intra_node.bandwidth_bytes_per_s == 300e9
    assert c.inter_node.fabric == "infiniband"
    # 8 HDR NICs x 200 Gb/s / 8 bit = 8 x 25e9 = 200e9 B/s per node
    assert c.inter_node.node_bandwidth_bytes_per_s == 200e9
    assert get_cluster_preset("dgx-a100-40gb").gpu.name == "a100-sxm-40gb"


@pytest.mark.parametrize("name,gpu", [("dgx-h100", "h100-sxm-80gb"),
                                      ("dgx-h200", "h200-sxm-141gb")])
def test_dgx_hopper_presets(name, gpu):
    c = get_cluster_preset(name, 4)
    assert c.gpu.name == gpu and c.num_gpus == 32
    assert c.intra_node.bandwidth_bytes_per_s == 450e9
    # 8 NDR NICs x 400 Gb/s = 8 x 50e9 = 400e9 B/s per node
    assert c.inter_node.node_bandwidth_bytes_per_s == 400e9


def test_pcie_roce_preset():
    c = get_cluster_preset("pcie-roce-a100", 1)
    assert c.gpu.name == "a100-pcie-80gb"
    assert (c.intra_node.fabric, c.intra_node.bandwidth_bytes_per_s) == ("pcie", 32e9)
    assert c.inter_node.fabric == "roce"
    # 2 x 100 Gb/s = 2 x 12.5e9 B/s
    assert c.inter_node.node_bandwidth_bytes_per_s == 25e9
    assert c.intra_node.latency_s > get_cluster_preset("dgx-a100-80gb").intra_node.latency_s


def test_unknown_preset_and_bad_node_count():
    with pytest.raises(InputError) as e:
        get_cluster_preset("dgx-a100", 2)
    assert e.value.field == "cluster" and "dgx-a100-80gb" in e.value.hint
    with pytest.raises(InputError) as e:
        get_cluster_preset("dgx-h100", 0)
    assert e.value.field == "cluster.num_nodes"


def test_default_cluster_is_dgx_a100_like():
    c = default_cluster(16)
    assert (c.num_nodes, c.gpus_per_node) == (2, 8)
    assert c.gpu.name == "a100-sxm-80gb"
    assert c.intra_node == get_cluster_preset("dgx-a100-80gb").intra_node
    assert c.inter_node.nic_bandwidth_bytes_per_s == IB_HDR_BYTES_PER_S
    assert c.inter_node.nics_per_node == 8


def test_default_cluster_picks_the_fabric_of_the_gpu():
    h = default_cluster(16, gpu="h100")
    assert h.inter_node.nic_bandwidth_bytes_per_s == IB_NDR_BYTES_PER_S
    assert h.intra_node.bandwidth_bytes_per_s == 450e9
    assert default_cluster(8, gpu="b200").intra_node.bandwidth_bytes_per_s == 900e9
    p = default_cluster(16, gpu="a100-pcie-80gb")
    assert (p.intra_node.fabric, p.inter_node.fabric) == ("pcie", "roce")
    spec = default_cluster(8, gpu=get_gpu("h200"))  # a GPUSpec is accepted as well
    assert spec.gpu.name == "h200-sxm-141gb"


def test_default_cluster_partial_node_and_other_node_sizes():
    c = default_cluster(4)
    assert (c.num_nodes, c.gpus_per_node) == (1, 4)
    c = default_cluster(16, gpus_per_node=4)
    assert (c.num_nodes, c.gpus_per_node) == (4, 4)


@pytest.mark.parametrize("n", [12, 20, 0, -8, 2.5, True])
def test_default_cluster_rejects_bad_counts(n):
    with pytest.raises(InputError) as e:
        default_cluster(n)
    assert e.value.field == "gpus"


def test_default_cluster_suggests_valid_counts():
    with pytest.raises(InputError) as e:
        split_gpus(12, 8)
    # floor and ceiling multiples of 8 around 12
    assert "8" in e.value.hint and "16" in e.value.hint
    assert "gpus_per_node=8" in e.value.message


def test_default_fabric_for_gpus_outside_the_catalog():
    base = dict(peak_flops_per_s={"bf16": 500e12}, memory_bytes=64e9,
                memory_bandwidth_bytes_per_s=3e12)
    nv = GPUSpec(name="x", nvlink_bandwidth_bytes_per_s=200e9, compute_capability=80, **base)
    intra, inter = default_node_fabric(nv)
    assert (intra.fabric, intra.bandwidth_bytes_per_s) == ("nvswitch", 200e9)
    assert inter.nic_bandwidth_bytes_per_s == IB_HDR_BYTES_PER_S
    pc = GPUSpec(name="y", nvlink_bandwidth_bytes_per_s=0, pcie_bandwidth_bytes_per_s=64e9,
                 **base)
    intra, inter = default_node_fabric(pc)
    assert (intra.fabric, intra.bandwidth_bytes_per_s, inter.fabric) == ("pcie", 64e9, "roce")
    # a GPU reusing a catalog name with other numbers is not mistaken for the catalog entry
    fake = GPUSpec(name="a100-sxm-80gb", nvlink_bandwidth_bytes_per_s=0, **base)
    assert default_node_fabric(fake)[0].fabric == "pcie"


# ==== models ================================================================================
def test_llama_65b_parameter_count():
    # cost-model.md 1.3: per layer 2*8192*128*(64+64) + 3*8192*22016 + 2*8192 = 809,517,056;
    # 80 layers + 2 * 32000 * 8192 (untied) + 8192 (final norm) = 65,285,660,672
    m = get_model("llama-65b")
    assert m.params_per_layer == 809_517_056
    assert m.total_params() == 65_285_660_672


def test_llama3_70b_parameter_count():
    # cost-model.md 1.3: 2*8192*128*(64+8) + 3*8192*28672 + 2*8192 = 855,654,400 per layer;
    # 80 * 855,654,400 + 2 * 128256 * 8192 + 8192 = 70,553,706,496
    m = get_model("llama3-70b")
    assert m.params_per_layer == 855_654_400
    assert m.total_params() == 70_553_706_496


@pytest.mark.parametrize("name,params", [
    # the Hugging Face checkpoints' parameter counts
    ("llama-7b", 6_738_415_616),    # 32*(4*4096^2 + 3*4096*11008 + 2*4096) + 2*32000*4096 + 4096
    ("llama2-13b", 13_015_864_320),
    ("llama2-70b", 68_976_648_192),  # 80*855,654,400 + 2*32000*8192 + 8192
    ("llama3-8b", 8_030_261_248),   # 32*(2*4096*128*40 + 3*4096*14336 + 8192) + 2*128256*4096 + 4096
])
def test_llama_family_parameter_counts(name, params):
    assert get_model(name).total_params() == params


def test_gpt3_175b_with_learned_positions():
    # Narayanan et al. eq. 2: 12*96*12288^2*(1 + 13/(12*12288) + (51200+2048)/(12*96*12288))
    # = 174.6e9; specs adds the final LayerNorm (2h): 174,615,846,912
    m = get_model("175b")
    assert m.name == "gpt3-175b"
    assert m.total_params(2048) == 174_615_846_912
    assert round(m.total_params(2048) / 1e8) == 1746
    assert m.tied_embeddings and m.learned_position_embeddings and m.linear_bias
    assert m.normalization == "layernorm" and not m.gated_mlp


@pytest.mark.parametrize("name,L,h,a,billions", [
    # Narayanan et al. 2021 Table 1 (parameters in billions, one decimal)
    ("gpt-1.7b", 24, 2304, 24, 1.7), ("gpt-3.6b", 30, 3072, 32, 3.6),
    ("gpt-7.5b", 36, 4096, 32, 7.5), ("gpt-18b", 40, 6144, 48, 18.4),
    ("gpt-39b", 48, 8192, 64, 39.1), ("gpt-76b", 60, 10240, 80, 76.1),
    ("gpt-145b", 80, 12288, 96, 145.6), ("gpt-310b", 96, 16384, 128, 310.1),
    ("gpt-530b", 105, 20480, 128, 529.6), ("gpt-1t", 128, 25600, 160, 1008.0),
])
def test_megatron_sc21_table1(name, L, h, a, billions):
    m = get_model(name)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (L, h, a)
    assert m.ffn_hidden_size == 4 * h and m.vocab_size == 51200
    assert round(m.total_params(2048) / 1e9, 1) == billions


def test_bert_large():
    # HF BertModel has 335,141,888 parameters; minus the pooler (1024*1024 + 1024) and the
    # token-type embeddings (2*1024) that ModelSpec does not count: 334,090,240
    m = get_model("bert-large")
    assert m.total_params(512) == 334_090_240
    assert m.vocab_size == 30522


def test_llama_shapes():
    m = get_model("llama3-405b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads,
            m.ffn_hidden_size, m.vocab_size) == (126, 16384, 128, 8, 53248, 128256)
    m = get_model("33b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.head_dim) == (60, 6656, 52, 128)
    for name in ("llama-7b", "llama2-70b", "llama3-8b"):
        m = get_model(name)
        assert m.gated_mlp and not m.tied_embeddings and m.normalization == "rmsnorm"
        assert not m.learned_position_embeddings and not m.linear_bias and m.head_dim == 128


@pytest.mark.parametrize("alias,name", [
    ("65b", "llama-65b"), ("7b", "llama-7b"), ("13b", "llama-13b"), ("33b", "llama-33b"),
    ("70b", "llama2-70b"), ("175b", "gpt3-175b"), ("LLaMA-65B", "llama-65b"),
    ("Llama-2-70B", "llama2-70b"), ("1t", "gpt-1t"), ("bert-large", "bert-large"),
])
def test_model_aliases(alias, name):
    assert get_model(alias).name == name


def test_unknown_model_suggests():
    with pytest.raises(InputError) as e:
        get_model("llama-56b")
    assert e.value.field == "model"
    assert "llama-65b" in e.value.hint
    with pytest.raises(InputError) as e:
        get_model(None)
    assert e.value.field == "model"


def test_list_models_rows():
    rows = list_models()
    names = [r[0] for r in rows]
    aliases = [a for r in rows for a in r[1]]
    assert len(set(names)) == len(names) and len(set(aliases)) == len(aliases)
    assert not set(names) & set(aliases)
    row = dict((r[0], r) for r in rows)
    assert row["llama-65b"][2] == 65_285_660_672
    assert "65b" in row["llama-65b"][1]
    # learned positions counted at max_position_embeddings = 2048
    assert row["gpt3-175b"][2] == 174_615_846_912
    assert catalog_params(get_model("gpt3-175b")) == get_model("gpt3-175b").total_params(2048)
    for r in rows:
        assert get_model(r[0]).source


def test_h100_96gb_hbm2e_has_hbm2e_bandwidth_of_six_stacks():
    """Meta's 96 GB HBM2e H100 SXM: six HBM2e stacks at the H100 PCIe's HBM2e rate (five
    stacks, 2,000 GB/s), below the HBM3 80 GB SXM's 3,350 GB/s; Tensor-Core peaks as SXM."""
    hbm2e = get_gpu("h100-sxm-96gb-hbm2e")
    sxm = get_gpu("h100-sxm-80gb")
    pcie = get_gpu("h100-pcie-80gb")
    assert hbm2e.memory_bandwidth_bytes_per_s == pytest.approx(
        pcie.memory_bandwidth_bytes_per_s * 6 / 5)
    assert hbm2e.memory_bandwidth_bytes_per_s < sxm.memory_bandwidth_bytes_per_s
    assert hbm2e.peak_flops_per_s == sxm.peak_flops_per_s
