"""Megatron-Core's EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``,
costmodel.moe_overlap) through the whole cost model: where it applies, what it hides, what
it cannot hide, and where core_v0.16.1 does not run it (``TransformerConfig.__post_init__``
asserts, ``schedules.py``)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.model import run_phases
from costmodel.moe_overlap import applies_to, unmet, unpaired_share
from costmodel.specs import ParallelConfig


@pytest.fixture(scope="module")
def qwen():
    """Qwen3-30B-A3B (a small-compute MoE: 3B active) on 4 H100 nodes: EP 16 and 32 cross
    hosts, so their all-to-all runs on the NICs and exceeds the layer's compute."""
    from optimizer.api import resolve_problem

    return resolve_problem(model="qwen3-30b-a3b", gpus=32, gpu="h100-sxm-80gb",
                           seq_length=4096, global_batch_size=256)


def _on(p):
    return replace(p, training=replace(p.training, moe_ep_overlap=True))


def _score(p, **cols):
    return run_phases(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))


def _cols(n, **over):
    cols = dict(tp=[1] * n, pp=[1] * n, dp=[32] * n, ep=[8] * n, etp=[1] * n,
                micro_batch_size=[1] * n, zero_stage=[1] * n)
    cols.update(over)
    return cols


def test_overlap_lowers_the_step_but_not_below_what_no_window_covers(qwen):
    cols = _cols(3, ep=[8, 16, 32])
    off, on = _score(qwen, **cols), _score(_on(qwen), **cols)
    assert np.all(on.scores.step_time_s < off.scores.step_time_s)
    a, exposed = off.moe_ep_comm_s, on.moe_ep_comm_s
    assert np.all(exposed < a)
    # the windows of one pair are the other micro-batch's whole forward and backward: what
    # exceeds them stays exposed, and the unpaired passes (1/m of them at pp = 1) keep all
    layer = off.layer
    compute = layer.forward_s + layer.backward_s
    m = qwen.training.global_batch_size / 32
    floor = a / m + (1 - 1 / m) * np.maximum(a - compute, 0.0)
    assert np.all(exposed >= floor)
    # ep 16 / 32 leave the host: their all-to-all is larger than the compute, the floor bites
    assert np.all(a[1:] > compute[1:]) and np.all(floor[1:] > a[1:] / m)
    # the layer charges the exposed all-to-all, not the whole one
    assert np.allclose(off.layer.tp_comm_s - on.layer.tp_comm_s, a - exposed)


@pytest.mark.parametrize("name,cols,training", [
    ("full recompute", dict(recompute=[2]), {}),
    ("partial recompute", dict(recompute=[2], recompute_num_layers=[4]), {}),
    ("moe_cuda_graph", {}, dict(moe_cuda_graph=True)),
    ("pp > 1, 1F1B", dict(pp=[2], dp=[16]), {}),
    ("pp > 1, interleaved v = 1", dict(pp=[2], dp=[16], schedule=[2], virtual_stages=[1]), {}),
    ("ep = 1", dict(ep=[1]), {}),
    # expert TP without EP: its all-gather / reduce-scatter is in the EP term, not overlapped
    ("ep = 1, etp = 2", dict(ep=[1], etp=[2]), {}),
    ("fp32", dict(precision=[0]), {}),
])
def test_not_applied_where_megatron_does_not_run_it(qwen, name, cols, training):
    base = replace(qwen, training=replace(qwen.training, **training))
    c = _cols(1, **cols)
    off = _score(base, **c).scores.step_time_s
    on = _score(_on(base), **c).scores.step_time_s
    assert np.array_equal(off, on), name
    # control: the same problem with the overlap's conditions met is faster with it
    assert _score(_on(qwen), **_cols(1)).scores.step_time_s[0] < \
        _score(qwen, **_cols(1)).scores.step_time_s[0]


def test_applied_with_the_interleaved_schedule(qwen):
    c = _cols(1, pp=[2], dp=[16], schedule=[2], virtual_stages=[2])
    assert _score(_on(qwen), **c).scores.step_time_s[0] < \
        _score(qwen, **c).scores.step_time_s[0]


def test_unmet_names_each_failed_condition(qwen):
    t = replace(qwen.training, moe_ep_overlap=True)
    ok = ParallelConfig(dp=32, ep=8)
    assert applies_to(t, ok) and unmet(t, ok) == []
    assert unmet(replace(t, moe_ep_overlap=False), replace(ok, recompute="full")) == []
    bad = unmet(t, ParallelConfig(pp=2, dp=16, ep=8, recompute="full"))
    assert len(bad) == 2 and any("full recompute" in b for b in bad) \
        and any("interleaved" in b for b in bad)
    assert not applies_to(t, ParallelConfig(pp=2, dp=16, ep=8, recompute="full"))
    assert unmet(t, ParallelConfig(dp=32, ep=1)) == ["ep > 1 (expert parallelism)"]
    assert any("CUDA graph" in b for b in unmet(replace(t, moe_cuda_graph=True), ok))


def test_unpaired_share():
    # pp = 1: the first forward and the last backward of m (combined 1F1B without a pipeline)
    b1 = ConfigBatch.from_columns(pp=[1, 1], dp=[8, 8])
    assert np.allclose(unpaired_share(b1, np.array([8.0, 1.0]), np.array([1.0, 1.0])),
                       [1 / 8, 1.0])
    # interleaved: rank 0's warm-up 2 (p - 1) + (v - 1) p plus the overlap's extra forward
    # (core_v0.16.1 schedules.get_pp_rank_microbatches), over its m v chunk passes
    b4 = ConfigBatch.from_columns(pp=[4, 4, 8], dp=[2, 2, 1], schedule=[2, 2, 2],
                                  virtual_stages=[2, 2, 4])
    got = unpaired_share(b4, np.array([16.0, 2.0, 64.0]), np.array([2.0, 2.0, 4.0]))
    # p 4 v 2: 6 + 4 + 1 = 11 of 32; m 2: 11 of 4, capped at 1; p 8 v 4: 14 + 24 + 1 of 256
    assert np.allclose(got, [11 / 32, 1.0, 39 / 256])


def test_batch_of_one_equals_the_same_row_in_a_batch(qwen):
    p = _on(qwen)
    cols = _cols(4, ep=[8, 16, 32, 8], pp=[1, 1, 2, 2], dp=[32, 32, 16, 16],
                 schedule=[1, 1, 2, 1], virtual_stages=[1, 1, 2, 1])
    whole = _score(p, **cols)
    for i in range(4):
        one = _score(p, **{k: [v[i]] for k, v in cols.items()})
        assert one.moe_ep_comm_s[0] == pytest.approx(whole.moe_ep_comm_s[i], rel=1e-12)
        assert one.scores.step_time_s[0] == pytest.approx(whole.scores.step_time_s[i],
                                                          rel=1e-12)


def test_dense_model_unaffected():
    from optimizer.api import resolve_problem

    p = resolve_problem(model="llama3-8b", gpus=16, gpu="h100-sxm-80gb", seq_length=4096,
                        global_batch_size=256)
    cols = dict(tp=[1, 2], pp=[1, 2], dp=[16, 4], micro_batch_size=[1, 1])
    off, on = _score(p, **cols), _score(_on(p), **cols)
    assert off.moe_ep_comm_s is None and on.moe_ep_comm_s is None
    assert np.array_equal(off.scores.step_time_s, on.scores.step_time_s)


def test_exposed_all_to_all_by_hand():
    # one configuration, all-to-all 8 ms (quarters of 2 ms); windows: attention forward 1 ms,
    # experts' backward 3 ms, experts' forward 1.5 ms, attention backward 2 ms; unpaired 1/4;
    # the covered time paid again at 20 of 100 SMs
    from costmodel.moe_overlap import EP_COMM_SMS, exposed_ep_s

    layer = SimpleNamespace(forward_s=np.array([2.5e-3]), backward_s=np.array([5e-3]),
                            moe_forward_s=np.array([1.5e-3]), moe_backward_s=np.array([3e-3]))
    a = np.array([8e-3])
    held = EP_COMM_SMS / 100.0
    uncovered = (2 - 1) + 0 + (2 - 1.5) + 0  # ms: what each window cannot cover
    covered = 1 + 2 + 1.5 + 2
    paired = (uncovered + held * covered) * 1e-3
    want = 0.25 * 8e-3 + 0.75 * paired
    got = exposed_ep_s(layer, a, np.array([True]), np.array([0.25]), 100)
    assert got == pytest.approx([want], rel=1e-12)
    assert exposed_ep_s(layer, a, np.array([False]), np.array([0.25]), 100) == \
        pytest.approx(a)


def test_overlap_is_megatron_only(qwen):
    cols = _cols(1)
    for fw in ("torchtitan", "deepspeed"):
        p = replace(qwen, training=replace(qwen.training, framework=fw))
        off, on = _score(p, **cols), _score(_on(p), **cols)
        assert on.scores.step_time_s == pytest.approx(off.scores.step_time_s, rel=1e-12)
        assert any("megatron framework" in x
                   for x in unmet(_on(p).training, ParallelConfig(dp=32, ep=8)))


def test_overlap_holds_one_more_layer_of_activations(qwen):
    cols = _cols(1)
    off, on = _score(qwen, **cols), _score(_on(qwen), **cols)
    extra = on.memory.peak_bytes - off.memory.peak_bytes if hasattr(on.memory, "peak_bytes") \
        else on.scores.allocated_memory_bytes - off.scores.allocated_memory_bytes
    per_layer = float(off.layer.activation_bytes[0])
    assert float(np.ravel(extra)[0]) == pytest.approx(per_layer, rel=0.05)


def test_overlap_layer_also_counted_with_activation_offload(qwen):
    cols = _cols(1, cpu_offloading_num_layers=[4])
    off, on = _score(qwen, **cols), _score(_on(qwen), **cols)
    extra = on.scores.allocated_memory_bytes - off.scores.allocated_memory_bytes
    assert float(extra[0]) == pytest.approx(float(off.layer.activation_bytes[0]), rel=0.05)


def test_flex_dispatcher_is_megatron_only():
    from costmodel.errors import InputError
    from costmodel.specs import TrainingSpec

    with pytest.raises(InputError, match="training.moe_dispatcher"):
        TrainingSpec(4096, 256, framework="torchtitan", moe_dispatcher="flex")
