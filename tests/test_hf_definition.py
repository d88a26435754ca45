"""Hugging Face families that name their fields otherwise (Falcon, OPT, GPT-J, BLOOM, MPT,
Gemma 3; issue 24) and the model-definition fields the launch flags read from the ModelSpec
(position kind, rotary base and scaling, norm epsilon, q/k/v biases, norms per layer).

Exact parameter counts against transformers' own models are in
tests/clients/test_transformers_params.py; these run without transformers, on config.json
excerpts with the published values."""

from __future__ import annotations

import pytest

from costmodel.errors import InputError
from costmodel.loaders import load_model
from costmodel.models_catalog import get_model
from costmodel.specs import ModelSpec
from optimizer.core.serialize import model_to_dict
from optimizer.launch.flags import _megatron_shape, launch_targets
from optimizer.launch.model_facts import model_facts

FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
             "num_attention_heads": 71, "vocab_size": 65024, "multi_query": True,
             "parallel_attn": True, "bias": False, "new_decoder_architecture": False,
             "alibi": False, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0}
FALCON_40B = {**FALCON_7B, "hidden_size": 8192, "num_hidden_layers": 60,
              "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": True}
BLOOM_7B1 = {"model_type": "bloom", "hidden_size": 4096, "n_layer": 30, "n_head": 32,
             "vocab_size": 250880, "layer_norm_epsilon": 1e-5}
MPT_7B = {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
          "expansion_ratio": 4, "vocab_size": 50432, "max_seq_len": 2048, "no_bias": True,
          "attn_config": {"alibi": True}, "layer_norm_epsilon": 1e-5}
OPT_6_7B = {"model_type": "opt", "hidden_size": 4096, "ffn_dim": 16384,
            "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 50272,
            "max_position_embeddings": 2048, "word_embed_proj_dim": 4096, "enable_bias": True}
GPTJ_6B = {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16,
           "rotary_dim": 64, "vocab_size": 50400, "n_positions": 2048,
           "layer_norm_epsilon": 1e-5}
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
             "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
             "head_dim": 256, "vocab_size": 262144, "rms_norm_eps": 1e-6,
             "hidden_activation": "gelu_pytorch_tanh",
             "rope_parameters": {"full_attention": {"rope_type": "default",
                                                    "rope_theta": 1000000.0},
                                 "sliding_attention": {"rope_type": "default",
                                                       "rope_theta": 10000.0}}}
LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                               "original_max_position_embeddings": 8192}}


def test_falcon_multi_query_parallel_block():
    m = load_model(FALCON_7B)
    assert (m.num_kv_heads, m.ffn_hidden_size, m.norms_per_layer) == (1, 4 * 4544, 1)
    assert m.tied_embeddings and not m.gated_mlp and not m.linear_bias
    assert m.normalization == "layernorm" and m.position_embedding == "rope"
    # published: 6,921,720,704 (transformers' FalconForCausalLM, tied)
    assert m.total_params() == 6_921_720_704
    big = load_model(FALCON_40B)
    assert (big.num_kv_heads, big.norms_per_layer) == (8, 2)


def test_bloom_and_mpt_are_alibi_and_megatron_refuses_them():
    for cfg, kv, bias in ((BLOOM_7B1, 32, True), (MPT_7B, 32, False)):
        m = load_model(cfg)
        assert m.position_embedding == "alibi" and not m.learned_position_embeddings
        assert (m.num_kv_heads, m.ffn_hidden_size, m.linear_bias) == (kv, 16384, bias)
        assert model_facts(m).position == "alibi"
        t = launch_targets(m, _config())
        assert not t["megatron"]["supported"] and "ALiBi" in t["megatron"]["reasons"][0]


def test_opt_gptj_gemma3_shapes():
    opt = load_model(OPT_6_7B)
    assert opt.learned_position_embeddings and opt.position_embedding == "learned"
    assert opt.linear_bias and opt.ffn_hidden_size == 16384
    gptj = load_model(GPTJ_6B)
    assert (gptj.ffn_hidden_size, gptj.norms_per_layer, gptj.rope_theta) == (16384, 1, 1e4)
    assert not gptj.tied_embeddings
    g3 = load_model(GEMMA3_1B)
    assert g3.gated_mlp and g3.qk_norm and g3.norms_per_layer == 4 and g3.tied_embeddings
    assert g3.rope_theta == 1e6  # the full-attention layers' base
    assert g3.total_params() == 999_885_952  # transformers' Gemma3ForCausalLM


def test_refusals_name_the_family_and_the_field():
    with pytest.raises(InputError) as e:
        load_model({k: v for k, v in FALCON_7B.items() if k != "hidden_size"})
    assert e.value.field == "model.hidden_size" and "falcon config" in e.value.message
    with pytest.raises(InputError) as e:
        load_model({**OPT_6_7B, "hidden_size": 1024, "num_attention_heads": 16,
                    "ffn_dim": 4096, "word_embed_proj_dim": 512})  # OPT-350m
    assert e.value.field == "model.word_embed_proj_dim" and "opt" in e.value.message
    with pytest.raises(InputError) as e:
        load_model({k: v for k, v in MPT_7B.items() if k != "n_layers"})
    assert e.value.field == "model.n_layers" and "mpt config" in e.value.message


def test_definition_facts_reach_the_megatron_flags():
    m = load_model(LLAMA31_8B)
    assert (m.rope_theta, m.rope_scaling_factor, m.norm_eps) == (500000.0, 8.0, 1e-5)
    facts = model_facts(m)
    assert facts.exact and facts.rope_base == 500000.0
    args = _megatron_shape(m)
    assert args[args.index("--rotary-base") + 1] == "500000"
    assert args[args.index("--norm-epsilon") + 1] == "1e-05"
    assert "--use-rope-scaling" in args
    # Qwen2: q/k/v biases without the other linear biases, counted and flagged
    qwen = load_model({**LLAMA31_8B, "model_type": "qwen2", "rope_scaling": None,
                       "rope_theta": 1e6, "rms_norm_eps": 1e-6})
    assert qwen.qkv_bias and not qwen.linear_bias
    plain = ModelSpec(**{**{k: getattr(qwen, k) for k in ("name", "num_layers", "hidden_size",
                         "num_attention_heads", "ffn_hidden_size", "vocab_size",
                         "num_kv_heads", "gated_mlp")}})
    a, g, d = 32, 8, 128
    assert qwen.total_params() - plain.total_params() == 32 * (a + 2 * g) * d
    qargs = _megatron_shape(qwen)
    assert "--add-qkv-bias" in qargs and qargs[qargs.index("--rotary-base") + 1] == "1000000"


def test_spec_fields_are_validated_and_stay_out_of_catalog_fingerprints():
    base = dict(name="x", num_layers=2, hidden_size=64, num_attention_heads=4,
                ffn_hidden_size=256, vocab_size=100)
    with pytest.raises(InputError, match="position_embedding"):
        ModelSpec(**base, position_embedding="alibi", learned_position_embeddings=True)
    with pytest.raises(InputError, match="position_embedding"):
        ModelSpec(**base, position_embedding="sinusoid")
    with pytest.raises(InputError, match="norm_eps"):
        ModelSpec(**base, norm_eps=-1.0)
    with pytest.raises(InputError, match="norms_per_layer"):
        ModelSpec(**base, norms_per_layer=0)
    for name in ("llama-65b", "llama3-8b", "gpt3-175b"):
        d = model_to_dict(get_model(name))
        assert not {"position_embedding", "rope_theta", "norm_eps", "qkv_bias",
                    "norms_per_layer", "rope_scaling_factor"} & set(d)


def _config():
    from costmodel.specs import ParallelConfig

    return ParallelConfig(tp=1, pp=1, dp=8)


def test_alibi_front_document_is_valid_with_empty_megatron_args(tmp_path):
    """A BLOOM config.json's front: Megatron is refused (no flags), and the document still
    validates against the shipped schema (megatron_args minItems 0; it was 1, and the CLI's
    schema check turned the run into an internal error)."""
    import json

    from conftest import run_cli_json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(BLOOM_7B1))
    doc = run_cli_json(["--model", str(path), "--gpus", "8"], "front")
    launches = [c["launch"] for c in doc["pareto_front"]]
    assert launches and all(la["megatron_args"] == [] for la in launches)
    assert all(not la["targets"]["megatron"]["supported"] for la in launches)
    assert all(la["torchtitan_args"] for la in launches)
