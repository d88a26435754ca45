"""Memory per pipeline stage: model states, activations in flight, the loss's buffers, the
optimizer step's copies, engine buffers and the allocator's reserve; the peak is the stage
that holds the most.

Sources: model states by ZeRO stage (Rajbhandari et al. 2020) in :mod:`costmodel.memory`;
activations per layer (Korthikanti et al. 2022 eq. 1) and micro-batches in flight per stage
(:func:`costmodel.memory.microbatches_in_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.data_parallel import Sharding, _fp16_main_grads, grad_wire_bytes
from costmodel.layers import LayerCosts
from costmodel.memory import (
    GRAD_BYTES,
    OPTIMIZER_BYTES,
    PARAM_BYTES,
    microbatches_in_flight,
    model_state_bytes,
)
from costmodel.schedule import GPIPE
from costmodel.shard import Shard
from costmodel.specs import PRECISIONS, GPUSpec, TrainingSpec
from costmodel.stages import StageGroup, StageParams, StagePlan, recomputed_layers, select

# Transformer Engine's quantised weight copies, bytes per element and orientation: fp8 data
# (1) and, for the block-scaled recipes, their scales: MXFP8 one E8M0 byte per 32 elements,
# NVFP4 4-bit data (0.5) and one E4M3 byte per 16 elements, blockwise fp8 one fp32 per
# 128 x 128 weight block (modern-training.md 5.1; TE recipe/__init__.py)
FP8_COPY_BYTES = {"delayed": 1.0, "tensorwise": 1.0, "blockwise": 1.0 + 4.0 / (128 * 128),
                  "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}
# Blackwell (compute capability 10.x): its fp8 GEMMs read a per-tensor-scaled operand in
# either orientation, so no transposed copy is kept (modern-training.md 5.1, TE
# performance_considerations.rst)
BLACKWELL_COMPUTE_CAPABILITY = 100
# DeepSpeed's gradient all-reduce gathers tensors into one flat buffer until it holds more
# than this many elements (engine.py allreduce_no_retain, pipe engine MEMORY_OPT_ALLREDUCE_SIZE)
DEEPSPEED_ALLREDUCE_ELEMENTS = 5e8


def fp8_weight_copy_bytes(recipe: str, compute_capability: int) -> float:
    """Bytes per linear-layer parameter of Transformer Engine's quantised weight copies
    (te.Linear's fp8 workspaces, cached across a step's micro-batches while
    is_first_microbatch is False; with ``--fp8-param-gather`` the parameter itself).

    The forward GEMM reads the weight rowwise, the data-gradient GEMM columnwise. Per-tensor
    scaling (delayed, tensorwise): on Hopper the columnwise operand is a physically transposed
    fp8 copy (1 + 1 byte); Blackwell reads one copy either way (1 byte). The block-scaled
    recipes quantise each orientation with its own scales (a quantised tensor and its
    transpose differ: modern-training.md 5.1), so both copies exist on every GPU: MXFP8
    2 x (1 + 1/32) = 2.06, NVFP4 2 x (0.5 + 1/16) = 1.125, blockwise fp8 2 x (1 + 4/128^2)."""
    per = FP8_COPY_BYTES[recipe]
    both = recipe in ("mxfp8", "nvfp4", "blockwise") or \
        compute_capability < BLACKWELL_COMPUTE_CAPABILITY
    return per * (2.0 if both else 1.0)


def gradient_bytes(fw, prec, pb, gb, z, d, bf16_opt, bf16_reduce: bool = False):
    """Gradient bytes per parameter as the framework's optimizer holds them: (the bytes
    ``model_state_bytes`` shards from ZeRO-2 on, the bytes already divided by d where ZeRO-1
    shards them). The optimizer states stay ``OPTIMIZER_BYTES``.

    Megatron-LM: fp32 main gradients (``GRAD_BYTES``), except fp16 training, which keeps fp16
    main gradients and copies the local gradients (or the distributed optimizer's shard) to
    fp32 for the step: 2 + 4 / d (``FrameworkCosts.dp.fp16_grad_copy``; the 20 and 4 + 16/d of
    cost-model.md 4.2). DeepSpeed: bf16 weights (bf16, and fp8,
    whose DeepSpeed config is the bf16 one) with ZeRO 0/1 run BF16_Optimizer, bf16 gradients
    beside an unsharded fp32 accumulation buffer (2 + 4; deepspeed/runtime/bf16_optimizer.py
    fp32_groups_gradients_flat); other 16-bit training runs the ZeRO optimizer (or
    FP16_Optimizer without ZeRO): 16-bit gradients (2) and, for the step, an fp32 copy of the
    local gradient partition (4 / d) next to the fp32 master weights and Adam moments (12 / d).
    With the weights that is DeepSpeed's own estimate (cost-model.md 4.3): 4 + 16/d at ZeRO-1
    (older estimate_zero2_model_states_mem_needs), 2 + 18/d at ZeRO-2 (current: 18 = 2 grads16
    + 4 grads32 + 4 params32 + 8 Adam).
    """
    sixteen = pb < 4.0
    zero16 = (fw.dp.zero_grad16 & sixteen & ~bf16_opt) | _fp16_main_grads(fw, prec)
    if bf16_reduce:
        # Megatron's --grad-reduce-in-bf16 leaves --accumulate-allreduce-grads-in-fp32 off:
        # the DDP gradient buffer takes the parameters' 16-bit dtype, and the (distributed)
        # optimizer copies its shard to fp32 for the step, as in fp16 training (2 + 4 / d)
        zero16 = zero16 | (fw.dp.fp16_grad_copy & sixteen)
    gm = np.where(bf16_opt, 6.0, np.where(zero16, 2.0, gb))
    g_part = np.where(zero16, 4.0, 0.0) / np.where(z >= 1, d, 1.0)
    return gm, g_part


def reduce_copy_bytes(bf16_opt, gcomm, g_part, psi):
    """Bytes per local parameter that exist only after the backward, for the gradient
    reduction and the optimizer step, on top of the model states: the fp32 copy of the local
    16-bit gradient partition (``g_part``, see :func:`gradient_bytes`), or, with DeepSpeed's
    BF16_Optimizer, the all-reduce's copies of its fp32 gradient buffer.

    BF16_Optimizer hands its flat fp32 gradient buffer, one per parameter group, to the
    engine's all-reduce (pipe/engine.py _bf16_reduce_grads -> buffered_allreduce_fallback),
    which casts each bucket to ``communication_data_type`` before reducing it
    (engine.py allreduce_bucket: ``tensor.to(self.communication_data_type)``, bf16 for bf16
    training without ZeRO), a copy of ``gcomm`` bytes per parameter while the fp32 buffer
    lives on. A group's buffer larger than the bucket size is reduced alone, as a view; below
    it, the two groups (with and without weight decay) are first concatenated into a new
    fp32 tensor, 4 bytes more. DeepSpeed decides that on the decay group's size; the model on
    the stage's parameters, the no-decay group (biases and norms) being small beside it.

    Read from DeepSpeed 0.6.3, the first release with BF16_Optimizer (2022-04), whose
    pipeline engine runs it at ZeRO stage 0 (it shards its fp32 states over DP itself) and
    refuses bf16 with ZeRO 1. BLOOM's Feb-2022 rows, which record "ZeRO 1" and "new
    BF16_Optimizer", ran a pre-release of it; the model assumes it reduced the same way.
    """
    small = psi <= DEEPSPEED_ALLREDUCE_ELEMENTS
    cast = np.where(gcomm < 4.0, gcomm, 0.0) + np.where(small, 4.0, 0.0)
    return np.where(bf16_opt, cast, g_part)


@dataclass(frozen=True)
class StageMemory:
    """One stage group's bytes per GPU in its two phases: the backward's peak and the step."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer_states: np.ndarray
    activations: np.ndarray
    logits: np.ndarray
    step_copy: np.ndarray  # the fp32 gradient copy (or BF16_Optimizer's cast) of the step
    reserve_backward: np.ndarray  # the allocator's fragmented reserve at the backward's peak
    reserve_step: np.ndarray  # ... and during the optimizer step
    backward: np.ndarray  # states + activations + logits + reserve
    step: np.ndarray  # states + step copy + reserve

    @property
    def peak(self) -> np.ndarray:
        return np.maximum(self.backward, self.step)

    @property
    def in_step(self) -> np.ndarray:
        """Whether the optimizer step, not the backward, sets the stage's peak."""
        return self.step > self.backward


@dataclass(frozen=True)
class MemoryContext:
    """What every stage's memory reads (arrays over the configurations)."""

    per_layer_act: np.ndarray
    full_act: np.ndarray  # a layer's activations without recompute
    transient: np.ndarray  # one layer live while recomputed
    logits: np.ndarray  # the loss's buffers (on the loss's stage)
    pipe_act: np.ndarray  # DeepSpeed's pipe buffers per micro-batch in flight (0: none)
    param_bytes: np.ndarray  # weights' bytes per parameter as held
    grad_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    g_part: np.ndarray
    gcomm: np.ndarray
    cache: np.ndarray  # fp8 weight cache per layer
    engine: np.ndarray  # engine buckets
    step_grad: np.ndarray  # autograd's gradients per parameter, allocated every step
    keep: float  # reserve per allocated byte
    # partial recompute: layers recomputed per model chunk (0: every layer, as recompute says)
    recompute_layers: np.ndarray | None = None
    unsharded_param_bytes: np.ndarray | None = None  # FSDP2 under PP: the gathered weights
    offload_layers: np.ndarray | None = None  # activation offload: layers kept in host memory
    # --fp8-param-gather: the 16-bit bytes per layer the fp8 parameter replaces (0: none)
    layer_weights16: np.ndarray | float = 0.0
    # the same two per parameter, for the routed experts' weights (TE's grouped linears)
    fp8_copy_per_param: np.ndarray | float = 0.0
    weights16_per_param: np.ndarray | float = 0.0
    # the loss's freed 16-bit logits the allocator still holds at its backward (on the loss's
    # stage; reserved, not allocated)
    logits_cached: np.ndarray | float = 0.0
    # FSDP2's root unit gathered in 16 bits (bytes): the embedding's on its stage, the output
    # layer's and final norm's on the loss's (0: not gathered, or the whole stage is)
    root_embedding: np.ndarray | float = 0.0
    root_head: np.ndarray | float = 0.0
    # layers' activations in flight beyond the schedule's micro-batches: 1 with Megatron's EP
    # overlap (costmodel.moe_overlap). Its combined 1F1B step runs the next forward's layer i
    # beside the oldest backward's layer L-1-i, which frees as it goes, so the peak is the
    # schedule's in-flight micro-batches plus about one layer (the extra warm-up forward
    # Megatron schedules interleaved is the step's own forward moved earlier)
    extra_layers: np.ndarray | float = 0.0


def fragmentation_fraction(eff, expandable_segments: bool = True) -> float:
    """The share of the caching allocator's reserve for step-time tensors that stays free but
    fragmented at the peak: ``eff.expandable_fraction`` with
    ``PYTORCH_ALLOC_CONF=expandable_segments:True`` (paraplan's launch environment), else
    ``eff.allocator_fraction`` (fixed segments, PyTorch's default)."""
    return eff.expandable_fraction if expandable_segments else eff.allocator_fraction


def memory_context(fw, eff, batch, opt: Sharding, shard: Shard, layer: LayerCosts,
                   plan: StagePlan, m, act_bytes, layer_params: float,
                   training: TrainingSpec, gpu: GPUSpec,
                   tied_embeddings: bool = False) -> MemoryContext:
    """What every stage group's memory reads: per-layer activations, the loss's buffers, the
    bytes per parameter of the model states as the framework holds them, engine buffers.
    From ``training``: the allocator setting (``expandable_segments``), which sets the
    fragmentation reserve (:func:`fragmentation_fraction`); ``grad_reduce_in_bf16``:
    Megatron's gradient buffer in 16 bits (:func:`gradient_bytes`); ``fp8_recipe`` and
    ``fp8_param_gather`` with the ``gpu``'s compute capability: Transformer Engine's weight
    copies (:func:`fp8_weight_copy_bytes`). ``tied_embeddings``: one matrix for the
    embedding and the output layer (ModelSpec)."""
    expandable_segments = training.expandable_segments
    grad_reduce_in_bf16 = training.grad_reduce_in_bf16
    fp8_param_gather = training.fp8_param_gather
    prec, z, d, bf16_opt = batch.precision, opt.zero, opt.dp, opt.bf16_optimizer
    t, tokens, h, V, single = shard.tp, shard.tokens, shard.hidden, shard.vocab, plan.single
    sched = batch.schedule
    pb, gb, ob = PARAM_BYTES[prec], GRAD_BYTES[prec], OPTIMIZER_BYTES[prec]
    # Megatron-Core's precision-aware optimizer (TE FusedAdam): bf16 exp_avg and exp_avg_sq
    # (12 -> 8 bytes with the fp32 master), and with --main-grads-dtype bf16 bf16 main
    # gradients (4 -> 2) (modern-training.md 4.3; MLM optimizer_config.py)
    opt_dtype = batch.precision_aware_optimizer
    ob = np.where(opt_dtype >= 1, ob - 4.0, ob)
    gb = np.where(opt_dtype == 2, 2.0, gb)
    # the loss's buffers on the last stage (FrameworkCosts.memory.logits_saved_bytes: what a
    # micro-batch keeps from its forward to its backward, Korthikanti 4.3's fp32 logits in
    # Megatron; plus what the running loss allocates on top), kept for every micro-batch in
    # flight on the last stage: one in 1F1B, m in GPipe (all forwards before any backward)
    infl_loss = np.where((sched == GPIPE) & ~single, m, 1.0)
    # DeepSpeed's PipelineEngine also keeps the last stage's output, the 16-bit logits, in its
    # output buffer until the micro-batch's backward (pipe_buffers["outputs"])
    saved = fw.memory.logits_saved_bytes + np.where(fw.pipeline.pipe_buffers & ~single, 2.0, 0.0)
    logits = (saved * infl_loss + fw.memory.logits_transient_bytes) * tokens * V / t
    logits_cached = fw.memory.logits_cached_bytes * tokens * V / t
    gm, g_part = gradient_bytes(fw, prec, pb, gb, z, d, bf16_opt, grad_reduce_in_bf16)
    # PyTorch FSDP FULL_SHARD keeps no 16-bit shard: the fp32 flat-parameter shard (the
    # master, counted with the optimizer states) is cast to 16 bits when a unit is gathered
    pw = np.where(fw.dp.fp32_flat_shard & (z >= 3) & (pb < 4.0), 0.0, pb)
    # Transformer Engine's quantised copies of each layer's linear weights (per recipe and
    # GPU: fp8_weight_copy_bytes), cached across the step's micro-batches where the framework
    # passes is_first_microbatch (Megatron-Core), beside the 16-bit weights; with
    # --fp8-param-gather the fp8 copy is the parameter and the layers keep no 16-bit weights
    # (the fp32 master stays in the optimizer states; embedding, output layer and norms stay
    # 16-bit: Transformer Engine quantises its linears only)
    fp8 = prec == PRECISIONS.index("fp8")
    te_cache = fp8 & fw.memory.fp8_weight_cache & (z < 3)
    copy_b = np.where(te_cache, fp8_weight_copy_bytes(training.fp8_recipe,
                                                      gpu.compute_capability), 0.0)
    w16_b = np.where(te_cache & fp8_param_gather, pb, 0.0)
    cache, weights16 = copy_b * layer_params / t, w16_b * layer_params / t
    # ZeRO-3's two layers of gathered parameters (prefetch), in fp8 where the all-gather is
    # (torchtitan's enable_fsdp_float8_all_gather: Float8Linear weights gathered as fp8);
    # FSDP2 under PP keeps the whole stage gathered instead (stage_memory)
    gathered_b = np.where(fp8 & fp8_param_gather, 1.0, pb)
    zbuf = np.where((z >= 3) & ~opt.once, 2.0 * layer_params / t * gathered_b, 0.0)
    # BF16_Optimizer reduces its fp32 gradients through the cast counted in the step copy,
    # not a bucket
    engine = (np.where(bf16_opt, 0.0, fw.memory.reduce_bucket_bytes)
              + fw.memory.gather_bucket_bytes + zbuf)
    step_grad = np.where(fw.memory.autograd_grads, pb, 0.0) / np.where(z >= 2, d, 1.0)
    frag = fragmentation_fraction(eff, expandable_segments)
    keep = frag / (1.0 - frag)
    # two activations per in-flight micro-batch (calibrated: FrameworkCosts.pipeline)
    pipe_act = 2.0 * tokens * h * act_bytes if fw.pipeline.pipe_buffers else None
    transient = np.where(batch.recompute == 2, layer.full_activation_bytes,
                         layer.recompute_transient_bytes)  # selective modules: costmodel.recompute
    if fw.kernels.selective_op_sac:
        # op-level SAC (torchtitan): a block's backward first recomputes what its policy did
        # not save, one block at a time
        sac = np.maximum(layer.full_activation_bytes - layer.activation_bytes, 0.0)
        transient = np.where(batch.recompute == 1, sac, transient)
    root_emb = root_head = 0.0
    if fw.memory.fsdp_root_gathered:
        # FSDP2's root unit (torchtitan 2024: the model itself, holding the embedding, final
        # norm and output layer; 0.3.0 wraps the embedding alone, resharded after forward, and
        # the norm with the output layer, kept gathered): its 16-bit weights stay gathered
        # from its forward into the backward. Where FSDP2 runs under PP the whole stage is
        # gathered already (Sharding.once)
        root = (z >= 3) & ~opt.once & (pb < 4.0)
        table = pb * V * h / t
        root_emb = np.where(root, table, 0.0)
        root_head = np.where(root & ~(tied_embeddings & single), table + pb * h, 0.0)
    if np.any(batch.cp > 1):  # the CP buffers of the layer being run (costmodel.cp)
        transient = np.where(batch.cp > 1, transient + layer.cp_buffer_bytes, transient)
    return MemoryContext(layer.activation_bytes, layer.full_activation_bytes, transient,
                         logits, pipe_act, pw, gm, ob, g_part,
                         grad_wire_bytes(fw, prec, optimizer_dtype=opt_dtype), cache, engine,
                         step_grad, keep, batch.recompute_num_layers, pb,
                         batch.cpu_offloading_num_layers, layer_weights16=weights16,
                         logits_cached=logits_cached, root_embedding=root_emb,
                         root_head=root_head, fp8_copy_per_param=copy_b,
                         weights16_per_param=w16_b)


def stage_memory(g: StageGroup, psi, cx: MemoryContext, opt: Sharding, plan: StagePlan, m, v,
                 sched, expert=None) -> StageMemory:
    """One stage group's memory: its layers' activations for the micro-batches in flight on
    its representative stage, model states of its parameters, the loss where it sits."""
    infl = microbatches_in_flight(sched, plan.pp, m, v, g.index)
    act = g.layers * cx.per_layer_act * infl + cx.transient + cx.extra_layers * cx.per_layer_act
    n = cx.recompute_layers
    if n is not None and (n > 0).any():
        # Megatron-Core's block method: the first n layers of each model chunk recompute
        # (only their inputs kept), the others keep every activation
        r = recomputed_layers(g.layers, n, v)
        part = (r * cx.per_layer_act + (g.layers - r) * cx.full_act) * infl + cx.transient
        act = np.where(n > 0, part, act)
    off = cx.offload_layers
    if off is not None and (off > 0).any():
        # activation offload (pp = 1): the offloaded layers' activations live in host memory;
        # one layer's is on the GPU in transit (Megatron's double buffer: the layer being
        # copied out while the next runs)
        kept = np.maximum(g.layers - off, 0.0) * cx.per_layer_act * infl + cx.per_layer_act
        act = np.where(off > 0, kept + cx.transient + cx.extra_layers * cx.per_layer_act, act)
    if cx.pipe_act is not None:
        act = act + np.where(plan.single, 0.0, cx.pipe_act * infl)
    logits = select(g.head, cx.logits, np.zeros(cx.logits.shape))
    w, gr, o = model_state_bytes(psi, cx.param_bytes, cx.grad_bytes, cx.optimizer_bytes,
                                 opt.zero, opt.dp)
    w = w + g.layers * (cx.cache - cx.layer_weights16)
    w = w + select(g.embedding, cx.root_embedding, 0.0) + select(g.head, cx.root_head, 0.0)
    if opt.once.any():
        # FSDP2 under PP (torchtitan): the stage's parameters stay gathered in 16 bits for the
        # whole step, and the unsynced gradients accumulate unsharded in fp32 until the last
        # backward's reduce-scatter (FSDPParam.to_accumulated_grad_if_needed), beside the
        # sharded fp32 gradient the optimizer reads
        w = np.where(opt.once, w + psi * cx.unsharded_param_bytes, w)
        gr = np.where(opt.once, gr + psi * 4.0, gr)
    # the fp32 copy of the (local partition of the) 16-bit gradients, or BF16_Optimizer's
    # bf16 cast of its fp32 gradients for the all-reduce, exists only after the backward has
    # freed the activations
    copy = psi * reduce_copy_bytes(opt.bf16_optimizer, cx.gcomm, cx.g_part, psi)
    if expert is not None:
        # MoE: the stage's routed-expert parameters (already / (ep etp)), their states
        # sharded by ZeRO over the expert data-parallel group edp = world / (etp ep pp)
        # (Megatron distributed optimizer; modern-training.md 2.2), not over dp
        psi_e, edp = expert
        we, ge, oe = model_state_bytes(psi_e, cx.param_bytes, cx.grad_bytes,
                                       cx.optimizer_bytes, opt.zero, edp)
        # TE's grouped expert linears keep their fp8 weight copies too
        we = we + psi_e * (cx.fp8_copy_per_param - cx.weights16_per_param)
        w, gr, o = w + we, gr + ge, o + oe
        copy = copy + psi_e * reduce_copy_bytes(opt.bf16_optimizer, cx.gcomm, cx.g_part, psi_e)
        psi = psi + psi_e
    # What the caching allocator reserves on each stage. Of what is allocated and freed
    # within a step (activations, logits, engine buckets and, where autograd allocates them
    # every step, the gradients in the weights' dtype) a share ``allocator_fraction`` of the
    # reserve stays free but fragmented at the peak, and nvidia-smi counts it; buffers
    # allocated once at start-up (weights, contiguous gradient buffers, optimizer states) do
    # not fragment. NCCL allocates its own buffers.
    # Two phases per stage. The backward's peak holds the activations (and logits) with their
    # share of fragmented reserve; the optimizer step holds the fp32 gradient copy once
    # they are freed, with only the engine's and autograd's gradients' reserve left.
    kept = (cx.engine + cx.step_grad * psi) * cx.keep
    res = (act + logits) * cx.keep + kept + select(g.head, cx.logits_cached, 0.0)
    state = w + gr + o
    return StageMemory(w, gr, o, act, logits, copy, res, kept, state + act + logits + res,
                       state + copy + kept)


@dataclass(frozen=True)
class MemoryResult:
    peak_bytes: np.ndarray  # what must fit: the larger of the backward and the step
    # PyTorch's view of the same peak: bytes in live tensors (max_memory_allocated) and what
    # the caching allocator holds (max_memory_reserved = allocated + the fragmentation
    # reserve); peak_bytes = reserved + NCCL's own buffers + the CUDA context
    allocated_bytes: np.ndarray
    reserved_bytes: np.ndarray
    observed_bytes: np.ndarray  # nvidia-smi's maximum
    breakdown_bytes: dict[str, np.ndarray]
    stages: tuple[StageMemory, ...]  # per group of the plan
    fixed_bytes: np.ndarray  # engine buckets, NCCL buffers, CUDA context: on every stage


def peak_memory(plan: StagePlan, params: StageParams, cx: MemoryContext, opt: Sharding, m, v,
                sched, nccl_buffers, eff, gpu_memory_bytes, expert=None) -> MemoryResult:
    """For each stage group of the plan, its memory; the peak is the group that holds
    strictly more than every group before it (embedding stage, loss stage, middle stages).
    ``expert``: a MoE model's (routed-expert parameters per stage group, edp)."""
    if expert is None:
        stages = [stage_memory(g, psi, cx, opt, plan, m, v, sched)
                  for g, psi in zip(plan.groups, params.per_group, strict=True)]
    else:
        per_group, edp = expert
        stages = [stage_memory(g, psi, cx, opt, plan, m, v, sched, (pe, edp))
                  for g, psi, pe in zip(plan.groups, params.per_group, per_group,
                                        strict=True)]
    sel = np.zeros(plan.pp.shape, np.int64)
    best = observed = None
    for k, (g, st) in enumerate(zip(plan.groups, stages, strict=True)):
        mem, seen = st.peak, st.backward + st.step_copy
        if best is None:
            best, observed = mem, seen
            continue
        sel = np.where(g.present & (mem > best), k, sel)
        best = np.maximum(best, np.where(g.present, mem, 0.0))
        observed = np.maximum(observed, np.where(g.present, seen, 0.0))

    chosen = [(sel == k, st) for k, st in enumerate(stages) if k > 0]
    chosen = [(mask, st) for mask, st in chosen if mask.any()]

    def pick(name):
        out = getattr(stages[0], name)
        for mask, st in chosen:
            out = np.where(mask, getattr(st, name), out)
        return out

    fixed = cx.engine + nccl_buffers + eff.cuda_context_bytes
    peak_mem = pick("peak") + fixed
    in_step = pick("in_step")
    in_bwd = ~in_step
    # What nvidia-smi's maximum shows: PyTorch's caching allocator keeps the backward's freed
    # blocks reserved and takes new ones for the step's copy, so the two add up there (the
    # allocator would release the cached blocks rather than fail: it is not what must fit).
    # Where the sum exceeds the GPU's memory it does so (a failed cudaMalloc frees the cached
    # blocks and retries, CUDACachingAllocator release_cached_blocks): nvidia-smi then reads
    # the whole GPU at most.
    observed = observed + fixed
    observed = np.minimum(observed, np.maximum(peak_mem, gpu_memory_bytes))
    breakdown = {
        "weights": pick("weights"),
        "gradients": pick("gradients") + np.where(in_step, pick("step_copy"), 0.0),
        "optimizer_states": pick("optimizer_states"),
        "activations": np.where(in_bwd, pick("activations"), 0.0),
        "logits": np.where(in_bwd, pick("logits"), 0.0),
        "communication_buffers": nccl_buffers + cx.engine,
        "cuda_context": np.full_like(plan.pp, eff.cuda_context_bytes, dtype=float),
        "allocator_reserve": np.where(in_bwd, pick("reserve_backward"), pick("reserve_step")),
    }
    reserved = peak_mem - nccl_buffers - eff.cuda_context_bytes
    allocated = reserved - breakdown["allocator_reserve"]
    return MemoryResult(peak_mem, allocated, reserved, observed, breakdown, tuple(stages),
                        fixed)
