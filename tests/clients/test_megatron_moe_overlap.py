"""``--overlap-moe-expert-parallel-comm`` (``TrainingSpec.moe_ep_overlap``) read back by
Megatron-LM's own parser (core_v0.16.1 ``parse_args`` + ``validate_args`` +
``core_transformer_config_from_args``): where paraplan emits it, ``TransformerConfig
.__post_init__``'s overlap assertions (ep > 1, alltoall/flex dispatcher, no full recompute
or recompute method, bf16/fp16, a virtual pipeline size when pp > 1) must pass; where the
cost model does not apply it, the flags leave it out and the warnings say why."""

from __future__ import annotations

import pytest
import realclients as rc

from costmodel.loaders import load_cluster, load_model
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.launch.flags import launch_bundle

FLAG = "--overlap-moe-expert-parallel-comm"


@pytest.fixture(scope="module")
def megatron():
    return rc.megatron()  # skips the module when the tree or torch is absent


@pytest.mark.parametrize("config", [
    ParallelConfig(tp=1, pp=1, dp=32, ep=8, precision="bf16", zero_stage=1),
    ParallelConfig(tp=2, pp=2, dp=8, ep=8, precision="fp8", schedule="interleaved",
                   virtual_stages=2, sequence_parallel=True, recompute="selective",
                   recompute_modules="moe_act"),
], ids=["pp1-bf16", "pp2-interleaved-fp8"])
def test_megatron_accepts_the_ep_overlap_where_emitted(megatron, config):
    model = load_model("qwen3-30b-a3b")  # 48 layers, 128 experts
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 4, "gpus_per_node": 8})
    training = TrainingSpec(4096, 256, moe_ep_overlap=True)
    b = launch_bundle(model, cluster, training, config)
    assert FLAG in b["megatron_args"]
    assert not any("is not emitted" in w for w in b["warnings"])
    assert b["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"  # Megatron's MoE README: > 1
    # TP on Hopper beside the overlap: Megatron's own advice, said as a warning
    assert any("advises against TP" in w for w in b["warnings"]) == (config.tp > 1)
    args, tc = rc.megatron_validate(b["megatron_args"], b["env"], config.world_size, 90)
    assert args.overlap_moe_expert_parallel_comm and tc.overlap_moe_expert_parallel_comm
    assert tc.expert_model_parallel_size == config.ep
    assert tc.virtual_pipeline_model_parallel_size == (config.virtual_stages
                                                       if config.pp > 1 else None)


@pytest.mark.parametrize("config, needs, refusal", [
    (ParallelConfig(tp=1, pp=2, dp=16, ep=8, recompute="full", zero_stage=1),
     ("full recompute", "interleaved"), "virtual_pipeline_model_parallel_size must be"),
    (ParallelConfig(tp=1, pp=1, dp=32, ep=8, precision="fp32"), ("bf16 or fp16",),
     "only supported with bf16 or fp16 model"),
], ids=["pp2-1f1b-full-recompute", "fp32"])
def test_not_emitted_where_megatron_would_refuse_it(megatron, config, needs, refusal):
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 4, "gpus_per_node": 8})
    training = TrainingSpec(4096, 256, moe_ep_overlap=True)
    b = launch_bundle(model, cluster, training, config)
    assert FLAG not in b["megatron_args"]
    w = [x for x in b["warnings"] if "moe_ep_overlap" in x]
    assert len(w) == 1 and all(n in w[0] for n in needs), w
    # the flags without it are what Megatron accepts; with it, its assertion fires
    rc.megatron_validate(b["megatron_args"], b["env"], config.world_size, 90)
    with pytest.raises(AssertionError, match=refusal):
        rc.megatron_validate([*b["megatron_args"], FLAG], b["env"], config.world_size, 90)
