"""The cost model: one vectorised function scores a batch of configurations.

``score(model, cluster, training, batch)`` returns step time, throughput, MFU, peak memory and
their breakdowns for every configuration of ``batch``. Scoring one configuration is a batch of
one. The structure follows cost-model.md, as a composition of phases that pass small frozen
records (:func:`run_phases`):

1. resolve the communication groups (:mod:`costmodel.groups`);
2. build each layer kind's op table on the rank's shard and price it, once per distinct
   layer shape (:mod:`costmodel.layers`, :mod:`costmodel.shard`, :mod:`costmodel.pricing`);
3. per-stage micro-batch costs over the stage plan (:mod:`costmodel.stages`);
4. the schedule's timeline: span, steady state, bubble (:mod:`costmodel.schedule`);
5. the data-parallel step: exposed gradient reduction, embedding sync, optimizer step
   (:mod:`costmodel.data_parallel`);
6. memory per stage, peak = the largest stage (:mod:`costmodel.stage_memory`);
7. metrics (:mod:`costmodel.metrics`).

Every collective goes through :mod:`costmodel.collectives` (NCCL's own algorithm/protocol
model) on the communication group's real geometry from :mod:`costmodel.topology`.
:func:`costmodel.trace.trace` returns one configuration's op list with sizes and times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodel import hardware, metrics
from costmodel.batch import ConfigBatch
from costmodel.calibration import FRAMEWORKS, Efficiency, FrameworkCosts, efficiency_for
from costmodel.cluster_calibration import apply_scales, is_calibrated, scales_of
from costmodel.compute import ACT_BYTES
from costmodel.data_parallel import (  # noqa: F401  (re-exported)
    DDP_BUCKET_ELEMENTS,
    OPTIMIZER_STEP_BYTES,
    DataParallelStep,
    Sharding,
    data_parallel_step,
    grad_wire_bytes,
    sharding,
    uses_bf16_optimizer,
)
from costmodel.groups import Collectives, Groups, nccl_system, resolve_groups
from costmodel.layers import (  # noqa: F401  (re-exported)
    FP8_CAST_BYTES,
    HP_GRAD_UPDATE_BYTES,
    SOFTMAX_FALLBACK,
    LayerCosts,
    price_distinct_layers,
    softmax_falls_back,
)
from costmodel.metrics import Scores
from costmodel.pipeline_layout import check_layout
from costmodel.pricing import peaks_by_precision
from costmodel.schedule import (
    INTERLEAVED,
    V_SHAPED,
    Timeline,
    pipeline_timeline,
    zero_bubble_ratio,
)
from costmodel.shard import Shard, shard_of
from costmodel.specs import ClusterSpec, ModelSpec, Precision, StagePlanCode, TrainingSpec
from costmodel.stage_memory import (  # noqa: F401  (re-exported)
    FP8_COPY_BYTES,
    MemoryResult,
    memory_context,
    peak_memory,
)
from costmodel.stages import (
    PartialRecompute,
    PipelineComm,
    StageParams,
    StagePlan,
    StageTimes,
    SteadyState,
    accumulate_gradients,
    activation_offload_s,
    expert_stage_params,
    pipeline_comm,
    stage_params,
    stage_plan,
    stage_times,
    steady_state,
)

__all__ = ["Phases", "Scores", "grad_wire_bytes", "run_phases", "score", "softmax_falls_back",
           "uses_bf16_optimizer"]


@dataclass(frozen=True)
class Phases:
    """Every phase's record for one batch (what :func:`costmodel.trace.trace` reads)."""

    framework: FrameworkCosts
    groups: Groups
    shard: Shard
    sharding: Sharding
    layer: LayerCosts  # per configuration, accumulation charged
    distinct_layers: LayerCosts  # per distinct layer shape, with their op tables
    plan: StagePlan
    pipeline: PipelineComm
    stages: StageTimes
    timeline: Timeline
    steady: SteadyState
    params: StageParams
    data_parallel: DataParallelStep
    memory: MemoryResult
    scores: Scores
    # a MoE layer's EP all-to-all per micro-batch left on the critical path (after
    # Megatron's EP overlap where it applies: costmodel.moe_overlap), what the layer's
    # tp_comm_s carries of it; None for a dense model
    moe_ep_comm_s: np.ndarray | None = None


def run_phases(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
               batch: ConfigBatch, *, efficiency: Efficiency | None = None,
               framework: FrameworkCosts | None = None) -> Phases:
    """score()'s phases, in order, each from records to a record."""
    gpu = cluster.gpu
    fw, eff, system = _profiles(cluster, training, efficiency, framework)
    # context parallelism: the gradient reduction and the distributed optimizer run over the
    # data-parallel group with CP (dp x cp; Megatron's _DATA_PARALLEL_GROUP_WITH_CP), while
    # the micro-batches per step count the data-parallel replicas alone
    cp_on = bool(np.any(batch.cp > 1))
    grad_batch = replace(batch, dp=batch.dp * batch.cp) if cp_on else batch
    groups = resolve_groups(cluster, batch.tp, batch.pp, grad_batch.dp, model.tied_embeddings,
                            batch.cp if cp_on else None)
    comm = Collectives(system, batch, groups.layout)
    shard = shard_of(model, training, batch, cluster.gpus_per_node)
    sharded = sharding(fw, batch.precision, batch.zero_stage, grad_batch.dp, batch.pp)
    sched = batch.schedule
    # model chunks per rank: the interleaved schedule's v, two for the V-shaped schedules
    v = np.where(sched == INTERLEAVED, batch.virtual_stages,
                 np.where(np.isin(sched, V_SHAPED), 2, 1)).astype(float)
    m = float(training.global_batch_size) / (shard.micro_batch * batch.dp.astype(float))
    ea = ACT_BYTES[batch.precision]

    layer, distinct = price_distinct_layers(model, training, eff, fw, gpu, system, batch, groups)
    layer, moe = _with_moe(layer, model, cluster, system, training, batch, shard, ea,
                           fw.host.host_overlap_p, m, v)
    layer = accumulate_gradients(layer, m, sharded.bf16_optimizer,
                                 model.tied_embeddings & (batch.pp == 1))
    head, emb = _end_shares(layer)
    plan = _stage_plan(model, training, batch, head, emb, v)
    # Megatron-Core's interleaved schedule overlaps p2p with the next chunk's compute
    # (--overlap-p2p-communication, on by default since 2023): the share overlap hides
    p2p_exposed = np.where(training.overlap_p2p_comm & (v > 1), 1.0 - eff.overlap_hidden, 1.0)
    pipe = pipeline_comm(system, fw, comm, batch, groups, shard.tokens * shard.hidden * ea, v,
                         p2p_exposed)
    partial = partial_recompute(model, training, eff, fw, cluster, system, batch, groups, m,
                                sharded, v, shard, ea)
    offload = activation_offload_s(layer, batch.cpu_offloading_num_layers,
                                   hardware.host_link_bytes_per_s(gpu))
    st = stage_times(plan, layer, pipe, partial, offload)
    timeline = pipeline_timeline(st.slowest_s, st.total_s, m, sched, v, zb_ratio(layer, sched))
    steady = steady_state(st, layer, timeline.steady_s, m, partial)
    params = stage_params(plan, model, training, shard.vocab, shard.tp, moe and moe["non_expert"])
    expert, dp_params = _expert_params(plan, params, moe, batch, sharded.dp)
    dp = data_parallel_step(comm, grad_batch, groups, fw, eff, training, sharded, dp_params,
                            plan.groups[0].layers, layer, steady, m, shard.vocab, shard.hidden,
                            model.tied_embeddings, gpu.memory_bandwidth_bytes_per_s)
    cx = memory_context(fw, eff, batch, sharded, shard, layer, plan, m, ea, params.layer,
                        training, gpu, model.tied_embeddings)
    cx = cx if moe is None else replace(cx, transient=cx.transient + moe["dispatch_buffers"],
                                        extra_layers=moe["ep_overlap"].astype(float))
    mem = peak_memory(plan, params, cx, sharded, m, v, sched, groups.nccl_buffers_bytes, eff,
                      gpu.memory_bytes, expert)
    n_gpus = shard.tp * batch.pp.astype(float) * sharded.dp  # sharded.dp: dp x cp
    peak = peaks_by_precision(gpu)[batch.precision]
    ref = gpu.peak_flops_per_s.get("bf16") or gpu.peak_flops_per_s.get("fp16") or peak
    scores = metrics.scores(model, training, plan, layer, st, steady, timeline, dp, mem, groups,
                            m, peak, eff, n_gpus, ref, partial=partial)
    return Phases(fw, groups, shard, sharded, layer, distinct, plan, pipe, st, timeline, steady,
                  params, dp, mem, scores, None if moe is None else moe["ep_comm_s"])


def _stage_plan(model: ModelSpec, training: TrainingSpec, batch: ConfigBatch, head, emb, v):
    """The layers per pipeline stage (costmodel.stages.stage_plan): an explicit layout after
    Megatron's checks against the model, else the default or balanced split."""
    if training.pipeline_layout is not None:
        check_layout(training.pipeline_layout, model.num_layers,
                     model.moe.mtp_layers if model.moe is not None else 0)
    return stage_plan(model.num_layers, batch.pp, batch.stage_plan == StagePlanCode.BALANCED,
                      head, np.isin(batch.schedule, V_SHAPED), emb, training.pipeline_layout, v)


def _profiles(cluster: ClusterSpec, training: TrainingSpec, efficiency, framework):
    """(framework profile, kernel efficiencies, NCCL system) of a run, with the cluster's
    fitted scales applied where ``optimize calibrate`` stored some."""
    fw = framework or FRAMEWORKS[training.framework]
    eff = efficiency or efficiency_for(cluster.gpu.compute_capability,
                                       fw.kernels.attention_kernel)
    system = nccl_system(cluster)
    if is_calibrated(cluster.calibration):  # optimize calibrate's fitted scales
        eff, fw, system = apply_scales(eff, fw, system, scales_of(cluster.calibration))
    return fw, eff, system


def _end_shares(layer: LayerCosts) -> tuple[np.ndarray, np.ndarray]:
    """The LM head's (with the loss) and the embedding's micro-batch time in layers' worth:
    what a balanced stage plan balances against (0 where a layer's time is not finite)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        head = layer.head_s / layer.total_s
        emb = layer.embedding_s / layer.total_s
    return (np.where(np.isfinite(head), head, 0.0), np.where(np.isfinite(emb), emb, 0.0))


def plan_of(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, config
            ) -> tuple[int, int, int]:
    """(first, middle, last) stage layers of the plan the cost model scores for one
    ParallelConfig (what the launch flags and the report state)."""
    ph = run_phases(model, cluster, training, ConfigBatch.from_configs([config]))
    first, last, middle = (int(g.layers[0]) for g in ph.plan.groups[:3])
    return first, middle, last


def zb_ratio(layer: LayerCosts, sched) -> np.ndarray:
    """A split-backward schedule's bubble over 1F1B's from a layer's passes: T_F the
    forward, T_B the input gradient (half the backward's GEMMs, Qi et al. 2023 take
    T_B = T_W) with the recomputed forward that precedes it, T_W the weight gradient (the
    other half)."""
    half = 0.5 * layer.backward_s
    return zero_bubble_ratio(layer.forward_s, half + layer.recompute_s, half, sched)


def partial_recompute(model, training, eff, fw, cluster, system, batch: ConfigBatch, groups, m,
                      sharded: Sharding, v, shard, ea) -> PartialRecompute | None:
    """The layer's costs without recompute for the configurations that recompute only some
    layers (``recompute_num_layers`` > 0, Megatron-Core's block method); None where none
    does (the usual case: no second pricing). A MoE model's layers that are not recomputed
    keep their EP all-to-all and dispatcher host stall (as the recomputed ones do)."""
    n = batch.recompute_num_layers
    if not (n > 0).any():
        return None
    plain_batch = replace(batch, recompute=np.zeros_like(batch.recompute))
    plain, _ = price_distinct_layers(model, training, eff, fw, cluster.gpu, system, plain_batch,
                                     groups)
    plain, _ = _with_moe(plain, model, cluster, system, training, plain_batch, shard, ea,
                         fw.host.host_overlap_p, m, v)
    plain = accumulate_gradients(plain, m, sharded.bf16_optimizer,
                                 model.tied_embeddings & (batch.pp == 1))
    return PartialRecompute(n, v, plain)


def _with_moe(layer: LayerCosts, model, cluster, system, training, batch, shard, ea,
              host_overlap_p: float, m, v) -> tuple[LayerCosts, dict | None]:
    """The layer with a MoE model's exposed EP communication (less what Megatron's EP
    overlap hides: costmodel.moe_overlap) and dispatcher host stall added, and the MoE terms
    (the layer and None for a dense model)."""
    if model.moe is None:
        return layer, None
    from costmodel import moe_overlap
    from costmodel.moe import moe_host_stall_s

    moe = _moe_terms(model, cluster, system, training, batch, shard, ea)
    applies = moe_overlap.ep_overlap_applies(training, batch, v)
    moe["ep_overlap"] = applies
    if applies.any():
        moe["ep_comm_s"] = moe_overlap.exposed_ep_s(
            layer, moe["ep_comm_s"], applies, moe_overlap.unpaired_share(batch, m, v),
            cluster.gpu.sm_count)
    layer = layer.with_(tp_comm_s=layer.tp_comm_s + moe["ep_comm_s"])
    stall = moe_host_stall_s(training, moe["shape"], batch.recompute, model=model,
                             gpu_layer_s=layer.total_s, host_overlap_p=host_overlap_p,
                             fp8=batch.precision == Precision.FP8)
    return layer.with_(host_s=layer.host_s + stall), moe


def _moe_terms(model, cluster, system, training, batch, shard, ea) -> dict:
    """A MoE model's extra per-configuration terms (:mod:`costmodel.moe`)."""
    from costmodel import moe as moe_ops

    ms = moe_ops.moe_shape(model, training, batch, shard.tokens, shard.tp)
    non_expert, expert = moe_ops.expert_param_split(model)
    world = batch.tp * batch.pp * batch.dp * batch.cp
    edp = np.maximum(world // np.maximum(batch.etp * batch.ep * batch.pp, 1), 1).astype(float)
    return {"ep_comm_s": moe_ops.ep_comm_s(cluster, system, batch, ms, shard.hidden, ea,
                                           batch.recompute, model, training),
            "shape": ms,
            "non_expert": non_expert, "expert": expert, "edp": edp,
            "dispatch_buffers": moe_ops.dispatcher_buffer_bytes(model, ms, shard.hidden, ea)}


def _expert_params(plan, params, moe, batch, dp):
    """(routed-expert parameters per stage group and edp, parameters the DP step reduces);
    (None, the dense ones) without MoE."""
    if moe is None:
        return None, params.largest
    expert = (expert_stage_params(plan, moe["expert"], batch.ep, batch.etp), moe["edp"])
    return expert, params.largest + _expert_dp_share(plan, expert, dp)


def _expert_dp_share(plan, expert, dp) -> np.ndarray:
    """The routed experts' gradients as dense-equivalent parameters of the DP reduction: they
    are reduced over edp ranks, not dp, and a bandwidth-bound ring moves (n-1)/n of the
    buffer, so the largest stage's expert parameters count (1 - 1/edp) / (1 - 1/dp) (none
    where edp = 1). An approximation: the reduction runs on the DP group's geometry."""
    per_group, edp = expert
    largest = per_group[0]
    for g, pe in zip(plan.groups[1:], per_group[1:], strict=True):
        largest = np.maximum(largest, np.where(g.present, pe, 0.0))
    d = np.asarray(dp, dtype=float)
    ratio = np.where(d > 1, (1.0 - 1.0 / edp) / np.where(d > 1, 1.0 - 1.0 / d, 1.0), 0.0)
    return largest * ratio


def score(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, batch: ConfigBatch,
          *, efficiency: Efficiency | None = None, framework: FrameworkCosts | None = None
          ) -> Scores:
    """Score every configuration of ``batch``; see the module docstring for the phases.

    ``framework``: the framework's runtime profile (default: ``training.framework``'s entry of
    :data:`costmodel.calibration.FRAMEWORKS`)."""
    return run_phases(model, cluster, training, batch, efficiency=efficiency,
                      framework=framework).scores
