"""The data-parallel step: gradient reduction, ZeRO's gathers, the embedding sync, the
optimizer step.

Exposed DP time per ZeRO stage (Rajbhandari et al. 2020, arXiv:1910.02054; cost-model.md 5 and
6): the reduction overlaps the backward of the last micro-batch on the first stage (Megatron's
DDP buckets, ``overlap_grad_reduce``), ZeRO-2 reduce-scatters every micro-batch, ZeRO-3
gathers the parameters for every forward and backward. The optimizer step is memory bound on
the local shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.compute import memory_op_time_s
from costmodel.memory import GRAD_BYTES, PARAM_BYTES
from costmodel.specs import PRECISIONS

# Megatron's DDP bucket: max(40M, 1M x dp) elements (megatron/core/distributed).
DDP_BUCKET_ELEMENTS = 40e6
# HBM bytes per parameter of one optimizer step (Megatron-LM's mixed-precision optimizer):
# unscale + inf/NaN check of the fp32 grads (read 4, write 4), grad-norm for clipping (read 4),
# Adam (read master, m, v, grad: 16; write master, m, v: 12), copy master -> 16-bit params
# (read 4, write 2), zero the grad buffer (write 4): 50. fp32: no unscale, no copy: 36.
OPTIMIZER_STEP_BYTES = np.array([36.0, 36.0, 50.0, 50.0, 50.0])
# ... less with Megatron-Core's precision-aware optimizer (OPTIMIZER_DTYPES order): bf16
# moments read and write m and v in 2 bytes (8 fewer); bf16 main gradients also halve the
# gradient's unscale (read + write), norm, Adam read and zeroing (10 fewer)
OPTIMIZER_STEP_SAVED_BYTES = np.array([0.0, 8.0, 18.0])


def _fp16_main_grads(fw, prec):
    """Megatron-LM's fp16 training keeps (and all-reduces) fp16 main gradients: only bf16
    forces --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py)."""
    return fw.dp.fp16_grad_copy & (prec == PRECISIONS.index("fp16"))


def grad_wire_bytes(fw, prec, bf16_reduce: bool = False, optimizer_dtype=None):
    """Bytes per gradient element of the data-parallel reduction: the gradient buffer's own
    width (``GRAD_BYTES``), 16 bits for Megatron's fp16 main gradients and for the
    precision-aware optimizer's bf16 main gradients (``optimizer_dtype`` 2:
    ``--main-grads-dtype bf16``), and DeepSpeed's ``communication_data_type``
    (``FrameworkCosts.dp.grad_comm_bytes``) for 16-bit training. ``bf16_reduce``
    (TrainingSpec.grad_reduce_in_bf16): 16-bit training reduces in bf16."""
    pb, gb = PARAM_BYTES[prec], GRAD_BYTES[prec]
    wire = np.where((fw.dp.grad_comm_bytes > 0) & (pb < 4.0), fw.dp.grad_comm_bytes, gb)
    wire = np.where(bf16_reduce & (pb < 4.0), 2.0, wire)
    wire = np.where(_fp16_main_grads(fw, prec), 2.0, wire)
    if optimizer_dtype is not None:
        wire = np.where(np.asarray(optimizer_dtype) == 2, 2.0, wire)
    return wire


def uses_bf16_optimizer(fw, prec, z):
    """DeepSpeed's BF16_Optimizer: bf16 weights (bf16 training, and fp8, whose DeepSpeed config
    is the bf16 one) with ZeRO 0/1. It all-reduces the gradients (pipe engine
    _bf16_reduce_grads -> buffered_allreduce_fallback) and then gathers its updated partition."""
    bf16_weights = (prec == PRECISIONS.index("bf16")) | (prec == PRECISIONS.index("fp8"))
    return fw.dp.bf16_fp32_grads & bf16_weights & (z <= 1)


@dataclass(frozen=True)
class Sharding:
    """How the optimizer shards over DP: ZeRO stage as the model sees it, and the optimizer."""

    zero: np.ndarray  # ZeRO stage; DeepSpeed's BF16_Optimizer counts as ZeRO-1
    bf16_optimizer: np.ndarray
    dp: np.ndarray  # d (float)
    # FSDP2 under a pipeline schedule (torchtitan): gathered once per step, kept unsharded
    # with unsharded fp32 gradients until the last micro-batch's backward reduce-scatters them
    gather_once: np.ndarray | None = None

    @property
    def once(self) -> np.ndarray:
        return np.zeros(self.zero.shape, bool) if self.gather_once is None else self.gather_once


def sharding(fw, prec, zero_stage, dp, pp=None) -> Sharding:
    # DeepSpeed's BF16_Optimizer shards its fp32 master weights and Adam moments over DP and
    # gathers the updated bf16 weights at ZeRO 0 as at 1 (it is what DeepSpeed runs for bf16
    # without the ZeRO optimizer; bf16_optimizer.py partitions by the DP group's size): a
    # ZeRO-1 for the model
    bf16_opt = uses_bf16_optimizer(fw, prec, zero_stage)
    # FSDP2 with pipeline parallelism as torchtitan runs it: fsdp_reshard_after_forward
    # "default" does not reshard under PP ("to avoid per-microbatch all-gathers",
    # torchtitan models/llama3/infra/parallelize.py), and torch.distributed.pipelining's stage
    # sets requires_gradient_sync / reshard_after_backward only for the last micro-batch's
    # backward (stage.py backward_maybe_with_nosync): one all-gather and one reduce-scatter
    # per step; FSDP2 accumulates the unsynced gradients unsharded in the reduce dtype (fp32).
    # Megatron-FSDP keeps its per-micro-batch gathers (the ZeRO-3 branch below).
    once = None
    if pp is not None and fw.dp.fp32_flat_shard:
        once = (np.asarray(zero_stage) >= 3) & (np.asarray(pp) > 1)
    return Sharding(np.where(bf16_opt, 1, zero_stage), bf16_opt, dp.astype(float), once)


@dataclass(frozen=True)
class DataParallelStep:
    """The DP collectives of one step and their exposed time, the embedding sync, the
    optimizer step (arrays over the configurations)."""

    grad_bytes: np.ndarray  # the largest stage's gradients on the wire
    bucket_bytes: np.ndarray  # the last DDP bucket, reduced after the backward
    gather_bytes: np.ndarray  # the largest stage's parameters, all-gathered
    reduce_collective: np.ndarray  # True: all-reduce; False: reduce-scatter
    reduce_s: np.ndarray  # the whole reduction of grad_bytes, once
    bucket_s: np.ndarray  # the last bucket's
    gather_s: np.ndarray  # the all-gather of gather_bytes, once
    exposed_s: np.ndarray
    total_s: np.ndarray  # the whole DP reduction, exposed or not
    embedding_sync_s: np.ndarray
    optimizer_s: np.ndarray


def _exposed(comm_s, window_s, eff):
    return (np.maximum(0.0, comm_s - window_s)
            + (1.0 - eff.overlap_hidden) * np.minimum(comm_s, window_s))


def data_parallel_step(comm, batch, groups, fw, eff, training, sh: Sharding, psi_max,
                       first_layers, layer, steady, m, vocab, hidden_size, tied, bandwidth
                       ) -> DataParallelStep:
    prec, z, d, bf16_opt = batch.precision, sh.zero, sh.dp, sh.bf16_optimizer
    pb = PARAM_BYTES[prec]
    if training.fp8_param_gather:  # the gathered weights travel as fp8 (1 byte)
        pb = np.where(prec == PRECISIONS.index("fp8"), 1.0, pb)
    dp_n, dp_nodes = batch.dp, groups.dp_nodes
    # bytes per gradient on the wire (FrameworkCosts.dp.grad_comm_bytes: DeepSpeed reduces 16-bit
    # gradients in the training dtype)
    gcomm = grad_wire_bytes(fw, prec, training.grad_reduce_in_bf16,
                            batch.precision_aware_optimizer)
    grad_bytes = psi_max * gcomm
    t_ar = comm.time_s("allreduce", grad_bytes, dp_n, dp_nodes)
    t_rs = comm.time_s("reducescatter", grad_bytes, dp_n, dp_nodes)
    t_ag = comm.time_s("allgather", psi_max * pb, dp_n, dp_nodes)
    bucket = np.minimum(grad_bytes, np.maximum(DDP_BUCKET_ELEMENTS, 1e6 * d) * gcomm)
    # gradients all-reduced: plain DP, and DeepSpeed's BF16_Optimizer at ZeRO-1
    all_reduce = (z == 0) | bf16_opt
    t_bucket = np.where(all_reduce, comm.time_s("allreduce", bucket, dp_n, dp_nodes),
                        comm.time_s("reducescatter", bucket, dp_n, dp_nodes))
    # backward of the last micro-batch on the first stage, with its recomputed forwards (the
    # gradient buckets fill over both)
    window_b = first_layers * (layer.backward_s + layer.recompute_s)
    window_f = first_layers * layer.forward_s
    reduce_t = np.where(all_reduce, t_ar, t_rs)
    if training.overlap_grad_reduce:
        hidden = 1.0 - eff.overlap_hidden  # share of overlapped communication still paid
        exposed_reduce = (np.maximum(0.0, reduce_t - window_b) + np.minimum(t_bucket, reduce_t)
                          + hidden * np.minimum(reduce_t, window_b))
        exposed_gather = np.maximum(0.0, t_ag - window_f) + hidden * np.minimum(t_ag, window_f)
    else:
        exposed_reduce = reduce_t
        exposed_gather = t_ag
    # ZeRO-3: parameters gathered for forward and backward of every micro-batch, gradients
    # reduce-scattered per micro-batch, prefetched one layer ahead (FSDP / DeepSpeed stage 3).
    z3_mb = 2.0 * t_ag + t_rs
    z3_window = steady.compute_s + steady.recompute_s
    z3_exposed = (m * _exposed(z3_mb, z3_window, eff) + t_ag / np.maximum(first_layers, 1))
    # ZeRO-2: gradients are sharded, so they are reduce-scattered every micro-batch (DeepSpeed
    # stage 2, Megatron-FSDP optim_grads), overlapped with that micro-batch's backward;
    # PyTorch FSDP's SHARD_GRAD_OP also reshards the parameters after each backward and
    # gathers them again for the next micro-batch's forward (FrameworkCosts.dp.zero2_regather)
    z2_window = first_layers * (layer.backward_s + layer.recompute_s)
    z2_gathers = np.where(fw.dp.zero2_regather, m, 1.0)
    z2_exposed = m * _exposed(t_rs, z2_window, eff) + z2_gathers * exposed_gather
    # FSDP2 under PP: one gather before the first forward, one reduce-scatter in the last
    # backward (Sharding.gather_once), exposed as the distributed optimizer's are
    once = sh.once
    z3_exposed = np.where(once, exposed_reduce + exposed_gather, z3_exposed)
    z3_mb_total = np.where(once, reduce_t + t_ag, m * z3_mb)
    dp_exposed = np.where(z >= 3, z3_exposed,
                          np.where(z == 2, z2_exposed,
                                   np.where(z == 1, exposed_reduce + exposed_gather,
                                            exposed_reduce)))
    dp_exposed = np.where(batch.dp > 1, dp_exposed, 0.0)
    dp_total = np.where(batch.dp > 1,
                        np.where(z >= 3, z3_mb_total,
                                 np.where(z == 2, m * t_rs + z2_gathers * t_ag,
                                          np.where(z == 1, reduce_t + t_ag, t_ar))), 0.0)

    # tied embeddings: the word-embedding gradient is all-reduced between first and last stage
    t = batch.tp.astype(float)
    tied_sync = np.zeros_like(t)
    if tied:
        tied_sync = np.where(batch.pp > 1,
                             comm.time_s("allreduce", vocab * hidden_size / t * gcomm, 2,
                                         np.where(groups.pp_crosses_nodes, 2, 1)), 0.0)

    # ---- optimizer step (memory bound on the local shard) ----------------------------------
    psi_opt = psi_max / np.where(z >= 1, d, 1.0)
    step_bytes = (OPTIMIZER_STEP_BYTES[prec]
                   - OPTIMIZER_STEP_SAVED_BYTES[batch.precision_aware_optimizer])
    t_opt = memory_op_time_s(psi_opt * step_bytes,
                             mem_bandwidth_bytes_per_s=bandwidth, eff=eff, n_kernels=8.0)
    return DataParallelStep(grad_bytes, bucket, psi_max * pb, all_reduce, reduce_t, t_bucket,
                            t_ag, dp_exposed, dp_total, tied_sync, t_opt)
