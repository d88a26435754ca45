"""One configuration's op list with sizes and times, as plain frozen records.

:func:`trace` scores a batch of one through the same phases as :func:`costmodel.model.score`
and lists what they priced: every row of the layer's op tables (GEMMs, attention kernels,
memory passes, TP collectives), the pipeline's transfers, the data-parallel collectives and
the stage plan, each with its bytes, FLOPs, communication group (ranks, nodes) and time. What
reads sizes off a configuration (the NCCL tuner CSV, ``optimize evaluate``) can read them here
instead of re-deriving them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.calibration import Efficiency, FrameworkCosts
from costmodel.compute import ACT_BYTES, GEMM_BYTES
from costmodel.data_parallel import grad_wire_bytes
from costmodel.layers import FORWARD, RECOMPUTE
from costmodel.model import run_phases
from costmodel.pricing import ATTENTION, COLLECTIVE, GEMM
from costmodel.specs import PRECISIONS, ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


@dataclass(frozen=True)
class TraceOp:
    """One row of an op table, for one configuration: a kernel run ``count`` times per
    micro-batch (per layer for the layer's rows)."""

    block: str  # "layer", "tp", "embedding+head", "pipeline"
    name: str
    kernel: str
    kind: str  # gemm, attention, memory, collective, p2p
    pass_: str
    category: str
    count: float
    group: str | None  # communication axis
    ranks: int  # the group's ranks (1 for on-GPU kernels)
    nodes: int
    nbytes: float  # message bytes (collective, p2p) or HBM bytes (memory, GEMM operands)
    flops: float  # GEMM / attention FLOPs of one run
    time_s: float  # one run
    window: str | None  # the kernel whose time can hide it


@dataclass(frozen=True)
class TraceCollective:
    """A data-parallel (or embedding-sync) collective of the step."""

    name: str
    collective: str
    nbytes: float
    ranks: int
    nodes: int
    time_s: float  # one of them
    count: int = 1  # how many the step runs (the gradient buckets of the whole reduction)


@dataclass(frozen=True)
class TraceStage:
    """A group of identical pipeline stages of the plan."""

    first_index: int  # the group's first stage
    count: int
    layers: int
    embedding: bool
    head: bool
    params: float  # parameters on each of its ranks (before ZeRO)
    micro_batch_s: float  # forward + backward of one micro-batch, with its transfers


@dataclass(frozen=True)
class Trace:
    config: ParallelConfig
    ops: tuple[TraceOp, ...]
    data_parallel: tuple[TraceCollective, ...]  # and the tied embedding's sync
    stages: tuple[TraceStage, ...]
    metrics: dict  # Scores.row(0)


def _kernel_size(kern, act_bytes, gemm_bytes) -> tuple[float, float]:
    if kern.kind == GEMM:
        m, n, k = (float(np.asarray(x).reshape(-1)[0]) for x in (kern.m, kern.n, kern.k))
        elem = act_bytes if kern.peak == "attention" else gemm_bytes
        return elem * (m * k + k * n) + 2.0 * m * n, 2.0 * m * n * k
    if kern.kind == ATTENTION:
        return 0.0, float(np.asarray(kern.flops).reshape(-1)[0]) if kern.flops is not None else 0.0
    return float(np.asarray(kern.nbytes).reshape(-1)[0]), 0.0


def _layer_ops(ph, config) -> list[TraceOp]:
    """The layer's rows as the scorer charges them (``layers.layer_costs``): a selective
    recompute's own rows only where the recompute is selective; under full recompute every
    forward row of the layer (GEMMs, attention, element-wise, CP communication) again in the
    ``recompute`` pass, the TP table carrying its own recomputed collectives; the embedding
    and the LM head are not recomputed. Partial recompute (``recompute_num_layers``) lists
    one recomputing layer's rows: the stages say how many of their layers recompute. The rows
    are kernel times: the CP communication's exposed share (what the scorer charges of it),
    its recompute under selective recompute and the TP collectives of recomputed modules are
    not split out, so with CP or module recompute the rows differ from the scored recompute
    by those terms."""
    layer = ph.distinct_layers
    prec = PRECISIONS.index(config.precision)
    act_bytes, gemm_bytes = float(ACT_BYTES[prec]), float(GEMM_BYTES[prec])
    tp_nodes = int(ph.groups.tp_nodes[0])
    cp_nodes = int(ph.groups.cp_nodes_or_ones()[0])
    full = config.recompute == "full"
    out = []
    for table in layer.tables:
        block = "layer" if table.block.startswith("attention") else table.block
        again = full and block not in ("tp", "embedding+head")
        for op in table.ops:
            if not bool(np.asarray(op.when).reshape(-1)[0]):
                continue
            if op.pass_ == RECOMPUTE and block != "tp" and config.recompute != "selective":
                continue  # the scorer reads these rows only under selective recompute
            kern = table.kernel(op.kernel)
            if not bool(np.asarray(kern.when).reshape(-1)[0]):
                continue
            nbytes, flops = _kernel_size(kern, act_bytes, gemm_bytes)
            comm = kern.kind == COLLECTIVE
            ranks, nodes = (config.tp, tp_nodes) if comm else (1, 1)
            if str(kern.group).startswith("cp"):  # the CP group (costmodel.cp)
                ranks, nodes = config.cp, cp_nodes
            repeat = 1.0 if op.repeat is None else float(np.asarray(op.repeat).reshape(-1)[0])
            row = TraceOp(block, op.name, op.kernel, kern.kind, op.pass_, op.category,
                          repeat, kern.group, ranks, nodes, nbytes,
                          flops, float(np.asarray(layer.times[op.kernel]).reshape(-1)[0]),
                          op.window)
            out.append(row)
            if again and op.pass_ == FORWARD:
                out.append(replace(row, name=f"{op.name}.recompute", pass_=RECOMPUTE))
    return out


def _pipeline_ops(ph, config) -> list[TraceOp]:
    if config.pp == 1:
        return []
    pipe = ph.pipeline
    nodes = 2 if bool(ph.groups.pp_crosses_nodes[0]) else 1
    ops = [TraceOp("pipeline", "pp.p2p", "pp.p2p", "p2p", "forward+backward", "pp", 1.0, "pp",
                   2, nodes, float(pipe.p2p_bytes[0]), 0.0, float(pipe.p2p_s[0]), None)]
    if pipe.regroup_s[0] > 0:
        ops.append(TraceOp("pipeline", "pp.regroup", "tp.allgather", COLLECTIVE,
                           "forward+backward", "pp", 1.0, "tp", config.tp,
                           int(ph.groups.tp_nodes[0]), float(pipe.p2p_bytes[0] * config.tp),
                           0.0, float(pipe.regroup_s[0]), None))
    return ops


def _dp_collectives(ph, config, tied: bool, bf16_reduce: bool = False
                    ) -> list[TraceCollective]:
    dp = ph.data_parallel
    out = []
    if config.dp > 1:
        nodes = int(ph.groups.dp_nodes[0])
        reduce = "allreduce" if bool(dp.reduce_collective[0]) else "reducescatter"
        grads, bucket = float(dp.grad_bytes[0]), float(dp.bucket_bytes[0])
        out += [TraceCollective("dp.gradients", reduce, grads, config.dp, nodes,
                                float(dp.reduce_s[0])),
                # Megatron's DDP buckets: the last one is reduced after the backward
                TraceCollective("dp.bucket", reduce, bucket, config.dp, nodes,
                                float(dp.bucket_s[0]), int(np.ceil(grads / bucket))),
                ]
        if int(ph.sharding.zero[0]) >= 1:
            out.append(TraceCollective("dp.parameters", "allgather", float(dp.gather_bytes[0]),
                                       config.dp, nodes, float(dp.gather_s[0])))
    if tied and config.pp > 1:
        # the tied word embedding's gradient, all-reduced between the first and the last stage
        prec = np.array([PRECISIONS.index(config.precision)])
        wire = float(grad_wire_bytes(ph.framework, prec, bf16_reduce)[0])
        nbytes = float(ph.shard.vocab[0] * ph.shard.hidden / ph.shard.tp[0] * wire)
        out.append(TraceCollective("embedding.sync", "allreduce", nbytes, 2,
                                   2 if bool(ph.groups.pp_crosses_nodes[0]) else 1,
                                   float(dp.embedding_sync_s[0])))
    return out


def _stages(ph) -> list[TraceStage]:
    out = []
    for g, psi, t in zip(ph.plan.groups, ph.params.per_group, ph.stages.stage_s, strict=True):
        if int(g.count[0]) == 0:
            continue
        out.append(TraceStage(int(g.index[0]), int(g.count[0]), int(g.layers[0]),
                              bool(g.embedding[0]), bool(g.head[0]), float(psi[0]),
                              float(t[0])))
    return sorted(out, key=lambda s: s.first_index)


def trace(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
          config: ParallelConfig, *, efficiency: Efficiency | None = None,
          framework: FrameworkCosts | None = None) -> Trace:
    """The op list, DP collectives and stage plan of one configuration, with sizes and times."""
    ph = run_phases(model, cluster, training, ConfigBatch.from_configs([config]),
                    efficiency=efficiency, framework=framework)
    return Trace(config, tuple(_layer_ops(ph, config) + _pipeline_ops(ph, config)),
                 tuple(_dp_collectives(ph, config, model.tied_embeddings,
                                       training.grad_reduce_in_bf16)), tuple(_stages(ph)),
                 ph.scores.row(0))
