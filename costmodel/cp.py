"""Context parallelism: the attention communication of a CP layer, as an op table.

CP splits the sequence (and every activation) over ``cp`` ranks; weights are replicated, so
everything outside attention runs unchanged on ``s/cp`` tokens (:class:`costmodel.shard.Shard`
divides the tokens). Attention needs the keys and values of the whole causal range; the
sequence is cut into ``2 cp`` chunks and CP rank ``i`` holds chunks ``i`` and ``2cp-1-i``
(Transformer Engine's DualChunkSwap), so every rank does ``1/cp`` of the causal attention
FLOPs (the shard's attention kernel: local queries against the whole sequence, causal half).
Megatron-Core ``--cp-comm-type`` (modern-training.md 1.2-1.4; TE
``attn_forward_func_with_cp``), per layer, micro-batch and rank, with ``s_c = s/cp``,
``a_l = a/t``, ``g_l = max(1, g/t)`` and ``KV_c = 2 b s_c g_l d_h e``:

- ``p2p``: the K/V chunks circulate on a ring in ``cp`` steps; step ``i``'s attention hides
  step ``i+1``'s transfer (two streams). Forward ``cp-1`` sends of ``KV_c``; backward
  ``cp-1`` of ``2 KV_c`` (K/V again and dK/dV). Exposed: per step what the step's attention
  (``1/cp`` of the kernel) does not cover (:func:`costmodel.layers.exposed`).
- ``all_gather``: all-gather of K/V (``cp KV_c`` gathered) before the local attention;
  backward all-gathers again and reduce-scatters dK/dV. Not overlapped.
- ``a2a`` (DeepSpeed-Ulysses): all-to-all of Q, K, V (``b s_c (a_l + 2 g_l) d_h e`` per rank)
  into a head split, full-sequence attention on ``a_l/cp`` heads, all-to-all of the output
  (``b s_c a_l d_h e``) back; the backward the same two again. Not overlapped.
- ``a2a+p2p`` (hierarchical, ``--hierarchical-context-parallel-sizes c1 c2``): the a2a inside
  groups of ``c1`` (:func:`cp_a2a_size`: inside a node, heads divisible), a p2p ring over
  ``c2 = cp/c1`` of ``KV_c`` per step, overlapped as p2p.

The ring's steps also merge each partial output with its softmax statistics (an element-wise
pass over the local output per step) and launch one attention kernel per step.

Memory (modern-training.md 1.6): activations are the shard's (``/cp``); the CP buffers of the
one layer being run: p2p double-buffers two received K/V chunks and, in the backward, two dK/dV
(``4 KV_c``); all_gather holds the gathered K/V and dK/dV (``2 cp KV_c``); a2a the head-split
Q, K, V and output (the size of the local tensors); a2a+p2p both.
"""

from __future__ import annotations

import numpy as np

from costmodel.pricing import ALLTOALL, COLLECTIVE, MEMORY, P2P, Kernel
from costmodel.specs import CpCommType

P2P_T, ALL_GATHER, A2A, A2A_P2P = (int(CpCommType.P2P), int(CpCommType.ALL_GATHER),
                                   int(CpCommType.A2A), int(CpCommType.A2A_P2P))


def cp_a2a_size(gpus_per_node: int, heads: int, kv_heads: int, tp, cp) -> np.ndarray:
    """The all-to-all group of hierarchical CP (``c1`` of ``--hierarchical-context-parallel-
    sizes c1 c2``): the largest power of two below ``cp`` that divides it, keeps ``tp * c1``
    inside a node and divides the local attention and KV heads; 1 where there is none."""
    tp = np.asarray(tp, dtype=np.int64)
    cp = np.asarray(cp, dtype=np.int64)
    t = np.maximum(tp, 1)
    a_l = heads // t
    g_l = np.maximum(1, kv_heads // t)
    out = np.ones(np.broadcast(tp, cp).shape, dtype=np.int64)
    c = 2
    while c < max(int(np.max(cp, initial=1)), 2):
        ok = ((cp % c == 0) & (c < cp) & (tp * c <= gpus_per_node) & (a_l % c == 0)
              & (g_l % c == 0))
        out = np.where(ok, c, out)
        c *= 2
    return out


def kv_chunk_bytes(sh, act_bytes) -> np.ndarray:
    """``KV_c``: K and V of one rank's local tokens (``2 b s_c g_l d_h e``)."""
    g_l = np.maximum(1.0, sh.kv_heads / sh.tp)
    return 2.0 * sh.tokens * g_l * sh.head_dim * act_bytes


def cp_table(sh, act_bytes):
    """The CP attention communication's kernels (zero-sized where ``cp = 1``): ring sends,
    all-gather / reduce-scatter, all-to-alls, the per-step output correction. Axes: ``cp``
    (the whole CP group), ``cp_a2a`` and ``cp_ring`` (hierarchical CP's two levels)."""
    on = sh.cp_ranks > 1
    ct = sh.cp_type
    kv = kv_chunk_bytes(sh, act_bytes)
    a_l = sh.heads / sh.tp
    g_l = np.maximum(1.0, sh.kv_heads / sh.tp)
    qkv = sh.tokens * (a_l + 2.0 * g_l) * sh.head_dim * act_bytes
    out = sh.tokens * a_l * sh.head_dim * act_bytes
    ring = on & ((ct == P2P_T) | (ct == A2A_P2P))
    steps = sh.cp_steps
    ag = on & (ct == ALL_GATHER)
    a2a = on & (ct == A2A)
    hier = on & (ct == A2A_P2P)
    zero = np.zeros(np.shape(on))
    return (
        Kernel("cp.kv", P2P, nbytes=np.where(ring, kv, zero), group="cp_ring", when=ring),
        Kernel("cp.kv.bwd", P2P, nbytes=np.where(ring, 2.0 * kv, zero), group="cp_ring",
               when=ring),
        Kernel("cp.allgather", COLLECTIVE, nbytes=np.where(ag, sh.cp * kv, zero),
               collective="allgather", group="cp", when=ag),
        Kernel("cp.reducescatter", COLLECTIVE, nbytes=np.where(ag, sh.cp * kv, zero),
               collective="reducescatter", group="cp", when=ag),
        Kernel("cp.a2a.qkv", ALLTOALL, nbytes=np.where(a2a, qkv, zero), group="cp", when=a2a),
        Kernel("cp.a2a.out", ALLTOALL, nbytes=np.where(a2a, out, zero), group="cp", when=a2a),
        Kernel("cp.h2a.qkv", ALLTOALL, nbytes=np.where(hier, qkv, zero), group="cp_a2a",
               when=hier),
        Kernel("cp.h2a.out", ALLTOALL, nbytes=np.where(hier, out, zero), group="cp_a2a",
               when=hier),
        # the ring merges each step's partial output with the running one through the softmax
        # statistics: read both outputs, write one (3 passes over the local output) per step
        Kernel("cp.correction", MEMORY, nbytes=np.where(ring, 3.0 * out * (steps - 1.0), zero),
               kernels=np.where(ring, steps - 1.0, 1.0), when=ring),
    )


def cp_exposed_s(times, sh, attn_f, attn_b, kernel_overhead_s, exposed, eff
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) CP time of one layer's attention on the critical path, beyond the
    attention kernels themselves: ring transfers a step's attention does not hide, the
    unoverlapped all-gather / reduce-scatter / all-to-alls, the ring's extra kernel launches
    and output corrections. ``attn_f`` / ``attn_b``: the rank's whole attention kernel
    times."""
    on = sh.cp_ranks > 1
    ct = sh.cp_type
    steps = sh.cp_steps
    ring = on & ((ct == P2P_T) | (ct == A2A_P2P))
    n = np.maximum(steps - 1.0, 0.0)
    per_f = attn_f / np.maximum(steps, 1.0)
    per_b = attn_b / np.maximum(steps, 1.0)
    ring_f = n * (exposed(times["cp.kv"], per_f, eff) + kernel_overhead_s) + times["cp.correction"]
    ring_b = n * (exposed(times["cp.kv.bwd"], per_b, eff) + kernel_overhead_s)
    ag_f = times["cp.allgather"]
    ag_b = times["cp.allgather"] + times["cp.reducescatter"]
    a2a = times["cp.a2a.qkv"] + times["cp.a2a.out"]
    h2a = times["cp.h2a.qkv"] + times["cp.h2a.out"]
    fwd = np.where(ring, ring_f, 0.0) + np.where(ct == ALL_GATHER, ag_f, 0.0) \
        + np.where(ct == A2A, a2a, 0.0) + np.where(ct == A2A_P2P, h2a, 0.0)
    bwd = np.where(ring, ring_b, 0.0) + np.where(ct == ALL_GATHER, ag_b, 0.0) \
        + np.where(ct == A2A, a2a, 0.0) + np.where(ct == A2A_P2P, h2a, 0.0)
    return np.where(on, fwd, 0.0), np.where(on, bwd, 0.0)


def cp_buffer_bytes(sh, act_bytes) -> np.ndarray:
    """The CP buffers of the layer being run (see the module docstring)."""
    on = sh.cp_ranks > 1
    ct = sh.cp_type
    kv = kv_chunk_bytes(sh, act_bytes)
    a_l = sh.heads / sh.tp
    g_l = np.maximum(1.0, sh.kv_heads / sh.tp)
    heads = sh.tokens * (2.0 * a_l + 2.0 * g_l) * sh.head_dim * act_bytes
    buf = np.where(ct == P2P_T, 4.0 * kv,
                   np.where(ct == ALL_GATHER, 2.0 * sh.cp * kv,
                            np.where(ct == A2A, heads, heads + 4.0 * kv)))
    return np.where(on, buf, 0.0)


__all__ = ["cp_a2a_size", "cp_buffer_bytes", "cp_exposed_s", "cp_table", "kv_chunk_bytes"]
