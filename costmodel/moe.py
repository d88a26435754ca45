"""The Mixture-of-Experts layer: its op table, its expert-parallel all-to-all, its memory.

Used only for models with a :class:`~costmodel.specs.MoESpec` (a dense model never reaches
this module, so dense results are unchanged). Formulas and flags: modern-training.md
section 2 (Megatron-Core ``megatron/core/transformer/moe``, its README, DeepSeek-V3 report).

Per micro-batch on one rank, Megatron-Core's ``alltoall`` dispatcher with grouped GEMMs
(``--moe-grouped-gemm``), uniform routing times the load-imbalance factor ``iota``:

- ``T = b s / t`` tokens enter the MoE block on a rank (the sequence-parallel shard; without
  sequence parallelism Megatron scatters the sequence over TP before the router);
- router GEMM ``T x E x h`` (fp32 in Megatron with ``--moe-router-dtype``; priced at the
  16-bit peak), replicated;
- permute and unpermute: one HBM read and write of the ``T k`` routed copies of ``h``
  each way (``moe_utils.permute`` / ``unpermute``), forward and backward;
- dispatch all-to-all over EP of ``T k h`` activation bytes per rank, the expert-TP
  all-gather of ``etp T k h`` (and its reduce-scatter on combine), combine all-to-all of the
  same size; the backward runs the same four (modern-training.md 2.3): priced by
  :func:`costmodel.collectives.alltoall_time_s` (nccl.md section 7) on the EP group's real
  geometry (:func:`costmodel.layout.group`: NVLink inside a host, the NICs across hosts;
  inside one multi-host NVL72 domain the one-node case of the fused NCCL node);
  exposed (the ``--overlap-moe-expert-parallel-comm`` overlap is not modelled);
- grouped expert GEMMs: ``E/ep`` local experts, each ``M = iota T k ep etp / E`` rows
  (modern-training.md 2.4), width ``f_e / etp``; TE's GroupedLinear / CUTLASS grouped GEMM
  schedule every group's tiles in one launch, so the grouped GEMM is priced as one GEMM of
  ``E/ep x ceil(M / 128) x 128`` rows (each expert's rows padded to the 128-row CTA tile) by
  :func:`costmodel.compute.gemm_time_s`, whose tile/wave quantisation and small-K factor
  then make small per-expert GEMMs lose efficiency;
- shared experts: a dense gated MLP of width ``f_s`` split by ``t`` (their TP collectives
  are the dense MLP's, which the layer keeps);
- the expert activation (SwiGLU) on ``M`` rows of ``f_e / etp``.

``iota``: :data:`DEFAULT_LOAD_IMBALANCE` for real routing (our choice: the most loaded EP
rank's tokens over the mean; modern-training.md 2.4 calls the factor a modelling choice),
``TrainingSpec.moe_load_imbalance`` overrides it (1.0 for the force-balanced benchmarks of
Megatron-Bridge's performance tables). With a capacity factor (token drop padded to capacity)
every expert holds exactly ``cf T k / E`` rows and ``cf`` takes its place. The host side of
the dispatcher (its device-to-host sync, or none when padded): :func:`moe_host_stall_s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel import collectives as coll
from costmodel.compute import active_layer_gemm_params  # noqa: F401  (re-exported)
from costmodel.layout import Layout, group
from costmodel.pricing import GEMM, MEMORY, Kernel

#: the most loaded EP rank's routed tokens over the mean, for real (aux-loss balanced)
#: routing; 1.0 for --moe-router-force-load-balancing
DEFAULT_LOAD_IMBALANCE = 1.1
#: rows of the grouped GEMM's CTA tile each expert's token block is padded to
GROUPED_GEMM_TILE_M = 128.0
#: host stall of one eager MoE layer per micro-batch (forward + backward) at the dropless
#: dispatcher's device-to-host sync (moe_host_stall_s), measured on Qwen3-30B-A3B mxfp8 with
#: 16 local experts (the pair below); other layers scale its per-expert part
#: (moe_host_launch_s)
MOE_HOST_STALL_S = 4.7e-3
#: host time of one kernel launch issued from Transformer Engine's C++ loops over the local
#: experts (a cuBLAS GEMM or a quantize kernel per expert, no Python dispatch in between):
#: the order of a bare CUDA launch's host cost, a few us (NVIDIA, "Getting Started with CUDA
#: Graphs", 2019: a few us per short kernel launched in a stream loop). Chosen, not fitted:
#: with MOE_ALLTOALL_HOST_S and MOE_ATTENTION_HOST_S the mbridge_perf_moe figure is 12.56 /
#: 12.17 / 12.28 / 12.57 / 13.01% at 0 / 2.5 / 5 / 7.5 / 10 us (without them flat from 0 to
#: 5 us, 13.39-13.40%, and 15.0% at 20 us), so the data bounds it to a few us; the host-bound padded Qwen3-235B rows (2 local experts,
#: 4.9 ms per layer) against the B200 Qwen3-30B one (16, 4.7 ms) say the same
#: (moe_host_launch_s)
MOE_LAUNCH_HOST_S = 2.5e-6
#: the measured pair's layer: Qwen3-30B-A3B, 128 experts on ep 8 (16 local), fp8 (mxfp8),
#: the flex dispatcher (HybridEP)
_PAIR_LOCAL_EXPERTS, _PAIR_FP8 = 16.0, True
#: what Megatron's ``alltoall`` dispatcher adds to the host time of one MoE layer and
#: micro-batch (forward + backward) over the flex dispatcher the pair ran. FITTED over
#: mbridge_perf_moe (the one fitted parameter of the host term; group MAPE 13.40 / 12.88 /
#: 12.73 / 12.61 / 12.60 / 12.60% at 0 / 0.3 / 0.4 / 0.5 / 0.6 / 0.7 ms, worse above: 13.2%
#: at 1.5 ms); the count of its extra calls gives the same order (moe_host_launch_s)
MOE_ALLTOALL_HOST_S = 0.5e-3
#: the attention block's share of the pair's host time (the pair ran it eagerly), which a
#: per-layer CUDA graph of the attention (scope ``attn``) removes. Measured on the data's
#: nearest pair, in-sample (the host term's second parameter taken from the data):
#: Qwen3-30B-A3B on 8 GPUs, ep 8, mbs 4, mxfp8, HybridEP, 26.02.01 / 26.04 / 26.04.01, on
#: GB200 with router + preprocess graphs (4.36-4.53 ms per layer and micro-batch above the
#: model's GPU time) and on B200 with attention graphs too (3.55-3.76 ms): 0.8 ms. The same
#: order as the attention block's Transformer Engine modules (fused norm + QKV, two q/k
#: norms, core attention, projection: 5 modules forward and backward) at ~80 us of Python
#: per module pass (our estimate). Group MAPE 12.61 / 12.29 / 12.17 / 12.12 / 12.34% at 0 /
#: 0.5 / 0.8 / 1.0 / 1.5 ms
MOE_ATTENTION_HOST_S = 0.8e-3


@dataclass(frozen=True)
class MoEShape:
    """One MoE layer's sizes on one rank, per configuration."""

    tokens: np.ndarray  # T: tokens entering the block on this rank
    routed: np.ndarray  # T k iota: routed copies a rank sends (the slowest rank)
    local_experts: np.ndarray  # E / ep
    rows_per_expert: np.ndarray  # M = iota T k ep etp / E
    width: np.ndarray  # f_e / etp
    ep: np.ndarray
    etp: np.ndarray
    frac: float  # share of the model's layers that are MoE


def moe_shape(model, training, batch, tokens: np.ndarray, tp: np.ndarray) -> MoEShape:
    m = model.moe
    iota = float(training.moe_load_imbalance if training.moe_load_imbalance is not None
                 else DEFAULT_LOAD_IMBALANCE)
    if m.capacity_factor is not None:
        # padded to capacity (Megatron drop_and_pad: every expert gets capacity = cf T k / E
        # rows, num_out_tokens = capacity x E): the capacity factor replaces the imbalance
        iota = float(m.capacity_factor)
    ep, etp = batch.ep.astype(float), batch.etp.astype(float)
    T = tokens / tp
    rows = iota * T * m.top_k * ep * etp / m.num_experts
    return MoEShape(T, iota * T * m.top_k, m.num_experts / ep, rows,
                    m.expert_ffn_hidden_size / etp, ep, etp,
                    model.moe_layers / model.num_layers)


def moe_kernels(model, sh, ms: MoEShape, ea: float) -> tuple[list[Kernel], list[tuple]]:
    """The MoE block's kernels and (name, kernel, pass, category, repeat, parts) rows."""
    m = model.moe
    h = sh.hidden
    up = (2.0 if model.gated_mlp else 1.0)
    rows = np.ceil(ms.rows_per_expert / GROUPED_GEMM_TILE_M) * GROUPED_GEMM_TILE_M
    grouped_m = ms.local_experts * rows
    copies = ms.routed * ms.etp  # rows the rank's experts hold after the expert-TP gather
    kerns = [Kernel("moe.router", GEMM, ms.tokens, float(m.num_experts), h, peak="attention"),
             Kernel("moe.fc1", GEMM, grouped_m, up * ms.width, h),
             Kernel("moe.fc2", GEMM, grouped_m, h, ms.width),
             # permute + unpermute: read and write the routed copies' hidden states
             Kernel("moe.permute", MEMORY, nbytes=4.0 * copies * h * ea, kernels=4.0),
             Kernel("moe.act", MEMORY, nbytes=(3.0 if model.gated_mlp else 2.0)
                    * copies * ms.width * ea, kernels=1.0)]
    kerns += gpt_oss_expert_kernels(model, ms, copies, h, ea)
    if m.shared_experts:
        fs = float(m.shared_ffn_hidden_size)
        kerns += [Kernel("moe.shared_fc1", GEMM, sh.tokens, up * fs / sh.tp, h),
                  Kernel("moe.shared_fc2", GEMM, sh.tokens, h, fs / sh.tp)]
    ops = []
    for k in kerns:
        if k.kind == GEMM:
            ops.append((f"{k.name}.fwd", k.name, "forward", "moe", None, ()))
            ops.append((f"{k.name}.bwd", k.name, "backward", "moe", 2.0, ("data", "weight")))
        else:
            ops.append((f"{k.name}.fwd", k.name, "forward", "moe", None, ()))
            ops.append((f"{k.name}.bwd", k.name, "backward", "moe",
                        _MEMORY_BACKWARD.get(k.name), ()))
    return kerns, ops


#: a memory kernel's backward traffic over its forward's (None: the same)
_MEMORY_BACKWARD = {"moe.act": 2.0, "moe.expert_bias": 36.0 / 28.0, "moe.act_clamp": 10.0 / 8.0}


def gpt_oss_expert_kernels(model, ms: MoEShape, copies, h, ea: float) -> list[Kernel]:
    """The unfused element-wise passes of biased and clamped experts (GPT-OSS), from
    Megatron-Core core_v0.16.1 ``experts.py`` (``TEGroupedMLP``) and
    ``fusions/fused_bias_geglu.py``, HBM bytes per routed copy on the rank:

    - ``_apply_bias`` (experts with biases, ``MoESpec.expert_bias``): the fc2 output of each
      expert gets ``t + b * p`` (its bias times the token's routing probability) in a Python
      loop over the local experts, then ``torch.cat`` and ``.to(dtype)``. The probabilities
      are fp32 (the flex dispatchers cast them with ``.float()``; the router's fp32 dtype
      otherwise, our assumption), so ``b * p`` and the sum are fp32 rows of ``h``: forward
      write 4, read ``ea`` + 4 and write 4, cat read 4 write 4, cast read 4 write ``ea``
      (24 + 2 ea bytes per element: 28 at 16 bits); backward the cast's and the add's
      gradients (4 + ea each), ``g * p`` and ``g * b`` with their sums (12 each): 32 + 2 ea
      (36). Two launches per local expert forward, plus the cat and the cast.
    - the SwiGLU clamp (``MoESpec.activation_clamp``; ``weighted_bias_quick_geglu_impl``
      with ``clamp_value``): ``chunk``, two ``clamp`` and a ``cat`` before the fused kernel,
      on the fc1 output (``2 f_e / etp`` wide): forward read and write each half, then read
      and write both (8 passes of ``f_e / etp`` elements); backward the clamps' gradients
      (read the gradient and the input, write: 6) and the chunk's cat of the two (4): 10.

    None for other models (the fused SwiGLU and TE's GEMM epilogues cover them)."""
    m = model.moe
    out = []
    if m.expert_bias:
        out.append(Kernel("moe.expert_bias", MEMORY, nbytes=(24.0 + 2.0 * ea) * copies * h,
                          kernels=2.0 * ms.local_experts + 2.0))
    if m.activation_clamp is not None:
        out.append(Kernel("moe.act_clamp", MEMORY, nbytes=8.0 * copies * ms.width * ea,
                          kernels=3.0))
    return out


def _remote_host_share(experts: int, k: int, hosts: int) -> float:
    """A token's distinct remote hosts (uniform routing of k of E experts spread evenly over
    ``hosts``) over its copies sent off-host by the plain all-to-all (k (H-1)/H)."""
    if hosts <= 1:
        return 1.0
    per = experts // hosts
    hit = 1.0 - math.comb(experts - per, k) / math.comb(experts, k)
    return (hosts - 1) * hit / (k * (hosts - 1) / hosts)


def ep_comm_s(cluster, system, batch, ms: MoEShape, hidden: float, ea: float, rc,
              model=None, training=None) -> np.ndarray:
    """Exposed EP (and expert-TP) communication of one MoE layer per micro-batch: dispatch and
    combine all-to-all forward and backward (and in the recomputed forward), priced once per
    distinct (tp, cp, pp, dp, ep, etp)."""
    n = len(batch)
    ep_ranks, ep_hosts = np.ones(n, np.int64), np.ones(n, np.int64)
    etp_hosts = np.ones(n, np.int64)
    key = np.stack([batch.tp, batch.cp, batch.pp, batch.dp, batch.ep, batch.etp], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    geo = {}
    for j, (t, c, p, d, e, et) in enumerate(uniq):
        try:
            lay = Layout(tp=int(t), cp=int(c), dp=int(d), pp=int(p), ep=int(e), etp=int(et))
            g_ep, g_etp = group(cluster, lay, "ep"), group(cluster, lay, "etp")
            # a group inside one multi-host NVLink domain (NVL72) runs over NVLink
            mnnvl = g_ep.hosts > 1 and g_ep.domains == 1
            geo[j] = (g_ep.n_ranks, 1 if mnnvl else g_ep.hosts, g_etp.hosts, mnnvl)
        except Exception:  # an invalid expert grid (the rules reject it): priced as none
            geo[j] = (1, 1, 1, False)
    mnnvl = np.zeros(n, bool)
    for j, (r, hsts, eh, mn) in geo.items():
        sel = inv == j
        ep_ranks[sel], ep_hosts[sel], etp_hosts[sel], mnnvl[sel] = r, hsts, eh, mn
    nbytes = ms.routed * hidden * ea
    host = (ep_ranks > 1) & ~mnnvl
    a2a = np.zeros(n)
    if host.any():
        a2a[host] = coll.alltoall_time_s(system, np.maximum(nbytes[host], 1.0), ep_ranks[host],
                                         ep_hosts[host])
    flex = host & (ep_hosts > 1) & (model is not None and training is not None
                                    and training.moe_dispatcher == "flex")
    if flex.any():
        # the flex dispatcher (DeepEP / HybridEP): a token crosses to each remote host holding
        # one of its experts once and is forwarded to those experts over NVLink there
        # (Megatron MoE README; DeepEP's internode kernels): the NIC bytes are the token's
        # distinct remote hosts, not its k copies; the NVLink side moves every copy
        ratio = np.array([_remote_host_share(model.moe.num_experts, model.moe.top_k, int(x))
                          for x in ep_hosts[flex]])
        ppn = np.maximum(ep_ranks[flex] // ep_hosts[flex], 1)
        nic = coll.alltoall_time_s(system, np.maximum(nbytes[flex] * ratio, 1.0),
                                   ep_ranks[flex], ep_hosts[flex])
        nvl = np.where(ppn > 1, coll.alltoall_time_s(system, np.maximum(nbytes[flex], 1.0),
                                                     ppn, np.ones_like(ppn)), 0.0)
        a2a[flex] = np.maximum(nic, nvl)
    if mnnvl.any():
        # EP across the hosts of one NVLink domain (GB200/GB300 NVL72: MNNVL; Megatron's
        # MoE README, HybridEP). NCCL fuses the domain's hosts into one node (nccl.md 1.1:
        # "a 'node' in the model is an NVLink domain"), so nccl.md 7's practical model
        # applies as inside a host: (n-1)/n of the send buffer at the one-node ring busBw
        # per GPU, one P2P latency per round of 8 peers. Where the NCCL system does not fuse
        # the domain (no MNNVL), the GPU's NVLink bandwidth and latency instead.
        r = ep_ranks[mnnvl]
        fused = bool(getattr(system, "mnnvl", False)) & (r <= system.gpus_per_node)
        t = np.zeros(len(r))
        if fused.any():
            t[fused] = coll.alltoall_time_s(system, np.maximum(nbytes[mnnvl][fused], 1.0),
                                            r[fused], np.ones(int(fused.sum()), np.int64))
        if (~fused).any():
            rf = r[~fused].astype(float)
            bw = (cluster.gpu.nvlink_bandwidth_bytes_per_s
                  or cluster.intra_node.bandwidth_bytes_per_s)
            rounds = np.ceil((rf - 1.0) / coll.ALLTOALL_PEERS_PER_ROUND)
            t[~fused] = (rounds * cluster.intra_node.latency_s
                         + nbytes[mnnvl][~fused] * (rf - 1.0) / rf / bw)
        a2a[mnnvl] = t
    etp = batch.etp
    gathered = nbytes * ms.etp
    ag = np.zeros(n)
    if (etp > 1).any():
        s = etp > 1
        ag[s] = (coll.collective_time_s(system, "allgather", gathered[s], etp[s], etp_hosts[s])
                 .time_s
                 + coll.collective_time_s(system, "reducescatter", gathered[s], etp[s],
                                          etp_hosts[s]).time_s)
    passes = 2.0 + np.where(rc == 2, 1.0, 0.0)  # forward, backward, recomputed forward
    return ms.frac * passes * (2.0 * a2a + ag)


#: rows per expert below which the grouped GEMM is far from its peak (a few CTA tiles)
SMALL_ROWS_PER_EXPERT = 512.0


def expert_launches(model, fp8) -> np.ndarray:
    """Kernel launches per local expert of one MoE layer and micro-batch (forward and
    backward), from core_v0.16.1's ``TEGroupedMLP`` on Transformer Engine's
    ``GroupedLinear`` (``--moe-grouped-gemm``, every Megatron-Bridge MoE recipe): TE runs
    its grouped GEMM as one cuBLAS GEMM per expert (``general_grouped_gemm``), so fc1 and
    fc2 forward, and their data- and weight-gradient GEMMs: 6; with fp8 (any recipe) each
    GEMM input is quantized per expert (``split_quantize``: one kernel per split), the two
    forward inputs and the two output gradients: 4; with expert biases (GPT-OSS)
    ``TEGroupedMLP._apply_bias`` loops over the experts in Python (``t + b * p``: a multiply
    and an add forward, their four gradient kernels backward): 6. A fused grouped GEMM
    (CUTLASS / cuDNN grouped MLP, ``cutedsl_fused_grouped_mlp``) launches once for all
    experts; the data's recipes with it run under full-iteration CUDA graphs (no host term)."""
    bias = 6.0 if model is not None and model.moe is not None and model.moe.expert_bias \
        else 0.0
    return 6.0 + 4.0 * np.asarray(fp8, dtype=float) + bias


def moe_host_launch_s(model, ms: MoEShape, fp8, dispatcher: str = "flex",
                      attention_graphed: bool = False) -> np.ndarray:
    """``H``: the host time to launch one eager MoE layer per micro-batch (forward and
    backward): the measured pair's :data:`MOE_HOST_STALL_S` with its per-expert launches
    (:func:`expert_launches` x 16 local experts x :data:`MOE_LAUNCH_HOST_S` = 0.4 ms) replaced
    by this layer's (its local experts ``E / ep``, its precision, its biases). The rest
    (attention, router, dispatcher, permutation, all-to-all calls: 4.3 ms) is the pair's.
    DeepSeek-V3 mxfp8 on ep 8 (32 local experts) takes 4.3 + 0.8 ms; on ep 64 (4), 4.3 +
    0.1 ms. Not modelled: per-layer CUDA graph scopes (``attn``, ``moe_router``,
    ``moe_preprocess``: the pair had the last two captured), the dispatcher's own launch
    count (alltoall vs the flex dispatchers), ``--moe-permute-fusion`` / router fusion (on
    in every recipe of the data), an unfused ``SequentialMLP`` (a full MLP per expert).

    ``dispatcher``: the pair ran the flex dispatcher (HybridEP: permutation fused into its
    dispatch and combine kernels, one custom op each way). Megatron's ``alltoall``
    dispatcher (core_v0.16.1 ``MoEAlltoAllTokenDispatcher``) runs from Python what that
    fuses: the permute and unpermute (TE ``moe_permute`` / ``moe_unpermute``), the chunk
    sorts between the EP ranks' and the local experts' order (``sort_chunks_by_idxs``, local
    experts > 1), forward and backward (about 16 autograd functions), and four
    ``all_to_all_single`` calls through ProcessGroupNCCL with host-side split lists (forward
    dispatch and combine, and their backward): at a few tens of us per Python-dispatched
    autograd function and ~45 us per collective call (the per-collective host time
    ``calibration.py`` fits on vTrain), about 0.3 + 0.2 ms. :data:`MOE_ALLTOALL_HOST_S`
    (0.5 ms) is fitted over the group and agrees with that count.

    ``attention_graphed`` (``TrainingSpec.moe_attention_graphed``): the attention block runs
    as a per-layer CUDA graph (one graph launch instead of its modules' kernels), which takes
    :data:`MOE_ATTENTION_HOST_S` off the pair's rest."""
    rest = MOE_HOST_STALL_S - MOE_LAUNCH_HOST_S * _PAIR_LOCAL_EXPERTS * float(
        expert_launches(None, _PAIR_FP8))
    a2a = MOE_ALLTOALL_HOST_S if dispatcher == "alltoall" else 0.0
    attn = MOE_ATTENTION_HOST_S if attention_graphed else 0.0
    return (rest + a2a - attn
            + MOE_LAUNCH_HOST_S * ms.local_experts * expert_launches(model, fp8))


def moe_host_stall_s(training, ms: MoEShape, rc, model=None, gpu_layer_s=None,
                     host_overlap_p: float = 7.0, fp8=None) -> np.ndarray:
    """What the MoE dispatcher's host side adds to one layer per micro-batch (forward and
    backward, and the recomputed forward with full recompute), averaged over the model's
    layers.

    The host launches one eager MoE layer's kernels in ``H`` = :data:`MOE_HOST_STALL_S` (times
    the passes). Megatron-Core (core_v0.16.1 ``token_dispatcher.py``,
    ``MoEAlltoAllTokenDispatcher.preprocess`` and ``_maybe_dtoh_and_synchronize``):

    - **dropless** (no capacity factor): the all-to-all splits and the tokens per expert are
      copied to the host and waited for (``d2h_event.synchronize()`` at ``before_ep_alltoall``
      when ep or tp > 1, else ``before_finish``; the flex dispatchers read their receive
      counts likewise). The host stops running ahead of the GPU there, and the GPU then waits
      for the host to launch the rest of the block: the two no longer overlap, and ``H`` is
      added to the layer's time. The data's same-layout pairs show it about constant per
      layer and micro-batch whatever the layer's GPU time (GB200 Qwen3-30B mbs 4: 4.7 ms;
      B300 mbs 8: 5.5 ms; B200 mbs 1 vs the model's GPU time: 6.3 ms).
    - **token drop padded to capacity** (``--moe-expert-capacity-factor`` with
      ``--moe-pad-expert-input-to-capacity``, the setting of NeMo's token-drop benchmarks,
      ``MegatronTokenDropCallback``): every split is ``capacity``, set on the host
      (``drop_and_pad``: no device-to-host copy, no sync). The host runs ahead as for a dense
      layer, and the layer takes the longer of its GPU time and ``H``, joined as the dense
      host time is (:func:`costmodel.compute.soft_max` with the Megatron host p-norm). The
      data's host-bound token-drop rows check ``H`` independently of the pair it is measured
      on: Qwen3-30B on 8 B200, mbs 1, 25.09: 14.51 s = 4.72 ms per layer and micro-batch
      (the model's GPU time 2.5 ms); Qwen3-235B on 64 GB200, mbs 1: 4.9 ms. Its GPU-bound
      token-drop rows (mbs 2-4 or pp > 1, 25.09 only) run 1.4-1.9x the model's GPU time, as
      the one 25.09 dense Blackwell row does (Llama 3.1 405B GB200: -29%): a release effect,
      not the sync. Without ``--moe-pad-expert-input-to-capacity`` the splits vary and
      Megatron syncs (``before_permutation_1``): that case is the dropless one; the spec's
      ``capacity_factor`` means the padded variant.

    Megatron removes the stall with CUDA graphs over the whole iteration
    (``--cuda-graph-impl full_iteration``, with the sync-free dispatch it requires):
    ``TrainingSpec.moe_cuda_graph``.

    :data:`MOE_HOST_STALL_S` is measured on one pair, not fitted to the group:
    Megatron-Bridge's Qwen3-30B-A3B on 8 GB200, ep 8, mbs 4, hybridep, the same layout in
    26.04 (CUDA graphs of attention, router and preprocess only: 10.04-10.07 s) and 26.06
    (full-iteration graphs: 6.40-6.44 s): 3.63 s over 16 micro-batches x 48 MoE layers =
    4.7 ms.

    ``gpu_layer_s``: the averaged layer's time without this term (GPU passes, exposed
    communication, the dense host time), needed for the padded token-drop form; without it
    that form reports ``H`` (an upper bound). ``host_overlap_p``: the framework's
    ``FrameworkCosts.host.host_overlap_p``."""
    if training.moe_cuda_graph:
        return np.zeros(np.shape(rc))
    passes = (3.0 + np.where(rc == 2, 1.0, 0.0)) / 3.0  # fwd + two backward halves (+ recompute)
    if fp8 is None:  # the measured pair's constant
        host = MOE_HOST_STALL_S * passes * np.ones(np.shape(ms.ep))
    else:
        host = moe_host_launch_s(model, ms, fp8, training.moe_dispatcher,
                                 training.moe_attention_graphed) * passes
    padded = model is not None and model.moe is not None and model.moe.capacity_factor is not None
    if not padded or gpu_layer_s is None:
        return ms.frac * host
    from costmodel.compute import soft_max

    g = np.asarray(gpu_layer_s, dtype=float)
    joined = soft_max(g, host, host_overlap_p)
    return ms.frac * np.subtract(joined, g, out=np.zeros(joined.shape), where=np.isfinite(g))


def moe_activation_delta(model, sh, ms: MoEShape, rc, ea: float, fp8=False) -> np.ndarray:
    """What a MoE layer stores beyond a dense layer's formula (which the layer keeps for its
    attention), averaged over the model's layers: minus the dense MLP's intermediates
    (:func:`costmodel.memory.layer_activation_bytes`: the activation function's 16-bit input,
    both halves when gated, and the FC2 input), plus per routed copy its fc1 input (h), fc1
    output (2 f_e / etp gated, 16-bit: the activation's input) and fc2 input (f_e / etp)
    (modern-training.md 2.2, derived), the router's fp32 logits and probabilities, the shared
    experts' dense-MLP intermediates. ``fp8`` (Transformer Engine's grouped linears, as its
    dense linears): the two GEMM inputs are kept as their fp8 casts, 1 byte instead of 2, as
    the dense formula counts them. Full recompute keeps only the layer input: no change."""
    m = model.moe
    e = ea / 2.0  # the coefficients below are bytes at 16 bits
    q = np.where(np.asarray(fp8, dtype=bool), 0.5, 1.0)
    act_in = 4.0 if model.gated_mlp else 2.0
    mlp = (act_in + 2.0 * q) * e  # bytes per FFN column and token
    dense_mlp = mlp * sh.tokens * sh.ffn / sh.tp
    copies = ms.routed * ms.etp
    routed = copies * (2.0 * q * sh.hidden + (act_in + 2.0 * q) * ms.width) * e
    router = 8.0 * ms.tokens * m.num_experts
    shared = mlp * sh.tokens * m.shared_ffn_hidden_size / sh.tp
    delta = ms.frac * (routed + router + shared - dense_mlp)
    return np.where(rc == 2, 0.0, delta)


def dispatcher_buffer_bytes(model, ms: MoEShape, hidden: float, ea: float) -> np.ndarray:
    """The all-to-all's send and receive buffers of one layer's routed copies (live during
    the layer; allocated per layer by the alltoall dispatcher)."""
    return 2.0 * ms.routed * ms.etp * hidden * ea


def expert_param_split(model) -> tuple[float, float]:
    """(non-expert, routed-expert) parameters per layer, averaged over the model's layers."""
    L = model.num_layers
    experts = model.moe_layers * model.routed_expert_params
    return (model.layers_params - experts) / L, experts / L


__all__ = ["DEFAULT_LOAD_IMBALANCE", "GROUPED_GEMM_TILE_M", "MOE_ALLTOALL_HOST_S", "MOE_ATTENTION_HOST_S", "MOE_HOST_STALL_S", "MOE_LAUNCH_HOST_S", "SMALL_ROWS_PER_EXPERT", "MoEShape", "active_layer_gemm_params",
           "dispatcher_buffer_bytes", "ep_comm_s", "expert_launches", "expert_param_split", "moe_activation_delta",
           "moe_host_launch_s", "moe_host_stall_s", "moe_kernels",
           "moe_shape"]
