"""The MoE token dispatcher and capacity the score prices, read back by Megatron-LM's own
parser (core_v0.16.1 ``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args``):
``flex`` with its backend (DeepEP on NVL8 hosts, HybridEP inside an NVL72 domain or when the
experts are padded to capacity, which TransformerConfig refuses with DeepEP), and a capacity
factor with ``--moe-pad-expert-input-to-capacity`` (the padded variant the cost model
prices)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import realclients as rc

from costmodel.loaders import load_cluster, load_model
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.launch.flags import launch_bundle


@pytest.fixture(scope="module")
def megatron():
    return rc.megatron()  # skips the module when the tree or torch is absent


CONFIG = ParallelConfig(tp=1, pp=1, dp=32, ep=8, precision="bf16", zero_stage=1)


@pytest.mark.parametrize("gpu,per_node,domain,padded,backend", [
    ("h100-sxm-80gb", 8, None, False, "deepep"),
    ("h100-sxm-80gb", 8, None, True, "hybridep"),
    ("gb200", 4, 72, False, "hybridep"),
], ids=["nvl8-deepep", "nvl8-padded-hybridep", "nvl72-hybridep"])
def test_megatron_builds_the_scored_dispatcher(megatron, gpu, per_node, domain, padded,
                                               backend):
    model = load_model("qwen3-30b-a3b")
    if padded:
        model = replace(model, moe=replace(model.moe, capacity_factor=1.0))
    cluster = load_cluster({"gpu": gpu, "num_nodes": 32 // per_node, "gpus_per_node": per_node,
                            **({"gpus_per_domain": domain} if domain else {})})
    training = TrainingSpec(4096, 256, moe_dispatcher="flex")
    b = launch_bundle(model, cluster, training, CONFIG)
    args, tc = rc.megatron_validate(b["megatron_args"], b["env"], CONFIG.world_size, 90)
    assert tc.moe_token_dispatcher_type == "flex"
    assert tc.moe_flex_dispatcher_backend == backend
    assert bool(tc.moe_pad_expert_input_to_capacity) == padded
    if padded:
        assert tc.moe_expert_capacity_factor == 1.0


def test_megatron_builds_alltoall_by_default(megatron):
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 4, "gpus_per_node": 8})
    b = launch_bundle(model, cluster, TrainingSpec(4096, 256), CONFIG)
    _, tc = rc.megatron_validate(b["megatron_args"], b["env"], CONFIG.world_size, 90)
    assert tc.moe_token_dispatcher_type == "alltoall"


def test_padded_experts_without_ep_use_the_alltoall_dispatcher(megatron):
    # at ep 1 the allgather dispatcher copies its counts to the host whatever the padding;
    # the alltoall one sets the padded counts on the host, the sync-free run the score prices
    model = load_model("qwen3-30b-a3b")
    model = replace(model, moe=replace(model.moe, capacity_factor=1.0))
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8})
    config = ParallelConfig(tp=1, pp=1, dp=8, ep=1, precision="bf16", zero_stage=1)
    b = launch_bundle(model, cluster, TrainingSpec(4096, 256), config)
    _, tc = rc.megatron_validate(b["megatron_args"], b["env"], config.world_size, 90)
    assert tc.moe_token_dispatcher_type == "alltoall"
    assert tc.moe_pad_expert_input_to_capacity
