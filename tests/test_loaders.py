"""File loaders (costmodel.loaders): models, clusters, runs, and every error path."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from costmodel.errors import InputError
from costmodel.hardware import ROCE_LATENCY_S, get_cluster_preset
from costmodel.loaders import (
    Run,
    cluster_from_mapping,
    gpu_from_mapping,
    load_cluster,
    load_model,
    load_run,
    model_from_mapping,
    parse_document,
)
from costmodel.models_catalog import get_model
from costmodel.specs import ClusterSpec, ModelSpec

DATA = Path(__file__).parent / "data"

SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
         "num_kv_heads", "gated_mlp", "tied_embeddings", "head_dim",
         "learned_position_embeddings", "linear_bias", "normalization")


def shape(m: ModelSpec) -> tuple:
    return tuple(getattr(m, k) for k in SHAPE)


def err(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as e:
        fn(*args, **kwargs)
    return e.value


# ==== models: catalog, contract files ======================================================
def test_catalog_names_and_passthrough():
    assert load_model("65b") is get_model("llama-65b")
    m = get_model("llama3-8b")
    assert load_model(m) is m


def test_unknown_catalog_name_suggests():
    e = err(load_model, "llama-56b")
    assert e.field == "model" and "llama-65b" in e.hint


def test_path_like_names_are_files():
    e = err(load_model, "./65b.yaml")
    assert e.field == "model" and "file not found" in e.message
    e = err(load_model, DATA / "nope.json")
    assert e.field == "model" and "file not found" in e.message


def test_model_yaml_matches_catalog():
    m = load_model(DATA / "model-llama65b.yaml")
    assert shape(m) == shape(get_model("llama-65b"))
    assert m.total_params() == 65_285_660_672  # cost-model.md 1.3
    assert load_model(str(DATA / "model-llama65b.yaml")) == m


def test_model_mapping_defaults_name_and_optional_keys():
    m = load_model({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "ffn_hidden_size": 256, "vocab_size": 1000, "num_kv_heads": None})
    assert m.name == "custom-model" and m.num_kv_heads == 4 and m.head_dim == 16


def test_model_file_without_name_takes_the_stem(tmp_path):
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                             "ffn_hidden_size": 256, "vocab_size": 1000}))
    assert load_model(p).name == "tiny"


def test_model_unknown_key_suggests():
    e = err(load_model, DATA / "model-typo.yaml")
    assert e.field == "model.ffn_hiden_size"
    assert "ffn_hidden_size" in e.hint


def test_model_missing_and_wrong_keys():
    base = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "ffn_hidden_size": 256, "vocab_size": 1000}
    e = err(model_from_mapping, {k: v for k, v in base.items() if k != "vocab_size"})
    assert e.field == "model.vocab_size"
    assert err(load_model, {**base, "gated_mlp": "yes"}).field == "model.gated_mlp"
    assert err(load_model, {**base, "num_layers": 2.5}).field == "model.num_layers"
    assert err(load_model, {**base, "normalization": "batchnorm"}).field == "model.normalization"
    assert err(load_model, {**base, "num_kv_heads": 3}).field == "model.num_kv_heads"
    assert err(load_model, 42).field == "model"


# ==== models: Hugging Face config.json =====================================================
def test_hf_llama2_config_maps_to_the_catalog_shape():
    m = load_model(DATA / "llama2-7b-config.json")
    assert shape(m) == shape(get_model("llama2-7b"))
    assert m.name == "meta-llama/Llama-2-7b-hf"
    assert m.max_position_embeddings == 4096
    assert m.total_params() == 6_738_415_616  # HF Llama-2-7b-hf parameter count


def test_hf_config_directory_gqa_and_dtype_key():
    # directory holding config.json; "dtype" (transformers 5) and rope_parameters are ignored
    m = load_model(DATA / "llama3-70b")
    assert m.name == "llama3-70b"
    assert (m.num_kv_heads, m.head_dim, m.vocab_size) == (8, 128, 128256)
    assert m.total_params() == 70_553_706_496  # cost-model.md 1.3


def test_hf_gpt2_config():
    m = load_model(DATA / "gpt2-config.json")
    # n_inner null -> 4 * n_embd = 3072
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == \
        (12, 768, 12, 3072)
    assert m.tied_embeddings and m.learned_position_embeddings and m.linear_bias
    assert not m.gated_mlp and m.normalization == "layernorm"
    assert m.max_position_embeddings == 1024
    # 12*(12*768^2 + 13*768) + 50257*768 + 1024*768 + 2*768 = 124,439,808 (HF GPT2Model)
    assert m.total_params(1024) == 124_439_808


LLAMA_HF = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
            "hidden_act": "silu"}


def test_hf_defaults_per_model_type():
    m = load_model(dict(LLAMA_HF))
    assert not m.tied_embeddings  # LlamaConfig default
    assert m.num_kv_heads == 4 and m.gated_mlp and m.normalization == "rmsnorm"
    assert load_model({**LLAMA_HF, "num_key_value_heads": None}).num_kv_heads == 4
    assert load_model({**LLAMA_HF, "tie_word_embeddings": True}).tied_embeddings
    assert load_model({**LLAMA_HF, "attention_bias": True}).linear_bias
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
            "n_inner": 128}
    m = load_model(gpt2)
    assert m.tied_embeddings and m.ffn_hidden_size == 128  # explicit n_inner wins
    assert not load_model({**gpt2, "tie_word_embeddings": False}).tied_embeddings


def test_hf_gating_from_activation_for_unknown_types():
    unknown = {**LLAMA_HF, "model_type": "somenewmodel"}
    assert load_model(unknown).gated_mlp
    m = load_model({**unknown, "hidden_act": "gelu", "layer_norm_eps": 1e-5})
    assert not m.gated_mlp and m.normalization == "layernorm"
    # no model_type at all: detected by its HF field names
    m = load_model({k: v for k, v in LLAMA_HF.items() if k != "model_type"})
    assert m.ffn_hidden_size == 688


def test_hf_explicit_head_dim():
    # Gemma-style: head_dim * heads != hidden_size
    m = load_model({**LLAMA_HF, "model_type": "gemma", "head_dim": 128})
    assert m.head_dim == 128 and m.tied_embeddings  # GemmaConfig ties by default


def test_hf_moe_is_mapped():
    m = load_model(DATA / "mixtral-config.json")
    assert m.moe is not None and m.moe.num_experts == 8 and m.moe.top_k == 2
    m = load_model({**LLAMA_HF, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert m.moe.num_experts == 8 and m.moe_layers == m.num_layers
    assert load_model({**LLAMA_HF, "num_local_experts": 1}).moe is None  # one expert = dense
    e = err(load_model, {**LLAMA_HF, "num_local_experts": 8, "num_experts_per_tok": 9})
    assert e.field == "model.num_experts_per_tok"
    e = err(load_model, {**LLAMA_HF, "kv_lora_rank": 512})
    assert e.field.startswith("model.")  # MLA needs its head dimensions


def test_hf_missing_required_field_names_the_hf_key():
    e = err(load_model, DATA / "hf-missing-layers.json")
    assert e.field == "model.num_hidden_layers"
    e = err(load_model, {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 100})
    assert e.field == "model.n_layer"
    e = err(load_model, {**{k: v for k, v in LLAMA_HF.items() if k != "vocab_size"},
                         "text_config": {}})
    assert e.field == "model.vocab_size" and "text_config" in e.hint


def test_hf_wrong_types_name_the_hf_key():
    assert err(load_model, {**LLAMA_HF, "num_hidden_layers": "2"}).field == \
        "model.num_hidden_layers"
    assert err(load_model, {**LLAMA_HF, "tie_word_embeddings": "no"}).field == \
        "model.tie_word_embeddings"
    e = err(load_model, {"model_type": "gpt2", "n_embd": "64", "n_layer": 2, "n_head": 4,
                         "vocab_size": 100})
    assert e.field == "model.n_embd"


def test_hf_unknown_keys_are_ignored():
    m = load_model({**LLAMA_HF, "rope_scaling": {"type": "yarn"}, "torch_dtype": "bfloat16",
                    "some_future_key": [1, 2]})
    assert m.num_layers == 2


# ==== documents: malformed input ===========================================================
@pytest.mark.parametrize("name,needle", [
    ("bad-yaml.yaml", "line 3"),            # the unclosed flow sequence
    ("bad-json.json", "line 5"),            # the trailing comma before "}" on line 5
    ("duplicate-key.yaml", "duplicate key 'num_layers'"),
    ("not-a-mapping.yaml", "must be a mapping"),
    ("garbage.bin", "not a UTF-8 text file"),
])
def test_malformed_model_files(name, needle):
    e = err(load_model, DATA / name)
    assert e.field == "model"
    assert needle in str(e)


def test_empty_binary_and_directory_files(tmp_path):
    (tmp_path / "empty.yaml").write_text("  \n")
    assert "empty" in err(load_model, tmp_path / "empty.yaml").message
    (tmp_path / "nul.yaml").write_bytes(b"a: 1\x00\x00")
    assert "binary" in err(load_model, tmp_path / "nul.yaml").message
    (tmp_path / "d").mkdir()
    e = err(load_model, tmp_path / "d")  # a directory without config.json
    assert e.field == "model" and "directory" in e.message


def test_json_duplicate_keys_are_errors(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"num_layers": 2, "num_layers": 3}')
    e = err(load_model, p)
    assert e.field == "model" and "duplicate key 'num_layers'" in e.message


def test_yaml_is_safe():
    e = err(parse_document, "!!python/object/apply:os.system ['true']", field="x")
    assert e.field == "x"


def test_yaml_exponent_string_gets_a_hint():
    e = err(gpu_from_mapping, {"memory_GB": 80, "memory_bandwidth_GBps": "2e3",
                               "peak_tflops": {"bf16": 312}})
    assert e.field == "cluster.gpu.memory_bandwidth_GBps" and "plain number" in e.hint


# ==== clusters ==============================================================================
def test_cluster_yaml_units():
    c = load_cluster(DATA / "cluster-2x-dgx-a100.yaml")
    assert (c.name, c.num_nodes, c.gpus_per_node, c.gpu.name) == \
        ("2x-dgx-a100-80gb", 2, 8, "a100-sxm-80gb")
    assert c.intra_node.bandwidth_bytes_per_s == 300e9  # 300 GB/s
    assert c.inter_node.nic_bandwidth_bytes_per_s == 25e9  # 200 Gb/s / 8
    # same as the preset, apart from name and source
    p = get_cluster_preset("dgx-a100-80gb", 2)
    assert (c.intra_node.fabric, c.inter_node) == (p.intra_node.fabric, p.inter_node)


def test_cluster_inline_gpu_and_defaults():
    c = load_cluster(DATA / "cluster-inline-gpu.yaml")
    g = c.gpu
    assert (g.name, g.memory_bytes, g.memory_bandwidth_bytes_per_s) == ("my-gpu", 96e9, 4e12)
    assert dict(g.peak_flops_per_s) == {"bf16": 800e12, "fp32": 50e12}
    # intra_node omitted: NVSwitch at the GPU's NVLink bandwidth
    assert (c.intra_node.fabric, c.intra_node.bandwidth_bytes_per_s) == ("nvswitch", 400e9)
    # 4 NICs x 400 Gb/s = 4 x 50e9 B/s, halved by 2:1 oversubscription = 100e9
    assert c.inter_node.node_bandwidth_bytes_per_s == 100e9
    assert c.num_gpus == 16


def test_inline_gpu_from_a_base():
    g = gpu_from_mapping({"base": "h100", "memory_GiB": 64, "peak_tflops": {"bf16": 700}})
    assert g.memory_bytes == 64 * 2**30
    assert g.peak("bf16") == 700e12 and g.peak("fp8") == 1978.9e12  # others inherited
    assert g.nvlink_bandwidth_bytes_per_s == 450e9


def test_preset_name_sized_by_default_gpus():
    assert load_cluster("dgx-h100").num_gpus == 8
    c = load_cluster("DGX-H100", default_gpus=32)
    assert (c.num_nodes, c.gpus_per_node, c.name) == (4, 8, "4x-dgx-h100")
    c = load_cluster("dgx-h100", default_gpus=2)  # one partial node
    assert (c.num_nodes, c.gpus_per_node) == (1, 2)
    e = err(load_cluster, "dgx-h100", default_gpus=12)
    assert e.field == "gpus" and "16" in e.hint


def test_cluster_mapping_sized_by_default_gpus_and_mismatch():
    c = load_cluster({"gpu": "a100"}, default_gpus=24)
    assert (c.num_nodes, c.gpus_per_node) == (3, 8)
    e = err(load_cluster, DATA / "cluster-2x-dgx-a100.yaml", default_gpus=32)
    assert e.field == "gpus" and "16" in e.message
    assert load_cluster({"gpu": "a100"}).num_gpus == 8  # no hint at all: one node


def test_cluster_preset_with_overrides():
    c = cluster_from_mapping({"preset": "dgx-h100", "num_nodes": 2,
                              "inter_node": {"nics_per_node": 4}})
    assert c.name == "2x-dgx-h100" and c.gpu.name == "h100-sxm-80gb"
    assert c.inter_node.nics_per_node == 4
    assert c.inter_node.nic_bandwidth_bytes_per_s == 50e9  # kept from the preset
    assert c.intra_node == get_cluster_preset("dgx-h100").intra_node


def test_cluster_fabric_change_changes_defaults():
    c = load_cluster({"gpu": "a100", "intra_node": {"fabric": "pcie"},
                      "inter_node": {"fabric": "roce", "nic_bandwidth_Gbps": 100}})
    assert (c.intra_node.fabric, c.intra_node.bandwidth_bytes_per_s) == ("pcie", 32e9)
    assert c.inter_node.latency_s == ROCE_LATENCY_S
    assert c.inter_node.nic_bandwidth_bytes_per_s == 12.5e9
    c = load_cluster({"gpu": "h100", "inter_node": {"fabric": "none"}})
    assert c.inter_node.nics_per_node == 0
    c = load_cluster({"gpu": "h100", "intra_node": {"latency_us": 2}, "calibration": {"a": 0.5}})
    assert c.intra_node.latency_s == pytest.approx(2e-6) and c.calibration == {"a": 0.5}


def test_nvswitch_on_a_pcie_gpu_needs_a_bandwidth():
    e = err(load_cluster, {"gpu": "a100-pcie-80gb", "intra_node": {"fabric": "nvswitch"}})
    assert e.field == "cluster.intra_node.bandwidth_GBps"


@pytest.mark.parametrize("data,field", [
    ({"num_nodes": 1}, "cluster.gpu"),
    ({"gpu": "a10"}, "cluster.gpu"),
    ({"gpu": "a100", "nodes": 2}, "cluster.nodes"),
    ({"gpu": "a100", "num_nodes": 0}, "cluster.num_nodes"),
    ({"gpu": "a100", "num_nodes": "2"}, "cluster.num_nodes"),
    ({"gpu": "a100", "gpus_per_node": 1.5}, "cluster.gpus_per_node"),
    ({"preset": "dgx-h1000"}, "cluster.preset"),
    ({"gpu": "a100", "intra_node": {"fabric": "nvlink5"}}, "cluster.intra_node.fabric"),
    ({"gpu": "a100", "intra_node": {"bandwidth_GBps": -1}}, "cluster.intra_node.bandwidth_GBps"),
    ({"gpu": "a100", "intra_node": {"bandwidth": 300}}, "cluster.intra_node.bandwidth"),
    ({"gpu": "a100", "intra_node": "nvswitch"}, "cluster.intra_node"),
    ({"gpu": "a100", "inter_node": {"nic_bandwidth_GBps": 25}},
     "cluster.inter_node.nic_bandwidth_GBps"),
    ({"gpu": "a100", "inter_node": {"oversubscription": 0.5}},
     "cluster.inter_node.oversubscription"),
    ({"gpu": "a100", "inter_node": {"fabric": "omnipath"}}, "cluster.inter_node.fabric"),
    ({"gpu": "a100-pcie-80gb", "intra_node": {"fabric": 3}}, "cluster.intra_node.fabric"),
    ({"gpu": "a100", "inter_node": {"nics_per_node": -1}}, "cluster.inter_node.nics_per_node"),
    ({"gpu": "a100", "calibration": {"x": "fast"}}, "cluster.calibration.x"),
    ({"gpu": "a100", "name": ""}, "cluster.name"),
    ({"gpu": {"memory_GB": 80, "peak_tflops": {"bf16": 1}}}, "cluster.gpu.memory_bandwidth_GBps"),
    ({"gpu": {"memory_bandwidth_GBps": 1, "peak_tflops": {"bf16": 1}}}, "cluster.gpu.memory_GB"),
    ({"gpu": {"memory_GB": 80, "memory_bandwidth_GBps": 1}}, "cluster.gpu.peak_tflops"),
    ({"gpu": {"base": "a100", "peak_tflops": {"bf61": 1}}}, "cluster.gpu.peak_tflops.bf61"),
    ({"gpu": {"base": "a100", "peak_tflops": {"bf16": 0}}}, "cluster.gpu.peak_tflops.bf16"),
    ({"gpu": {"base": "a1000"}}, "cluster.gpu.base"),
    ({"gpu": {"base": "a100", "memory_GB": 1, "memory_GiB": 1}}, "cluster.gpu.memory_GiB"),
    ({"gpu": {"base": "a100", "sm_count": 0}}, "cluster.gpu.sm_count"),
    ({"gpu": {"base": "a100", "hbm": 1}}, "cluster.gpu.hbm"),
])
def test_cluster_errors_name_the_field(data, field):
    assert err(load_cluster, data).field == field


def test_gbps_case_mistake_gets_a_units_hint():
    e = err(load_cluster, {"gpu": "a100", "inter_node": {"nic_bandwidth_GBps": 25}})
    assert "nic_bandwidth_Gbps" in e.hint and "gigabits" in e.hint


def test_unknown_cluster_reference():
    e = err(load_cluster, "dgx-h10")
    assert e.field == "cluster" and "dgx-h100" in e.hint
    e = err(load_cluster, "missing/cluster.yaml")
    assert e.field == "cluster" and "file not found" in e.message
    assert err(load_cluster, 3).field == "cluster"
    e = err(load_cluster, DATA / "not-a-mapping.yaml")
    assert e.field == "cluster" and "must be a mapping" in e.message


def test_cluster_passthrough():
    c = get_cluster_preset("dgx-h100", 2)
    assert load_cluster(c) is c
    assert err(load_cluster, c, default_gpus=8).field == "gpus"


@pytest.fixture
def fake_topology(monkeypatch):
    """costmodel.topology is another module; stand in for its cluster_from_graph."""
    calls = []

    def cluster_from_graph(data):
        calls.append(data)
        return get_cluster_preset("dgx-a100-80gb", len(data["graph"].get("nodes_hint", [1])))

    mod = types.ModuleType("costmodel.topology")
    mod.cluster_from_graph = cluster_from_graph
    monkeypatch.setitem(sys.modules, "costmodel.topology", mod)
    return calls


GRAPH = {"directed": False, "multigraph": False, "graph": {"nodes_hint": [1, 2]},
         "nodes": [{"id": "n0.gpu0", "kind": "gpu"}, {"id": "n0.nic0", "kind": "nic"}],
         "links": [{"source": "n0.gpu0", "target": "n0.nic0", "bandwidth_GBps": 25}]}


def test_graph_json_goes_to_topology(fake_topology, tmp_path):
    p = tmp_path / "graph.json"
    p.write_text(json.dumps(GRAPH))
    c = load_cluster(p)
    assert isinstance(c, ClusterSpec) and c.num_gpus == 16
    assert fake_topology == [GRAPH]
    assert load_cluster(GRAPH).num_gpus == 16  # an inline mapping too
    assert err(load_cluster, p, default_gpus=8).field == "gpus"


# ==== runs ==================================================================================
def test_run_file_with_relative_paths():
    r = load_run(DATA / "run-llama65b.yaml")
    assert isinstance(r, Run)
    assert shape(r.model) == shape(get_model("llama-65b"))
    assert r.cluster.name == "2x-dgx-a100-80gb" and r.cluster.num_gpus == 16
    assert (r.parallel.tp, r.parallel.pp, r.parallel.dp) == (4, 4, 1)
    assert (r.training.seq_length, r.training.global_batch_size) == (2048, 1024)
    assert load_run(str(DATA / "run-llama65b.yaml")) == r
    with pytest.raises(AttributeError):
        r.model = None  # frozen


def test_run_world_size_mismatch_names_both_numbers():
    e = err(load_run, DATA / "run-mismatch.yaml")
    assert e.field == "parallel"
    assert "32" in e.message and "16" in e.message


def test_run_cluster_sized_from_the_layout():
    r = load_run({"model": "7b", "cluster": {"gpu": "h100"}, "parallel": {"tp": 8, "dp": 4}})
    assert (r.cluster.num_nodes, r.cluster.gpus_per_node) == (4, 8)
    r = load_run({"model": "7b", "cluster": "dgx-a100-80gb", "parallel": {"tp": 2}})
    assert (r.cluster.num_nodes, r.cluster.gpus_per_node) == (1, 2)
    e = err(load_run, {"model": "7b", "cluster": "dgx-a100-80gb", "parallel": {"tp": 12}})
    assert e.field == "parallel" and "12" in e.message


def test_run_mapping_resolves_paths_against_base_dir():
    run = {"model": "model-llama65b.yaml", "cluster": "cluster-2x-dgx-a100.yaml",
           "parallel": {"tp": 8, "pp": 2}}
    r = load_run(run, base_dir=DATA)
    assert r.model.name == "llama-65b" and r.training.seq_length == 2048  # default training
    e = err(load_run, run)  # relative to the working directory: not there
    assert e.field == "model" and "file not found" in e.message


def test_run_json_with_inline_sections(tmp_path):
    run = {"model": {**LLAMA_HF}, "cluster": {"preset": "dgx-h100", "num_nodes": 1},
           "training": {"seq_length": 4096, "global_batch_size": 64},
           "parallel": {"tp": 8, "precision": "fp8"}}
    p = tmp_path / "run.json"
    p.write_text(json.dumps(run))
    r = load_run(p)
    assert r.model.num_layers == 2 and r.parallel.precision == "fp8"
    assert r.training.tokens_per_step == 4096 * 64


@pytest.mark.parametrize("run,field", [
    ({"model": "65b", "cluster": "dgx-h100", "paralel": {}}, "run.paralel"),
    ({"cluster": "dgx-h100"}, "model"),
    ({"model": "65b"}, "cluster"),
    ({"model": "65b", "cluster": "dgx-h100", "parallel": [8]}, "parallel"),
    ({"model": "65b", "cluster": "dgx-h100", "parallel": {"tp": 8, "precision": "bf61"}},
     "parallel.precision"),
    ({"model": "65b", "cluster": "dgx-h100", "parallel": {"tensor_parallel": 8}},
     "parallel.tensor_parallel"),
    ({"model": "65b", "cluster": "dgx-h100", "parallel": {"tp": 8}, "training": {"seq_len": 1}},
     "training.seq_len"),
    ({"model": "65b", "cluster": "dgx-h100", "parallel": {"tp": 8},
      "training": {"seq_length": 0}}, "training.seq_length"),
    ({"model": "65c", "cluster": "dgx-h100", "parallel": {"tp": 8}}, "model"),
    ({"model": "65b", "cluster": {"gpu": "h1000"}, "parallel": {"tp": 8}}, "cluster.gpu"),
    ({"model": {"num_layers": 1}, "cluster": "dgx-h100", "parallel": {"tp": 8}},
     "model.hidden_size"),
])
def test_run_errors_name_the_field(run, field):
    assert err(load_run, run).field == field


def test_run_file_errors():
    assert err(load_run, DATA / "missing-run.yaml").field == "run"
    assert err(load_run, DATA / "not-a-mapping.yaml").field == "run"
    assert err(load_run, DATA / "garbage.bin").field == "run"
    assert err(load_run, 7).field == "run"


# ==== import cost ===========================================================================
def test_loaders_import_is_light():
    code = ("import sys, costmodel; before = set(sys.modules); import costmodel.loaders; "
            "print(sorted(m for m in ('yaml', 'numpy', 'networkx', 'optuna') "
            "if m in sys.modules and m not in before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"
