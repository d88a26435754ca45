"""An explicit pipeline layout (``TrainingSpec.pipeline_layout``) read back by Megatron-LM's
own parser
(core_v0.16.1 ``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args``,
whose ``TransformerConfig`` parses and validates the layout): Megatron's per-rank layer
counts must be the ones the cost model scores (``costmodel.pipeline_layout.rank_layout``, the
stage plan's groups)."""

from __future__ import annotations

import pytest
import realclients as rc

from costmodel.batch import ConfigBatch
from costmodel.loaders import load_cluster, load_model
from costmodel.model import run_phases
from costmodel.pipeline_layout import rank_layout, without_mtp
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.launch.flags import launch_bundle

LAYOUT = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge DeepSeek-V3 B200 recipe (pp 8, vpp 2)


@pytest.fixture(scope="module")
def megatron():
    return rc.megatron()  # skips the module when the tree or torch is absent


@pytest.mark.parametrize("layout, pp, vpp", [(LAYOUT, 8, 2), ("Et*8|(t*8|)*6t*5mL", 8, 1),
                                             ("Et*3|(t*4|)*14t*2L", 4, 4)])
def test_megatron_builds_the_scored_layout(megatron, layout, pp, vpp):
    model = load_model("deepseek-v3")  # 61 layers, 1 MTP module
    cluster = load_cluster({"gpu": "b200", "num_nodes": 32, "gpus_per_node": 8})
    training = TrainingSpec(4096, 4096, pipeline_layout=layout, moe_dispatcher="flex")
    config = ParallelConfig(tp=1, pp=pp, dp=256 // pp, ep=32, precision="fp8",
                            schedule="interleaved" if vpp > 1 else "1f1b", virtual_stages=vpp)
    b = launch_bundle(model, cluster, training, config)
    assert b["targets"]["megatron"]["supported"], b["targets"]["megatron"]["reasons"]
    args, tc = rc.megatron_validate(b["megatron_args"], b["env"], config.world_size, 100)
    assert str(args.pipeline_model_parallel_layout) == without_mtp(layout)
    assert args.virtual_pipeline_model_parallel_size == (vpp if vpp > 1 else None)
    meg = tc.pipeline_model_parallel_layout
    # Megatron's parsed layout: layout[pp_rank][vpp_rank], a list of LayerTypes each
    # (get_num_layers_to_build reads the parallel state, not set up here)
    assert meg.virtual_pipeline_model_parallel_size == vpp
    built = [sum(x.name == "decoder" for chunk in meg.layout[r] for x in chunk)
             for r in range(pp)]
    ours = rank_layout(layout, pp)
    assert tuple(built) == ours.layers
    # the stage plan the cost model scores holds the same layers per rank
    ph = run_phases(model, cluster, training, ConfigBatch.from_configs([config]))
    plan = ph.plan
    assert [int(plan.stage_layers(r)[0]) for r in range(pp)] == built
