"""costmodel.stage_memory: memory per stage group, the peak is the largest stage."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.memory import microbatches_in_flight
from costmodel.model import run_phases
from costmodel.specs import ParallelConfig
from optimizer.api import resolve_problem

CONFIGS = [ParallelConfig(tp=4, pp=4, dp=1, recompute="full", sequence_parallel=True),
           ParallelConfig(tp=2, pp=8, dp=1, micro_batch_size=2, recompute="selective",
                          schedule="interleaved", virtual_stages=5),
           ParallelConfig(tp=8, pp=1, dp=2, recompute="full", zero_stage=3),
           ParallelConfig(tp=1, pp=16, dp=1, recompute="full", schedule="gpipe"),
           ParallelConfig(tp=4, pp=2, dp=2, recompute="full", zero_stage=1)]


@pytest.fixture(scope="module")
def phases():
    pr = resolve_problem(model="65b", gpus=16)
    return run_phases(pr.model, pr.cluster, pr.training, ConfigBatch.from_configs(CONFIGS))


def test_peak_is_the_largest_stage_group(phases):
    plan, mem = phases.plan, phases.memory
    largest = np.max([np.where(g.present, st.peak, 0.0)
                      for g, st in zip(plan.groups, mem.stages, strict=True)], axis=0)
    np.testing.assert_array_equal(mem.peak_bytes, largest + mem.fixed_bytes)
    np.testing.assert_allclose(mem.peak_bytes, sum(mem.breakdown_bytes.values()), rtol=1e-12)
    # each stage's two phases: the backward holds activations, the step the gradient copy
    for st in mem.stages:
        np.testing.assert_array_equal(st.peak, np.maximum(st.backward, st.step))


def test_stages_hold_their_layers_and_the_loss_sits_on_the_last(phases):
    plan, mem = phases.plan, phases.memory
    first, last, middle = mem.stages
    single = plan.single
    # the loss's buffers only where the head is
    assert (first.logits[~single] == 0).all() and (last.logits > 0).all()
    assert (middle.logits == 0).all()
    # activations scale with the layers held (full recompute: one input per layer)
    assert (first.activations > 0).all()


def test_middle_stages_are_represented_by_the_second(phases):
    mid = phases.plan.groups[2]
    assert mid.index.tolist() == [1, 1, 0, 1, 1]
    # 1F1B: the second stage keeps one micro-batch fewer in flight than the first
    m = phases.scores.microbatches[0]
    assert microbatches_in_flight(1, 4, m, 1, mid.index[0]) == 3.0
    assert microbatches_in_flight(1, 4, m, 1, 0) == 4.0
