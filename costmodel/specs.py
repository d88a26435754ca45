"""Frozen, validated input records: model, GPU, cluster, training, parallel configuration.

Everything inside is SI: bytes, seconds, FLOP/s, bytes per second. File formats (contract.md
section 2) are mapped to these records by :mod:`costmodel.loaders`; catalogs live in
:mod:`costmodel.hardware` and :mod:`costmodel.models_catalog`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

from costmodel.dimensions import (
    BOOL,
    CHOICE,
    INT,
    STRING,
    Column,
    Dimension,
    OptunaParam,
    cp_comm_label,
    default_cp,
    default_cp_comm_types,
    default_ep,
    default_etp,
    default_micro_batch_sizes,
    default_pp,
    default_precision,
    default_recompute_modules,
    default_recompute_num_layers,
    default_tp,
    default_virtual_stages,
    default_zero_stages,
    dim,
    dimensions_of,
    layout_token,
    nccl_label,
    schedule_label,
    schedule_token,
    stage_plan_label,
    yes_dash,
)
from costmodel.errors import InputError, did_you_mean
from costmodel.nccl_grammar import parse_nccl_setting

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev")
#: Megatron-Core --cp-comm-type values (TransformerConfig.cp_comm_type; TE's dispatcher
#: spells the all-gather type ``all_gather``): ring of K/V sends overlapped with attention,
#: all-gather of K/V, Ulysses all-to-all, hierarchical all-to-all inside + ring across
CP_COMM_TYPES: tuple[str, ...] = ("p2p", "all_gather", "a2a", "a2a+p2p")
# Where the pipeline's layers sit (costmodel.stages.stage_plan): Megatron's default split, or
# the first and last stage's layer counts that balance the stages once the embedding and the
# LM head + loss are counted in layers' worth of work (costmodel.schedule.balanced_layers)
STAGE_PLANS: tuple[str, ...] = ("default", "balanced")
# Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer): "off" keeps the
# fp32 Adam moments and main gradients; "bf16_moments" stores exp_avg and exp_avg_sq in bf16
# (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, DeepSeek-V3 3.3.3); "bf16_moments_grads"
# also keeps bf16 main gradients (--main-grads-dtype bf16)
OPTIMIZER_DTYPES: tuple[str, ...] = ("off", "bf16_moments", "bf16_moments_grads")
# With recompute selective, the modules Megatron-Core checkpoints (--recompute-modules, the
# names joined by "+"; costmodel.recompute): the attention core (its default), the dense MLP,
# the norms that are modules of their own, the MoE experts' activation function
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "mlp", "core_attn+mlp", "layernorm",
                                      "moe_act", "layernorm+moe_act")


class Precision(IntEnum):
    """Codes of ``ConfigBatch.precision``: indexes into :data:`PRECISIONS`."""

    FP32 = 0
    TF32 = 1
    FP16 = 2
    BF16 = 3
    FP8 = 4


class Recompute(IntEnum):
    """Codes of ``ConfigBatch.recompute``: indexes into :data:`RECOMPUTE`."""

    NONE = 0
    SELECTIVE = 1
    FULL = 2


class CpCommType(IntEnum):
    """Codes of ``ConfigBatch.cp_comm_type``: indexes into :data:`CP_COMM_TYPES`."""

    P2P = 0
    ALL_GATHER = 1
    A2A = 2
    A2A_P2P = 3


def precision_label(value: Any, config: Mapping[str, Any]) -> str:
    """The front table's precision cell; ``+m16`` (bf16 moments), ``+mg16`` (and gradients)."""
    opt = config.get("precision_aware_optimizer", "off")
    return str(value) + {"off": "", "bf16_moments": "+m16"}.get(opt, "+mg16")


class OptimizerDtype(IntEnum):
    """Codes of ``ConfigBatch.precision_aware_optimizer``: indexes into
    :data:`OPTIMIZER_DTYPES`."""

    OFF = 0
    BF16_MOMENTS = 1
    BF16_MOMENTS_GRADS = 2


class RecomputeModules(IntEnum):
    """Codes of ``ConfigBatch.recompute_modules``: indexes into :data:`RECOMPUTE_MODULES`."""

    CORE_ATTN = 0
    MLP = 1
    CORE_ATTN_MLP = 2
    LAYERNORM = 3
    MOE_ACT = 4
    LAYERNORM_MOE_ACT = 5


def recompute_label(value: Any, config: Mapping[str, Any]) -> str:
    """The front table's recompute cell: ``full/N`` for N recomputed layers per stage,
    ``selective/<modules>`` for modules other than the attention core."""
    n = config.get("recompute_num_layers", 0)
    if value == "full" and n:
        return f"{value}/{n}"
    mods = config.get("recompute_modules", "core_attn")
    return f"{value}/{mods}" if value == "selective" and mods != "core_attn" else str(value)


class Schedule(IntEnum):
    """Codes of ``ConfigBatch.schedule``: indexes into :data:`SCHEDULES`."""

    GPIPE = 0
    ONE_F_ONE_B = 1
    INTERLEAVED = 2
    ZB_H1 = 3
    ZB_V = 4
    DUALPIPE_V = 5


class StagePlanCode(IntEnum):
    """Codes of ``ConfigBatch.stage_plan``: indexes into :data:`STAGE_PLANS`."""

    DEFAULT = 0
    BALANCED = 1


NCCL_ALGOS: tuple[str, ...] = ("auto", "ring", "tree", "nvls", "nvlstree", "collnet", "pat")
NCCL_PROTOS: tuple[str, ...] = ("auto", "simple", "ll", "ll128")


def nccl_algo_value(value: Any, field: str) -> str:
    """An ``NCCL_ALGO`` value checked by :mod:`costmodel.nccl_grammar` (InputError naming
    ``field``), normalised (stripped, lower case): the ``parse`` of ``nccl_algo``."""
    parse_nccl_setting(value, "algo", field)
    return value.strip().lower()


def nccl_proto_value(value: Any, field: str) -> str:
    """The same for ``NCCL_PROTO`` (``nccl_proto``)."""
    parse_nccl_setting(value, "proto", field)
    return value.strip().lower()


def _nccl_grammar_text(tokens: tuple[str, ...]) -> str:
    names = ", ".join(v for v in tokens if v != "auto")
    return f"auto, or {names} in NCCL's grammar (a,b  ^a  allreduce:a;allgather:b)"
INTRA_FABRICS: tuple[str, ...] = ("nvswitch", "nvlink", "pcie")
INTER_FABRICS: tuple[str, ...] = ("infiniband", "roce", "ethernet", "none")
# Training frameworks whose runtime behaviour the model distinguishes (calibration.FRAMEWORKS):
# Megatron-LM / Megatron-Core, Megatron-DeepSpeed (DeepSpeed pipeline engine and ZeRO), FSDP
# (llm-foundry), torchtitan (FSDP2 with its op-level selective activation checkpointing).
FRAMEWORKS: tuple[str, ...] = ("megatron", "deepspeed", "fsdp", "torchtitan")
# frameworks that pipeline their TP collectives with the GEMMs they feed (tp_comm_overlap):
# Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers) and torchtitan's async TP
# (compile.enable_async_tensor_parallel: Inductor's micro-pipeline TP pass splits each
# all-gather -> matmul and matmul -> reduce-scatter over SymmetricMemory copy-engine p2p;
# torchtitan 0.3.0 config_registry.llama3_405b enables it with compile)
TP_COMM_OVERLAP_FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan")
FP8_RECIPE_NAMES: tuple[str, ...] = ("delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4")


def _int(section: str, name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (isinstance(value, float) and not math.isfinite(value)) or int(value) != value:
        raise InputError(f"{section}.{name}", f"must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{section}.{name}", f"must be >= {minimum}, got {value!r}")
    return int(value)


def _pos(section: str, name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise InputError(f"{section}.{name}", f"must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{section}.{name}", f"must be {'>= 0' if allow_zero else '> 0'}, "
                                              f"got {value!r}")
    return float(value)


def _bool(section: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{section}.{name}", f"must be true or false, got {value!r}")
    return value


def _choice(section: str, name: str, value: Any, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in valid:
        raise InputError(f"{section}.{name}", f"unknown value {value!r}",
                         did_you_mean(str(value), valid))
    return value.lower()


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


class FrozenMap(Mapping):
    """A read-only, hashable, picklable mapping (unlike ``types.MappingProxyType``)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_items", dict(items))

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __reduce__(self):
        return (FrozenMap, (self._items,))


# --------------------------------------------------------------------------------------------
ROUTERS: tuple[str, ...] = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoESpec:
    """The Mixture-of-Experts block that replaces the MLP of some layers (modern-training.md
    section 2.1; Megatron-Core ``--num-experts`` ... ``--moe-layer-freq``).

    ``dense_layers``: the first layers keep a dense MLP (DeepSeek-V3 ``first_k_dense_replace``
    = 3); ``layer_freq``: of the rest, layer i is MoE when ``(i - dense_layers) % layer_freq
    == 0`` (Megatron ``--moe-layer-freq N``; Llama 4 ``interleave_moe_layer_step``).
    ``capacity_factor`` None = dropless. ``shared_ffn_hidden_size`` is the total width of the
    shared experts (Megatron ``--moe-shared-expert-intermediate-size``). ``expert_bias``:
    biases on the expert linears (GPT-OSS); ``router_bias``: a bias on the router (GPT-OSS);
    ``shared_expert_gate``: Qwen2-MoE's sigmoid gate (h parameters). ``activation_clamp``:
    the expert SwiGLU's clamp limit (GPT-OSS ``swiglu_limit`` 7.0; Megatron
    ``activation_func_clamp_value``), None = no clamp.
    """

    num_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    shared_experts: int = 0
    shared_ffn_hidden_size: int = 0
    dense_layers: int = 0
    layer_freq: int = 1
    capacity_factor: float | None = None
    router: str = "softmax"
    router_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    mtp_layers: int = 0
    activation_clamp: float | None = None

    def __post_init__(self) -> None:
        s = "model.moe"
        for name in ("num_experts", "top_k", "expert_ffn_hidden_size", "layer_freq"):
            _set(self, name, _int(s, name, getattr(self, name)))
        for name in ("shared_experts", "shared_ffn_hidden_size", "dense_layers", "mtp_layers"):
            _set(self, name, _int(s, name, getattr(self, name), minimum=0))
        if self.top_k > self.num_experts:
            raise InputError("model.moe.top_k", f"{self.top_k} exceeds num_experts="
                             f"{self.num_experts}", "a token picks top_k of the routed experts")
        if (self.shared_experts == 0) != (self.shared_ffn_hidden_size == 0):
            raise InputError("model.moe.shared_ffn_hidden_size",
                             f"{self.shared_ffn_hidden_size} with shared_experts="
                             f"{self.shared_experts}", "give both or neither")
        if self.capacity_factor is not None:
            _set(self, "capacity_factor", _pos(s, "capacity_factor", self.capacity_factor))
        if self.activation_clamp is not None:
            _set(self, "activation_clamp", _pos(s, "activation_clamp", self.activation_clamp))
        _set(self, "router", _choice(s, "router", self.router, ROUTERS))
        for name in ("router_bias", "expert_bias", "shared_expert_gate"):
            _set(self, name, _bool(s, name, getattr(self, name)))

    def is_moe_layer(self, i: int) -> bool:
        return i >= self.dense_layers and (i - self.dense_layers) % self.layer_freq == 0

    def moe_layers(self, num_layers: int) -> int:
        return sum(self.is_moe_layer(i) for i in range(num_layers))

    def megatron_layer_freq(self, num_layers: int) -> str | int:
        """``--moe-layer-freq``: an int when every layer from the first is MoE on a stride,
        else the list expression Megatron parses (``([0]*3+[1]*58)``)."""
        if self.dense_layers == 0:
            return self.layer_freq
        flags = [int(self.is_moe_layer(i)) for i in range(num_layers)]
        if self.layer_freq == 1:
            return f"([0]*{self.dense_layers}+[1]*{num_layers - self.dense_layers})"
        return "[" + ",".join(str(x) for x in flags) + "]"


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3; modern-training.md section 2.6):
    ``q_lora_rank`` None = no query compression."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        s = "model.mla"
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _set(self, name, _int(s, name, getattr(self, name)))
        if self.q_lora_rank is not None:
            _set(self, "q_lora_rank", _int(s, "q_lora_rank", self.q_lora_rank))

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params(self, h: int, a: int) -> int:
        """q (LoRA or plain), kv (joint latent + decoupled RoPE key, its norm, up-projection),
        output: Megatron theoretical_memory_usage.py; HF DeepseekV3Attention."""
        q = (h * a * self.qk_head_dim if self.q_lora_rank is None else
             h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * self.qk_head_dim)
        kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
              + self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim))
        return q + kv + a * self.v_head_dim * h


# --------------------------------------------------------------------------------------------
#: Position encodings a model may use (ModelSpec.position_embedding).
POSITIONS: tuple[str, ...] = ("rope", "learned", "alibi", "none")
# The MLP's activation function (with gated_mlp: the gate's, GLU style: SwiGLU = silu,
# GeGLU = gelu / gelu_tanh): gelu is the exact (erf) GELU, gelu_tanh its tanh approximation
# (HF gelu_new / gelu_pytorch_tanh), quick_gelu x*sigmoid(1.702x), squared_relu relu(x)^2.
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu", "gelu_tanh", "quick_gelu", "relu",
                                "squared_relu")


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only (or encoder) transformer's shape (contract.md section 2)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    num_kv_heads: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = False
    head_dim: int | None = None
    learned_position_embeddings: bool = False
    max_position_embeddings: int | None = None
    linear_bias: bool = False
    normalization: str = "rmsnorm"
    causal: bool = True  # decoder (causal mask); False for encoders such as BERT
    source: str = ""
    moe: MoESpec | None = None  # Mixture-of-Experts layers (None: dense)
    mla: MLASpec | None = None  # multi-head latent attention (None: MHA/GQA)
    qk_norm: bool | None = None  # RMSNorm on each q and k head (Qwen3): 2 d_h; None: unknown
    attention_sinks: bool = False  # a learned logit per head (GPT-OSS): a per layer
    # Model-definition facts (read from a Hugging Face config.json; None: not known). The
    # launch flags use them so the framework trains the model that was scored
    # (optimizer.launch.model_facts); the ones that change a parameter count are counted.
    position_embedding: str | None = None  # rope | learned | alibi | none
    rope_theta: float | None = None  # the rotary base (HF rope_theta)
    rope_scaling_factor: float | None = None  # Llama 3.1's "llama3" rope scaling factor
    norm_eps: float | None = None  # the normalisation epsilon
    qkv_bias: bool | None = None  # q/k/v biases without the other linear ones (Qwen2): (a+2g)d_h
    norms_per_layer: int | None = None  # None: 2; 1 for parallel blocks (GPT-J, Falcon-7B,
    #                                     Phi), 4 for Gemma 2/3's sandwich norms
    activation: str | None = None  # ACTIVATIONS; None: silu when gated (SwiGLU), else gelu

    def __post_init__(self) -> None:
        s = "model"
        if not isinstance(self.name, str) or not self.name:
            raise InputError("model.name", f"must be a non-empty string, got {self.name!r}")
        for name in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                     "vocab_size"):
            _set(self, name, _int(s, name, getattr(self, name)))
        kv = self.num_attention_heads if self.num_kv_heads is None else self.num_kv_heads
        _set(self, "num_kv_heads", _int(s, "num_kv_heads", kv))
        if self.num_attention_heads % self.num_kv_heads:
            raise InputError("model.num_kv_heads",
                             f"{self.num_kv_heads} does not divide num_attention_heads="
                             f"{self.num_attention_heads}", "GQA needs heads % kv_heads == 0")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise InputError("model.hidden_size",
                                 f"{self.hidden_size} is not divisible by num_attention_heads="
                                 f"{self.num_attention_heads}", "set head_dim explicitly or fix "
                                 "the head count")
            _set(self, "head_dim", self.hidden_size // self.num_attention_heads)
        else:
            _set(self, "head_dim", _int(s, "head_dim", self.head_dim))
        for name in ("gated_mlp", "tied_embeddings", "learned_position_embeddings",
                     "linear_bias", "causal"):
            _set(self, name, _bool(s, name, getattr(self, name)))
        if self.max_position_embeddings is not None:
            _set(self, "max_position_embeddings",
                 _int(s, "max_position_embeddings", self.max_position_embeddings))
        _set(self, "normalization", _choice(s, "normalization", self.normalization,
                                            ("rmsnorm", "layernorm")))
        for name in ("qk_norm", "attention_sinks", "qkv_bias"):
            if getattr(self, name) is not None:
                _set(self, name, _bool(s, name, getattr(self, name)))
        if self.position_embedding is not None:
            _set(self, "position_embedding", _choice(s, "position_embedding",
                                                     self.position_embedding, POSITIONS))
            if (self.position_embedding == "learned") != self.learned_position_embeddings:
                raise InputError("model.position_embedding",
                                 f"{self.position_embedding!r} contradicts "
                                 f"learned_position_embeddings={self.learned_position_embeddings}",
                                 "learned positions <=> position_embedding: learned")
        for name in ("rope_theta", "rope_scaling_factor", "norm_eps"):
            if getattr(self, name) is not None:
                _set(self, name, _pos(s, name, getattr(self, name)))
        if self.norms_per_layer is not None:
            _set(self, "norms_per_layer", _int(s, "norms_per_layer", self.norms_per_layer))
        if self.activation is not None:
            _set(self, "activation", _choice(s, "activation", self.activation, ACTIVATIONS))
        if self.moe is not None:
            if not isinstance(self.moe, MoESpec):
                raise InputError("model.moe", "must be a MoE mapping")
            if self.moe.dense_layers >= self.num_layers:
                raise InputError("model.moe.dense_layers",
                                 f"{self.moe.dense_layers} leaves no MoE layer of num_layers="
                                 f"{self.num_layers}", "dense_layers < num_layers")
        if self.mla is not None and not isinstance(self.mla, MLASpec):
            raise InputError("model.mla", "must be an MLA mapping")

    # Parameter counts (cost-model.md section 1; Narayanan et al. 2021 eq. 2 generalised).
    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections: 2*h*d_h*(a + g) (+ biases)."""
        h, d, a, g = self.hidden_size, self.head_dim, self.num_attention_heads, self.num_kv_heads
        if self.mla is not None:
            return self.mla.params(h, a)
        p = 2 * h * d * (a + g)
        if self.linear_bias:
            p += a * d + 2 * g * d + h
        elif self.qkv_bias:
            p += a * d + 2 * g * d
        if self.qk_norm:
            p += 2 * d
        if self.attention_sinks:
            p += a
        return p

    @property
    def mlp_params(self) -> int:
        """2*h*f plain, 3*h*f gated (SwiGLU) (+ biases)."""
        p = (3 if self.gated_mlp else 2) * self.hidden_size * self.ffn_hidden_size
        if self.linear_bias:
            p += self.ffn_hidden_size * (2 if self.gated_mlp else 1) + self.hidden_size
        return p

    @property
    def norm_params_per_layer(self) -> int:
        n = 2 if self.norms_per_layer is None else self.norms_per_layer
        return n * self.hidden_size * (2 if self.normalization == "layernorm" else 1)

    @property
    def params_per_layer(self) -> int:
        return self.attention_params + self.mlp_params + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def position_params(self, seq_length: int) -> int:
        return seq_length * self.hidden_size if self.learned_position_embeddings else 0

    def total_params(self, seq_length: int = 0) -> int:
        """All parameters: layers, input embedding, untied output layer, final norm (MTP
        modules not counted: :attr:`mtp_params`)."""
        final_norm = self.hidden_size * (2 if self.normalization == "layernorm" else 1)
        out = 0 if self.tied_embeddings else self.embedding_params
        return (self.layers_params + self.embedding_params + out
                + final_norm + self.position_params(seq_length))

    # ---- Mixture of Experts (modern-training.md section 2.1) ------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a MoE block."""
        return 0 if self.moe is None else self.moe.moe_layers(self.num_layers)

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    def _expert_params(self, width: int) -> int:
        g = 3 if self.gated_mlp else 2
        p = g * self.hidden_size * width
        if self.moe is not None and self.moe.expert_bias:
            p += width * (2 if self.gated_mlp else 1) + self.hidden_size
        return p

    @property
    def routed_expert_params(self) -> int:
        """One MoE layer's routed experts: E x 3 h f_e (sharded over ep x etp)."""
        m = self.moe
        return 0 if m is None else m.num_experts * self._expert_params(m.expert_ffn_hidden_size)

    @property
    def moe_dense_params(self) -> int:
        """One MoE layer's non-routed MLP parameters: shared experts (3 h f_s, split by tp),
        the router (h E, + E with a bias; replicated) and Qwen2-MoE's shared gate (h)."""
        m = self.moe
        if m is None:
            return 0
        h = self.hidden_size
        p = h * m.num_experts + (m.num_experts if m.router_bias else 0)
        if m.shared_experts:
            p += self._expert_params(m.shared_ffn_hidden_size)
        if m.shared_expert_gate:
            p += h
        return p

    @property
    def moe_params_per_layer(self) -> int:
        """A MoE layer: attention, norms, experts, shared experts, router."""
        return (self.attention_params + self.norm_params_per_layer + self.routed_expert_params
                + self.moe_dense_params)

    @property
    def layers_params(self) -> int:
        if self.moe is None:
            return self.num_layers * self.params_per_layer
        return (self.dense_layers * self.params_per_layer
                + self.moe_layers * self.moe_params_per_layer)

    @property
    def expert_params(self) -> int:
        """All routed-expert parameters of the model (what ep x etp shards)."""
        return self.moe_layers * self.routed_expert_params

    def active_params(self, seq_length: int = 0) -> int:
        """Parameters a token uses: all but the routed experts it is not sent to."""
        if self.moe is None:
            return self.total_params(seq_length)
        m = self.moe
        unused = self.moe_layers * (m.num_experts - m.top_k) * self._expert_params(
            m.expert_ffn_hidden_size)
        return self.total_params(seq_length) - unused

    @property
    def mtp_params(self) -> int:
        """DeepSeek-V3's multi-token-prediction modules beyond the shared embedding and head:
        per module two RMSNorms, the 2h x h projection, one layer of the last layer's kind."""
        if self.moe is None or not self.moe.mtp_layers:
            return 0
        h = self.hidden_size
        per = 2 * h + 2 * h * h + self.moe_params_per_layer + h  # + the module's final norm
        return self.moe.mtp_layers * per


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Peaks are dense Tensor-Core FLOP/s per precision (no sparsity)."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    nvlink_bandwidth_bytes_per_s: float  # per GPU, one direction (0 if none)
    nvlink_links: int = 0
    sm_count: int = 108
    compute_capability: int = 80
    pcie_bandwidth_bytes_per_s: float = 32e9  # one direction, x16
    source: str = ""
    # dense FP4 Tensor-Core peak (NVFP4 / MXFP4), FLOP/s; None: no FP4 matrix type. Apart
    # from peak_flops_per_s: "fp4" is no training precision (NVFP4 GEMMs are an fp8 recipe)
    fp4_dense_peak_flops_per_s: float | None = None
    # the vendor's architecture name where compute_capability does not tell it (AMD: gfx942,
    # gfx950; their compute_capability is a placeholder); "" for NVIDIA
    arch: str = ""

    def __post_init__(self) -> None:
        s = f"gpu[{self.name}]"
        if self.fp4_dense_peak_flops_per_s is not None:
            _set(self, "fp4_dense_peak_flops_per_s",
                 _pos(s, "fp4_dense_peak_flops_per_s", self.fp4_dense_peak_flops_per_s))
        if not isinstance(self.arch, str):
            raise InputError(f"{s}.arch", f"must be a string, got {self.arch!r}")
        peaks = {}
        if not isinstance(self.peak_flops_per_s, Mapping) or not self.peak_flops_per_s:
            raise InputError(f"{s}.peak_flops_per_s", "must map precision -> FLOP/s")
        for k, v in self.peak_flops_per_s.items():
            peaks[_choice(s, "peak_flops_per_s", k, PRECISIONS)] = _pos(s, f"peak_flops_per_s.{k}", v)
        _set(self, "peak_flops_per_s", FrozenMap(peaks))
        _set(self, "memory_bytes", _pos(s, "memory_bytes", self.memory_bytes))
        _set(self, "memory_bandwidth_bytes_per_s",
             _pos(s, "memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s))
        _set(self, "nvlink_bandwidth_bytes_per_s",
             _pos(s, "nvlink_bandwidth_bytes_per_s", self.nvlink_bandwidth_bytes_per_s,
                  allow_zero=True))
        _set(self, "pcie_bandwidth_bytes_per_s",
             _pos(s, "pcie_bandwidth_bytes_per_s", self.pcie_bandwidth_bytes_per_s))
        _set(self, "nvlink_links", _int(s, "nvlink_links", self.nvlink_links, minimum=0))
        _set(self, "sm_count", _int(s, "sm_count", self.sm_count))
        _set(self, "compute_capability", _int(s, "compute_capability", self.compute_capability))

    def supports(self, precision: str) -> bool:
        return precision in self.peak_flops_per_s

    def peak(self, precision: str) -> float:
        return self.peak_flops_per_s[precision]


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IntraNodeSpec:
    """The fabric inside a node. Bandwidth is per GPU, one direction."""

    fabric: str = "nvswitch"
    bandwidth_bytes_per_s: float = 300e9
    latency_s: float = 0.7e-6

    def __post_init__(self) -> None:
        _set(self, "fabric", _choice("cluster.intra_node", "fabric", self.fabric, INTRA_FABRICS))
        _set(self, "bandwidth_bytes_per_s",
             _pos("cluster.intra_node", "bandwidth", self.bandwidth_bytes_per_s))
        _set(self, "latency_s", _pos("cluster.intra_node", "latency_s", self.latency_s,
                                     allow_zero=True))


@dataclass(frozen=True)
class InterNodeSpec:
    """The fabric between nodes: NICs per node, each NIC's bandwidth (one direction)."""

    fabric: str = "infiniband"
    nics_per_node: int = 8
    nic_bandwidth_bytes_per_s: float = 25e9
    oversubscription: float = 1.0
    latency_s: float = 5e-6

    def __post_init__(self) -> None:
        s = "cluster.inter_node"
        _set(self, "fabric", _choice(s, "fabric", self.fabric, INTER_FABRICS))
        _set(self, "nics_per_node", _int(s, "nics_per_node", self.nics_per_node, minimum=0))
        _set(self, "nic_bandwidth_bytes_per_s",
             _pos(s, "nic_bandwidth", self.nic_bandwidth_bytes_per_s))
        _set(self, "oversubscription", _pos(s, "oversubscription", self.oversubscription))
        if self.oversubscription < 1:
            raise InputError(f"{s}.oversubscription", f"must be >= 1, got {self.oversubscription}")
        _set(self, "latency_s", _pos(s, "latency_s", self.latency_s, allow_zero=True))

    @property
    def node_bandwidth_bytes_per_s(self) -> float:
        """What one node can inject into the fabric, after oversubscription."""
        return self.nics_per_node * self.nic_bandwidth_bytes_per_s / self.oversubscription


@dataclass(frozen=True)
class ClusterSpec:
    """Homogeneous hosts ("nodes") of ``gpus_per_node`` GPUs, grouped into NVLink domains, on
    an inter-node fabric. ``graph`` optionally replaces the short form with an explicit
    networkx node-link topology (see :mod:`costmodel.topology`).

    Three levels, kept apart: the **host** (``gpus_per_node`` GPUs: one OS, one PCIe tree,
    its NICs), the **NVLink domain** (``gpus_per_domain`` GPUs that reach each other over
    NVLink; ``None``, the default, means one host -- every DGX/HGX system; a GB200/GB300 NVL72
    rack is 18 hosts of 4 GPUs in one 72-GPU domain) and the **fabric** between domains
    (``inter_node``). Ranks fill hosts in order and hosts fill domains in order; the last
    domain may be partial (a job on 16 GPUs of an NVL72 rack is 4 hosts of one domain). A
    domain spans whole hosts on an NVSwitch fabric. Group geometry reports hosts and domains
    (:func:`costmodel.layout.group`); the link model (:mod:`costmodel.topology`,
    :mod:`costmodel.collectives`) still prices every host-to-host hop on the NICs.
    """

    name: str
    num_nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    intra_node: IntraNodeSpec = field(default_factory=IntraNodeSpec)
    inter_node: InterNodeSpec = field(default_factory=InterNodeSpec)
    graph_data: Mapping[str, Any] | None = None
    calibration: Mapping[str, float] | None = None
    source: str = ""
    gpus_per_domain: int | None = None  # NVLink domain; None: one host (stored None if equal)

    def __post_init__(self) -> None:
        _set(self, "num_nodes", _int("cluster", "num_nodes", self.num_nodes))
        _set(self, "gpus_per_node", _int("cluster", "gpus_per_node", self.gpus_per_node))
        if not isinstance(self.gpu, GPUSpec):
            raise InputError("cluster.gpu", "must be a GPU catalog key or mapping")
        if self.gpus_per_domain is not None:
            _set(self, "gpus_per_domain", self._checked_domain())

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def domain_gpus(self) -> int:
        """GPUs per NVLink domain (``gpus_per_node`` unless the cluster says otherwise)."""
        return self.gpus_per_node if self.gpus_per_domain is None else self.gpus_per_domain

    @property
    def hosts_per_domain(self) -> int:
        return self.domain_gpus // self.gpus_per_node

    @property
    def num_domains(self) -> int:
        """NVLink domains the cluster's hosts touch (the last one may be partial)."""
        return -(-self.num_nodes // self.hosts_per_domain)

    def __hash__(self) -> int:  # graph_data / calibration are mappings
        return hash((self.name, self.num_nodes, self.gpus_per_node, self.gpu.name,
                     self.intra_node, self.inter_node, self.gpus_per_domain))

    def _checked_domain(self) -> int | None:
        """``gpus_per_domain``: whole hosts on an NVSwitch fabric; ``None`` for one host."""
        f = "cluster.gpus_per_domain"
        per_domain = _int("cluster", "gpus_per_domain", self.gpus_per_domain)
        g = self.gpus_per_node
        if per_domain % g:
            raise InputError(f, f"{per_domain} is not a whole number of hosts of "
                                f"gpus_per_node={g}",
                             "an NVLink domain spans whole hosts (NVL72: 72 = 18 x 4)")
        if per_domain == g:
            return None
        if self.intra_node.fabric != "nvswitch":
            raise InputError(f, f"{per_domain} GPUs span {per_domain // g} hosts, which needs "
                                f"an NVSwitch fabric; intra_node.fabric is "
                                f"{self.intra_node.fabric!r}",
                             "set intra_node.fabric: nvswitch or drop gpus_per_domain")
        return per_domain


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingSpec:
    """What one optimizer step processes."""

    seq_length: int = 2048
    global_batch_size: int = 1024  # sequences per optimizer step
    # Framework behaviour the step time depends on (modern Megatron-Core defaults):
    flash_attention: bool = True  # fused attention: no s^2 activations, causal half FLOPs
    overlap_grad_reduce: bool = True  # DP reduction in buckets overlapped with backward
    dropout: bool = False  # dropout masks in activation memory (Korthikanti et al. assume them)
    framework: str = "megatron"  # megatron | deepspeed | fsdp | torchtitan: host overheads, buffers
    # Megatron-Core --tp-comm-overlap: TP all-gathers / reduce-scatters (sequence parallel
    # only) pipelined with the GEMMs next to them (Transformer Engine userbuffers); torchtitan:
    # its async TP, the same pipelining (TP_COMM_OVERLAP_FRAMEWORKS)
    tp_comm_overlap: bool = False
    # Transformer Engine / torchao recipe of fp8 linears (read where precision is fp8):
    # delayed | tensorwise | blockwise | mxfp8 | nvfp4 (calibration.FP8_RECIPES)
    fp8_recipe: str = "delayed"
    # Megatron-Core's --overlap-p2p-communication: the interleaved schedule's pipeline
    # transfers overlap the next chunk's compute (its default since 2023; Megatron-LM 2021-22
    # and DeepSpeed block on them)
    overlap_p2p_comm: bool = False
    # fp8 runs all-gather their (ZeRO-3 / FSDP) parameters in fp8, 1 byte each (torchao's
    # enable_fsdp_float8_all_gather, Megatron's --fp8-param-gather); else in 16 bits
    fp8_param_gather: bool = False
    # Megatron's --grad-reduce-in-bf16 (Megatron-Bridge's recipes): the data-parallel
    # reduction of 16-bit training runs in bf16 instead of the fp32 main gradients; with the
    # megatron profile the gradient buffer is then 16-bit too, with an fp32 copy of the
    # optimizer's shard for the step (stage_memory.gradient_bytes, cost model 0.6.0)
    grad_reduce_in_bf16: bool = False
    # PyTorch's caching allocator with PYTORCH_ALLOC_CONF=expandable_segments:True, which
    # paraplan's launch environment sets (optimizer/launch/flags.py launch_env): segments grow
    # by mapping more memory, so less of the reserve is left fragmented (stage_memory; the
    # fractions are calibration.Efficiency's allocator_fraction / expandable_fraction)
    expandable_segments: bool = True
    # MoE: the most loaded EP rank's routed tokens over the mean (None: costmodel.moe's
    # DEFAULT_LOAD_IMBALANCE for real routing; 1.0 for force-balanced benchmarks)
    moe_load_imbalance: float | None = None
    # MoE: the MoE layers run inside a CUDA graph (Megatron --cuda-graph-impl full_iteration,
    # or a graph scope holding the whole MoE block): no per-layer host stall at the dispatcher
    moe_cuda_graph: bool = False
    # MoE: the attention block of each layer is captured in a per-layer CUDA graph (Megatron
    # --cuda-graph-impl transformer_engine/local with scope attn): its launches leave the MoE
    # layer's host time (costmodel.moe.moe_host_launch_s)
    moe_attention_graphed: bool = False
    # Transformer Engine's FP8 dot-product attention (``fp8_dpa``; Megatron-Bridge recipes'
    # ``fp8_dot_product_attention``): with fp8 linears the fused attention core runs in fp8
    # too (costmodel.pricing.FP8_ATTENTION_FORWARD_SPEEDUP); else it stays in 16 bits
    fp8_dot_product_attention: bool = False
    # MoE token dispatcher: alltoall (Megatron's default) | flex (DeepEP / HybridEP: a token
    # crosses to each remote host once, forwarded over NVLink there)
    moe_dispatcher: str = "alltoall"
    # MoE: Megatron-Core's --overlap-moe-expert-parallel-comm (combined 1F1B: one
    # micro-batch's all-to-all under another's compute; costmodel.moe_overlap), applied where
    # Megatron runs it
    moe_ep_overlap: bool = False
    # Megatron-Core's --pipeline-model-parallel-layout (costmodel.pipeline_layout): the layers,
    # embedding, MTP and loss of every virtual stage; it fixes pp x vpp to its stage count.
    # None: Megatron's default split (or stage_plan balanced)
    pipeline_layout: str | None = None
    # torch.compile of the model (torchtitan's [compile] section): None = not stated (the
    # framework profile's fitted element-wise traffic, KernelCosts.elementwise_traffic); True:
    # Inductor fuses the norms, activations, rotary and torchao's float8 casts
    # (KernelCosts.compiled_elementwise_traffic); False: eager PyTorch
    # (KernelCosts.eager_elementwise_traffic). Frameworks without those fields ignore it.
    torch_compile: bool | None = None

    def __post_init__(self) -> None:
        if self.moe_load_imbalance is not None:
            _set(self, "moe_load_imbalance",
                 _pos("training", "moe_load_imbalance", self.moe_load_imbalance))
            if self.moe_load_imbalance < 1:
                raise InputError("training.moe_load_imbalance",
                                 f"must be >= 1 (max over mean), got {self.moe_load_imbalance}")
        if self.moe_dispatcher not in ("alltoall", "flex"):
            raise InputError("training.moe_dispatcher",
                             f"must be alltoall or flex, got {self.moe_dispatcher!r}")
        _set(self, "seq_length", _int("training", "seq_length", self.seq_length))
        _set(self, "global_batch_size",
             _int("training", "global_batch_size", self.global_batch_size))
        for name in ("flash_attention", "overlap_grad_reduce", "dropout", "tp_comm_overlap",
                     "overlap_p2p_comm", "fp8_param_gather", "grad_reduce_in_bf16",
                     "moe_cuda_graph", "moe_attention_graphed", "expandable_segments",
                     "fp8_dot_product_attention", "moe_ep_overlap"):
            _set(self, name, _bool("training", name, getattr(self, name)))
        if self.pipeline_layout is not None:
            from costmodel.pipeline_layout import parse_layout
            parse_layout(self.pipeline_layout)  # InputError on what Megatron cannot parse
        if self.torch_compile is not None:
            _set(self, "torch_compile", _bool("training", "torch_compile", self.torch_compile))
        _set(self, "framework", _choice("training", "framework", self.framework, FRAMEWORKS))
        _set(self, "fp8_recipe", _choice("training", "fp8_recipe", self.fp8_recipe,
                                         FP8_RECIPE_NAMES))
        if self.tp_comm_overlap and self.framework not in TP_COMM_OVERLAP_FRAMEWORKS:
            raise InputError("training.tp_comm_overlap",
                             f"is a Megatron-Core or torchtitan feature; framework is "
                             f"{self.framework!r}",
                             "set framework: megatron or torchtitan, or tp_comm_overlap: false")
        if self.moe_dispatcher == "flex" and self.framework != "megatron":
            raise InputError("training.moe_dispatcher",
                             f"flex (DeepEP / HybridEP) is Megatron-Core's dispatcher; "
                             f"framework is {self.framework!r}",
                             "set framework: megatron or moe_dispatcher: alltoall")
        if self.fp8_dot_product_attention and self.framework != "megatron":
            raise InputError("training.fp8_dot_product_attention",
                             f"is Transformer Engine's FP8 attention (Megatron-Core); "
                             f"framework is {self.framework!r}",
                             "set framework: megatron or fp8_dot_product_attention: false")
        if self.tp_comm_overlap and self.framework == "torchtitan":
            if self.torch_compile is None:
                # its launch compiles the model (--compile.enable): price the compiled run
                _set(self, "torch_compile", True)
            elif not self.torch_compile:
                # torchtitan's CompileConfig refuses async TP without compiling the model
                raise InputError("training.tp_comm_overlap",
                                 "torchtitan's async TP needs torch.compile; torch_compile is "
                                 "false", "set torch_compile: true or tp_comm_overlap: false")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_length * self.global_batch_size


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParallelConfig:
    """One candidate layout: the ``parallel`` section of a run file (contract.md section 2).

    Each field is a dimension declared once, here (:mod:`costmodel.dimensions`): its kind,
    vocabulary, default, default search values, batch column, Optuna parameter, CLI flag and
    table column. ``PARALLEL_DIMENSIONS`` lists them; the batch, the search space, the
    enumerator and the optimizer are generated from it.
    """

    tp: int = dim(INT, 1, "tensor-parallel size", space_default=default_tp, expand_rank=0,
                  optuna=OptunaParam("layout", 0, layout_token, log_steps=True),
                  column=Column("tp", 10))
    pp: int = dim(INT, 1, "pipeline-parallel size", space_default=default_pp,
                  expand_rank=1, optuna=OptunaParam("layout", 0), column=Column("pp", 20))
    cp: int = dim(INT, 1, "context-parallel size (the sequence split over cp ranks)",
                  space_default=default_cp, expand_rank=1, optuna=OptunaParam("cp", 9),
                  column=Column("cp", 25, hide_default=True), new=True)
    dp: int = dim(INT, 1, "data-parallel size",
                  derived="world_size / (tp * cp * pp); search tp, cp and pp instead",
                  column=Column("dp", 30))
    micro_batch_size: int = dim(INT, 1, "sequences per micro-batch",
                                space_default=default_micro_batch_sizes, expand_rank=3,
                                optuna=OptunaParam("micro_batch_size", 1),
                                column=Column("mbs", 40))
    precision: str = dim(CHOICE, "bf16", "training precision", values=PRECISIONS,
                         codes=Precision, space_default=default_precision, expand_rank=2,
                         optuna=OptunaParam("precision", 6),
                         column=Column("prec", 90, precision_label, left=True))
    recompute: str = dim(CHOICE, "none", "activation recomputation", values=RECOMPUTE,
                         codes=Recompute, space_default=RECOMPUTE, expand_rank=10,
                         optuna=OptunaParam("recompute", 2),
                         column=Column("recompute", 60, recompute_label, left=True))
    sequence_parallel: bool = dim(BOOL, False, "Megatron sequence parallelism, with tp > 1",
                                  space_default=(False, True), expand_rank=7,
                                  optuna=OptunaParam("sequence_parallel", 3),
                                  column=Column("SP", 70, yes_dash))
    zero_stage: int = dim(INT, 0, "ZeRO stage: 1 distributed optimizer, 3 fully sharded",
                          minimum=0, maximum=3, space_default=default_zero_stages, expand_rank=6,
                          optuna=OptunaParam("zero_stage", 4), column=Column("ZeRO", 80))
    schedule: str = dim(CHOICE, "1f1b", "pipeline schedule", values=SCHEDULES, codes=Schedule,
                        space_default=("1f1b", "interleaved"), expand_rank=4,
                        optuna=OptunaParam("schedule", 5, schedule_token),
                        column=Column("schedule", 50, schedule_label, left=True))
    virtual_stages: int = dim(INT, 1, "model chunks per pipeline stage, interleaved schedule",
                              space_default=default_virtual_stages, expand_rank=5,
                              optuna=OptunaParam("schedule", 5))
    stage_plan: str = dim(CHOICE, "default", "layers per pipeline stage: Megatron's default "
                          "split, or first/last stages balanced against the embedding and "
                          "the LM head", values=STAGE_PLANS, codes=StagePlanCode,
                          space_default=("default", "balanced"), expand_rank=11,
                          optuna=OptunaParam("stage_plan", 11), new=True,
                          column=Column("plan", 95, stage_plan_label, left=True))
    recompute_num_layers: int = dim(
        INT, 0, "with recompute full: layers per pipeline stage recomputed (Megatron "
        "--recompute-method block --recompute-num-layers N; the others keep their "
        "activations); 0: every layer (--recompute-method uniform --recompute-num-layers 1)",
        minimum=0, space_default=default_recompute_num_layers, expand_rank=12,
        optuna=OptunaParam("recompute_num_layers", 12), new=True)
    recompute_modules: str = dim(
        CHOICE, "core_attn", "with recompute selective: the modules recomputed (Megatron-Core "
        "--recompute-modules, names joined by '+'): core_attn, mlp (dense MLP), layernorm "
        "(norms that are modules of their own), moe_act (the experts' activation)",
        values=RECOMPUTE_MODULES, codes=RecomputeModules, space_default=default_recompute_modules,
        expand_rank=12, optuna=OptunaParam("recompute_modules", 15), new=True,
        omit_default=True)
    precision_aware_optimizer: str = dim(
        CHOICE, "off", "Megatron-Core's precision-aware optimizer: bf16 Adam moments, and "
        "bf16 main gradients too", values=OPTIMIZER_DTYPES, codes=OptimizerDtype,
        expand_rank=13, optuna=OptunaParam("precision_aware_optimizer", 13), new=True)
    cpu_offloading_num_layers: int = dim(
        INT, 0, "Megatron-Core activation offload: layers whose activations go to host memory "
        "in the forward and come back for the backward (--cpu-offloading-num-layers)",
        minimum=0, expand_rank=14, optuna=OptunaParam("cpu_offloading_num_layers", 14), new=True)
    nccl_algo: str = dim(STRING, "auto", "the NCCL_ALGO setting", values=NCCL_ALGOS,
                         parse=nccl_algo_value, grammar=_nccl_grammar_text(NCCL_ALGOS),
                         expand_rank=8, optuna=OptunaParam("nccl_algo", 7),
                         column=Column("NCCL", 100, nccl_label, left=True))
    nccl_proto: str = dim(STRING, "auto", "the NCCL_PROTO setting", values=NCCL_PROTOS,
                          parse=nccl_proto_value, grammar=_nccl_grammar_text(NCCL_PROTOS),
                          expand_rank=9, optuna=OptunaParam("nccl_proto", 8))
    cp_comm_type: str = dim(CHOICE, "p2p", "context-parallel attention communication",
                            values=CP_COMM_TYPES, codes=CpCommType,
                            space_default=default_cp_comm_types, expand_rank=11,
                            optuna=OptunaParam("cp_comm_type", 10),
                            column=Column("cp comm", 26, cp_comm_label, left=True,
                                          hide_default=True), new=True)
    # MoE layers' expert grid (Megatron-Core MoE parallel folding: the expert view of
    # costmodel.layout, edp = world / (etp * ep * pp)); members of the joint layout parameter
    ep: int = dim(INT, 1, "expert-parallel size (MoE layers)", space_default=default_ep,
                  expand_rank=11, optuna=OptunaParam("layout", 0), column=Column("ep", 27, hide_default=True),
                  omit_default=True)
    etp: int = dim(INT, 1, "expert-tensor-parallel size (MoE layers)",
                   space_default=default_etp, expand_rank=12, optuna=OptunaParam("layout", 0),
                   column=Column("etp", 28, hide_default=True), omit_default=True)

    def __post_init__(self) -> None:
        for d in PARALLEL_DIMENSIONS:
            _set(self, d.name, _check_dimension(d, getattr(self, d.name)))
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise InputError("parallel.virtual_stages",
                             f"{self.virtual_stages} needs schedule: interleaved",
                             "set schedule: interleaved or virtual_stages: 1")

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def expert_dp(self) -> int:
        """edp: the expert data-parallel degree, world / (etp * ep * pp)."""
        return self.world_size // (self.etp * self.ep * self.pp)

    def as_dict(self) -> dict[str, Any]:
        """The fields, less ``omit_default`` ones at their default (a dense layout's
        document is what it was before ep/etp existed)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (_omitted(f.name) and getattr(self, f.name) == f.default)}


def _omitted(name: str) -> bool:
    return DIMENSIONS_BY_NAME[name].omit_default


def _check_dimension(d: Dimension, value: Any) -> Any:
    """``value`` validated and normalised for dimension ``d`` (InputError ``parallel.<name>``)."""
    s = "parallel"
    if d.kind == INT:
        v = _int(s, d.name, value, minimum=d.minimum)
        if d.maximum is not None and v > d.maximum:
            raise InputError(f"{s}.{d.name}", f"must be {d.minimum}..{d.maximum}, got {v}")
        return v
    if d.kind == CHOICE:
        return _choice(s, d.name, value, d.values)
    if d.kind == BOOL:
        return _bool(s, d.name, value)
    return d.parse(value, f"{s}.{d.name}")  # STRING: the dimension's own grammar


#: The dimensions of a parallel configuration, in field order.
PARALLEL_DIMENSIONS: tuple[Dimension, ...] = dimensions_of(ParallelConfig)
DIMENSIONS_BY_NAME: Mapping[str, Dimension] = FrozenMap({d.name: d for d in PARALLEL_DIMENSIONS})
