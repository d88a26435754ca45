"""DeepSpeed 0.19's own configuration parser on every bundle of the corpus, and its
pipeline-engine rule (ZeRO 0/1 only with pp > 1), which ``deepspeed.initialize`` applies."""

from __future__ import annotations

import inspect

import pytest
import realclients as rc
from corpus import FRONT_RUNS, SCENARIOS, bundles, fronts, run_all


class _Mpu:
    """Megatron-DeepSpeed's model-parallel unit as DeepSpeedConfig asks it: the DP size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.fixture(scope="module")
def ds():
    rc.require("torch")
    config = rc.require("deepspeed.runtime.config")
    engine = rc.require("deepspeed.runtime.pipe.engine")
    zero = rc.require("deepspeed.runtime.zero.config")
    rule = inspect.getsource(engine.PipelineEngine.__init__)
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in rule
    assert "zero_optimization_stage(\n        ) < ZeroStageEnum.gradients" in rule or \
        "< ZeroStageEnum.gradients" in rule
    return config.DeepSpeedConfig, zero.ZeroStageEnum


@pytest.fixture(scope="module")
def corpus():
    return dict((s.name, (s, r)) for s, r in bundles())


@pytest.fixture
def rank0(monkeypatch):
    """Rank 0 of an initialised job (DeepSpeedConfig asks deepspeed.comm for its rank and
    otherwise falls back to a world of one): a stand-in for the process group only."""
    import deepspeed.runtime.config as dsc

    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_deepspeed_config_parses_to_the_scored_run(ds, corpus, name, rank0):
    check_deepspeed(ds, corpus[name][1])


@pytest.mark.parametrize("run", list(FRONT_RUNS))
def test_deepspeed_accepts_every_front_point(ds, corpus, run, rank0):
    run_all(fronts()[run], lambda case: check_deepspeed(ds, case))


def check_deepspeed(ds, result):
    DeepSpeedConfig, ZeroStageEnum = ds
    c, training = result.candidate.config, result.problem.training
    launch = result.candidate.launch
    cfg = DeepSpeedConfig(dict(launch["deepspeed_config"]), mpu=_Mpu(c.dp))
    assert cfg.world_size == c.dp
    m = training.global_batch_size // (c.micro_batch_size * c.dp)
    assert cfg.train_batch_size == training.global_batch_size
    assert cfg.train_micro_batch_size_per_gpu == c.micro_batch_size
    assert cfg.gradient_accumulation_steps == m
    assert cfg.zero_optimization_stage == c.zero_stage
    assert cfg.bfloat16_config.enabled == (c.precision in ("bf16", "fp8"))
    assert cfg.float16_config.enabled == (c.precision == "fp16")
    recompute = c.recompute != "none"
    assert bool(cfg.activation_checkpointing_config.partition_activations) == (
        recompute and c.tp > 1)
    layout = launch["targets"]["deepspeed"]["megatron_deepspeed_args"]
    assert layout[:4] == ["--tensor-model-parallel-size", str(c.tp),
                          "--pipeline-model-parallel-size", str(c.pp)]
    # what the DeepSpeed artefacts cannot express: Megatron-Core's recompute modules other
    # than the attention core, MoE / MLA layers (flags.deepspeed_refusal, flags.unexpressed)
    model = result.problem.model
    expressible = not (c.recompute == "selective" and c.recompute_modules != "core_attn") \
        and model.moe is None and model.mla is None and c.recompute_num_layers == 0 \
        and c.cpu_offloading_num_layers == 0 and c.precision_aware_optimizer == "off" \
        and c.cp == 1
    target = launch["targets"]["deepspeed"]
    if c.pp > 1:
        # PipelineEngine: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'
        starts = cfg.zero_optimization_stage < ZeroStageEnum.gradients
        assert target["supported"] == (starts and expressible), target
        if not starts:
            assert any("pipeline engine" in w for w in launch["warnings"])
        assert cfg.pipeline["activation_checkpoint_interval"] == (
            1 if c.recompute == "full" else 0)
        assert "tensor_parallel" not in launch["deepspeed_config"]
    else:
        assert target["supported"] == expressible, target


def test_the_corpus_has_a_refused_pipeline_zero2_point(corpus):
    _, r = corpus["llama3-8b-ds-pp2-zero2"]
    assert not r.candidate.launch["targets"]["deepspeed"]["supported"]
