"""Megatron-LM's own argument validation on every bundle of the corpus.

``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args`` (which builds and
checks ``TransformerConfig``) of the Megatron-LM source tree (core_v0.16.1) run on each
``megatron_args`` list with the bundle's environment, as rank 0 of the scored world size on
the scored GPU's compute capability; then the parsed values must be the scored ones.
"""

from __future__ import annotations

import pytest
import realclients as rc
from corpus import FRONT_RUNS, SCENARIOS, bundles, fronts, run_all

from optimizer.launch.model_facts import model_facts


@pytest.fixture(scope="module")
def corpus():
    rc.megatron()  # skips the module when the tree or torch is absent
    return dict((s.name, (s, r)) for s, r in bundles())


def _scored(result):
    p = result.problem
    return p.model, p.cluster, p.training, result.candidate.config


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_megatron_accepts_and_parses_the_scored_run(corpus, name):
    check_megatron(corpus[name][1])


@pytest.mark.parametrize("run", list(FRONT_RUNS))
def test_megatron_accepts_every_front_point(corpus, run):
    run_all(fronts()[run], check_megatron)


def check_megatron(result):
    model, cluster, training, c = _scored(result)
    launch = result.candidate.launch
    target = launch["targets"]["megatron"]
    assert target["supported"], target["reasons"]
    assert target["script"] == ("pretrain_gpt.py" if model.causal else "pretrain_bert.py")
    args, tc = rc.megatron_validate(launch["megatron_args"], launch["env"], c.world_size,
                                    cluster.gpu.compute_capability)
    # layout and batch
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
            args.data_parallel_size) == (c.tp, c.pp, c.dp)
    assert args.micro_batch_size == c.micro_batch_size
    assert args.global_batch_size == training.global_batch_size
    assert args.seq_length == training.seq_length
    m = training.global_batch_size // (c.micro_batch_size * c.dp)
    assert args.global_batch_size == m * c.micro_batch_size * args.data_parallel_size
    interleaved = c.schedule == "interleaved" and c.virtual_stages > 1
    assert args.virtual_pipeline_model_parallel_size == (c.virtual_stages if interleaved
                                                         else None)
    assert tc.sequence_parallel == (c.sequence_parallel and c.tp > 1)
    assert bool(args.tp_comm_overlap) == (training.tp_comm_overlap and c.sequence_parallel
                                          and c.tp > 1)
    # stages: Megatron's own layer split equals the scored one (a balanced plan included)
    from costmodel.model import plan_of

    first, middle, last = plan_of(model, cluster, training, c)
    uneven = c.pp > 1 and (first != last or (c.pp > 2 and middle != first))
    if interleaved and (uneven or model.num_layers % (c.pp * c.virtual_stages)):
        # an uneven interleaved plan goes through --pipeline-model-parallel-layout (Megatron
        # refuses first/last-stage layer counts with virtual stages)
        assert args.pipeline_model_parallel_layout, args.pipeline_model_parallel_layout
    elif uneven:
        assert (tc.num_layers_in_first_pipeline_stage,
                tc.num_layers_in_last_pipeline_stage) == (int(first), int(last))
        if c.pp > 2:
            rest = model.num_layers - int(first) - int(last)
            assert rest == int(middle) * (c.pp - 2)
    else:
        assert tc.num_layers_in_first_pipeline_stage is None
    # recompute
    want = {"none": None, "selective": "selective", "full": "full"}[c.recompute]
    assert tc.recompute_granularity == want
    if c.recompute == "full":  # partial recompute: the block method on N layers per chunk
        assert (tc.recompute_method, tc.recompute_num_layers) == (
            ("block", c.recompute_num_layers) if c.recompute_num_layers > 0 else ("uniform", 1))
    if c.recompute == "selective":  # the modules scored (costmodel.recompute)
        assert list(tc.recompute_modules) == c.recompute_modules.split("+")
    # precision
    assert tc.bf16 == (c.precision in ("bf16", "fp8"))
    assert tc.fp16 == (c.precision == "fp16")
    if c.precision == "fp8":
        assert tc.fp8 in ("hybrid", "e4m3") and tc.fp8_recipe != "delayed"
    else:
        assert not tc.fp8
    if c.precision == "tf32":
        assert launch["env"]["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"
    # data parallelism / ZeRO
    assert args.use_distributed_optimizer == (c.zero_stage == 1)
    assert args.use_megatron_fsdp == (c.zero_stage >= 2)
    if c.zero_stage >= 2:
        assert args.data_parallel_sharding_strategy == (
            "optim_grads" if c.zero_stage == 2 else "optim_grads_params")
        assert args.ckpt_format == "fsdp_dtensor"
    # the model definition
    facts = model_facts(model)
    dropout = 0.1 if training.dropout else 0.0
    assert (tc.hidden_dropout, tc.attention_dropout) == (dropout, dropout)
    assert (tc.num_layers, tc.hidden_size, tc.ffn_hidden_size, tc.num_attention_heads) == (
        model.num_layers, model.hidden_size, model.ffn_hidden_size, model.num_attention_heads)
    assert tc.num_query_groups in (model.num_kv_heads, None) and (
        tc.num_query_groups or tc.num_attention_heads) == model.num_kv_heads
    assert tc.kv_channels == model.head_dim
    assert tc.gated_linear_unit == model.gated_mlp
    assert tc.normalization == ("RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm")
    assert tc.layernorm_epsilon == facts.norm_eps
    assert tc.add_bias_linear == model.linear_bias
    assert args.untie_embeddings_and_output_weights == (not model.tied_embeddings)
    assert args.padded_vocab_size is None or args.vocab_size == model.vocab_size
    assert args.vocab_size == model.vocab_size
    if facts.position == "rope":
        assert args.position_embedding_type == "rope"
        assert args.rotary_base == facts.rope_base
        assert args.use_rope_scaling == bool(facts.rope_scaling_factor)
        if facts.rope_scaling_factor:
            assert args.rope_scaling_factor == facts.rope_scaling_factor
    else:
        assert args.position_embedding_type == "learned_absolute"
    assert args.max_position_embeddings >= training.seq_length
    if not training.flash_attention:
        assert str(args.attention_backend).endswith("unfused")


def test_llama3_rotary_base_is_500000(corpus):
    _, result = corpus["llama3-8b-h100-fp8"]
    args, _ = rc.megatron_validate(result.candidate.launch["megatron_args"],
                                   result.candidate.launch["env"], 8, 90)
    assert args.rotary_base == 500000 and not args.use_rope_scaling


def test_llama31_405b_rope_scaling(corpus):
    _, result = corpus["llama3-405b-16x"]
    args, _ = rc.megatron_validate(result.candidate.launch["megatron_args"],
                                   result.candidate.launch["env"], 1024, 90)
    assert args.use_rope_scaling and args.rope_scaling_factor == 8.0


def test_megatron_refuses_alibi_with_a_warning():
    from costmodel.loaders import load_cluster
    from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec
    from optimizer.launch.flags import launch_bundle

    bloom = ModelSpec("bloom-like", num_layers=4, hidden_size=1024, num_attention_heads=16,
                      ffn_hidden_size=4096, vocab_size=250880, linear_bias=True,
                      normalization="layernorm", tied_embeddings=True,
                      source="Hugging Face config.json (model_type 'bloom')")
    cl = load_cluster({"gpu": "a100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8})
    b = launch_bundle(bloom, cl, TrainingSpec(2048, 64), ParallelConfig(dp=8))
    assert b["megatron_args"] == []
    assert not b["targets"]["megatron"]["supported"]
    assert any("ALiBi" in w for w in b["warnings"])
