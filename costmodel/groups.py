"""Phase 1 of :func:`costmodel.model.score`: resolve each configuration's communication groups.

The geometry of the TP, DP and PP groups (ranks, nodes they span) comes from
:func:`costmodel.topology.layout_topology`, once per distinct (tp, pp, dp); the NCCL
connection buffers a rank holds follow from the communicators it joins. :class:`Collectives`
prices every collective of a step through NCCL's own model (:mod:`costmodel.collectives`),
once per distinct (layout, micro-batch, precision, ZeRO, NCCL algorithm/protocol) key.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel import collectives as coll
from costmodel import layout, topology
from costmodel.batch import ConfigBatch
from costmodel.specs import ClusterSpec


@lru_cache(maxsize=64)
def nccl_system(cluster: ClusterSpec) -> coll.NcclSystem:
    """NCCL's view of the cluster, built once per cluster."""
    return coll.nccl_system(cluster)


def nccl_buffer_bytes(system: coll.NcclSystem, lay: topology.LayoutTopology, tied: bool
                      ) -> float:
    """NCCL connection buffers on one rank, summed over the communicators it joins: the world
    (init barriers), TP, DP, PP, model-parallel (TP x PP: gradient norm and overflow
    checks) and, with tied embeddings, the first/last-stage embedding group
    (NcclSystem.communicator_buffer_bytes; Megatron-LM parallel_state.initialize_model_parallel
    and DeepSpeed's PipelineModule create these groups)."""
    gpn = system.gpus_per_node
    mnnvl = system.mnnvl
    t, p, d = lay.tp.n_ranks, lay.pp.n_ranks, lay.dp.n_ranks
    n = t * p * d
    groups = [(min(n, gpn), -(-n // gpn))]
    for g in (lay.tp, lay.dp, lay.pp):
        groups.append(nccl_nodes(g, mnnvl))
    if t > 1 and p > 1:
        ppn = min(nccl_nodes(lay.tp, mnnvl)[0] * nccl_nodes(lay.pp, mnnvl)[0], gpn)
        groups.append((ppn, -(-t * p // ppn)))
    if tied and p > 1:
        groups.append((1, 2) if _crosses(lay.pp, mnnvl) else (2, 1))
    return sum(system.communicator_buffer_bytes(ppn, nodes) for ppn, nodes in groups)


def nccl_nodes(g: topology.GroupPath, mnnvl: bool) -> tuple[int, int]:
    """(ranks per NCCL node, NCCL nodes) of a group. With multi-node NVLink (an NVL72 rack)
    NCCL fuses the ranks of one NVLink domain into one node (MNNVL, NCCL >= 2.21, on by
    default where an IMEX domain runs: src/graph/topo.cc), so its rings, trees and NVLS run
    over NVLink across the domain's hosts and only domain-to-domain hops use the NICs."""
    if mnnvl:
        return g.ranks_per_domain, g.n_domains
    return g.ranks_per_node, g.n_nodes


def _crosses(g: topology.GroupPath, mnnvl: bool) -> bool:
    return g.crosses_domains if mnnvl else g.crosses_nodes


@dataclass(frozen=True)
class Groups:
    """Each configuration's communication groups (arrays of the batch's length)."""

    tp_nodes: np.ndarray  # nodes the TP group spans
    dp_nodes: np.ndarray  # nodes the DP group spans
    pp_inter: np.ndarray  # 1.0 where pipeline neighbours sit on different nodes, else 0.0
    nccl_buffers_bytes: np.ndarray  # NCCL connection buffers of all communicators of a rank
    layout: np.ndarray  # index of the configuration's distinct (tp, pp, dp, cp)
    cp_nodes: np.ndarray | None = None  # nodes the CP group spans (None: no CP anywhere)

    @property
    def pp_crosses_nodes(self) -> np.ndarray:
        return self.pp_inter > 0.5

    def take(self, index: np.ndarray) -> Groups:
        return Groups(self.tp_nodes[index], self.dp_nodes[index], self.pp_inter[index],
                      self.nccl_buffers_bytes[index], self.layout[index],
                      None if self.cp_nodes is None else self.cp_nodes[index])

    def cp_nodes_or_ones(self) -> np.ndarray:
        return np.ones(len(self.tp_nodes)) if self.cp_nodes is None else self.cp_nodes


def resolve_groups(cluster: ClusterSpec, tp, pp, dp, tied: bool = True, cp=None) -> Groups:
    """Group geometry per configuration, computed once per unique (tp, pp, dp, cp).

    With context parallelism (``cp``, rank order tp-cp-ep-dp-pp) ``dp`` here is the data-
    parallel group *with* CP (``dp * cp``: the gradient reduction's, Megatron's
    ``_DATA_PARALLEL_GROUP_WITH_CP``): cp and dp are adjacent in the order, so that group, the
    TP group and the PP group are those of the (tp, pp, dp * cp) layout; the CP group itself
    (stride tp) is placed by :func:`costmodel.layout.group`."""
    key = (tp.astype(np.int64) * 1_000_003 + pp) * 1_000_003 + dp
    if cp is not None and np.any(cp > 1):
        _, kinv = np.unique(key, return_inverse=True)
        key = kinv.reshape(-1).astype(np.int64) * 1_000_003 + cp
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    cols = {name: np.empty(len(uniq)) for name in
            ("tp_nodes", "dp_nodes", "pp_inter", "nccl_buffers", "cp_nodes")}
    system = nccl_system(cluster)
    mnnvl = system.mnnvl
    for j, i in enumerate(first):
        lay = topology.layout_topology(cluster, int(tp[i]), int(pp[i]), int(dp[i]))
        cols["tp_nodes"][j] = nccl_nodes(lay.tp, mnnvl)[1]
        cols["dp_nodes"][j] = nccl_nodes(lay.dp, mnnvl)[1]
        cols["pp_inter"][j] = 1.0 if _crosses(lay.pp, mnnvl) else 0.0
        c = 1 if cp is None else int(cp[i])
        cols["nccl_buffers"][j] = nccl_buffer_bytes(system, lay, tied)
        cols["cp_nodes"][j] = 1.0
        if c > 1:
            geo = layout.group(cluster, layout.Layout(tp=int(tp[i]), cp=c, dp=int(dp[i]) // c,
                                                      pp=int(pp[i])), ("cp",))
            cols["cp_nodes"][j] = geo.hosts
            # the CP communicator's connection buffers
            cols["nccl_buffers"][j] += system.communicator_buffer_bytes(geo.ranks_per_host,
                                                                        geo.hosts)
    inv = inv.reshape(-1)
    cp_nodes = None if cp is None else cols["cp_nodes"][inv]
    return Groups(cols["tp_nodes"][inv], cols["dp_nodes"][inv], cols["pp_inter"][inv],
                  cols["nccl_buffers"][inv], inv, cp_nodes)


class Collectives:
    """Collective times through the NCCL model, computed once per distinct call.

    Every collective of a step is a function of the layout, the micro-batch size, the
    precision, the ZeRO stage, the NCCL algorithm/protocol and (with CP) the CP comm type. Those columns form one
    integer key; collectives are evaluated on one representative configuration per key and
    gathered back, so a batch of a million configurations costs a few hundred NCCL-model
    evaluations.
    """

    def __init__(self, system: coll.NcclSystem, batch: ConfigBatch, layout: np.ndarray
                 ) -> None:
        self.system = system
        self.algo_table = batch.nccl_algo_table
        self.proto_table = batch.nccl_proto_table
        key = layout.astype(np.int64)
        for col, radix in ((batch.micro_batch_size, 1 << 16), (batch.precision, 8),
                           (batch.zero_stage, 4), (batch.nccl_algo, 256),
                           (batch.nccl_proto, 256)):
            key = key * radix + col
        if np.any(batch.cp > 1):  # the CP collectives' sizes depend on the comm type
            key = key * 4 + batch.cp_comm_type
        _, self.first, self.inv = np.unique(key, return_index=True, return_inverse=True)
        self.inv = self.inv.reshape(-1)
        self.algo = batch.nccl_algo[self.first]
        self.proto = batch.nccl_proto[self.first]

    def time_s(self, collective: str, nbytes, n_ranks, n_nodes) -> np.ndarray:
        n = self.inv.shape[0]
        full = [np.broadcast_to(np.asarray(x, dtype=dt), (n,))
                for x, dt in ((nbytes, float), (n_ranks, np.int64), (n_nodes, np.int64))]
        pick, inv = self.first, self.inv
        if any(not np.array_equal(a, a[pick][inv]) for a in full):
            # a size that depends on a column outside the key (the stage plan's first-stage
            # parameters, the expert grid's DP share, ...): one evaluation per distinct
            # (key, size, ranks, nodes) instead, so a configuration's time never depends on
            # the batch it is scored in
            cols = np.stack([self.inv.astype(float), *(a.astype(float) for a in full)], axis=1)
            _, pick, inv = np.unique(cols, axis=0, return_index=True, return_inverse=True)
            inv = inv.reshape(-1)
        nbytes, n_ranks, n_nodes = (a[pick] for a in full)
        algo, proto = self.algo[self.inv[pick]], self.proto[self.inv[pick]]
        out = np.zeros(len(pick))
        active = n_ranks > 1
        for a_code in np.unique(algo[active]):
            for p_code in np.unique(proto[active]):
                sel = active & (algo == a_code) & (proto == p_code)
                if not sel.any():
                    continue
                res = coll.collective_time_s(
                    self.system, collective, nbytes[sel], n_ranks[sel], n_nodes[sel],
                    algo=self.algo_table[a_code], proto=self.proto_table[p_code],
                    on_invalid="inf")
                out[sel] = np.asarray(res.time_s, dtype=float)
        return out[inv]
