"""Pipeline schedules: how per-stage micro-batch times combine into the pipeline's span.

Sources:
- GPipe (Huang et al. 2019, arXiv:1811.06965) and 1F1B / PipeDream-Flush (Narayanan et al.
  2021, arXiv:2006.09503): bubble (p - 1)(t_f + t_b); bubble share of the step
  (p - 1)/(m + p - 1).
- Interleaved 1F1B with v chunks per rank (Narayanan et al. 2021, arXiv:2104.04473 section
  2.2.2): the bubble shrinks to (p - 1)(t_f + t_b)/v.
- Unequal stages, flow-shop approximation (cost-model.md 7.3): the span is
  sum_i T_i + (m - 1) max_i T_i, so the slowest stage sets the steady state.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from costmodel.specs import Schedule

GPIPE, ONE_F_ONE_B, INTERLEAVED = Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED


def bubble_share(pp, m, virtual_stages=1) -> np.ndarray:
    """Closed form for equal stages: (p - 1)/(v m + p - 1) of the pipeline span."""
    p = np.asarray(pp, dtype=float)
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    return (p - 1.0) / (v * m + p - 1.0)


class Timeline(NamedTuple):
    """The pipeline's span for one optimizer step: steady = m x the slowest stage's
    micro-batch, bubble = span - steady (arrays over the configurations)."""

    span_s: np.ndarray
    steady_s: np.ndarray
    bubble_s: np.ndarray


def pipeline_span_s(first_s, middle_s, last_s, pp, m, schedule, virtual_stages) -> Timeline:
    """Span of the pipeline for one optimizer step.

    Arguments are per-micro-batch times (forward + backward, including blocking
    communication) of the first, a middle and the last stage; with pp == 1 pass the single
    stage's time as ``first_s`` (the others are ignored). Returns (span, steady, bubble) with
    steady = m * slowest stage and bubble = span - steady.
    """
    p = np.asarray(pp, dtype=float)
    first_s = np.asarray(first_s, dtype=float)
    middle_s = np.asarray(middle_s, dtype=float)
    last_s = np.asarray(last_s, dtype=float)
    single = p <= 1
    has_mid = p >= 3
    slowest = np.where(single, first_s,
                       np.maximum(np.maximum(first_s, last_s), np.where(has_mid, middle_s, 0.0)))
    with np.errstate(invalid="ignore"):
        total = np.where(single, first_s,
                         first_s + last_s + np.maximum(p - 2.0, 0.0) * middle_s)
    return pipeline_timeline(slowest, total, m, schedule, virtual_stages)


def pipeline_timeline(slowest_s, total_s, m, schedule, virtual_stages) -> Timeline:
    """Span of the pipeline from the stages' micro-batch times reduced over the stage plan:
    ``slowest_s`` the slowest stage's, ``total_s`` the sum over all stages (one micro-batch
    through the whole pipeline). Returns (span, steady, bubble) with steady = m * slowest
    stage and bubble = span - steady."""
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    # an unrunnable configuration (an infinite stage time) gives an infinite span; the
    # inf - inf and 0 x inf on the way are expected, not warnings
    with np.errstate(invalid="ignore"):
        fill_drain = total_s - slowest_s  # the other stages' share of one micro-batch
    inter = np.asarray(schedule) == INTERLEAVED
    span = m * slowest_s + np.where(inter, fill_drain / v, fill_drain)
    steady = m * slowest_s
    return Timeline(span, steady, span - steady)


def stage_layers(num_layers, pp) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Transformer layers on the first, a middle and the last pipeline stage.

    When ``pp`` divides the layers every stage holds ``L/pp`` (Megatron-LM's default split).
    Otherwise the middle stages hold ``c = ceil(L/pp)`` and the first and last stages share
    the rest, ``r = L - (pp - 2) c``, the last (which also runs the output layer and the loss)
    taking the smaller half: the split Megatron-Core expresses with
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` (the
    middle stages must divide the rest evenly), and the one Llama 3 405B was trained with
    (126 layers on 16 stages, one layer fewer on the first and the last: Dubey et al. 2024,
    arXiv:2407.21783, section 3.3.2). With ``pp == 2`` the first stage takes ``ceil(L/2)``.

    Returns (first, middle, last, splittable). ``splittable`` is False where no such split
    gives the first and the last stage at least one layer (``r < 2``, e.g. 5 layers on 4
    stages) or ``pp > L``; there every stage is charged ``ceil(L/pp)`` layers.
    """
    L = np.asarray(num_layers, dtype=float)
    p = np.maximum(np.asarray(pp, dtype=float), 1.0)
    c = np.ceil(L / p - 1e-9)
    even = np.mod(L, p) == 0
    rest = L - np.maximum(p - 2.0, 0.0) * c  # what the first and last stage share (pp >= 2)
    last = np.floor(rest / 2.0)
    first = rest - last
    ok = (p <= L) & (even | (p == 2) | (rest >= 2.0))
    uneven = ok & ~even & (p >= 2)
    first = np.where(uneven, first, c)
    last = np.where(uneven, last, c)
    middle = np.broadcast_to(c, first.shape).astype(float)
    return first, middle, last, ok | (p == 1)
