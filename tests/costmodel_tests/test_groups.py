"""costmodel.groups: group geometry per distinct layout, collectives once per distinct key."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import collectives as coll
from costmodel import topology
from costmodel.batch import ConfigBatch
from costmodel.groups import Collectives, nccl_system, resolve_groups
from costmodel.hardware import default_cluster
from costmodel.specs import ParallelConfig


def test_groups_follow_the_layout_topology_of_each_configuration():
    cluster = default_cluster(32)
    layouts = [(1, 1, 32), (8, 4, 1), (4, 2, 4), (2, 8, 2), (8, 4, 1), (16, 2, 1)]
    tp, pp, dp = (np.array(c) for c in zip(*layouts, strict=True))
    groups = resolve_groups(cluster, tp, pp, dp)
    for i, (t, p, d) in enumerate(layouts):
        lay = topology.layout_topology(cluster, t, p, d)
        assert groups.tp_nodes[i] == lay.tp.n_nodes
        assert groups.dp_nodes[i] == lay.dp.n_nodes
        assert bool(groups.pp_crosses_nodes[i]) == lay.pp.crosses_nodes
    # one geometry per distinct (tp, pp, dp): equal layouts share their index
    assert groups.layout[1] == groups.layout[4]
    assert len(set(groups.layout.tolist())) == 5
    sub = groups.take(np.array([4, 0]))
    assert sub.tp_nodes.tolist() == [groups.tp_nodes[4], groups.tp_nodes[0]]


def test_collectives_price_through_nccl_once_per_key():
    cluster = default_cluster(16)
    system = nccl_system(cluster)
    assert nccl_system(cluster) is system  # built once per cluster
    configs = [ParallelConfig(tp=8, pp=1, dp=2, micro_batch_size=b) for b in (1, 2, 1, 1)]
    batch = ConfigBatch.from_configs(configs)
    groups = resolve_groups(cluster, batch.tp, batch.pp, batch.dp)
    comm = Collectives(system, batch, groups.layout)
    assert len(comm.first) == 2  # two distinct keys (micro-batch 1 and 2)
    nbytes = np.array([1e6, 2e6, 1e6, 1e6])
    got = comm.time_s("allreduce", nbytes, batch.tp, groups.tp_nodes)
    want = float(np.asarray(coll.collective_time_s(system, "allreduce", 1e6, 8, 1).time_s))
    assert got[0] == pytest.approx(want, rel=1e-12) and got[2] == got[0]
    # a group of one rank communicates nothing
    assert comm.time_s("allreduce", nbytes, np.ones(4, int), np.ones(4, int)).tolist() == [0.0] * 4
