"""costmodel.data_parallel: gradient reduction by ZeRO stage, embedding sync, optimizer step."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS
from costmodel.data_parallel import grad_wire_bytes, sharding, uses_bf16_optimizer
from costmodel.model import run_phases
from costmodel.specs import PRECISIONS, ParallelConfig
from optimizer.api import resolve_problem

BF16, FP16, FP32 = (PRECISIONS.index(p) for p in ("bf16", "fp16", "fp32"))


def test_wire_bytes_by_framework():
    prec = np.array([BF16, FP16, FP32])
    assert grad_wire_bytes(FRAMEWORKS["megatron"], prec).tolist() == [4.0, 2.0, 4.0]
    assert grad_wire_bytes(FRAMEWORKS["deepspeed"], prec).tolist() == [2.0, 2.0, 4.0]
    assert grad_wire_bytes(FRAMEWORKS["fsdp"], prec).tolist() == [4.0, 4.0, 4.0]


def test_bf16_optimizer_counts_as_zero_1():
    prec, z = np.array([BF16, BF16, FP16, BF16]), np.array([0, 1, 0, 2])
    sh = sharding(FRAMEWORKS["deepspeed"], prec, z, np.array([4, 4, 4, 4]))
    assert sh.bf16_optimizer.tolist() == [True, True, False, False]
    assert sh.zero.tolist() == [1, 1, 0, 2]
    assert not uses_bf16_optimizer(FRAMEWORKS["megatron"], prec, z).any()


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_dp_step_per_zero_stage(zero):
    pr = resolve_problem(model="65b", gpus=16)
    batch = ConfigBatch.from_configs([ParallelConfig(tp=8, pp=1, dp=2, recompute="full",
                                                     zero_stage=zero)])
    ph = run_phases(pr.model, pr.cluster, pr.training, batch)
    dp, m = ph.data_parallel, ph.scores.microbatches[0]
    assert dp.grad_bytes[0] == ph.params.largest[0] * 4.0  # fp32 main gradients on the wire
    assert bool(dp.reduce_collective[0]) == (zero == 0)
    total = {0: dp.reduce_s[0], 1: dp.reduce_s[0] + dp.gather_s[0],
             2: m * dp.reduce_s[0] + dp.gather_s[0]}.get(zero)
    if total is not None:
        assert ph.scores.dp_comm_total_s[0] == pytest.approx(total, rel=1e-12)
    assert 0.0 < dp.exposed_s[0] <= ph.scores.dp_comm_total_s[0] * (1 + 1e-12)
    # the optimizer step streams the local shard once (ZeRO >= 1: over d)
    assert dp.optimizer_s[0] > 0.0
