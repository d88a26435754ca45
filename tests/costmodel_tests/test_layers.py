"""costmodel.layers: the dense layer as op tables, priced and combined."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS, efficiency_for
from costmodel.groups import Collectives, nccl_system, resolve_groups
from costmodel.hardware import default_cluster
from costmodel.layers import (
    BACKWARD,
    DATA_AND_WEIGHT,
    FORWARD,
    RECOMPUTE,
    layer_costs,
    pass_time,
    row_time,
)
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec

MODEL = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                  ffn_hidden_size=16384, vocab_size=51200)
CLUSTER = default_cluster(16)
EFF = efficiency_for(CLUSTER.gpu.compute_capability)


def _costs(configs, fw=FRAMEWORKS["megatron"], **training):
    batch = ConfigBatch.from_configs(configs)
    groups = resolve_groups(CLUSTER, batch.tp, batch.pp, batch.dp)
    comm = Collectives(nccl_system(CLUSTER), batch, groups.layout)
    tr = TrainingSpec(seq_length=2048, global_batch_size=16, **training)
    return layer_costs(MODEL, tr, EFF, fw, CLUSTER.gpu, comm, batch, groups.tp_nodes)


@pytest.mark.parametrize("flash", [True, False])
def test_op_table_rows_name_priced_kernels_and_passes(flash):
    costs = _costs([ParallelConfig(tp=4, dp=4, recompute="selective")], flash_attention=flash)
    for table in costs.tables:
        names = {k.name for k in table.kernels}
        for op in table.ops:
            assert op.kernel in names, op
            assert op.pass_ in (FORWARD, BACKWARD, RECOMPUTE)
            assert (op.group is None) == (table.kernel(op.kernel).group is None)
    layer = costs.tables[0]
    linears = [op for op in layer.ops if op.category == "linear"]
    assert [op.kernel for op in linears if op.pass_ == FORWARD] == ["qkv", "proj", "fc1", "fc2"]
    # a linear's backward: data and weight gradient, each as long as the forward GEMM
    for op in (op for op in linears if op.pass_ == BACKWARD):
        assert op.parts == DATA_AND_WEIGHT and op.repeat == 2.0


def test_pass_times_sum_their_rows_by_category():
    costs = _costs([ParallelConfig(tp=2, dp=8, recompute=r) for r in ("none", "selective",
                                                                        "full")])
    layer, times = costs.tables[0], costs.times
    for pass_ in (FORWARD, BACKWARD):
        rows = [row_time(op, times) for op in layer.ops if op.pass_ == pass_]
        np.testing.assert_allclose(pass_time(layer, times, pass_), sum(rows), rtol=1e-14)
    # backward GEMMs: twice the forward ones; full recompute re-runs the forward; selective the
    # (fused) core
    gemm_f = sum(times[k] for k in ("qkv", "proj", "fc1", "fc2"))
    assert np.all(costs.backward_s > 2.0 * gemm_f)
    assert costs.recompute_s[0] == 0.0
    np.testing.assert_allclose(costs.recompute_s[1], times["attn"][1], rtol=1e-14)
    assert costs.recompute_s[2] == costs.forward_s[2]


def test_tp_rows_are_what_a_blocking_framework_pays():
    # no async gradients, no SP, no rendezvous: the exposed TP time is the rows' sum
    fw = FRAMEWORKS["megatron"].with_(async_tp_grad=False, collective_s=0.0)
    for rc in ("none", "full"):
        costs = _costs([ParallelConfig(tp=4, dp=4, recompute=rc)], fw=fw)
        tp = costs.tables[1]
        rows = [op for op in tp.ops if bool(np.asarray(op.when).reshape(-1)[0])]
        assert len(rows) == (6 if rc == "full" else 4)
        assert {op.kernel for op in rows} == {"tp.allreduce"}
        total = sum(float(row_time(op, costs.times)[0]) for op in rows)
        assert costs.tp_comm_s[0] == pytest.approx(total, rel=1e-12)


def test_sequence_parallel_rows_pair_gathers_and_scatters_and_regather():
    costs = _costs([ParallelConfig(tp=4, dp=4, sequence_parallel=True)])
    rows = [op for op in costs.tables[1].ops if bool(np.asarray(op.when).reshape(-1)[0])]
    kinds = sorted(op.kernel for op in rows)
    # 4 all-reduces become 4 (all-gather, reduce-scatter) pairs, plus 2 backward re-gathers
    assert kinds.count("tp.allgather") == 6 and kinds.count("tp.reducescatter") == 4
    assert {op.window for op in rows if "regather" in op.name} == {"qkv", "fc1"}


def test_layer_costs_take_gathers_per_configuration():
    costs = _costs([ParallelConfig(tp=t, dp=16 // t) for t in (1, 2)])
    back = costs.take(np.array([1, 0, 1]))
    assert back.forward_s.tolist() == [costs.forward_s[1], costs.forward_s[0], costs.forward_s[1]]
    assert back.tables == () and back.times == {}
