"""torchtitan 0.3's own ConfigManager on every bundle of the corpus, then its ParallelDims
validation, its pipeline split (``_get_pipeline_metadata`` + ``_generate_llm_fqn_per_model_part``,
what ``pipeline_llm`` runs) and the Trainer's batch arithmetic; the parsed values must be the
scored ones (layout, micro-batches, stages, recompute, precision, the model definition)."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from pathlib import Path

import pytest
import realclients as rc
from corpus import FRONT_RUNS, SCENARIOS, bundles, fronts, run_all

from optimizer.launch.flags import TORCHTITAN_MODULE
from optimizer.launch.model_facts import model_facts


@pytest.fixture(scope="module")
def titan():
    rc.require("torch")
    manager = rc.require("torchtitan.config.manager")
    dims = rc.require("torchtitan.distributed.parallel_dims")
    pipe = rc.require("torchtitan.distributed.pipeline_parallel")
    ac = rc.require("torchtitan.distributed.activation_checkpoint")
    rc.require("torchao")  # torchtitan's Float8 converter is torchao's Float8Linear
    f8 = rc.require("torchtitan.components.quantization.float8")
    logging.getLogger("torchtitan").setLevel(logging.ERROR)
    return manager.ConfigManager, dims.ParallelDims, pipe, ac, f8


@pytest.fixture(scope="module")
def corpus():
    return dict((s.name, (s, r)) for s, r in bundles())


def _parse(ConfigManager, launch, tmp_path, cc):
    """Save the bundle's config module as paraplan_torchtitan.py and parse the arguments."""
    import tempfile

    d = Path(tempfile.mkdtemp(dir=tmp_path))
    (d / f"{TORCHTITAN_MODULE}.py").write_text(launch["torchtitan_config"])
    sys.path.insert(0, str(d))
    sys.modules.pop(TORCHTITAN_MODULE, None)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), rc.gpu_facts(cc):
            return ConfigManager().parse_args(list(launch["torchtitan_args"]))
    finally:
        sys.path.remove(str(d))
        sys.modules.pop(TORCHTITAN_MODULE, None)


def _stage_layers(parts):
    return [sum(1 for m in p if m.startswith("layers.")) for p in parts]


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_torchtitan_accepts_and_parses_the_scored_run(titan, corpus, name, tmp_path):
    check_torchtitan(titan, corpus[name][1], tmp_path)


@pytest.mark.parametrize("run", list(FRONT_RUNS))
def test_torchtitan_accepts_every_front_point(titan, corpus, run, tmp_path):
    # the points torchtitan's target supports (launch.targets.torchtitan.supported); the
    # others carry their reasons (e.g. ZeRO-1, fp16, selective AC) and are not faithful
    cases = [c for c in fronts()[run] if c.candidate.launch["targets"]["torchtitan"]["supported"]]
    run_all(cases, lambda case: check_torchtitan(titan, case, tmp_path))


def _check_partial_recompute(cfg, policy, result, pipe, dims, par):
    """Build the parsed model on the meta device, split it into pipeline_llm's model parts
    (``_split_module`` on ``_generate_llm_fqn_per_model_part``'s stage lists), apply the
    parsed policy to each part, and compare the checkpointed blocks with what the cost model
    prices: the first N blocks of each model chunk (costmodel.stages.recomputed_layers)."""
    import numpy as np
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from costmodel.model import plan_of
    from costmodel.stages import recomputed_layers

    model, c = result.problem.model, result.candidate.config
    n = c.recompute_num_layers
    with torch.device("meta"):
        whole = cfg.model_spec.model.build()
    if c.pp > 1:
        n_stages, n_layers, iw, ow = pipe._get_pipeline_metadata(dims, par, cfg.model_spec.model)
        names = pipe._generate_llm_fqn_per_model_part(n_stages, n_layers, iw, ow)
        parts = [pipe._split_module(whole, stage) for stage in names]
    else:
        parts = [whole]
    checkpointed = []  # per model part: the blocks wrapped, in order
    for part in parts:
        ids = list(part.layers.keys())
        policy.build().apply(part)
        wrapped = [k for k in ids if isinstance(part.layers[k], CheckpointWrapper)]
        assert wrapped == ids[:n]  # the first N blocks of the chunk, none other
        checkpointed.append((len(ids), len(wrapped)))
    # the cost model's stages: stage s holds model parts s, s + pp, ... (torchtitan's loop
    # order); where the chunks are equal its first-N-per-chunk count is torchtitan's
    v = len(parts) // c.pp
    first, middle, last = plan_of(model, result.problem.cluster, result.problem.training, c)
    stage_layers = [int(first), *[int(middle)] * (c.pp - 2), int(last)] if c.pp > 1 else [
        model.num_layers]
    for s in range(c.pp):
        mine = checkpointed[s::c.pp]
        assert sum(k for k, _ in mine) == stage_layers[s]
        if len({k for k, _ in mine}) == 1:
            priced = float(recomputed_layers(np.float64(stage_layers[s]), n, v))
            assert sum(w for _, w in mine) == priced


def check_torchtitan(titan, result, tmp_path):
    ConfigManager, ParallelDims, pipe, ac, f8 = titan
    model, training, c = result.problem.model, result.problem.training, result.candidate.config
    launch = result.candidate.launch
    cfg = _parse(ConfigManager, launch, tmp_path, result.problem.cluster.gpu.compute_capability)
    par = cfg.parallelism
    dims = ParallelDims.from_config(par, c.world_size)  # validates the degrees
    fsdp = c.zero_stage >= 2
    assert (dims.dp_replicate, dims.dp_shard, dims.tp, dims.pp, dims.cp) == (
        1 if fsdp else c.dp, c.dp if fsdp else 1, c.tp, c.pp, c.cp)
    if fsdp:
        assert par.fsdp_reshard_after_forward == ("never" if c.zero_stage == 2 else "always")
    if c.tp > 1:
        assert par.enable_sequence_parallel == c.sequence_parallel
    # batch: the Trainer's arithmetic
    batch_degree = dims.dp_replicate * dims.dp_shard
    t = cfg.training
    assert t.global_batch_size == training.global_batch_size and t.seq_len == training.seq_length
    assert t.global_batch_size % (t.local_batch_size * batch_degree) == 0
    accumulation = t.global_batch_size // (t.local_batch_size * batch_degree)
    m = training.global_batch_size // (c.micro_batch_size * c.dp)
    if c.pp > 1:
        assert t.disable_cuda_graphs  # Trainer.Config refuses CUDA graphs with PP
        assert accumulation == 1
        assert t.local_batch_size // par.pipeline_parallel_microbatch_size == m
        assert par.pipeline_parallel_microbatch_size == c.micro_batch_size
        # stages, as pipeline_llm builds them
        n_stages, n_layers, iw, ow = pipe._get_pipeline_metadata(dims, par, cfg.model_spec.model)
        v = c.virtual_stages if c.schedule == "interleaved" else 1
        assert n_layers == model.num_layers and n_stages == c.pp * v
        parts = pipe._generate_llm_fqn_per_model_part(n_stages, n_layers, iw, ow)
        layers = _stage_layers(parts)
        from costmodel.model import plan_of

        first, middle, last = plan_of(model, result.problem.cluster, training, c)
        if v > 1 and (model.num_layers % (c.pp * v) or c.stage_plan == "balanced"):
            # an uneven interleaved plan (Llama 3: the first and last chunk one layer short):
            # the chunks hold every layer, the middle ones the plan's v-layer share each
            assert sum(layers) == model.num_layers and len(layers) == c.pp * v
        elif v > 1:
            assert layers == [model.num_layers // (c.pp * v)] * (c.pp * v)
        else:
            assert layers == [int(first), *[int(middle)] * (c.pp - 2), int(last)]
        assert "tok_embeddings" in parts[0] and "lm_head" in parts[-1]
        schedule = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
        assert par.pipeline_parallel_schedule == schedule[c.schedule]
    else:
        assert t.local_batch_size == c.micro_batch_size and accumulation == m
    # recompute
    policy = cfg.activation_checkpoint
    if c.recompute == "full" and c.recompute_num_layers:
        # partial: the config module's PartialFullAC (a FullAC), which the CLI keeps; applied
        # to the real model (meta device) as pipeline_llm applies it, stage part by part
        assert type(policy).__qualname__ == "PartialFullAC.Config"
        assert isinstance(policy, ac.FullAC.Config)
        assert policy.num_layers == c.recompute_num_layers
        _check_partial_recompute(cfg, policy, result, pipe, dims, par)
    elif c.recompute == "full":
        assert type(policy) is ac.FullAC.Config
    elif c.recompute == "none":
        assert policy is None
    else:  # torchtitan's SAC is another recompute: the bundle says the target is not faithful
        assert isinstance(policy, ac.SelectiveAC.Config)
        assert not launch["targets"]["torchtitan"]["supported"]
    # torch.compile as priced (TrainingSpec.torch_compile), async TP only over a TP group
    async_tp = bool(training.tp_comm_overlap) and c.tp > 1
    assert cfg.compile.enable == (bool(training.torch_compile) or async_tp)
    assert cfg.compile.enable_async_tensor_parallel == async_tp
    # precision
    float8 = [fqn for fqn, *_ in cfg.model_spec.model.traverse(f8.Float8Linear.Config)]
    assert bool(float8) == (c.precision == "fp8")
    if float8:  # every transformer Linear, not the LM head (as Transformer Engine in Megatron)
        assert not any("lm_head" in f for f in float8)
        assert len(float8) == 4 * model.num_layers or len(float8) == 5 * model.num_layers
    if c.precision in ("bf16", "fp8"):
        assert t.mixed_precision_param == "bfloat16"
    elif c.precision in ("fp32", "tf32"):
        assert t.mixed_precision_param == "float32"
    else:
        assert not launch["targets"]["torchtitan"]["supported"]
    # the model definition
    mc = cfg.model_spec.model
    assert len(mc.layers) == model.num_layers and mc.dim == model.hidden_size
    assert mc.vocab_size == model.vocab_size
    assert mc.enable_weight_tying == model.tied_embeddings
    layer = mc.layers[0]
    attn = layer.attention
    assert attn.n_heads == model.num_attention_heads and attn.n_kv_heads == model.num_kv_heads
    ffn = layer.feed_forward
    assert ffn.w1.out_features == model.ffn_hidden_size
    facts = model_facts(model)
    assert attn.rope.theta == (facts.rope_base or 10000.0)
    assert attn.rope.scaling == ("llama" if facts.rope_scaling_factor else "none")
    assert layer.attention_norm.eps == facts.norm_eps == mc.norm.eps
    faithful = launch["targets"]["torchtitan"]["supported"]
    assert faithful == (model.gated_mlp and not model.linear_bias and model.causal
                        and model.normalization == "rmsnorm" and c.recompute != "selective"
                        and c.precision != "fp16" and c.zero_stage != 1
                        and not (c.dp > 1 and not fsdp and (c.tp > 1 or c.pp > 1))
                        and (c.cp == 1 or c.cp_comm_type == "all_gather")
                        and c.cpu_offloading_num_layers == 0
                        and c.precision_aware_optimizer == "off")
