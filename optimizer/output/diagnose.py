"""Diagnosis of one scored configuration, following the source article's checks.

Each finding names the problem with numbers and gives concrete advice: communication share of
the step over 30% (which group), pipeline bubble, TP crossing nodes, stage imbalance, memory
headroom under 5%, low compute utilisation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costmodel.specs import ParallelConfig

COMM_SHARE = 0.30
BUBBLE_SHARE = 0.15
IMBALANCE = 1.05
HEADROOM = 0.05
LOW_MFU = 0.30


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str


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


def diagnose(problem, config: ParallelConfig, metrics: Mapping[str, Any]) -> list[Finding]:
    """Findings for one configuration, most important first."""
    out: list[Finding] = []
    step = metrics["step_time_s"]
    tb = metrics["time_breakdown_s"]
    if not step or step == float("inf"):
        return [Finding("invalid", "configuration cannot run")]
    gpn = problem.cluster.gpus_per_node

    shares = {"TP": tb.get("tp_comm", 0.0) / step,
              "PP": tb.get("pp_comm", 0.0) / step,
              "DP": (tb.get("dp_comm_exposed", 0.0) + tb.get("embedding_sync", 0.0)) / step}
    group, share = max(shares.items(), key=lambda kv: kv[1])
    total_comm = sum(shares.values())
    if total_comm > COMM_SHARE:
        advice = {
            "TP": "keep TP inside the NVLink domain, lower tp, or enable sequence parallelism",
            "PP": "use fewer pipeline stages or a larger micro-batch",
            "DP": "overlap the gradient reduction, use ZeRO-1/distributed optimizer, a larger "
                  "global batch or another NCCL algorithm",
        }[group]
        out.append(Finding("communication",
                           f"communication is {total_comm:.0%} of the step ({group} "
                           f"{share:.0%}): {advice}"))
    if metrics.get("tp_crosses_nodes"):
        out.append(Finding("tp_cross_node",
                           f"the TP group (tp={config.tp}) crosses nodes of {gpn} GPUs: keep "
                           f"tp <= {gpn} so its per-layer collectives stay on NVLink"))
    bubble = metrics.get("bubble_share", 0.0)
    if config.pp > 1 and bubble > BUBBLE_SHARE:
        m = metrics.get("microbatches_per_step")
        tip = "more micro-batches per step (larger global batch or smaller micro-batch)"
        if config.schedule != "interleaved":
            tip += ", or the interleaved schedule"
        out.append(Finding("bubble", f"pipeline bubble is {bubble:.0%} of the step "
                                     f"(pp={config.pp}, {m} micro-batches): {tip}"))
    imb = metrics.get("stage_imbalance", 1.0)
    if config.pp > 1 and imb > IMBALANCE:
        out.append(Finding("imbalance",
                           f"slowest pipeline stage is {imb - 1:.0%} above the mean (embedding "
                           "/ LM head stages): move layers off the first/last stage "
                           "(--decoder-first/last-pipeline-num-layers)"))
    head = metrics.get("memory_headroom")
    if head is not None and head < HEADROOM:
        out.append(Finding("memory", f"only {max(head, 0):.1%} memory headroom: risk of OOM "
                                     "from fragmentation; use ZeRO, selective/full recompute or "
                                     "a smaller micro-batch"))
    # MFU against the bf16 peak: an fp8 run at 25% of the fp8 peak uses 50% of the bf16 one,
    # the figure NVIDIA and Meta report and the threshold means
    mfu_bf16, mfu = mfu_pair(metrics, getattr(getattr(getattr(problem, "cluster", None),
                                                      "gpu", None), "peak_flops_per_s", None),
                             config.precision)
    if mfu_bf16 < LOW_MFU:
        own = "" if mfu_bf16 == mfu else f" ({mfu:.0%} of the {config.precision} peak)"
        out.append(Finding("low_mfu", f"MFU {mfu_bf16:.0%} of the bf16 peak{own} is low; "
                                      f"main cost: {main_bottleneck(metrics)}"))
    return out
