"""A MoE configuration's facts for the diagnosis (optimizer/output/diagnose.py): the EP
all-to-all as the cost model charges it (:class:`costmodel.model.Phases`'
``moe_ep_comm_s``, after Megatron's EP overlap where it applies: costmodel.moe_overlap),
the dispatcher's host stall, the EP group's reach and the rows per expert. Its own module:
it reads :func:`costmodel.model.run_phases`, which imports :mod:`costmodel.moe`."""

from __future__ import annotations

from costmodel.batch import ConfigBatch
from costmodel.layout import Layout, group
from costmodel.model import run_phases
from costmodel.moe import moe_host_stall_s, moe_shape
from costmodel.moe_overlap import applies_to
from costmodel.specs import Precision


def moe_diagnostics(model, cluster, training, config) -> dict:
    """One configuration's MoE facts for the diagnosis: the exposed EP (and expert-TP)
    communication per step (the layer's dispatch/combine all-to-alls as the cost model
    charges them, after Megatron's EP overlap where it applies (costmodel.moe_overlap),
    times the heaviest stage's layers and the micro-batches), whether that overlap applies,
    the host stall per step, whether the EP group leaves the NVLink domain, and the rows
    each local expert's GEMM gets. Empty for a dense model."""
    if model.moe is None:
        return {}
    batch = ConfigBatch.from_configs([config])
    ph = run_phases(model, cluster, training, batch)  # the exposed all-to-all, as scored
    sh = ph.shard
    ms = moe_shape(model, training, batch, sh.tokens, sh.tp)
    layer = float(ph.moe_ep_comm_s[0])
    m = training.global_batch_size / (config.micro_batch_size * config.dp)
    layers = -(-model.num_layers // config.pp)
    try:
        g = group(cluster, Layout(tp=config.tp, cp=config.cp, dp=config.dp, pp=config.pp,
                                  ep=config.ep, etp=config.etp), "ep")
        crosses = g.domains > 1
    except Exception:  # an expert grid the rules reject
        crosses = False
    return {"ep_comm_s": layer * layers * m,
            "ep_overlap_applies": applies_to(training, config),
            # the dropless dispatcher's sync stall; none when padded to capacity (the host
            # runs ahead: a host-bound layer shows as the step's host overhead)
            "host_stall_s": 0.0 if model.moe.capacity_factor is not None
            else float(moe_host_stall_s(training, ms, batch.recompute, model=model,
                                        fp8=batch.precision == Precision.FP8)[0])
            * layers * m,
            "ep_crosses_domain": bool(crosses and config.ep > 1),
            "rows_per_expert": float(ms.rows_per_expert[0]),
            "local_experts": float(ms.local_experts[0])}


__all__ = ["moe_diagnostics"]
