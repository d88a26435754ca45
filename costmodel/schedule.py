"""Pipeline schedules: how per-stage micro-batch times combine into the pipeline's span.

Sources:
- GPipe (Huang et al. 2019, arXiv:1811.06965) and 1F1B / PipeDream-Flush (Narayanan et al.
  2021, arXiv:2006.09503): bubble (p - 1)(t_f + t_b); bubble share of the step
  (p - 1)/(m + p - 1).
- Interleaved 1F1B with v chunks per rank (Narayanan et al. 2021, arXiv:2104.04473 section
  2.2.2): the bubble shrinks to (p - 1)(t_f + t_b)/v.
- ZB-H1, zero bubble (Qi et al. 2023, arXiv:2401.10241, section 3 and Table 1): the backward
  splits into B (input gradient) and W (weight gradient); W of the warm-up's last micro-batches
  fills the drain, so the bubble is (p - 1)(T_F + T_B - T_W) instead of 1F1B's
  (p - 1)(T_F + T_B + T_W), with 1F1B's peak activation memory (p micro-batches on the first
  stage). The fill-and-drain part of the flow-shop span is scaled by that ratio.
- ZB-V (Qi et al. 2024, arXiv:2405.15362; ZB README: bubble 0 and 1F1B's activation memory at
  T_F = T_B = T_W, twice the pipeline transfers): two chunks per rank in a V (rank r holds
  stages r and 2p - 1 - r), so it is ZB-H2's schedule, bubble (p - 1)(T_F + T_B - 2 T_W)
  (Qi et al. 2023 Table 1), on chunks of half a stage: (p - 1)(T_F + T_B - 2 T_W)/2 in a
  rank's times, never below 0; ZB-H2's 2p - 1 chunk micro-batches in flight are about p of
  the rank's, 1F1B's peak (p on every rank: the V puts the first and the last stage on
  rank 0).
- DualPipeV (DeepSeek-V3 report, arXiv:2412.19437, section 3.2.1 and Table 2; the DualPipe
  README's "cut-in-half" V): bubble (PP/2 - 1)(F&B + B - 3W) over PP = 2p chunk-stages on p
  ranks, F&B an overlapped forward and full backward chunk (F + B + W), B the full backward
  chunk (B + W): (p - 1)(T_F + 2 T_B - T_W)/2 in a rank's times; activations PP + 1 chunk
  micro-batches per rank, p + 1/2 of the rank's; two chunks per rank (twice the transfers);
  needs an even number of micro-batches, at least 2p.
- Unequal stages, flow-shop approximation (cost-model.md 7.3): the span is
  sum_i T_i + (m - 1) max_i T_i, so the slowest stage sets the steady state.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from costmodel.pipeline_layout import write_layout
from costmodel.specs import Schedule

GPIPE, ONE_F_ONE_B, INTERLEAVED = Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED
ZB_H1, ZB_V, DUALPIPE_V = Schedule.ZB_H1, Schedule.ZB_V, Schedule.DUALPIPE_V
#: schedules with two model chunks per rank in a V (twice the pipeline transfers)
V_SHAPED = (ZB_V, DUALPIPE_V)


def zero_bubble_ratio(t_f, t_b, t_w, schedule=ZB_H1) -> np.ndarray:
    """A split-backward schedule's bubble over 1F1B's (p - 1)(T_F + T_B + T_W), T_B the
    input gradient and T_W the weight gradient of a rank's stage (module docstring):
    ZB-H1 (T_F + T_B - T_W); ZB-V (T_F + T_B - 2 T_W)/2; DualPipeV (T_F + 2 T_B - T_W)/2.
    At T_F = T_B = T_W: 1/3 (the ZB README's "ZB1P: B/3"), 0 ("ZBV 0") and 1/3. 1 for the
    other schedules; never below 0."""
    t_f, t_b, t_w = (np.asarray(x, dtype=float) for x in (t_f, t_b, t_w))
    sched = np.asarray(schedule)
    with np.errstate(invalid="ignore", divide="ignore"):
        one = t_f + t_b + t_w
        r = np.where(sched == ZB_H1, (t_f + t_b - t_w) / one,
                     np.where(sched == ZB_V, 0.5 * (t_f + t_b - 2.0 * t_w) / one,
                              np.where(sched == DUALPIPE_V, 0.5 * (t_f + 2.0 * t_b - t_w) / one,
                                       1.0)))
    return np.where(np.isfinite(r), np.clip(r, 0.0, 1.0), 1.0)


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


def pipeline_timeline(slowest_s, total_s, m, schedule, virtual_stages,
                      zb_ratio=None) -> Timeline:
    """Span of the pipeline from the stages' micro-batch times reduced over the stage plan:
    ``slowest_s`` the slowest stage's, ``total_s`` the sum over all stages (one micro-batch
    through the whole pipeline). Returns (span, steady, bubble) with steady = m * slowest
    stage and bubble = span - steady. ``zb_ratio``: a split-backward schedule's bubble over
    1F1B's (:func:`zero_bubble_ratio`), for the zb-h1, zb-v and dualpipev rows."""
    m = np.asarray(m, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    # an unrunnable configuration (an infinite stage time) gives an infinite span; the
    # inf - inf and 0 x inf on the way are expected, not warnings
    with np.errstate(invalid="ignore"):
        fill_drain = total_s - slowest_s  # the other stages' share of one micro-batch
    inter = np.asarray(schedule) == INTERLEAVED
    span = m * slowest_s + np.where(inter, fill_drain / v, fill_drain)
    if zb_ratio is not None:
        zb = np.asarray(schedule) >= ZB_H1
        span = np.where(zb, m * slowest_s + zb_ratio * fill_drain, span)
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


def head_share(model, seq_length: int, recompute=None):
    """The LM head's forward FLOPs per token in layers' worth (cost-model.md 7.4):
    2 h V / (2 P_matmul + 4 s a d_h), P_matmul the layer's GEMM parameters (causal attention
    counted whole, as 7.4 does; the loss's softmax is left out). With full recomputation
    (``recompute`` code 2 or "full") a layer runs one forward more, the head not: 3/4 of it.
    What the rules and the report estimate; the cost model balances on its own priced times
    (:func:`costmodel.stages.stage_plan`)."""
    h, V = float(model.hidden_size), float(model.vocab_size)
    matmul = float(model.attention_params + model.mlp_params)
    attn = 4.0 * seq_length * model.num_attention_heads * model.head_dim
    share = 2.0 * h * V / (2.0 * matmul + attn)
    if recompute is None:
        return share
    full = np.isin(np.asarray(recompute), (2, "full"))
    return np.where(full, 0.75 * share, share)


#: the slowest stage must shrink by this share for a balanced plan to leave the default split
#: (a smaller gain is within the cost model's error and only reshuffles layers)
MIN_BALANCE_GAIN = 0.02


def balanced_layers(num_layers, pp, head, embedding=0.0):
    """The split Megatron-Core can express with ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers`` (middle stages equal, every stage at least one
    layer) that minimises the slowest stage once the embedding and the LM head + loss are
    counted as ``embedding`` and ``head`` layers' worth of work (numbers or arrays over the
    configurations): the remedy of moving the
    head's share off the last stage (cost-model.md 7.4; Llama 3 405B's one layer fewer on the
    first and last stage, Dubey et al. 2024, 3.3.2). The default split stays unless the
    slowest stage shrinks by ``MIN_BALANCE_GAIN``.

    Returns (first, middle, last, differs): ``differs`` where the split is not the default."""
    L = float(num_layers)
    d_first, d_mid, d_last, ok = stage_layers(L, pp)
    p = np.maximum(np.asarray(pp, dtype=float), 1.0)
    has_mid = p >= 3

    def cost(f, c, la):
        return np.maximum(np.maximum(f + embedding, la + head), np.where(has_mid, c, 0.0))

    best_f, best_c, best_l = d_first, d_mid, d_last
    best = np.where(ok & (p >= 2), cost(d_first, d_mid, d_last), np.inf)
    c0 = np.ceil(L / p - 1e-9)
    for dc in (-2.0, -1.0, 0.0, 1.0):
        c = np.where(has_mid, c0 + dc, 0.0)
        rest = L - np.maximum(p - 2.0, 0.0) * c
        for k in range(-3, 4):
            f = np.floor(rest / 2.0) + k
            la = rest - f
            fine = (p >= 2) & (f >= 1) & (la >= 1) & (~has_mid | (c >= 1))
            t = np.where(fine, cost(f, c, la), np.inf)
            better = t < best * (1.0 - MIN_BALANCE_GAIN)
            best = np.where(better, t, best)
            best_f = np.where(better, f, best_f)
            best_c = np.where(better, c, best_c)
            best_l = np.where(better, la, best_l)
    differs = (best_f != d_first) | (best_l != d_last) | ((best_c != d_mid) & has_mid)
    return best_f, np.broadcast_to(best_c, best_f.shape).astype(float), best_l, differs


def pipeline_layout(first: int, mid: int, last: int, pp: int, v: int) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` for a split of (first, middle x
    (pp - 2), last) layers per rank in ``v`` chunks each: virtual stage a of rank b is stage
    a pp + b, stages separated by ``|``, ``E`` the embedding, ``t`` a layer, ``L`` the loss
    (megatron/core/transformer/pipeline_parallel_layer_layout.py). A rank's layers are spread
    evenly over its chunks; on the first rank the lighter chunks come first (a chunk may hold
    the embedding alone: Llama 3 405B), on the last rank last."""
    per_rank = [first] + [mid] * max(pp - 2, 0) + ([last] if pp >= 2 else [])
    chunks = []
    for b, n in enumerate(per_rank):
        q, r = divmod(n, v)
        sizes = [q + (1 if a < r else 0) for a in range(v)]
        if b == 0:
            sizes = sorted(sizes)
        chunks.append(sizes)
    stages = []
    for a in range(v):
        for b in range(pp):
            s = "t" * chunks[b][a]
            if a == 0 and b == 0:
                s = "E" + s
            if a == v - 1 and b == pp - 1:
                s = s + "L"
            stages.append(s)
    return write_layout(stages)  # Megatron's repetition grammar: t*n, (s|)*n
