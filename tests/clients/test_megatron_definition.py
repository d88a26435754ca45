"""The model definition the Megatron-LM arguments build, field by field, read back by
Megatron's own parser (core_v0.16.1 ``parse_args`` + ``validate_args`` +
``core_transformer_config_from_args``): each ModelSpec definition field (activation, rotary
base and scaling, position kind, norm type and epsilon, q/k/v biases, linear biases, q/k
norms, tied embeddings, head width) must come out as the value that was scored, and a model
Megatron's arguments cannot express (Gemma's GeGLU, OPT's ReLU, ALiBi) gets no flags.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import realclients as rc

from costmodel.loaders import load_cluster, load_model
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec
from optimizer.launch.flags import launch_bundle

BASE = ModelSpec("def-test", num_layers=4, hidden_size=1024, num_attention_heads=16,
                 ffn_hidden_size=2816, vocab_size=32000, num_kv_heads=4, gated_mlp=True,
                 position_embedding="rope", rope_theta=500000.0, norm_eps=1e-5)
CLUSTER = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8})
TRAIN = TrainingSpec(2048, 64)
CONFIG = ParallelConfig(tp=2, dp=4)


@pytest.fixture(scope="module")
def megatron():
    return rc.megatron()  # skips the module when the tree or torch is absent


def parsed(model: ModelSpec):
    b = launch_bundle(model, CLUSTER, TRAIN, CONFIG)
    assert b["targets"]["megatron"]["supported"], b["targets"]["megatron"]["reasons"]
    return rc.megatron_validate(b["megatron_args"], b["env"], CONFIG.world_size, 90)


@pytest.mark.parametrize("gated, activation, func, glu", [
    (True, "silu", "silu", True), (True, "quick_gelu", "quick_gelu", True),
    (False, "gelu", "gelu", False), (False, "squared_relu", "squared_relu", False),
    (False, None, "gelu", False), (True, None, "silu", True)])
def test_activation(megatron, gated, activation, func, glu):
    _, tc = parsed(replace(BASE, gated_mlp=gated, activation=activation,
                           ffn_hidden_size=2816 if gated else 4096))
    assert tc.gated_linear_unit is glu
    assert tc.activation_func.__name__ == func


@pytest.mark.parametrize("gated, activation", [(True, "gelu_tanh"), (True, "gelu"),
                                               (False, "relu"), (False, "silu"),
                                               (True, "relu")])
def test_activation_megatron_cannot_express_is_refused(gated, activation):
    m = replace(BASE, gated_mlp=gated, activation=activation)
    b = launch_bundle(m, CLUSTER, TRAIN, CONFIG)
    assert b["megatron_args"] == []
    assert not b["targets"]["megatron"]["supported"]
    assert any("cannot express" in r for r in b["targets"]["megatron"]["reasons"])
    assert not b["targets"]["torchtitan"]["supported"]  # Llama 3 builder: SwiGLU only
    # Megatron-DeepSpeed's legacy MLP: SwiGLU or plain GELU
    assert not b["targets"]["deepspeed"]["supported"]


def test_plain_tanh_gelu_runs_as_erf_gelu_with_a_warning(megatron):
    m = replace(BASE, gated_mlp=False, activation="gelu_tanh", ffn_hidden_size=4096)
    _, tc = parsed(m)
    assert tc.activation_func.__name__ == "gelu" and not tc.gated_linear_unit
    b = launch_bundle(m, CLUSTER, TRAIN, CONFIG)
    assert any("tanh-approximated GELU" in w for w in b["warnings"])


@pytest.mark.parametrize("theta", [10000.0, 500000.0, 1000000.0])
def test_rope_theta(megatron, theta):
    args, _ = parsed(replace(BASE, rope_theta=theta))
    assert args.position_embedding_type == "rope" and args.rotary_base == theta


def test_attention_sinks_are_refused():  # GPT-OSS: no Megatron-LM argument for them
    b = launch_bundle(replace(BASE, attention_sinks=True), CLUSTER, TRAIN, CONFIG)
    assert b["megatron_args"] == [] and not b["targets"]["megatron"]["supported"]


def test_fractional_rope_theta_is_refused():
    b = launch_bundle(replace(BASE, rope_theta=12345.5), CLUSTER, TRAIN, CONFIG)
    assert b["megatron_args"] == [] and not b["targets"]["megatron"]["supported"]


@pytest.mark.parametrize("factor", [None, 8.0, 32.0])
def test_rope_scaling(megatron, factor):
    args, _ = parsed(replace(BASE, rope_scaling_factor=factor))
    assert args.use_rope_scaling == (factor is not None)
    if factor is not None:
        assert args.rope_scaling_factor == factor


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 1e-12, 3.3e-7])
def test_norm_eps(megatron, eps):
    _, tc = parsed(replace(BASE, norm_eps=eps))
    assert tc.layernorm_epsilon == eps


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_normalization(megatron, norm):
    _, tc = parsed(replace(BASE, normalization=norm))
    assert tc.normalization == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[norm]


@pytest.mark.parametrize("position", ["rope", "learned", "none"])
def test_position_embedding(megatron, position):
    m = replace(BASE, position_embedding=position,
                learned_position_embeddings=position == "learned",
                max_position_embeddings=4096 if position == "learned" else None,
                rope_theta=500000.0 if position == "rope" else None)
    args, _ = parsed(m)
    assert args.position_embedding_type == {"rope": "rope", "learned": "learned_absolute",
                                            "none": "none"}[position]
    if position == "learned":
        assert args.max_position_embeddings == 4096


def test_alibi_is_refused():
    b = launch_bundle(replace(BASE, position_embedding="alibi", rope_theta=None), CLUSTER,
                      TRAIN, CONFIG)
    assert b["megatron_args"] == [] and not b["targets"]["megatron"]["supported"]


@pytest.mark.parametrize("linear_bias, qkv_bias", [(False, False), (False, True),
                                                   (True, None)])
def test_biases(megatron, linear_bias, qkv_bias):
    _, tc = parsed(replace(BASE, linear_bias=linear_bias, qkv_bias=qkv_bias))
    assert tc.add_bias_linear == linear_bias
    assert tc.add_qkv_bias == (linear_bias or bool(qkv_bias))


@pytest.mark.parametrize("qk_norm", [False, True])
def test_qk_norm(megatron, qk_norm):
    _, tc = parsed(replace(BASE, qk_norm=qk_norm))
    assert tc.qk_layernorm == qk_norm


@pytest.mark.parametrize("tied", [False, True])
def test_tied_embeddings(megatron, tied):
    args, _ = parsed(replace(BASE, tied_embeddings=tied))
    assert args.untie_embeddings_and_output_weights == (not tied)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_head_dim(megatron, head_dim):
    _, tc = parsed(replace(BASE, head_dim=head_dim))
    assert tc.kv_channels == head_dim and tc.num_query_groups == BASE.num_kv_heads


# Hugging Face configs of the families whose activation Megatron's arguments cannot express
GEMMA_2B = {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
            "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
            "head_dim": 256, "vocab_size": 256000, "hidden_act": "gelu",
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0}
OPT_125M = {"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
            "num_attention_heads": 12, "vocab_size": 50272, "max_position_embeddings": 2048,
            "activation_function": "relu"}


@pytest.mark.parametrize("config, activation", [(GEMMA_2B, "gelu_tanh"), (OPT_125M, "relu")])
def test_hf_families_megatron_cannot_build(config, activation):
    m = load_model(config)
    assert m.activation == activation
    b = launch_bundle(m, CLUSTER, TRAIN, ParallelConfig(dp=8))
    assert b["megatron_args"] == [] and not b["targets"]["megatron"]["supported"]
    from costmodel.errors import InputError
    from optimizer.launch.scripts import k8s_yaml, slurm_script

    for emit in (slurm_script, k8s_yaml):
        with pytest.raises(InputError, match="cannot express"):
            emit(m, CLUSTER, TRAIN, ParallelConfig(dp=8))
