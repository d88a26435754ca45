"""Metrics: the step's time breakdown, throughput, MFU, memory, as :class:`Scores`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.compute import model_flops_per_step


@dataclass(frozen=True)
class Scores:
    """Per-configuration results, each an array of the batch's length."""

    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    samples_per_s: np.ndarray
    mfu: np.ndarray  # model FLOPs over the bf16 dense peak (fp16 where a GPU has no bf16)
    peak_memory_bytes: np.ndarray  # what must fit: the larger of the backward and the step
    observed_memory_bytes: np.ndarray  # nvidia-smi's maximum: the step's copy on the cache
    time_breakdown_s: dict[str, np.ndarray]
    memory_breakdown_bytes: dict[str, np.ndarray]
    microbatches: np.ndarray
    bubble_share: np.ndarray  # pipeline bubble / step time
    stage_imbalance: np.ndarray  # slowest stage / mean stage, per micro-batch
    tp_crosses_nodes: np.ndarray
    dp_comm_total_s: np.ndarray  # the whole DP reduction, exposed or not
    # model FLOPs over the dense peak of the training precision (fp8 runs: the fp8 peak; equal
    # to ``mfu`` for bf16 runs)
    low_precision_utilization: np.ndarray
    # PyTorch's view of the memory peak: live tensors (torch.cuda.max_memory_allocated) and
    # what the caching allocator holds (max_memory_reserved: allocated + the fragmentation
    # reserve, which depends on TrainingSpec.expandable_segments); peak_memory_bytes adds
    # NCCL's own buffers and the CUDA context and is what the memory verdict compares
    allocated_memory_bytes: np.ndarray
    reserved_memory_bytes: np.ndarray

    def __len__(self) -> int:
        return int(self.step_time_s.shape[0])

    @staticmethod
    def concat(parts: Sequence[Scores]) -> Scores:
        """Scores of consecutive sub-batches, joined in order."""
        if len(parts) == 1:
            return parts[0]
        cat = {}
        for name in Scores.__dataclass_fields__:
            first = getattr(parts[0], name)
            if isinstance(first, dict):
                cat[name] = {k: np.concatenate([getattr(p, name)[k] for p in parts])
                             for k in first}
            else:
                cat[name] = np.concatenate([getattr(p, name) for p in parts])
        return Scores(**cat)

    def row(self, i: int) -> dict:
        """Plain-Python metrics of configuration ``i`` (the JSON ``metrics`` object)."""
        return {
            "step_time_s": float(self.step_time_s[i]),
            "tokens_per_s": float(self.tokens_per_s[i]),
            "samples_per_s": float(self.samples_per_s[i]),
            "mfu": float(self.mfu[i]),
            "low_precision_utilization": float(self.low_precision_utilization[i]),
            "peak_memory_bytes": float(self.peak_memory_bytes[i]),
            "observed_memory_bytes": float(self.observed_memory_bytes[i]),
            "allocated_memory_bytes": float(self.allocated_memory_bytes[i]),
            "reserved_memory_bytes": float(self.reserved_memory_bytes[i]),
            "microbatches_per_step": int(self.microbatches[i]),
            "bubble_share": float(self.bubble_share[i]),
            "stage_imbalance": float(self.stage_imbalance[i]),
            "tp_crosses_nodes": bool(self.tp_crosses_nodes[i]),
            "time_breakdown_s": {k: float(v[i]) for k, v in self.time_breakdown_s.items()},
            "memory_breakdown_bytes": {k: float(v[i])
                                       for k, v in self.memory_breakdown_bytes.items()},
        }


def stage_imbalance(plan, st, layer, num_layers: float, partial=None) -> np.ndarray:
    """Slowest stage / the mean over stages of the true work: L layers (not p x ceil(L/p)),
    embedding, LM head and every stage's transfers. With partial recompute
    (``costmodel.stages.PartialRecompute``) the layers do not all cost ``st.layer_s``: the
    work is then the stages' own sum (``st.total_s``)."""
    work = num_layers * st.layer_s + layer.embedding_s + layer.head_s
    for g, p2p in zip(plan.groups, st.p2p_s, strict=True):
        work = work + g.count * np.where(g.present, p2p, 0.0)
    if partial is not None:
        work = np.where(partial.n > 0, st.total_s, work)
    mean = np.where(plan.single, st.first_s, work / plan.pp.astype(float))
    return st.slowest_s / mean


def scores(model, training, plan, layer, st, steady, timeline, dp, mem, groups, m,
           peak_flops_per_s, eff, n_gpus, reference_peak_flops_per_s, partial=None) -> Scores:
    """The step's metrics; ``mfu`` over ``reference_peak_flops_per_s`` (the bf16 dense peak,
    as NVIDIA and Meta report MFU), ``low_precision_utilization`` over the training
    precision's own peak ``peak_flops_per_s``."""
    span, bubble = timeline.span_s, timeline.bubble_s
    step = span + dp.exposed_s + dp.embedding_sync_s + dp.optimizer_s + eff.step_overhead_s
    # context parallelism's attention communication on the critical path, taken out of the
    # passes it sits in (0 where cp = 1: compute and recompute stay bit for bit)
    # (with partial recompute only the recomputed layers' share of it: steady.recompute_s is
    # already that share of the layers' recompute; 1 exactly without partial recompute)
    full_rc = st.slowest_layers * layer.recompute_s
    with np.errstate(invalid="ignore", divide="ignore"):
        rc_share = np.where(np.isfinite(full_rc) & (full_rc > 0),
                            steady.recompute_s / np.where(full_rc > 0, full_rc, 1.0), 1.0)
    cp_rc = m * (st.slowest_layers * layer.cp_recompute_s) * rc_share
    cp_fb = m * (st.slowest_layers * (layer.cp_comm_s - layer.cp_recompute_s))
    times = {
        "compute": m * steady.compute_s - cp_fb,
        "recompute": m * steady.recompute_s - cp_rc,
        "cp_comm": cp_fb + cp_rc,
        "tp_comm": m * steady.tp_comm_s,
        "host_overhead": m * steady.host_s,
        "pp_comm": m * steady.pp_comm_s,
        "pipeline_bubble": bubble,
        "dp_comm_exposed": dp.exposed_s,
        "embedding_sync": dp.embedding_sync_s,
        "optimizer": dp.optimizer_s,
        "overhead": np.full_like(m, eff.step_overhead_s),
    }
    B, s = float(training.global_batch_size), float(training.seq_length)
    flops = model_flops_per_step(model, training.seq_length, training.global_batch_size)
    with np.errstate(invalid="ignore", divide="ignore"):
        imbalance = stage_imbalance(plan, st, layer, float(model.num_layers), partial)
        step = np.where(np.isfinite(step), step, np.inf)
        return Scores(
            step_time_s=step,
            tokens_per_s=B * s / step,
            samples_per_s=B / step,
            mfu=flops / (step * n_gpus * reference_peak_flops_per_s),
            peak_memory_bytes=mem.peak_bytes,
            observed_memory_bytes=mem.observed_bytes,
            time_breakdown_s=times,
            memory_breakdown_bytes=mem.breakdown_bytes,
            microbatches=m,
            bubble_share=bubble / step,
            stage_imbalance=imbalance,
            tp_crosses_nodes=groups.tp_nodes > 1,
            dp_comm_total_s=dp.total_s,
            low_precision_utilization=flops / (step * n_gpus * peak_flops_per_s),
            allocated_memory_bytes=mem.allocated_bytes,
            reserved_memory_bytes=mem.reserved_bytes,
        )
