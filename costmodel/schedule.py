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

import numpy as np

GPIPE, ONE_F_ONE_B, INTERLEAVED = 0, 1, 2


def bubble_share(pp, m, virtual_stages=1) -> np.ndarray:
    """Closed form for equal stages: (p - 1)/(v m + p - 1) of the pipeline span."""
    p = np.asarray(pp, dtype=float)
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    return (p - 1.0) / (v * m + p - 1.0)


def pipeline_span_s(first_s, middle_s, last_s, pp, m, schedule, virtual_stages
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Span of the pipeline for one optimizer step.

    Arguments are per-micro-batch times (forward + backward, including blocking
    communication) of the first, a middle and the last stage; with pp == 1 pass the single
    stage's time as ``first_s`` (the others are ignored). Returns (span, steady, bubble) with
    steady = m * slowest stage and bubble = span - steady.
    """
    p = np.asarray(pp, dtype=float)
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    first_s = np.asarray(first_s, dtype=float)
    middle_s = np.asarray(middle_s, dtype=float)
    last_s = np.asarray(last_s, dtype=float)
    single = p <= 1
    has_mid = p >= 3
    slowest = np.where(single, first_s,
                       np.maximum(np.maximum(first_s, last_s), np.where(has_mid, middle_s, 0.0)))
    # an unrunnable configuration (an infinite stage time) gives an infinite span; the
    # inf - inf and 0 x inf on the way are expected, not warnings
    with np.errstate(invalid="ignore"):
        total = np.where(single, first_s,
                         first_s + last_s + np.maximum(p - 2.0, 0.0) * middle_s)
        fill_drain = total - slowest  # the other stages' share of one micro-batch
    inter = np.asarray(schedule) == INTERLEAVED
    span = m * slowest + np.where(inter, fill_drain / v, fill_drain)
    steady = m * slowest
    return span, steady, span - steady
