"""Diagnosis of one scored configuration: what limits it and which lever would move it.

Advice is computed from the configuration, so no finding suggests a lever that cannot change
anything (issue 25): ZeRO only when dp > 1 and a higher stage exists, a heavier recompute only
when one is left, a smaller micro-batch only when it is above 1, the interleaved schedule only
with a pipeline whose stages hold two or more layers, and "more micro-batches" never at a
fixed batch with micro-batch 1 (a larger global batch is named as what it is: a change of
the training recipe). Memory follows the one verdict of :mod:`costmodel.memory_verdict`: a predicted
peak over the GPU's own HBM is "does not fit", over the limit (the GPU's memory less the safety
margin) "over the limit"; under the limit it fits, with no second headroom threshold.

Each finding carries the names of its levers (:data:`LEVERS`); levers paraplan cannot search
yet (expert-parallel placement, CUDA graphs) say so.
MFU is reported on the bf16 peak (the industry convention, so fp8 runs are comparable); the
utilisation of the low-precision peak the run actually uses is reported separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costmodel.specs import ParallelConfig

COMM_SHARE = 0.30
BUBBLE_SHARE = 0.15
RECOMPUTE_SHARE = 0.15
HOST_SHARE = 0.10
IMBALANCE = 1.05
LOW_MFU = 0.30
# Dense-transformer bf16 MFU published at scale: Megatron-LM 52% on A100 (Narayanan et al.
# 2021, 1T model), Llama 3 405B 38-43% on H100 (arXiv:2407.21783, Table 4). "Far below" is
# under half of the lower figure.
REACHED_MFU = 0.38
FAR_BELOW = 0.5
GIB = 1024**3

LEVERS: dict[str, str] = {  # name -> how the advice phrases it; "(not searched)" = paraplan cannot
    "zero": "a higher ZeRO stage",
    "recompute_selective": "selective recompute",
    "recompute_full": "full recompute",
    "lighter_recompute": "selective instead of full recompute",
    "smaller_micro_batch": "a smaller micro-batch",
    "larger_micro_batch": "a larger micro-batch",
    "more_model_parallel": "more tensor/pipeline parallelism",
    "sequence_parallel": "sequence parallelism",
    "more_gpus": "more GPUs",
    "fewer_gpus": "fewer GPUs",
    "tp_in_node": "TP inside the node",
    "lower_tp": "a lower TP degree",
    "tp_comm_overlap": "--tp-comm-overlap",
    "fewer_pp": "fewer pipeline stages",
    "interleaved": "the interleaved schedule (virtual pipeline stages)",
    "more_virtual_stages": "more virtual pipeline stages",
    "overlap_grad_reduce": "overlapped gradient reduction",
    "larger_global_batch": "a larger global batch (changes the training recipe)",
    "stage_layers": "uneven stage layer counts",
    "mixed_precision": "bf16/fp16 mixed precision",
    "cp": "context parallelism",
    "partial_recompute": "partial recompute (--recompute-num-layers)",
    "ep_placement": "expert-parallel placement (not searched)",
    "cuda_graphs": "CUDA graphs (not searched)",
}


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str
    levers: tuple[str, ...] = ()


def mfu_against(mfu: float, peaks: Mapping[str, float] | None, precision: str,
                reference: str = "bf16") -> float:
    """MFU over the dense ``reference`` peak (bf16, as NVIDIA and Meta report it; fp16 on a
    GPU without bf16) from the cost model's MFU over the run precision's peak. ``mfu`` when
    the peaks are unknown or the same."""
    if not peaks:
        return mfu
    ref = peaks.get(reference) or peaks.get("fp16")
    own = peaks.get(precision)
    if not ref or not own:
        return mfu
    return mfu * own / ref


def mfu_pair(metrics: Mapping[str, float], peaks: Mapping[str, float] | None, precision: str
             ) -> tuple[float, float]:
    """(MFU over the bf16 peak, utilisation of the run precision's peak) of a metrics object.
    The cost model's ``mfu`` is over the bf16 peak with ``low_precision_utilization`` beside
    it (cost model >= 0.5.0); a document without that field has ``mfu`` over the run
    precision's peak, converted with :func:`mfu_against`."""
    mfu = metrics.get("mfu", 0.0)
    own = metrics.get("low_precision_utilization")
    if own is not None:
        return mfu, own
    return mfu_against(mfu, peaks, precision), mfu


def main_bottleneck(metrics: Mapping[str, Any]) -> str:
    """The largest term of the step time."""
    tb = metrics["time_breakdown_s"]
    return max(tb, key=lambda k: tb[k])


def ranked_terms(metrics: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Step-time terms, largest first, as (name, share of the step)."""
    tb, step = metrics["time_breakdown_s"], metrics["step_time_s"]
    return sorted(((k, v / step) for k, v in tb.items() if v > 0), key=lambda kv: -kv[1])


def mfu_bf16(problem, config: ParallelConfig, metrics: Mapping[str, Any]) -> float:
    """MFU on the bf16 (dense tensor-core) peak, whatever precision the run uses
    (:func:`mfu_pair`)."""
    return float(mfu_pair(metrics, problem.cluster.gpu.peak_flops_per_s, config.precision)[0])


# ---------------------------------------------------------------------------------------------
def _memory_levers(problem, c: ParallelConfig, metrics) -> list[tuple[str, str]]:
    """(lever, phrase with the expected saving) that can lower this configuration's peak."""
    mb = metrics.get("memory_breakdown_bytes", {})
    out = []
    if c.dp > 1 and c.zero_stage < 3:
        nxt = c.zero_stage + 1
        part = {1: "optimizer_states", 2: "gradients", 3: "weights"}[nxt]
        save = mb.get(part, 0.0) * (1 - 1 / c.dp)
        out.append(("zero", f"ZeRO-{nxt} (shards the {part.replace('_', ' ')} over dp={c.dp}: "
                            f"about {save / GIB:.1f} GiB less)"))
    act = mb.get("activations", 0.0)
    if c.recompute == "none":
        out.append(("recompute_selective", "selective recompute (drops the attention core's "
                                           "activations)"))
    if c.recompute != "full":
        out.append(("recompute_full", f"full recompute (activations {act / GIB:.1f} GiB now)"))
    if c.micro_batch_size > 1:
        out.append(("smaller_micro_batch", f"micro-batch {c.micro_batch_size // 2} (about "
                                           f"{act / 2 / GIB:.1f} GiB of activations less)"))
    if c.tp > 1 and not c.sequence_parallel:
        out.append(("sequence_parallel", "sequence parallelism (splits norm/dropout "
                                         "activations over TP)"))
    gpn = problem.cluster.gpus_per_node
    if c.tp < gpn or c.pp < problem.model.num_layers:
        out.append(("more_model_parallel", "more tensor (up to the node) or pipeline "
                                           "parallelism"))
    if act > 0.3 * metrics["peak_memory_bytes"] and c.recompute == "full" \
            and c.micro_batch_size == 1:
        out.append(("cp", "context parallelism (splits the sequence over GPUs: --cp, "
                          "searched by default on long sequences)"))
    out.append(("more_gpus", "more GPUs"))
    return out


def _memory(problem, c, metrics) -> Finding | None:
    if "peak_memory_bytes" not in metrics or getattr(problem, "model", None) is None:
        return None
    peak = metrics["peak_memory_bytes"]
    hbm = problem.cluster.gpu.memory_bytes
    limit = metrics.get("memory_limit_bytes") or problem.memory_limit_bytes
    levers = _memory_levers(problem, c, metrics)
    fix = "; ".join(p for _, p in levers[:4])
    names = tuple(n for n, _ in levers[:4])
    from costmodel.memory_verdict import DOES_NOT_FIT, OVER_LIMIT, verdict

    v = verdict(peak, limit, hbm)
    margin = max(0.0, 1.0 - limit / hbm)
    if v == DOES_NOT_FIT:
        return Finding("does_not_fit", f"does not fit: {peak / GIB:.1f} GiB predicted per GPU "
                                       f"(allocator reserve included), over the GPU's "
                                       f"{hbm / GIB:.1f} GiB; try {fix}", names)
    if v == OVER_LIMIT:
        return Finding("over_limit", f"over the memory limit: {peak / GIB:.1f} GiB predicted, "
                                     f"limit {limit / GIB:.1f} GiB (the GPU's "
                                     f"{hbm / GIB:.1f} GiB less a {margin:.0%} safety margin); "
                                     f"try {fix}", names)
    return None


def _communication(problem, c, metrics, step, tb) -> Finding | None:
    shares = {"TP": tb.get("tp_comm", 0.0) / step,
              "PP": tb.get("pp_comm", 0.0) / step,
              "DP": (tb.get("dp_comm_exposed", 0.0) + tb.get("embedding_sync", 0.0)) / step,
              "CP": tb.get("cp_comm", 0.0) / step}
    group, share = max(shares.items(), key=lambda kv: kv[1])
    total = sum(shares.values())
    if total <= COMM_SHARE:
        return None
    from costmodel.specs import TrainingSpec

    tr = getattr(problem, "training", None) or TrainingSpec()
    gpn = problem.cluster.gpus_per_node
    levers: list[tuple[str, str]] = []
    if group == "TP":
        if metrics.get("tp_crosses_nodes"):
            levers.append(("tp_in_node", f"keep tp <= {gpn} so TP stays on NVLink"))
        if c.tp > 1:
            levers.append(("lower_tp", f"tp={c.tp // 2} with more pipeline or data "
                                       "parallelism"))
        if c.sequence_parallel and not tr.tp_comm_overlap and tr.framework == "megatron":
            levers.append(("tp_comm_overlap", "--tp-comm-overlap (overlaps TP collectives "
                                              "with the GEMMs)"))
    elif group == "CP":
        if getattr(c, "cp_comm_type", "p2p") != "p2p":
            levers.append(("cp_p2p", "cp_comm_type p2p (the ring overlaps K/V transfers with "
                                     "attention)"))
        if c.cp > 1:
            levers.append(("lower_cp", f"cp={c.cp // 2} (longer local chunks hide the ring "
                                       "transfers) with more tensor or pipeline parallelism"))
    elif group == "PP":
        if c.pp > 1:
            levers.append(("fewer_pp", f"pp={c.pp // 2}"))
        if metrics.get("microbatches_per_step", 1) > 1:
            levers.append(("larger_micro_batch", "a larger micro-batch (fewer, larger "
                                                 "point-to-point transfers)"))
    else:
        if not tr.overlap_grad_reduce:
            levers.append(("overlap_grad_reduce", "overlap the gradient reduction with the "
                                                  "backward"))
        levers.append(("fewer_gpus", f"fewer GPUs (dp={c.dp}: the gradient reduction does "
                                     "not shrink with more replicas, the compute does)"))
        levers.append(("larger_global_batch", "a larger global batch, if the training "
                                              "recipe allows (more compute per reduction)"))
    if not levers:
        return None
    return Finding("communication",
                   f"communication is {total:.0%} of the step ({group} {share:.0%}): "
                   + "; ".join(p for _, p in levers), tuple(n for n, _ in levers))


def _bubble(problem, c, metrics) -> Finding | None:
    bubble = metrics.get("bubble_share", 0.0)
    if c.pp <= 1 or bubble <= BUBBLE_SHARE:
        return None
    m = metrics.get("microbatches_per_step")
    model = getattr(problem, "model", None)
    L = model.num_layers if model is not None else c.pp
    per_stage = L // c.pp
    levers: list[tuple[str, str]] = []
    if c.micro_batch_size > 1:
        levers.append(("smaller_micro_batch", f"micro-batch {c.micro_batch_size // 2} "
                                              f"({2 * m} micro-batches per step)"))
    if c.schedule != "interleaved" and per_stage >= 2:
        levers.append(("interleaved", "the interleaved schedule (virtual pipeline stages)"))
    elif c.schedule == "interleaved" and per_stage >= 2 * c.virtual_stages:
        levers.append(("more_virtual_stages", f"{2 * c.virtual_stages} virtual stages"))
    levers.append(("fewer_pp", f"pp={c.pp // 2}" if c.pp >= 4 else "no pipeline (pp=1)"))
    if c.micro_batch_size == 1:
        levers.append(("larger_global_batch", "a larger global batch if the training recipe "
                                              "allows (micro-batch is already 1)"))
    return Finding("bubble", f"pipeline bubble is {bubble:.0%} of the step (pp={c.pp}, {m} "
                             "micro-batches): " + "; ".join(p for _, p in levers),
                   tuple(n for n, _ in levers))


def plan_layers_of(problem, c) -> tuple[int, int, int, bool]:
    """(first, middle, last) layers of the stage plan the cost model scores for ``c``
    (costmodel.model.plan_of for a balanced plan), and whether a balanced plan would move
    layers (the rules' FLOP estimate, costmodel.schedule.head_share)."""
    import numpy as np

    from costmodel.model import plan_of
    from costmodel.schedule import balanced_layers, head_share, stage_layers

    model, training = problem.model, problem.training
    pp = np.array([c.pp])
    head = head_share(model, training.seq_length, np.array([c.recompute]))
    moves = bool(balanced_layers(model.num_layers, pp, head)[3][0])
    if c.stage_plan == "balanced" or training.pipeline_layout is not None:
        # the scored plan (an explicit layout: its first rank, first middle run and last rank)
        return (*plan_of(model, problem.cluster, training, c), moves)
    first, mid, last, _ = stage_layers(model.num_layers, pp)
    return int(first[0]), int(mid[0]), int(last[0]), moves


def _stage_plan(problem, c, metrics) -> Finding | None:
    """The stage plan in layers, the LM head's share and the imbalance (issue 21)."""
    model, training = getattr(problem, "model", None), getattr(problem, "training", None)
    if c.pp <= 1 or model is None or training is None or getattr(problem, "cluster",
                                                                  None) is None:
        return None
    from costmodel.schedule import head_share

    first, mid, last, moves = plan_layers_of(problem, c)
    head = float(head_share(model, training.seq_length, c.recompute))
    middle = f", {mid} x {c.pp - 2}" if c.pp >= 3 else ""
    ranks = f"{first}{middle}, {last}"
    name = c.stage_plan
    if training.pipeline_layout is not None:
        # every rank's layers: a layout's middle ranks need not be equal
        from costmodel.pipeline_layout import rank_layout

        name = f"layout {training.pipeline_layout}"
        ranks = _runs_text(rank_layout(training.pipeline_layout, c.pp).layers)
    text = (f"stage plan {name}: {ranks} layers (LM head "
            f"{head:.2f} layers' worth of FLOPs on the last); slowest stage "
            f"{metrics.get('stage_imbalance', 1.0) - 1:.1%} above the mean")
    if c.stage_plan == "default" and training.pipeline_layout is None:
        text += ("; stage_plan balanced moves layers off the last stage" if moves else
                 "; already balanced: no whole-layer move off the last stage shortens the "
                 "slowest one")
    return Finding("stage_plan", text, ("stage_plan",) if moves else ())


def _runs_text(layers) -> str:
    """Layers per rank with runs of equal ranks written ``n x k``: ``8 x 7, 5``."""
    from itertools import groupby

    runs = ((n, len(list(g))) for n, g in groupby(layers))
    return ", ".join(f"{n} x {k}" if k > 1 else f"{n}" for n, k in runs)


def _recompute(c, step, tb) -> Finding | None:
    share = tb.get("recompute", 0.0) / step
    if share <= RECOMPUTE_SHARE or c.recompute == "none":
        return None
    if c.recompute == "full":
        return Finding("recompute", f"full recompute costs {share:.0%} of the step: recompute "
                                    "only as many layers as memory needs (Megatron "
                                    "--recompute-method block --recompute-num-layers N, "
                                    "searched by default with framework megatron), or "
                                    "selective recompute where it fits",
                       ("partial_recompute", "lighter_recompute"))
    return Finding("recompute", f"selective recompute costs {share:.0%} of the step: no "
                                "recompute where memory allows", ())


def _mfu(problem, c, metrics, ranked) -> list[Finding]:
    mfu16 = mfu_bf16(problem, c, metrics)
    mfu = float(mfu_pair(metrics, problem.cluster.gpu.peak_flops_per_s, c.precision)[1])
    if mfu16 >= LOW_MFU:
        return []
    peaks = getattr(getattr(getattr(problem, "cluster", None), "gpu", None),
                    "peak_flops_per_s", None) or {}
    ref = "bf16" if "bf16" in peaks or not peaks else "fp16"
    own = "" if mfu16 == mfu else f" ({mfu:.0%} of the {c.precision} peak)"
    levers: tuple[str, ...] = ()
    others = [(k, s) for k, s in ranked if k != "compute"]
    model = getattr(problem, "model", None)
    if c.precision in ("fp32", "tf32"):
        why = (f"{c.precision} does not use the 16-bit tensor cores: bf16/fp16 mixed precision "
               "is the lever")
        levers = ("mixed_precision",)
    elif others and others[0][1] > 0.1:
        why = f"{others[0][0]} takes {others[0][1]:.0%} of the step"
    elif model is not None:
        why = f"the GEMMs are small at this shard size (hidden/tp = {model.hidden_size // c.tp})"
    else:
        why = f"main cost: {ranked[0][0] if ranked else 'compute'}"
    far = (f", far below what this hardware reaches (~{REACHED_MFU:.0%} in published dense "
           "runs)" if mfu16 < FAR_BELOW * REACHED_MFU else "")
    return [Finding("low_mfu", f"MFU {mfu16:.0%} of the {ref} peak{own} is low{far}: {why}",
                    levers)]


#: the EP all-to-all share of the step above which the diagnosis names it
A2A_SHARE = 0.15


def _moe(problem, c: ParallelConfig, step: float) -> list[Finding]:
    """MoE findings: the EP all-to-all's share of the step, an EP group leaving the NVLink
    domain, too few tokens per expert for efficient grouped GEMMs, the dispatcher's host
    stall."""
    model = getattr(problem, "model", None)
    if getattr(model, "moe", None) is None:
        return []
    from costmodel.moe import SMALL_ROWS_PER_EXPERT
    from costmodel.moe_diagnosis import moe_diagnostics

    d = moe_diagnostics(model, problem.cluster, problem.training, c)
    out = []
    share = d["ep_comm_s"] / step
    if share > A2A_SHARE:
        # the share is the exposed all-to-all: after Megatron's EP overlap where it applies
        where = ", or EP inside the NVLink domain" if d["ep_crosses_domain"] else ""
        if d["ep_overlap_applies"]:
            out.append(Finding("moe_a2a", f"the expert-parallel all-to-all (dispatch + "
                                          f"combine) left exposed by the all-to-all overlap "
                                          f"is {share:.0%} of the step (ep={c.ep}): a "
                                          f"smaller ep{where}", ("lower_ep",)))
        else:
            from costmodel.moe_overlap import conditions, unmet

            # asked for but not run here: what this configuration lacks of Megatron's terms
            need = unmet(problem.training, c)
            how = (f"asked for, it needs {'; '.join(need)}" if need else
                   "training.moe_ep_overlap, which needs " + "; ".join(conditions()))
            out.append(Finding("moe_a2a", f"the expert-parallel all-to-all (dispatch + "
                                          f"combine) is {share:.0%} of the step (ep={c.ep}): "
                                          f"a smaller ep{where}, or Megatron's all-to-all "
                                          f"overlap (--overlap-moe-expert-parallel-comm; {how})",
                               ("lower_ep", "a2a_overlap")))
    if d["ep_crosses_domain"]:
        out.append(Finding("moe_ep_cross_domain", f"the EP group (ep={c.ep}) crosses the NVLink "
                                                  "domain: its all-to-all runs on the NICs",
                           ("ep_in_domain",)))
    if d["rows_per_expert"] < SMALL_ROWS_PER_EXPERT:
        out.append(Finding("moe_small_experts", f"{d['rows_per_expert']:.0f} tokens per expert "
                                                f"and micro-batch ({d['local_experts']:.0f} "
                                                "local experts): too few for efficient grouped "
                                                "GEMMs; a larger ep or micro-batch",
                           ("higher_ep", "larger_micro_batch")))
    stall = d["host_stall_s"] / step
    if stall > A2A_SHARE:
        out.append(Finding("moe_host_stall", f"the dropless dispatcher's host stall is "
                                             f"{stall:.0%} of the step: CUDA graphs over the "
                                             "MoE layers (--cuda-graph-impl full_iteration) or "
                                             "a larger micro-batch", ("cuda_graphs",
                                                                      "larger_micro_batch")))
    return out


def diagnose(problem, config: ParallelConfig, metrics: Mapping[str, Any]) -> list[Finding]:
    """Findings for one configuration, most important first."""
    c = config
    step = metrics["step_time_s"]
    tb = metrics["time_breakdown_s"]
    if not step or step == float("inf"):
        return [Finding("invalid", "configuration cannot run")]
    out: list[Finding] = []
    mem = _memory(problem, c, metrics)
    if mem is not None:
        out.append(mem)
    ranked = ranked_terms(metrics)
    if len(ranked) >= 2:
        (k1, s1), (k2, s2) = ranked[0], ranked[1]
        out.append(Finding("breakdown", f"step {step:.3g} s: {k1} {s1:.0%}, then {k2} "
                                        f"{s2:.0%}", ()))
    for f in (_communication(problem, c, metrics, step, tb), _bubble(problem, c, metrics),
              _recompute(c, step, tb)):
        if f is not None:
            out.append(f)
    if metrics.get("tp_crosses_nodes") and not any("tp_in_node" in f.levers for f in out):
        gpn = problem.cluster.gpus_per_node
        out.append(Finding("tp_cross_node", f"the TP group (tp={c.tp}) crosses nodes of {gpn} "
                                            f"GPUs: keep tp <= {gpn} so its per-layer "
                                            "collectives stay on NVLink", ("tp_in_node",)))
    plan = _stage_plan(problem, c, metrics)
    if plan is not None:
        out.append(plan)
    imb = metrics.get("stage_imbalance", 1.0)
    if c.pp > 1 and imb > IMBALANCE and c.stage_plan == "default":
        # Megatron's first/last-stage flags do not combine with an explicit layout
        lever = ("move layers between the stages of the layout (training.pipeline_layout)"
                 if getattr(problem.training, "pipeline_layout", None) is not None else
                 "move layers off the first/last stage "
                 "(--decoder-first/last-pipeline-num-layers)")
        out.append(Finding("imbalance",
                           f"slowest pipeline stage is {imb - 1:.0%} above the mean (embedding "
                           f"/ LM head stages): {lever}", ("stage_layers",)))
    host = tb.get("host_overhead", 0.0) / step
    if host > HOST_SHARE:
        more_mb = metrics.get("microbatches_per_step", 1) > 1
        out.append(Finding("host", f"host overhead (kernel launches) is {host:.0%} of the step: "
                                   + ("a larger micro-batch, or " if more_mb else "")
                                   + "CUDA graphs (not searched)",
                           ("larger_micro_batch", "cuda_graphs") if more_mb
                           else ("cuda_graphs",)))
    out.extend(_moe(problem, c, step))
    out.extend(_mfu(problem, c, metrics, ranked))
    return out
