"""Megatron-Core's expert-parallel communication overlap (``--overlap-moe-expert-parallel-comm``).

With the flag, Megatron-Core (core_v0.16.1 ``pipeline_parallel/combined_1f1b.py``,
``models/gpt/fine_grained_callables.py``) runs the steady state of its schedule as *combined
1F1B* steps: one micro-batch's forward and another's backward through the same layer, split
into sub-modules (attention, dispatch, experts, combine) whose compute runs on one stream
while the other micro-batch's all-to-all runs on a second: DeepSeek-V3's DualPipe overlap of
computation and communication within a pair of chunks (DeepSeek-V3 technical report
section 3.2.1), without DualPipe's bidirectional pipeline. Per layer and pair
(``TransformerLayerSchedulePlan.run``) the four all-to-alls of a micro-batch sit in four
windows of the other's compute:

- the backward's combine under the forward's attention block;
- the forward's dispatch under the backward's experts (data and weight gradients: without
  ``--delay-wgrad-compute``, which paraplan does not emit, ``backward_dw`` returns at once
  and the experts' backward computes both, ``fine_grained_callables.py``);
- the backward's dispatch under the forward's experts;
- the forward's combine under the backward's attention block.

Each window hides what its compute covers, less the compute the dispatcher's SMs take while
they run: the covered time is paid again at :data:`EP_COMM_SMS` over the GPU's SMs (the
compute runs on the rest); what exceeds its window stays on the critical path.

Unpaired passes keep their all-to-all exposed: with no pipeline, the first micro-batch's
forward and the last one's backward (``combined_1f1b_schedule_for_no_pipelining``); with
the interleaved schedule, rank 0's warm-up forwards and the matching cool-down backwards,
``2 (p - 1) + (v - 1) p + 1`` of its ``m v`` chunk passes (``get_pp_rank_microbatches``:
the interleaved warm-up plus the one extra forward the overlap schedules), applied to every
rank (rank 0 has the most: an upper bound elsewhere). Approximations: with an explicit
layout of uneven chunks Megatron pairs only the layers both chunks have
(``model_chunk_schedule_plan.py``); the layer here is the model's average.

Where Megatron runs it (only Megatron-Core has the flag: the ``megatron`` framework; core_v0.16.1 ``TransformerConfig.__post_init__`` asserts, and
``schedules.py``): ep > 1; the alltoall or flex dispatcher (paraplan's two); no full
recompute and no recompute method (partial recompute); a bf16 or fp16 model; pp = 1 or the interleaved schedule
(a virtual pipeline size is required when pp > 1); no CUDA graph of the MoE block or of the
whole iteration (only ``transformer_engine`` graphs without the ``moe`` / ``mlp`` scopes are
allowed: :attr:`TrainingSpec.moe_cuda_graph` marks the ones it refuses). Elsewhere the
flag is not applied and the all-to-all stays exposed, as without it."""

from __future__ import annotations

import numpy as np

from costmodel.schedule import INTERLEAVED
from costmodel.specs import Precision, Recompute

#: SMs the all-to-all kernels hold while they overlap compute: DeepSeek-V3's 20 of the H800's
#: 132 (DeepSeek-V3 technical report, sections 3.2.2 and 3.5.1), Megatron's historical
#: ``--moe-deepep-num-sms`` default (modern-training.md section 2); HybridEP's figures use
#: 8-16 and NCCL's all-to-all its channels, so one number for every dispatcher
EP_COMM_SMS = 20.0


def _exposed(comm_s, window_s, held: float) -> np.ndarray:
    """What a window of compute leaves of an overlapped all-to-all: the part it cannot
    cover, plus the covered time the compute loses to the SMs the all-to-all holds."""
    return np.maximum(0.0, comm_s - window_s) + held * np.minimum(comm_s, window_s)


#: Megatron-Core core_v0.16.1's conditions for the overlap, per configuration: (what it
#: needs, the test on a batch and its chunks per rank ``v``). ``TransformerConfig
#: .__post_init__`` asserts ep > 1, recompute_granularity != 'full', recompute_method and
#: recompute_num_layers None (paraplan's partial recompute is full recompute on N layers
#: with the block method), bf16 or fp16 (paraplan's fp8 runs in bf16: ``--bf16`` with
#: ``--fp8-format``, optimizer/launch/flags.py), and a virtual pipeline size when pp > 1
#: (the interleaved schedule with v > 1). The alltoall/flex dispatcher holds for paraplan's
#: two.
_RULES = (
    ("ep > 1 (expert parallelism)", lambda b, v: b.ep > 1),
    ("no full recompute", lambda b, v: b.recompute != Recompute.FULL),
    ("no partial recompute (recompute_num_layers 0)", lambda b, v: b.recompute_num_layers == 0),
    ("a bf16 or fp16 model (precision bf16, fp16 or fp8)",
     lambda b, v: np.isin(b.precision, (Precision.BF16, Precision.FP16, Precision.FP8))),
    ("pp = 1 or the interleaved schedule with virtual_stages > 1",
     lambda b, v: (b.pp == 1) | ((b.schedule == INTERLEAVED) & (np.asarray(v) > 1))),
)

#: only Megatron-Core has the flag
_FRAMEWORK_RULE = ("the megatron framework (Megatron-Core's flag; torchtitan and DeepSpeed "
                   "have none)")

#: why a CUDA-graphed MoE block refuses it (core_v0.16.1 ``TransformerConfig.__post_init__``)
_GRAPH_RULE = ("no CUDA graph of the MoE block or the whole iteration (moe_cuda_graph)")


def ep_overlap_applies(training, batch, v) -> np.ndarray:
    """Per configuration: whether Megatron-Core runs the overlap (the module docstring's
    conditions, :data:`_RULES`) when ``training.moe_ep_overlap`` asks for it."""
    n = len(batch)
    if not training.moe_ep_overlap or training.moe_cuda_graph \
            or training.framework != "megatron":
        return np.zeros(n, bool)
    out = np.ones(n, bool)
    for _, test in _RULES:
        out &= np.asarray(test(batch, v), bool)
    return out


def _one(config):
    """A batch of one configuration and its ``v`` (the virtual stages: the rules read them
    only under the interleaved schedule)."""
    from costmodel.batch import ConfigBatch

    batch = ConfigBatch.from_configs([config])
    return batch, batch.virtual_stages


def applies_to(training, config) -> bool:
    """:func:`ep_overlap_applies` of one :class:`ParallelConfig` (a batch of one)."""
    batch, v = _one(config)
    return bool(ep_overlap_applies(training, batch, v)[0])


def conditions() -> list[str]:
    """Every condition Megatron-Core sets on the overlap, as :func:`unmet` words them."""
    return [_FRAMEWORK_RULE, _GRAPH_RULE] + [need for need, _ in _RULES]


def unmet(training, config) -> list[str]:
    """What one configuration lacks of the conditions (empty where the overlap applies or
    is not asked for): the same tests as :func:`ep_overlap_applies`."""
    if not training.moe_ep_overlap:
        return []
    batch, v = _one(config)
    out = [_GRAPH_RULE] if training.moe_cuda_graph else []
    if training.framework != "megatron":
        out.append(_FRAMEWORK_RULE)
    return out + [need for need, test in _RULES if not bool(np.asarray(test(batch, v))[0])]


def unpaired_share(batch, m, v) -> np.ndarray:
    """The share of a rank's chunk passes (forward or backward) the combined 1F1B steps do
    not pair: 1 / m without a pipeline; rank 0's warm-up over its m v passes interleaved."""
    m = np.maximum(np.asarray(m, dtype=float), 1.0)
    v = np.asarray(v, dtype=float)
    p = batch.pp.astype(float)
    warmup = np.where(p > 1, 2.0 * (p - 1.0) + (v - 1.0) * p + 1.0, 1.0)
    return np.minimum(warmup / (m * np.where(p > 1, v, 1.0)), 1.0)


def exposed_ep_s(layer, ep_comm_s, applies, unpaired, sm_count: float) -> np.ndarray:
    """The all-to-all per layer and micro-batch left on the critical path: ``ep_comm_s``
    where the overlap does not apply; else the unpaired share of it in full plus, for the
    paired passes, each of its four quarters through its window (module docstring).
    ``layer``: :class:`costmodel.layers.LayerCosts` (its MoE share of the passes);
    ``sm_count``: the GPU's SMs (:attr:`GPUSpec.sm_count`)."""
    a = np.asarray(ep_comm_s, dtype=float)
    quarter = 0.25 * a
    moe_f, moe_b = layer.moe_forward_s, layer.moe_backward_s
    attn_f = np.maximum(layer.forward_s - moe_f, 0.0)
    attn_b = np.maximum(layer.backward_s - moe_b, 0.0)
    windows = (attn_f, moe_b, moe_f, attn_b)
    held = min(EP_COMM_SMS / max(float(sm_count), EP_COMM_SMS), 1.0)
    paired = sum(_exposed(quarter, w, held) for w in windows)
    out = unpaired * a + (1.0 - unpaired) * paired
    return np.where(applies, out, a)


__all__ = ["EP_COMM_SMS", "applies_to", "conditions", "ep_overlap_applies", "exposed_ep_s", "unmet",
           "unpaired_share"]
