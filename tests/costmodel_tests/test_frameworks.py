"""costmodel.calibration.FrameworkCosts: framework profiles grouped by the phase that reads
them, passed to score(..., framework=)."""

from __future__ import annotations

import pytest

from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS, FrameworkCosts
from costmodel.hardware import default_cluster
from costmodel.model import score
from costmodel.specs import FRAMEWORKS as FRAMEWORK_NAMES
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec


def test_every_framework_has_a_named_profile():
    assert set(FRAMEWORKS) == set(FRAMEWORK_NAMES)
    for name, fw in FRAMEWORKS.items():
        assert fw.name == name
        for group in ("host", "kernels", "tp", "pipeline", "dp", "memory"):
            assert getattr(fw, group) is not None


def test_with_changes_the_field_in_its_group():
    ds = FRAMEWORKS["deepspeed"]
    paired = ds.with_(serial_p2p=False, layer_pass_s=0.0)
    assert paired.pipeline.serial_p2p is False and paired.host.layer_pass_s == 0.0
    assert paired.pipeline.pipe_buffers == ds.pipeline.pipe_buffers
    assert paired.memory == ds.memory and ds.pipeline.serial_p2p is True  # a copy
    with pytest.raises(TypeError, match="no field"):
        ds.with_(no_such_field=1)
    assert FrameworkCosts("plain").host.layer_pass_s == 0.0


def test_score_takes_the_profile_without_patching_globals():
    model = ModelSpec(name="m", num_layers=4, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=50000)
    training = TrainingSpec(seq_length=1024, global_batch_size=16, framework="deepspeed")
    batch = ConfigBatch.from_configs([ParallelConfig(tp=2, pp=2, dp=2, precision="fp16")])
    cluster = default_cluster(8)
    default = score(model, cluster, training, batch)
    explicit = score(model, cluster, training, batch, framework=FRAMEWORKS["deepspeed"])
    assert explicit.row(0) == default.row(0)
    faster_host = score(model, cluster, training, batch,
                        framework=FRAMEWORKS["deepspeed"].with_(layer_pass_s=0.0,
                                                                collective_host_s=0.0))
    assert faster_host.step_time_s[0] < default.step_time_s[0]
    assert score(model, cluster, training, batch).row(0) == default.row(0)  # nothing leaked


def test_torchtitan_selective_is_op_level_sac():
    """torchtitan's selective recompute re-runs wk, wo, w3 (every other matmul) and the
    element-wise ops; FSDP's (Megatron's meaning, fused attention saved) re-runs nothing."""
    model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                      num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128000,
                      gated_mlp=True)
    cluster = default_cluster(8)
    out = {}
    for fw in ("fsdp", "torchtitan"):
        training = TrainingSpec(seq_length=4096, global_batch_size=16, framework=fw)
        batch = ConfigBatch.from_configs([
            ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=2, precision="bf16",
                           recompute=rc, zero_stage=3) for rc in ("none", "selective")])
        out[fw] = score(model, cluster, training, batch)
    assert out["fsdp"].time_breakdown_s["recompute"][1] == 0.0
    rc = out["torchtitan"].time_breakdown_s["recompute"]
    assert rc[0] == 0.0 and rc[1] > 0.0
    compute = out["torchtitan"].time_breakdown_s["compute"][1]
    assert 0.08 < rc[1] / compute < 0.2  # ~37% of the linears' forward (1/3) + element-wise
    assert out["torchtitan"].step_time_s[0] == pytest.approx(out["fsdp"].step_time_s[0])


def test_torch_compile_sets_torchtitans_elementwise_traffic():
    """torchtitan's element-wise ops cost the eager byte count without torch.compile and the
    fused minimum with it (casts of float8 without their amax pass); not stated keeps the
    fitted FSDP figure. Megatron has no such figures: the field changes nothing there."""
    from costmodel.layers import elementwise_traffic

    model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                      num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128000,
                      gated_mlp=True)
    cluster = default_cluster(8, gpu="h100-sxm-80gb")
    batch = ConfigBatch.from_configs([
        ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision=p, zero_stage=3)
        for p in ("bf16", "fp8")])
    step = {}
    for fw in ("torchtitan", "megatron"):
        for tc in (None, False, True):
            training = TrainingSpec(seq_length=4096, global_batch_size=16, framework=fw,
                                    torch_compile=tc, fp8_recipe="tensorwise")
            step[fw, tc] = score(model, cluster, training, batch).step_time_s
    tt = FRAMEWORKS["torchtitan"]
    assert elementwise_traffic(tt, TrainingSpec(torch_compile=False)) == 3.3
    assert elementwise_traffic(tt, TrainingSpec(torch_compile=True)) == 1.0
    assert elementwise_traffic(tt, TrainingSpec()) == FRAMEWORKS["fsdp"].kernels.elementwise_traffic
    assert (step["torchtitan", True] < step["torchtitan", None]).all()
    assert (step["torchtitan", None] < step["torchtitan", False]).all()
    for tc in (False, True):
        assert step["megatron", tc] == pytest.approx(step["megatron", None])
    with pytest.raises(Exception, match="torch_compile"):
        TrainingSpec(torch_compile="yes")
