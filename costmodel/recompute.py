"""Selective recompute by modules: Megatron-Core's ``--recompute-granularity selective
--recompute-modules ...`` (``ParallelConfig.recompute_modules``), in time and memory.

Megatron-Core core_v0.16.1 (``megatron/core/transformer``) checkpoints, per module name:

- ``core_attn``: the attention core (``attention.py`` ``_checkpointed_attention_forward``);
  the default and what ``recompute: selective`` always meant here. Its rows are the layer
  table's own (``layers.attention_block``); this module only switches them off where the set
  leaves the core out.
- ``mlp``: the dense MLP (``transformer_layer.py``: ``recompute_mlp`` for non-MoE layers,
  ``tensor_parallel.checkpoint`` of the MLP). With Transformer Engine the pre-MLP norm is
  fused into ``linear_fc1`` (``TELayerNormColumnParallelLinear``; ``pre_mlp_layernorm`` is
  ``IdentityOp`` in ``gpt_layer_specs.py``), so the checkpoint's input is the residual
  stream, which the layer keeps anyway; freed are the FC1 input (the norm's output, 2sbh,
  the fp8 cast with fp8 linears), the activation function's input (4sbf gated, 2sbf plain)
  and the FC2 input (2sbf) -- Korthikanti et al. 2022 (arXiv:2205.05198) section 4.1's MLP
  terms, as :func:`costmodel.memory.layer_activation_bytes` counts them. The backward re-runs
  the MLP's forward: the norm, FC1, the activation, FC2 and their TP collectives (with
  sequence parallelism the FC1 input's all-gather and the FC2 output's reduce-scatter, else
  FC2's all-reduce; Shoeybi et al. 2019), and the fp8 casts of the two GEMM inputs.
- ``layernorm``: output-discarding checkpoints of ``input_layernorm`` and
  ``pre_mlp_layernorm`` where they are modules of their own (``transformer_layer.py``: not
  ``IdentityOp``). Under the TE spec that is every layer's pre-MLP norm in a MoE model
  (``backend.layer_norm() if num_experts``: the router reads the normed input) and MLA's
  input norm; a dense Llama-style layer has none (both fused into the next linear), so the
  rules do not offer it there. Freed: the norm's output, 2sbh (Korthikanti's "input to the
  linear", the fp8 cast with fp8 linears), split by t with SP; re-run: the norm's forward,
  one pass over 2sbh in and out. (In a MoE model the dense layers' MLP checkpoint then keeps
  its input, the separate norm's output.)
- ``moe_act``: the experts' activation function, output-discarding (``moe/experts.py``,
  grouped GEMM only): freed the FC2 input of each routed copy (f_e / etp per copy, the fp8
  cast with fp8 linears, as :func:`costmodel.moe.moe_activation_delta` counts it); re-run:
  the activation over the routed copies (gated: read 2 f_e, write f_e).

Not modelled (not offered by the search; ``search_spaces.rules`` refuses them): ``moe`` (the
whole MoE layer, dispatch all-to-alls included), ``shared_experts``, ``mla_up_proj``.

The recomputed module's activations of the layer in backward are live on top of the stored
ones (:attr:`RecomputeCosts.transient_bytes`), as the full layer's are for full recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.pricing import MEMORY, Kernel
from costmodel.specs import RECOMPUTE_MODULES

__all__ = ["ModuleMasks", "RecomputeCosts", "core_kept", "module_masks", "module_rows",
           "module_saved_bytes", "module_tp_s"]

_FORWARD, _RECOMPUTE = "forward", "recompute"


def _has(name: str) -> np.ndarray:
    """Codes of RECOMPUTE_MODULES whose set names ``name``."""
    return np.array([name in v.split("+") for v in RECOMPUTE_MODULES])


@dataclass(frozen=True)
class ModuleMasks:
    """Per configuration: which modules selective recompute checkpoints (all False where
    recompute is not selective)."""

    core_attn: np.ndarray
    mlp: np.ndarray
    layernorm: np.ndarray
    moe_act: np.ndarray

    @property
    def any_module(self) -> bool:
        return bool(np.any(self.mlp) or np.any(self.layernorm) or np.any(self.moe_act))


def module_masks(batch) -> ModuleMasks:
    """The masks of ``batch`` (a ConfigBatch; ``recompute_modules`` codes)."""
    sel = np.asarray(batch.recompute) == 1
    code = np.asarray(getattr(batch, "recompute_modules", np.zeros(np.shape(sel), int)))
    return ModuleMasks(*(sel & _has(n)[code] for n in ("core_attn", "mlp", "layernorm",
                                                       "moe_act")))


def _fractions(model) -> tuple[float, float, float]:
    """Under Megatron-Core's TE layer spec (``gpt_layer_specs.py``), as shares of the model's
    layers: (dense-MLP layers, dense-MLP layers whose norm is fused into FC1 so that the
    MLP checkpoint frees the norm's output too, norm modules of their own per layer). A MoE
    model's every layer has a ``pre_mlp_layernorm`` module (``backend.layer_norm() if
    num_experts``), MLA an ``input_layernorm``; a dense Llama-style layer has none."""
    if model.moe is None:
        dense, fused = 1.0, 1.0
        norms = 0.0
    else:
        dense = 1.0 - model.moe_layers / model.num_layers
        fused = 0.0  # the norm's output is the MLP checkpoint's input, which stays
        norms = 1.0
    return dense, fused, norms + (1.0 if model.mla is not None else 0.0)


def module_rows(model, sh, fw, dev, masks: ModuleMasks, moe_shape=None
                ) -> tuple[list[Kernel], list[tuple]]:
    """The kernels and op rows ``(name, kernel, pass, category, repeat, parts, when)`` (the
    fields of ``layers.Op``) the module sets add to the layer's recompute pass: the layer's
    own FC1 and FC2 kernels where the MLP is re-run, and their memory-bound passes."""
    dense, fused, norms = _fractions(model)
    moe_frac = 0.0 if model.moe is None else model.moe_layers / model.num_layers
    t, h, f = sh.tp, sh.hidden, sh.ffn
    ea, tokens = dev.act_bytes, sh.tokens
    sp_split = np.where(sh.sp, t, 1.0)
    traffic = fw.kernels.elementwise_traffic
    gate = 3.0 if model.gated_mlp else 2.0  # the activation reads up (2f gated) and writes f
    norm_pass = 2.0 * tokens * h * ea / sp_split  # read the input, write the output
    kerns = [Kernel("rc.mlp_elementwise", MEMORY, kernels=2.0,
                    nbytes=traffic * (fused * norm_pass + gate * tokens * f * ea / t)),
             Kernel("rc.mlp_fp8_cast", MEMORY, kernels=2.0, when=dev.fp8,
                    nbytes=4.0 * dev.cast_scale * tokens * (h / sp_split + f / t)),
             Kernel("rc.norm", MEMORY, kernels=1.0, nbytes=traffic * norm_pass)]
    ops = [("fc1.rc_module", "fc1", _RECOMPUTE, "linear", dense, (), masks.mlp),
           ("fc2.rc_module", "fc2", _RECOMPUTE, "linear", dense, (), masks.mlp),
           ("mlp_elementwise.rc_module", "rc.mlp_elementwise", _RECOMPUTE, "elementwise",
            dense, (), masks.mlp),
           ("mlp_fp8_cast.rc_module", "rc.mlp_fp8_cast", _RECOMPUTE, "cast", dense, (),
            masks.mlp),
           ("norm.rc_module", "rc.norm", _RECOMPUTE, "elementwise", norms, (),
            masks.layernorm)]
    if moe_shape is not None:
        copies = moe_shape.routed * moe_shape.etp
        kerns.append(Kernel("rc.moe_act", MEMORY, kernels=1.0,
                            nbytes=traffic * gate * copies * moe_shape.width * ea))
        ops.append(("moe_act.rc_module", "rc.moe_act", _RECOMPUTE, "elementwise", moe_frac,
                    (), masks.moe_act))
    return kerns, ops


def core_kept(masks: ModuleMasks, rc) -> np.ndarray:
    """Where the layer's attention-core recompute rows run: everywhere but the selective
    configurations whose module set leaves ``core_attn`` out."""
    return (np.asarray(rc) != 1) | masks.core_attn


def module_tp_s(times, sh, masks: ModuleMasks, model, fw, eff, tp_comm_overlap: bool,
                exposed):
    """The recomputed MLP's TP collectives on the critical path: FC1's input all-gather and
    FC2's reduce-scatter with SP, FC2's all-reduce without (each with the TP rendezvous);
    with tp-comm-overlap (SP) pipelined with their GEMMs as in the forward
    (``layers.tp_exposed_s``; ``exposed`` is its ``layers.exposed``)."""
    dense = _fractions(model)[0]
    ar, ag, rs = times["tp.allreduce"], times["tp.allgather"], times["tp.reducescatter"]
    cs = fw.tp.collective_s
    plain = np.where(sh.sp, ag + rs + 2.0 * cs, ar + cs)
    if tp_comm_overlap:
        over = exposed(ag + cs, times["fc1"], eff) + exposed(rs + cs, times["fc2"], eff)
        plain = np.where(sh.sp, np.minimum(over, plain), plain)
    return np.where(masks.mlp & (sh.tp_ranks > 1), dense * plain, 0.0)


@dataclass(frozen=True)
class RecomputeCosts:
    """What the module sets save of a layer's stored activations (bytes per micro-batch on
    one TP rank) and hold while the layer's backward re-runs them."""

    saved_bytes: np.ndarray
    transient_bytes: np.ndarray


def module_saved_bytes(model, seq, samples, sh, masks: ModuleMasks, act_bytes, fp8,
                       moe_shape=None) -> RecomputeCosts:
    """Activation bytes the module sets free per layer (averaged over the model's layers),
    in the units of :func:`costmodel.memory.layer_activation_bytes` (``seq`` x ``samples``
    its tokens: a CP rank's share)."""
    dense, fused, norms = _fractions(model)
    moe_frac = 0.0 if model.moe is None else model.moe_layers / model.num_layers
    e = np.asarray(act_bytes, dtype=float) / 2.0  # the coefficients are bytes at 16 bits
    q = np.where(np.asarray(fp8, dtype=bool), 0.5, 1.0)  # a linear's saved input
    t = np.asarray(sh.tp, dtype=float)
    sp_split = np.where(sh.sp, t, 1.0)
    sbh = float(seq) * np.asarray(samples, dtype=float) * model.hidden_size
    sbf = float(seq) * np.asarray(samples, dtype=float) * model.ffn_hidden_size
    act_in = 4.0 if model.gated_mlp else 2.0
    mlp = dense * (fused * 2.0 * q * sbh / sp_split + (act_in + 2.0 * q) * sbf / t)
    norm = norms * 2.0 * q * sbh / sp_split
    moe_act = 0.0
    if moe_shape is not None:
        moe_act = moe_frac * moe_shape.routed * moe_shape.etp * 2.0 * q * moe_shape.width
    saved = e * (np.where(masks.mlp, mlp, 0.0) + np.where(masks.layernorm, norm, 0.0)
                 + np.where(masks.moe_act, moe_act, 0.0))
    # one layer's recomputed module outputs live during its backward (all of the set's:
    # an upper bound, a layer's MLP and norms are re-run one after the other)
    return RecomputeCosts(saved, saved)
