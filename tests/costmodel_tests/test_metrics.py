"""costmodel.metrics: Scores from the phases' records."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.metrics import Scores
from costmodel.model import run_phases, score
from costmodel.specs import ParallelConfig
from optimizer.api import resolve_problem

CONFIGS = [ParallelConfig(tp=4, pp=4, dp=1, recompute="full", sequence_parallel=True),
           ParallelConfig(tp=8, pp=2, dp=1, micro_batch_size=2, recompute="full"),
           ParallelConfig(tp=8, pp=1, dp=2, recompute="full", zero_stage=1)]


@pytest.fixture(scope="module")
def problem():
    return resolve_problem(model="65b", gpus=16)


def test_step_is_the_sum_of_its_breakdown(problem):
    sc = score(problem.model, problem.cluster, problem.training,
               ConfigBatch.from_configs(CONFIGS))
    np.testing.assert_allclose(sum(sc.time_breakdown_s.values()), sc.step_time_s, rtol=1e-12)
    np.testing.assert_allclose(sc.bubble_share * sc.step_time_s,
                               sc.time_breakdown_s["pipeline_bubble"], rtol=1e-12)
    tokens = problem.training.global_batch_size * problem.training.seq_length
    np.testing.assert_allclose(sc.tokens_per_s * sc.step_time_s, tokens, rtol=1e-12)


def test_stage_imbalance_is_slowest_over_mean_stage(problem):
    ph = run_phases(problem.model, problem.cluster, problem.training,
                    ConfigBatch.from_configs(CONFIGS))
    imb = ph.scores.stage_imbalance
    assert imb[2] == 1.0  # one stage
    assert (imb[:2] >= 1.0).all()  # the LM head makes the last stage the slowest


def test_concat_and_row_round_trip(problem):
    batch = ConfigBatch.from_configs(CONFIGS)
    whole = score(problem.model, problem.cluster, problem.training, batch)
    parts = [score(problem.model, problem.cluster, problem.training, batch.take(slice(i, i + 1)))
             for i in range(len(CONFIGS))]
    joined = Scores.concat(parts)
    assert len(joined) == 3
    for i in range(3):
        assert joined.row(i) == whole.row(i)
