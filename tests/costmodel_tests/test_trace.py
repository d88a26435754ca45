"""costmodel.trace: one configuration's op list, DP collectives and stage plan, and that its
sizes are the ones score() prices."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS
from costmodel.data_parallel import grad_wire_bytes
from costmodel.groups import Collectives, nccl_system, resolve_groups
from costmodel.layers import BACKWARD, FORWARD, layer_costs
from costmodel.model import score
from costmodel.specs import PRECISIONS, ParallelConfig
from costmodel.trace import trace
from optimizer.api import resolve_problem


@pytest.fixture(scope="module")
def problem():
    return resolve_problem(model="65b", gpus=16)


CONFIGS = [ParallelConfig(tp=4, pp=2, dp=2, micro_batch_size=1, recompute="full",
                          sequence_parallel=True, zero_stage=1),
           ParallelConfig(tp=2, pp=8, dp=1, micro_batch_size=2, recompute="selective"),
           ParallelConfig(tp=8, pp=1, dp=2, micro_batch_size=1, recompute="full",
                          precision="fp16", zero_stage=0)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_trace_metrics_are_scores(problem, config):
    tr = trace(problem.model, problem.cluster, problem.training, config)
    sc = score(problem.model, problem.cluster, problem.training,
               ConfigBatch.from_configs([config]))
    assert tr.metrics == sc.row(0)
    assert tr.config == config


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_trace_stage_plan_covers_the_layers(problem, config):
    tr = trace(problem.model, problem.cluster, problem.training, config)
    assert sum(s.count for s in tr.stages) == config.pp
    assert sum(s.count * s.layers for s in tr.stages) == problem.model.num_layers
    assert tr.stages[0].first_index == 0 and tr.stages[0].embedding
    assert [s.head for s in tr.stages].count(True) == 1


def test_trace_dp_gradient_bytes_are_what_score_reduces(problem):
    config = CONFIGS[0]
    tr = trace(problem.model, problem.cluster, problem.training, config)
    prec = np.array([PRECISIONS.index(config.precision)])
    wire = float(grad_wire_bytes(FRAMEWORKS[problem.training.framework], prec)[0])
    grads = next(c for c in tr.data_parallel if c.name == "dp.gradients")
    # the largest stage's parameters, on the wire at the reduction's width
    assert grads.nbytes == pytest.approx(max(s.params for s in tr.stages) * wire, rel=1e-15)
    assert grads.collective == "reducescatter" and grads.ranks == config.dp  # ZeRO-1
    gather = next(c for c in tr.data_parallel if c.name == "dp.parameters")
    # without gradient-reduce overlap score() pays the reduction and the gather whole
    from dataclasses import replace

    training = replace(problem.training, overlap_grad_reduce=False)
    sc = score(problem.model, problem.cluster, training, ConfigBatch.from_configs([config]))
    assert sc.dp_comm_total_s[0] == pytest.approx(grads.time_s + gather.time_s, rel=1e-12)
    assert sc.time_breakdown_s["dp_comm_exposed"][0] == pytest.approx(sc.dp_comm_total_s[0],
                                                                       rel=1e-12)
    # re-priced from the trace's own sizes, the collective takes the trace's time
    batch = ConfigBatch.from_configs([config])
    groups = resolve_groups(problem.cluster, batch.tp, batch.pp, batch.dp)
    comm = Collectives(nccl_system(problem.cluster), batch, groups.layout)
    again = comm.time_s(grads.collective, np.array([grads.nbytes]), batch.dp, groups.dp_nodes)
    assert again[0] == grads.time_s


def test_trace_tp_rows_carry_the_activation_size_and_group(problem):
    config = CONFIGS[0]
    tr = trace(problem.model, problem.cluster, problem.training, config)
    tp_rows = [o for o in tr.ops if o.group == "tp"]
    act = problem.training.seq_length * config.micro_batch_size * problem.model.hidden_size * 2.0
    assert tp_rows and all(o.nbytes == act and o.ranks == config.tp for o in tp_rows)
    assert {o.pass_ for o in tp_rows} == {"forward", "backward", "recompute"}  # full recompute
    p2p = next(o for o in tr.ops if o.name == "pp.p2p")
    assert p2p.nbytes == act / config.tp  # Megatron's scatter/gather


def _layer_costs(problem, config):
    """layer_costs of one configuration, as score() prices its layer."""
    from costmodel.calibration import efficiency_for

    batch = ConfigBatch.from_configs([config])
    groups = resolve_groups(problem.cluster, batch.tp, batch.pp, batch.dp)
    comm = Collectives(nccl_system(problem.cluster), batch, groups.layout)
    return layer_costs(problem.model, problem.training,
                       efficiency_for(problem.cluster.gpu.compute_capability),
                       FRAMEWORKS[problem.training.framework], problem.cluster.gpu, comm,
                       batch, groups.tp_nodes)


def test_trace_layer_rows_add_up_to_the_layer_passes(problem):
    config = CONFIGS[1]
    tr = trace(problem.model, problem.cluster, problem.training, config)
    costs = _layer_costs(problem, config)
    for pass_, want in ((FORWARD, costs.forward_s[0]), (BACKWARD, costs.backward_s[0])):
        rows = [o for o in tr.ops if o.block == "layer" and o.pass_ == pass_]
        assert sum(o.count * o.time_s for o in rows) == pytest.approx(want, rel=1e-12)
    gemms = [o for o in tr.ops if o.kind == "gemm" and o.pass_ == FORWARD and o.block == "layer"]
    assert all(o.flops > 0 and o.nbytes > 0 for o in gemms)


def test_trace_lists_the_ddp_buckets_and_the_tied_embedding_sync():
    from costmodel.data_parallel import DDP_BUCKET_ELEMENTS

    pr = resolve_problem(model="gpt3-175b", gpus=96, global_batch_size=1536)
    assert pr.model.tied_embeddings
    config = ParallelConfig(tp=8, pp=6, dp=2, recompute="full", sequence_parallel=True)
    tr = trace(pr.model, pr.cluster, pr.training, config)
    grads = next(c for c in tr.data_parallel if c.name == "dp.gradients")
    bucket = next(c for c in tr.data_parallel if c.name == "dp.bucket")
    assert bucket.nbytes == DDP_BUCKET_ELEMENTS * 4.0  # max(40M, 1M x dp) fp32 elements
    assert bucket.count == -(-grads.nbytes // bucket.nbytes)
    sync = next(c for c in tr.data_parallel if c.name == "embedding.sync")
    assert sync.ranks == 2 and sync.collective == "allreduce"
    assert sync.time_s == tr.metrics["time_breakdown_s"]["embedding_sync"] > 0


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_trace_recompute_rows_are_what_the_scorer_charges(problem, recompute):
    """Full recompute re-runs every forward row of the layer (listed again in the recompute
    pass; before, the trace listed only the attention core's selective row, under every
    recompute mode); selective lists its own rows; none lists no layer recompute at all."""
    from costmodel.layers import RECOMPUTE

    config = ParallelConfig(tp=4, pp=2, dp=2, micro_batch_size=1, recompute=recompute,
                            sequence_parallel=True, zero_stage=1)
    tr = trace(problem.model, problem.cluster, problem.training, config)
    costs = _layer_costs(problem, config)
    rows = [o for o in tr.ops if o.block == "layer" and o.pass_ == RECOMPUTE]
    assert sum(o.count * o.time_s for o in rows) == pytest.approx(costs.recompute_s[0],
                                                                  rel=1e-12)
    forward = {o.name for o in tr.ops if o.block == "layer" and o.pass_ == FORWARD}
    if recompute == "full":
        assert {o.name for o in rows} == {f"{n}.recompute" for n in forward}
    elif recompute == "none":
        assert rows == [] and costs.recompute_s[0] == 0.0
    else:
        assert [o.name for o in rows] == ["attn.recompute"]
    tp_rc = [o for o in tr.ops if o.block == "tp" and o.pass_ == RECOMPUTE]
    assert bool(tp_rc) == (recompute == "full")
