"""Stages as an axis: the stage plan, per-stage micro-batch times, the pipeline's transfers.

A :class:`StagePlan` says how many layers each pipeline stage holds and where the embedding
and the loss sit (Megatron's pipeline layout; today's even and uneven splits come from
:func:`costmodel.schedule.stage_layers`). Stages with equal layers and neither embedding nor
head are identical, so the plan lists stage *groups* with a count: the embedding's stage
(stage 0), the loss's stage (stage pp-1) and the middle stages (1 .. pp-2). Every phase that
works per stage loops over ``plan.groups`` with running sums and maxima, vectorised over the
configurations (never a configurations x stages array); a group a configuration does not have
(count 0) takes no part. The groups run in the order the sums have always run: embedding
stage, loss stage, middle stages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodel.layers import LayerCosts
from costmodel.pipeline_layout import fits_ranks, rank_layout
from costmodel.pricing import P2P, Axis, Kernel, price
from costmodel.schedule import balanced_layers, stage_layers


def select(mask, a, b=0.0):
    """``np.where(mask, a, b)``, without the pass where the mask is uniform over the batch (a
    plan's flags mostly are: the embedding's stage always holds the embedding)."""
    if mask.all():
        return a
    if not mask.any():
        return b
    return np.where(mask, a, b)


def add_where(x, mask, y):
    """``x + np.where(mask, y, 0.0)``, skipping the addition of zeros (same values)."""
    if not mask.any():
        return x
    return x + (y if mask.all() else np.where(mask, y, 0.0))


@dataclass(frozen=True)
class StageGroup:
    """Identical pipeline stages of a plan (arrays over the configurations)."""

    name: str
    index: np.ndarray  # stage index of the group's representative
    count: np.ndarray  # stages in the group (0 where a configuration has none)
    layers: np.ndarray  # transformer layers on each of them
    embedding: np.ndarray  # holds the word (and position) embedding
    head: np.ndarray  # holds the output layer, the final norm and the loss
    wins_time_ties: bool  # counts as the slowest stage when it ties with the slowest so far
    # MTP modules on each of them (an explicit layout's ``m``; placed, not priced: the cost
    # model does not score the MTP module, see costmodel.pipeline_layout)
    mtp: np.ndarray | float = 0.0

    @property
    def present(self) -> np.ndarray:
        return self.count > 0


@dataclass(frozen=True)
class StagePlan:
    """Layers per pipeline stage and where the embedding and the loss sit."""

    pp: np.ndarray
    groups: tuple[StageGroup, ...]
    splittable: np.ndarray  # False where no split gives every stage a layer
    v_shape: np.ndarray | None = None  # V-shaped schedules: the loss on rank 0 too

    @property
    def single(self) -> np.ndarray:
        return self.pp == 1

    def stage_layers(self, i: int) -> np.ndarray:
        """Layers on stage ``i`` (per configuration; 0 past the last stage)."""
        out = np.zeros(self.pp.shape)
        for g in self.groups:
            lo = g.index
            out = np.where((i >= lo) & (i < lo + g.count), g.layers, out)
        return out


def stage_plan(num_layers: int, pp: np.ndarray, balanced: np.ndarray | None = None,
               head=0.0, v_shape: np.ndarray | None = None, embedding=0.0,
               layout: str | None = None, v=None) -> StagePlan:
    """Megatron's split: even where pp divides the layers, else the middle stages hold
    ceil(L/pp) and the first and last share the rest (``schedule.stage_layers``). Where
    ``balanced`` (the ``stage_plan: balanced`` rows), the first and last stage's layers that
    balance the stages against the LM head's ``head`` and the embedding's ``embedding``
    layers' worth of work (per configuration: the priced times over a layer's;
    ``schedule.balanced_layers``): a different plan of the same three groups. Where
    ``v_shape`` (ZB-V, DualPipeV: rank r holds chunks r and 2p - 1 - r), the embedding and
    the loss both sit on rank 0; the last rank holds the V's turn.

    ``layout``: an explicit Megatron pipeline layout (``TrainingSpec.pipeline_layout``,
    :mod:`costmodel.pipeline_layout`) for the configurations whose pp x ``v`` (model chunks
    per rank) equals its stages (the rules reject the others; they keep the split above):
    every rank holds the layers of its chunks, the embedding rank 0, the loss rank pp - 1;
    middle ranks with equal layers (and MTP modules) form one group each, in rank order,
    represented by the first of them (the most micro-batches in flight). The plan then has
    more than three groups; a configuration without the layout has none in the extra ones."""
    n_first, n_mid, n_last, ok = stage_layers(float(num_layers), pp)
    if balanced is not None and np.any(balanced):
        b_first, b_mid, b_last, _ = balanced_layers(float(num_layers), pp, head, embedding)
        n_first = np.where(balanced, b_first, n_first)
        n_mid = np.where(balanced, b_mid, n_mid)
        n_last = np.where(balanced, b_last, n_last)
    single = pp == 1
    yes, no = np.ones(pp.shape, bool), np.zeros(pp.shape, bool)
    head_first = single if v_shape is None or not np.any(v_shape) else single | v_shape
    head_last = yes if v_shape is None or not np.any(v_shape) else ~v_shape
    first = StageGroup("first", np.zeros(pp.shape, np.int64), np.ones(pp.shape, np.int64),
                       n_first, yes, head_first, wins_time_ties=False)
    last = StageGroup("last", pp - 1, np.where(single, 0, 1), n_last, no, head_last,
                      wins_time_ties=True)
    # the second stage represents the middle ones: a full middle stage with one micro-batch
    # fewer in flight than the first; it holds the most when the first stage has fewer layers
    # (uneven split)
    middle = StageGroup("middle", np.minimum(1, pp - 1), np.maximum(pp - 2, 0), n_mid, no, no,
                        wins_time_ties=False)
    if layout is not None:
        use = fits_ranks(layout, pp, np.ones(pp.shape) if v is None else v)
        if v_shape is not None:
            use = use & ~v_shape
        if use.any():
            first, last, mids = _layout_groups(layout, pp, use, first, last, middle)
            return StagePlan(pp, (first, last, *mids), ok | use, v_shape)
    return StagePlan(pp, (first, last, middle), ok, v_shape)


def _layout_groups(layout: str, pp: np.ndarray, use: np.ndarray, first: StageGroup,
                   last: StageGroup, middle: StageGroup):
    """The first, last and middle-run groups of an explicit layout where ``use`` (the default
    groups elsewhere), for every pp of the batch that uses it."""
    per_pp = {}
    for p in np.unique(pp[use]):
        rl = rank_layout(layout, int(p))
        runs: list[list] = []  # [first rank, count, layers, mtp]
        for r in range(1, rl.pp - 1):
            key = (rl.layers[r], rl.mtp[r])
            if runs and (runs[-1][2], runs[-1][3]) == key:
                runs[-1][1] += 1
            else:
                runs.append([r, 1, *key])
        per_pp[int(p)] = (rl, runs)
    k = max(1, max(len(runs) for _, runs in per_pp.values()))
    zero_i = np.zeros(pp.shape, np.int64)
    f_layers, l_layers = first.layers.astype(float).copy(), last.layers.astype(float).copy()
    f_mtp, l_mtp = np.zeros(pp.shape), np.zeros(pp.shape)
    mids = [[middle.index.copy(), middle.count.copy(), middle.layers.astype(float).copy(),
             np.zeros(pp.shape)]] + [[zero_i.copy(), zero_i.copy(), np.zeros(pp.shape),
                                      np.zeros(pp.shape)] for _ in range(k - 1)]
    for p, (rl, runs) in per_pp.items():
        sel = use & (pp == p)
        f_layers[sel], f_mtp[sel] = rl.layers[0], rl.mtp[0]
        if rl.pp > 1:
            l_layers[sel], l_mtp[sel] = rl.layers[-1], rl.mtp[-1]
        for j in range(k):
            idx, cnt, lay, mt = (runs[j] if j < len(runs) else (min(1, rl.pp - 1), 0, 0, 0))
            mids[j][0][sel], mids[j][1][sel], mids[j][2][sel], mids[j][3][sel] = \
                idx, cnt, lay, mt
    first = replace(first, layers=f_layers, mtp=f_mtp)
    last = replace(last, layers=l_layers, mtp=l_mtp)
    no = np.zeros(pp.shape, bool)
    groups = tuple(StageGroup("middle" if j == 0 else f"middle{j + 1}", idx, cnt, lay, no, no,
                              wins_time_ties=False, mtp=mt)
                   for j, (idx, cnt, lay, mt) in enumerate(mids))
    return first, last, groups


def recomputed_layers(layers, n, v):
    """Layers a stage recomputes under Megatron-Core's block method: the first ``n`` of each
    of its ``v`` model chunks (``--recompute-method block --recompute-num-layers n``;
    TransformerBlock._checkpointed_forward), every layer where ``n`` is 0."""
    v = np.asarray(v, dtype=float)
    per_chunk = np.minimum(np.asarray(n, dtype=float), layers / v)
    return np.where(np.asarray(n) > 0, v * per_chunk, layers)


# ---- per-step gradient accumulation ---------------------------------------------------------
def accumulate_gradients(layer: LayerCosts, m, bf16_opt, tied_here) -> LayerCosts:
    """Charge the accumulation passes per micro-batch: AccumulateGrad on every micro-batch but
    a step's first; with BF16_Optimizer its fp32 update after every micro-batch instead. A
    tied output layer on the embedding's stage (pp = 1) is the same parameter: no update of
    its own, but autograd adds its gradient to the embedding's within every backward."""
    later = (m - 1.0) / m
    emb_hp, accum = layer.embedding_hp_grad_s, layer.embedding_grad_accum_s
    return layer.with_(
        backward_s=layer.backward_s + np.where(bf16_opt, layer.hp_grad_s,
                                               later * layer.grad_accum_s),
        embedding_s=layer.embedding_s + np.where(bf16_opt, emb_hp, later * accum),
        head_s=layer.head_s + np.where(tied_here, accum, np.where(bf16_opt, emb_hp,
                                                                  later * accum)))


# ---- pipeline point-to-point ----------------------------------------------------------------
@dataclass(frozen=True)
class PipelineComm:
    """Per micro-batch transfer time of the pipeline's stages, and what one transfer moves."""

    p2p_bytes: np.ndarray  # one activation (or its gradient) per TP rank
    p2p_s: np.ndarray  # one transfer
    regroup_s: np.ndarray  # the receiver's TP all-gather of a partitioned tensor
    edge_s: np.ndarray  # the first or the last stage's transfers and re-gathers
    middle_s: np.ndarray  # a middle stage's
    out_regroup_s: np.ndarray | float  # DeepSpeed's re-gather of a sent activation
    serial_s: np.ndarray  # the extra transfers of serial blocking p2p, middle stages

    def stage_s(self, g: StageGroup, pp) -> np.ndarray:
        """A stage group's transfers per micro-batch (0 without a pipeline)."""
        edge = g.embedding | g.head
        out = add_where(select(edge, self.edge_s, self.middle_s), ~g.head, self.out_regroup_s)
        return add_where(out, ~edge & (pp >= 3), self.serial_s)


def pipeline_comm(system, fw, comm, batch, groups, act_bytes, v, exposed=1.0
                  ) -> PipelineComm:
    """p2p per micro-batch with Megatron's scatter/gather optimisation (Narayanan et al. 2021
    4.1): each stage sends its TP rank's share of the b s h activation. ``exposed``: the
    share of each transfer the stage waits for (1; less where the interleaved schedule
    overlaps p2p with compute, TrainingSpec.overlap_p2p_comm)."""
    t = batch.tp.astype(float)
    p2p_bytes = act_bytes / np.where(batch.tp > 1, t, 1.0)  # scatter/gather optimisation
    pp_axis = Axis(batch.pp, np.where(groups.pp_crosses_nodes, 2, 1))
    p2p_one = price((Kernel("pp.p2p", P2P, nbytes=p2p_bytes, group="pp"),), None,
                    axes={"pp": pp_axis}, system=system)["pp.p2p"] * exposed
    # the receiver re-assembles the full tensor with an all-gather over the TP group
    # (Narayanan et al. 2021 4.1; DeepSpeed's partitioned pipe activations and gradients);
    # with sequence parallelism the tensor is already split along the sequence: no gather
    regroup = np.where((batch.tp > 1) & ~batch.sequence_parallel,
                       comm.time_s("allgather", act_bytes, batch.tp, groups.tp_nodes), 0.0)
    # per micro-batch: 2v transfers on every stage (activation out and gradient in on the
    # first, the reverse on the last); the first and last stage receive one tensor fewer
    # (2v - 1 re-gathers), a middle stage 2v
    pp_on = batch.pp > 1
    one = p2p_one  # the exposed share (``exposed``) is applied above
    edge = np.where(pp_on, 2.0 * v * one + (2.0 * v - 1.0) * regroup, 0.0)
    middle = np.where(pp_on, 2.0 * v * (one + regroup), 0.0)
    # DeepSpeed frees a sent activation's full tensor and re-gathers it from its partition for
    # the backward (PipelineEngine._exec_backward_pass: part_output.full()): one more
    # re-gather per micro-batch on every stage but the last
    out_regroup = np.where(pp_on, v * regroup, 0.0) if fw.pipeline.pipe_regather_output else 0.0
    # a middle stage of a framework with serial blocking p2p (DeepSpeed) pays 4 transfers
    # (serial transfers add no re-gathers)
    serial = (2.0 * v * one if fw.pipeline.serial_p2p else np.zeros(p2p_one.shape))
    return PipelineComm(p2p_bytes, p2p_one, regroup, edge, middle, out_regroup, serial)


# ---- per-stage micro-batch times --------------------------------------------------------------
@dataclass(frozen=True)
class StageTimes:
    """The stages' micro-batch times, reduced over the plan, and the slowest's components."""

    layer_s: np.ndarray  # one layer's micro-batch on the critical path (LayerCosts.total_s)
    stage_s: tuple[np.ndarray, ...]  # per group of the plan
    p2p_s: tuple[np.ndarray, ...]  # per group: its transfers
    first_s: np.ndarray  # the embedding's stage
    slowest_s: np.ndarray
    total_s: np.ndarray  # sum over all stages (one micro-batch through the pipeline)
    slowest_layers: np.ndarray  # the slowest stage's layers ...
    slowest_ends_s: np.ndarray  # ... its embedding and head ...
    slowest_p2p_s: np.ndarray  # ... and its transfers


@dataclass(frozen=True)
class PartialRecompute:
    """Megatron-Core's block method: ``n`` layers per model chunk recomputed (0: all), ``v``
    chunks per stage, and the layer's costs without recompute (``plain``)."""

    n: np.ndarray
    v: np.ndarray
    plain: LayerCosts

    def layers_s(self, layers, lt) -> np.ndarray:
        """A stage's layers: the recomputed ones at ``lt``, the others at the plain cost."""
        r = recomputed_layers(layers, self.n, self.v)
        return np.where(self.n > 0, r * lt + (layers - r) * self.plain.total_s, layers * lt)

    def recompute_share(self, layers) -> np.ndarray:
        """The share of a stage's layers that recompute."""
        with np.errstate(invalid="ignore", divide="ignore"):
            share = recomputed_layers(layers, self.n, self.v) / layers
        return np.where(self.n > 0, np.nan_to_num(share), 1.0)


def activation_offload_s(layer: LayerCosts, n, host_link_bytes_per_s) -> np.ndarray | None:
    """Megatron-Core's activation offload (``--cpu-offloading-num-layers n``, pp = 1): each
    offloaded layer's activations go to host memory during the forward and come back during
    the backward on a side stream, overlapped with the next layer's forward / the previous
    layer's backward; what a transfer takes beyond that window is on the critical path, per
    micro-batch (None where no configuration offloads)."""
    n = np.asarray(n)
    if not (n > 0).any():
        return None
    x = layer.full_activation_bytes / host_link_bytes_per_s
    per_layer = np.maximum(0.0, x - layer.forward_s) + np.maximum(0.0, x - layer.backward_s)
    return np.where(n > 0, n * per_layer, 0.0)


def stage_times(plan: StagePlan, layer: LayerCosts, pipe: PipelineComm,
                partial: PartialRecompute | None = None, offload_s=None) -> StageTimes:
    """For each stage of the plan (identical stages once, with their count): layers x the
    layer's micro-batch + embedding / head + transfers; running sum and maximum.
    ``offload_s``: activation offload's exposed transfers per micro-batch (pp = 1: on the
    embedding's stage, the only one)."""
    lt = layer.total_s
    pp = plan.pp
    stage_s, p2p_s = [], []
    slowest = total = sel_layers = sel_ends = sel_p2p = None
    for g in plan.groups:
        p2p = pipe.stage_s(g, pp)
        lay = g.layers * lt if partial is None else partial.layers_s(g.layers, lt)
        t = add_where(add_where(lay, g.embedding, layer.embedding_s), g.head,
                      layer.head_s) + p2p
        if offload_s is not None:
            t = add_where(t, g.embedding, offload_s)
        ends = add_where(select(g.embedding, layer.embedding_s), g.head, layer.head_s)
        stage_s.append(t)
        p2p_s.append(p2p)
        if slowest is None:  # the embedding's stage: every configuration has it
            slowest, total = t, t
            sel_layers, sel_ends, sel_p2p = g.layers, ends, p2p
            continue
        # an unrunnable configuration (an infinite stage time) gives an infinite span; the
        # inf - inf and 0 x inf on the way are expected, not warnings
        with np.errstate(invalid="ignore"):
            total = total + np.where(g.present, g.count * t, 0.0)
        here = g.present & ((t >= slowest) if g.wins_time_ties else (t > slowest))
        sel_layers = np.where(here, g.layers, sel_layers)
        sel_ends = np.where(here, ends, sel_ends)
        sel_p2p = np.where(here, p2p, sel_p2p)
        slowest = np.maximum(slowest, np.where(g.present, t, 0.0))
    return StageTimes(lt, tuple(stage_s), tuple(p2p_s), stage_s[0], slowest, total,
                      sel_layers, sel_ends, np.where(plan.single, 0.0, sel_p2p))


@dataclass(frozen=True)
class SteadyState:
    """The slowest stage's micro-batch split into terms (x m: the steady part of the span)."""

    compute_s: np.ndarray
    recompute_s: np.ndarray
    tp_comm_s: np.ndarray
    host_s: np.ndarray
    pp_comm_s: np.ndarray


def steady_state(st: StageTimes, layer: LayerCosts, steady_s, m,
                 partial: PartialRecompute | None = None) -> SteadyState:
    Ls = st.slowest_layers
    if partial is None:
        def mix(field):
            return Ls * getattr(layer, field)
    else:
        # the recomputed layers at the recompute costs, the others at the plain ones (their
        # forward's TP collectives and launches are not re-run either)
        share = partial.recompute_share(Ls)

        def mix(field):
            return Ls * (share * getattr(layer, field)
                         + (1.0 - share) * getattr(partial.plain, field))
    compute_mb = mix("forward_s") + mix("backward_s") + st.slowest_ends_s
    recompute_mb = Ls * layer.recompute_s
    if partial is not None:
        recompute_mb = recompute_mb * partial.recompute_share(Ls)
    tp_mb = mix("tp_comm_s")
    host_mb = mix("host_s")
    pp_steady = st.slowest_p2p_s
    # residual rounding (e.g. SP collectives inside emb/head) folds into compute (an
    # unrunnable configuration's infinite terms leave it NaN: its step time is inf)
    with np.errstate(invalid="ignore"):
        compute_mb = compute_mb + (steady_s / m - (compute_mb + recompute_mb + tp_mb + host_mb
                                                   + pp_steady))
    return SteadyState(compute_mb, recompute_mb, tp_mb, host_mb, pp_steady)


def expert_stage_params(plan: StagePlan, expert_per_layer: float, ep, etp
                        ) -> tuple[np.ndarray, ...]:
    """Each stage group's routed-expert parameters on one rank: layers x experts per layer
    / (ep etp) (the layers' average share of MoE layers; not divided by tp)."""
    return tuple(g.layers * expert_per_layer / (ep * etp) for g in plan.groups)


# ---- parameters per stage ---------------------------------------------------------------------
@dataclass(frozen=True)
class StageParams:
    """Parameters each stage group's ranks hold after TP partitioning (before ZeRO)."""

    per_group: tuple[np.ndarray, ...]
    largest: np.ndarray  # the largest stage's: what the DP collectives move
    layer: float  # one layer's parameters (unpartitioned)


def stage_params(plan: StagePlan, model, training, vocab, tp, layer_params=None
                 ) -> StageParams:
    """Layers / t, the word embedding / t and learned positions (replicated over TP) on the
    embedding's stage, the output layer / t (none when tied on one stage) and the final norm
    on the loss's. ``layer_params``: a MoE model's non-expert parameters per layer (its
    routed experts are sharded over ep x etp instead: :func:`expert_stage_params`)."""
    t = tp
    h = float(model.hidden_size)
    layer_params = float(model.params_per_layer if layer_params is None else layer_params)
    emb_params = vocab * h
    one_rank = plan.pp == 1 if plan.v_shape is None else (plan.pp == 1) | plan.v_shape
    head_params = np.where(model.tied_embeddings & one_rank, 0.0, vocab * h)
    pos_params = float(model.position_params(training.seq_length))
    norm_params = float(model.hidden_size * (2 if model.normalization == "layernorm" else 1))
    out, largest = [], None
    for g in plan.groups:
        psi = add_where(g.layers * layer_params / t, g.embedding, emb_params / t)
        psi = add_where(psi, g.embedding, pos_params)
        # the output layer and the final norm: added one by one on the loss's own stage, as
        # one term where the embedding's stage holds them too (pp = 1)
        alone, shared = g.head & ~g.embedding, g.head & g.embedding
        psi = add_where(add_where(psi, alone, head_params / t), alone, norm_params)
        psi = add_where(psi, shared, head_params / t + norm_params)
        out.append(psi)
        largest = psi if largest is None else np.maximum(largest, np.where(g.present, psi, 0.0))
    return StageParams(tuple(out), largest, layer_params)
