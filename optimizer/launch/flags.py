"""Launch flags for one parallel configuration: Megatron-LM flags, a DeepSpeed config,
torchtitan overrides, the process environment and warnings (the Slurm / Kubernetes wrappers
are :mod:`optimizer.launch.scripts`, the NCCL tuner CSV :mod:`optimizer.launch.tuner`).

Everything here is a pure function of the frozen input records (no printing, no I/O); the
``launch`` object of the JSON output (contract.md section 4) is :func:`launch_bundle`.

Sources (ecosystem.md):

* section 2.1, Megatron-LM ``megatron/training/arguments.py`` and the Megatron-Core config
  dataclasses: flag names, the interleaving flag (there is no
  ``--virtual-pipeline-model-parallel-size``), ``CUDA_DEVICE_MAX_CONNECTIONS``;
* section 2.3, DeepSpeed ``deepspeed/runtime/config.py`` ``_batch_assertion``:
  ``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``;
* section 2.4, torchtitan ``--parallelism.<field> <value>`` overrides (valid with the TOML
  configs up to v0.2.2 and with the Python config registry from v0.3);
* section 2.5, NCCL ``NCCL_ALGO`` / ``NCCL_PROTO`` names and syntax (``src/graph/tuning.cc``),
  the valid algorithm/protocol combinations, and the documentation's production warning;
* section 2.6, ``torchrun``; section 6, Slurm ``sbatch`` and Kubeflow ``PyTorchJob``.

Mapping of paraplan's ``zero_stage``: 1 = Megatron's distributed optimizer; 2 and 3 = Megatron
FSDP (``optim_grads`` / ``optim_grads_params``), DeepSpeed ZeRO-2/3, torchtitan FSDP2 (no
reshard after forward for 2, reshard for 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.errors import InputError
from costmodel.pipeline_layout import check_fit, check_layout, without_mtp
from costmodel.schedule import pipeline_layout, stage_layers
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from optimizer.launch.model_facts import model_facts
from optimizer.launch.moe_flags import megatron_moe_args, megatron_moe_notes

__all__ = [
    "DEEPSPEED_TARGET",
    "MEGATRON_TARGET",
    "NCCL_PRODUCTION_WARNING",
    "TORCHTITAN_TARGET",
    "deepspeed_refusal",
    "megatron_deepspeed_args",
    "launch_targets",
    "megatron_refusal",
    "megatron_script",
    "torchtitan_config_source",
    "torchtitan_model",
    "torchtitan_refusal",
    "deepspeed_config",
    "job_shape",
    "launch_bundle",
    "launch_env",
    "launch_warnings",
    "megatron_args",
    "nccl_algo_env",
    "nccl_proto_env",
    "torchtitan_args",
]

NCCL_PRODUCTION_WARNING = (
    "NCCL_ALGO/NCCL_PROTO are debugging variables: the NCCL documentation says they \"should "
    "not be used in production nor retained in scripts, or only as workaround\"; NCCL also picks "
    "algorithm and protocol per message size, so one forced choice is rarely right for every "
    "collective (NVIDIA/nccl#754)"
)
LL128_WARNING = (
    "NCCL_PROTO names LL128, which bypasses NCCL's platform checks: \"enabling LL128 on platforms "
    "that don't support it can lead to data corruption\" (NCCL documentation)"
)

# Megatron pads the vocabulary to a multiple of this times TP (--make-vocab-size-divisible-by).
_VOCAB_DIVISIBLE_BY = 128
# DeepSpeed fp16 dynamic loss scaling, the documented defaults (ecosystem.md section 2.3).
_DS_FP16 = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
            "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
_DS_GRADIENT_CLIPPING = 1.0
_TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                         "zb-v": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
# schedules Megatron-LM main does not have (modern-training.md 3.1, 3.2)
_NOT_IN_MEGATRON = {"zb-h1": "the sail-sg zero-bubble fork's --enable-zero-bubble",
                    "zb-v": "the sail-sg fork's --enable-zero-bubble --zero-bubble-v-schedule, "
                            "or torchtitan's ZBVZeroBubble",
                    "dualpipev": "torchtitan's DualPipeV or deepseek-ai/DualPipe"}


# --------------------------------------------------------------------------------------------
# Shared checks
def job_shape(cluster: ClusterSpec, config: ParallelConfig) -> tuple[int, int]:
    """(nodes, processes per node) that run ``config``'s ``tp*pp*dp`` ranks on ``cluster``.

    The whole cluster when the world size equals its GPU count; otherwise the fewest whole
    nodes (or part of one node) that hold exactly the world size.
    """
    world, per_node = config.world_size, cluster.gpus_per_node
    if world == cluster.num_gpus:
        return cluster.num_nodes, per_node
    if world > cluster.num_gpus:
        raise InputError("parallel", f"tp*cp*pp*dp = {world} ranks exceed the cluster's "
                                     f"{cluster.num_gpus} GPUs",
                         "lower dp (or tp/pp) or use a larger cluster")
    if world < per_node:
        return 1, world
    if world % per_node:
        raise InputError("parallel", f"tp*cp*pp*dp = {world} ranks do not fill whole nodes of "
                                     f"{per_node} GPUs", "use a multiple of gpus_per_node")
    return world // per_node, per_node


def _microbatches(training: TrainingSpec, config: ParallelConfig) -> int:
    """m = global_batch / (micro_batch * dp) (Megatron num_microbatches_calculator.py)."""
    per_step = config.micro_batch_size * config.dp
    if training.global_batch_size % per_step:
        raise InputError("training.global_batch_size",
                         f"{training.global_batch_size} is not divisible by micro_batch_size*dp "
                         f"= {config.micro_batch_size}*{config.dp} = {per_step}",
                         "choose a global batch that is a multiple of micro_batch_size*dp")
    return training.global_batch_size // per_step


def _interleaved(config: ParallelConfig) -> bool:
    return config.schedule == "interleaved" and config.virtual_stages > 1


def _layers_per_virtual_stage(model: ModelSpec, config: ParallelConfig) -> int:
    """num_layers / pp / v: Megatron's --num-layers-per-virtual-pipeline-stage."""
    if config.pp < 2:
        raise InputError("parallel.virtual_stages",
                         f"{config.virtual_stages} virtual stages need pp >= 2, got pp={config.pp}",
                         "set virtual_stages: 1 or a larger pp")
    chunks = config.pp * config.virtual_stages
    if model.num_layers % chunks:
        raise InputError("parallel.virtual_stages",
                         f"num_layers={model.num_layers} is not divisible by pp*virtual_stages = "
                         f"{config.pp}*{config.virtual_stages} = {chunks}",
                         "pick virtual_stages so that pp*virtual_stages divides num_layers")
    return model.num_layers // chunks


def _plan(model: ModelSpec, cluster: ClusterSpec | None, training: TrainingSpec | None,
          config: ParallelConfig) -> tuple[int, int, int]:
    """(first, middle, last) layers of the stage plan the cost model scores
    (costmodel.model.plan_of; the default split without the cluster and training)."""
    if config.stage_plan != "default" and cluster is not None and training is not None:
        from costmodel.model import plan_of

        return plan_of(model, cluster, training, config)
    first, mid, last, _ = stage_layers(model.num_layers, config.pp)
    return int(first), int(mid), int(last)


def _uneven_split(model: ModelSpec, config: ParallelConfig,
                  training: TrainingSpec | None = None,
                  cluster: ClusterSpec | None = None) -> tuple[int, int] | None:
    """(first, last) stage layers where pp does not divide the layers or the stage plan is
    balanced and moves layers, else None: the split the cost model scores
    (costmodel.schedule.stage_layers, costmodel.model.plan_of)."""
    if config.pp >= 2 and config.stage_plan == "balanced" and training is not None \
            and cluster is not None:
        first, mid, last = _plan(model, cluster, training, config)
        if not first == mid == last:
            return first, last
    if config.pp < 2 or model.num_layers % config.pp == 0:
        return None
    first, _, last, ok = stage_layers(model.num_layers, config.pp)
    if not ok:
        raise InputError("parallel.pp", f"pp={config.pp} cannot give each of the "
                         f"{model.num_layers} layers' pipeline stages at least one layer",
                         "pick a smaller pp")
    return int(first), int(last)


def _max_position_embeddings(model: ModelSpec, training: TrainingSpec) -> int:
    """Megatron asserts max_position_embeddings >= seq_length for learned positions; for RoPE
    the value only sizes the rotary cache, so the larger of the two is always safe."""
    declared = model.max_position_embeddings
    if model.learned_position_embeddings:
        if declared is not None and declared < training.seq_length:
            raise InputError("training.seq_length",
                             f"{training.seq_length} exceeds model {model.name}'s "
                             f"max_position_embeddings={declared} (learned positions)",
                             f"use seq_length <= {declared}")
        return declared if declared is not None else training.seq_length
    return max(declared or 0, training.seq_length)


def _fsdp(config: ParallelConfig) -> bool:
    """ZeRO-2/3 run as (Megatron) FSDP; ZeRO-1 is Megatron's distributed optimizer."""
    return config.zero_stage >= 2


# --------------------------------------------------------------------------------------------
# Megatron-LM
MEGATRON_TARGET = "Megatron-LM core_v0.16+ and main (megatron/training/arguments.py)"
# Dropout the cost model scores: none unless training.dropout (then Megatron's own 0.1, the
# value Korthikanti et al. assume for the masks it counts).
_DROPOUT_ON = 0.1


# Megatron-LM's activation arguments (core_v0.16.1 megatron/training/arguments.py
# core_transformer_config_from_args): TransformerConfig.activation_func is F.gelu (the erf
# GELU) unless --swiglu (gated, F.silu), --quick-geglu (gated, quick_gelu) or --squared-relu
# (plain); --openai-gelu (the tanh GELU) reaches megatron/legacy models only. Any other
# (gated, activation) pair, e.g. Gemma's GeGLU (gated gelu_tanh) or OPT's ReLU, cannot be
# set from the command line (Megatron-Bridge sets activation_func in Python).
_MEGATRON_ACTIVATIONS: dict[tuple[bool, str], tuple[str, ...]] = {
    (True, "silu"): ("--swiglu",), (True, "quick_gelu"): ("--quick-geglu",),
    (False, "gelu"): (), (False, "gelu_tanh"): (), (False, "squared_relu"): ("--squared-relu",),
}
_ACTIVATION_NAMES = {(True, "silu"): "SwiGLU", (True, "gelu"): "GeGLU (erf GELU)",
                     (True, "gelu_tanh"): "GeGLU (tanh GELU)"}


def _activation_name(model: ModelSpec, activation: str) -> str:
    return _ACTIVATION_NAMES.get((model.gated_mlp, activation),
                                 ("gated " if model.gated_mlp else "") + activation)


def megatron_refusal(model: ModelSpec) -> str | None:
    """Why Megatron-LM cannot train ``model`` as scored, or None."""
    facts = model_facts(model)
    reasons = []
    if facts.position == "alibi":
        reasons.append("the model uses ALiBi, which Megatron-Core does not implement "
                       "(--position-embedding-type none is NoPE)")
    if (model.gated_mlp, facts.activation) not in _MEGATRON_ACTIVATIONS:
        reasons.append(f"its MLP is {_activation_name(model, facts.activation)}, which "
                       "Megatron-LM's arguments cannot express (--swiglu is gated SiLU, "
                       "--quick-geglu gated x*sigmoid(1.702x), --squared-relu plain; the "
                       "default is the plain erf GELU)")
    if getattr(model, "attention_sinks", False):
        reasons.append("its attention has learned sinks (GPT-OSS), which Megatron-LM's "
                       "arguments cannot set (nor GPT-OSS's clamped, offset GLU)")
    if facts.position == "rope" and not float(facts.rope_base or 10000).is_integer():
        reasons.append(f"its rotary base {facts.rope_base} is not an integer (--rotary-base "
                       "is type=int)")
    if not reasons:
        return None
    return (f"Megatron-LM refused for {model.name}: " + "; ".join(reasons)
            + "; no Megatron flags are emitted")


def _megatron_activation_note(model: ModelSpec) -> list[str]:
    """The one activation Megatron runs approximately: the plain tanh GELU as the erf one."""
    if not model.gated_mlp and model_facts(model).activation == "gelu_tanh":
        return [f"{model.name} uses the tanh-approximated GELU: Megatron-Core's MLP runs the "
                "exact (erf) GELU (--openai-gelu acts on megatron/legacy models only); the "
                "two differ by < 5e-4 per element, the cost is the same"]
    return []


def megatron_script(model: ModelSpec) -> str:
    """The Megatron-LM entry point the arguments are for."""
    return "pretrain_gpt.py" if model.causal else "pretrain_bert.py"


def megatron_args(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                  config: ParallelConfig) -> list[str]:
    """Megatron-LM argv tokens (ecosystem.md section 2.1, modern-training.md section 8.1) for
    :func:`megatron_script` (``pretrain_gpt.py``; ``pretrain_bert.py`` for an encoder).

    Every model-definition default Megatron would otherwise apply is overridden with the
    value the cost model scored (dropout, positions and rotary base/scaling, norm epsilon,
    GQA, biases, tied embeddings), and every flag ``validate_args`` needs for the layout is
    present (FSDP's ``--ckpt-format fsdp_dtensor``). Empty for a model Megatron cannot build
    (:func:`megatron_refusal`: ALiBi).

    ``--vocab-size`` is the unpadded vocabulary: Megatron pads it to a multiple of
    ``--make-vocab-size-divisible-by`` (128) times TP. Megatron normally takes the vocabulary
    from ``--tokenizer-type``/``--tokenizer-model`` (add those for real data);
    ``--vocab-size`` is what the null tokenizer and mock data use.
    """
    job_shape(cluster, config)
    _microbatches(training, config)
    if megatron_refusal(model) is not None:
        return []
    a: list[str] = [
        "--tensor-model-parallel-size", str(config.tp),
        "--pipeline-model-parallel-size", str(config.pp),
    ]
    split = _uneven_split(model, config, training, cluster)
    uneven_chunks = config.stage_plan == "balanced" and _chunks_uneven(model, config)
    layout = training.pipeline_layout if training is not None else None
    if layout is not None:
        check_layout(layout, model.num_layers, model.moe.mtp_layers if model.moe else 0)
        if config.pp > 1:
            check_fit(layout, config.pp, config.virtual_stages if _interleaved(config) else 1)
    if layout is not None and config.pp > 1:
        # the explicit layout as scored (its MTP modules left out: the flags do not launch
        # the MTP module, optimizer/launch/moe_flags.py); Megatron derives vpp from it
        a += ["--pipeline-model-parallel-layout", without_mtp(layout)]
    elif _interleaved(config) and (split is not None or uneven_chunks):
        # an uneven plan in chunks (or stages whose layers the chunks do not divide evenly:
        # the rules' FLOP-based balanced plan can differ from the scored, time-based one,
        # which may keep the default split): the pipeline layout
        first, mid, last = _plan(model, cluster, training, config)
        a += ["--pipeline-model-parallel-layout",
              pipeline_layout(first, mid, last, config.pp, config.virtual_stages)]
    elif _interleaved(config):
        a += ["--num-layers-per-virtual-pipeline-stage",
              str(_layers_per_virtual_stage(model, config))]
    elif split is not None:  # Megatron-Core: the middle stages split the rest evenly
        a += ["--decoder-first-pipeline-num-layers", str(split[0]),
              "--decoder-last-pipeline-num-layers", str(split[1])]
    a += _megatron_context_parallel(model, cluster, config)
    if config.sequence_parallel and config.tp > 1:  # Megatron drops it with a warning at TP=1
        a.append("--sequence-parallel")
        if training.tp_comm_overlap:  # Transformer Engine userbuffers; needs SP
            a.append("--tp-comm-overlap")
    a += [
        "--micro-batch-size", str(config.micro_batch_size),
        "--global-batch-size", str(training.global_batch_size),
        "--seq-length", str(training.seq_length),
        "--max-position-embeddings", str(_max_position_embeddings(model, training)),
    ]
    a += _megatron_shape(model)
    a += megatron_moe_args(model, config, training, cluster)  # MoE / MLA (none for dense)
    dropout = _fmt(_DROPOUT_ON if training.dropout else 0.0)
    a += ["--attention-dropout", dropout, "--hidden-dropout", dropout]
    if not training.flash_attention:  # the s^2 score path the model then scores
        a += ["--attention-backend", "unfused"]
    a += _megatron_recompute(config.recompute, config.recompute_num_layers,
                             config.recompute_modules)
    a += _megatron_data_parallel(config)
    a += _megatron_precision(config.precision, cluster)
    a += _megatron_optimizer_dtypes(config.precision_aware_optimizer)
    if config.cpu_offloading_num_layers:  # no --cpu-offloading flag: N > 0 turns it on
        a += ["--cpu-offloading-num-layers", str(config.cpu_offloading_num_layers)]
    return a


def _megatron_optimizer_dtypes(option: str) -> list[str]:
    """Megatron-Core's precision-aware optimizer (TE FusedAdam; megatron/training/arguments.py
    --use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype, --main-grads-dtype)."""
    if option == "off":
        return []
    a = ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype",
         "bf16"]
    if option == "bf16_moments_grads":
        a += ["--main-grads-dtype", "bf16"]
    return a


def _fmt(x: float) -> str:
    """A float as Megatron's argparse reads it back exactly (repr, no exponent for ints)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _megatron_context_parallel(model: ModelSpec, cluster: ClusterSpec,
                               config: ParallelConfig) -> list[str]:
    """``--context-parallel-size`` and ``--cp-comm-type`` (one type for every layer; TE's
    spelling ``all_gather``), and for a2a+p2p the all-to-all and ring sizes
    (``--hierarchical-context-parallel-sizes c1 c2``, costmodel.cp.cp_a2a_size)."""
    if config.cp <= 1:
        return []
    a = ["--context-parallel-size", str(config.cp), "--cp-comm-type", config.cp_comm_type]
    if config.cp_comm_type == "a2a+p2p":
        from costmodel.cp import cp_a2a_size

        c1 = int(cp_a2a_size(cluster.gpus_per_node, model.num_attention_heads,
                             model.num_kv_heads, config.tp, config.cp))
        a += ["--hierarchical-context-parallel-sizes", str(c1), str(config.cp // c1)]
    return a


def _megatron_shape(model: ModelSpec) -> list[str]:
    facts = model_facts(model)
    a = [
        "--num-layers", str(model.num_layers),
        "--hidden-size", str(model.hidden_size),
        "--ffn-hidden-size", str(model.ffn_hidden_size),
        "--num-attention-heads", str(model.num_attention_heads),
    ]
    if model.num_kv_heads < model.num_attention_heads:
        a += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.head_dim * model.num_attention_heads != model.hidden_size:
        a += ["--kv-channels", str(model.head_dim)]
    a += ["--vocab-size", str(model.vocab_size),
          "--make-vocab-size-divisible-by", str(_VOCAB_DIVISIBLE_BY)]
    a += _MEGATRON_ACTIVATIONS[(model.gated_mlp, facts.activation)]
    a += ["--normalization", "RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm",
          "--norm-epsilon", repr(float(facts.norm_eps))]
    if facts.qk_norm:
        a.append("--qk-layernorm")
    if facts.position == "learned":
        a += ["--position-embedding-type", "learned_absolute"]
    elif facts.position == "none":
        a += ["--position-embedding-type", "none"]
    else:
        a += ["--position-embedding-type", "rope",
              "--rotary-base", str(int(facts.rope_base or 10000))]
        if facts.rope_scaling_factor:
            a += ["--use-rope-scaling", "--rope-scaling-factor",
                  _fmt(facts.rope_scaling_factor)]
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not model.linear_bias:
        a.append("--disable-bias-linear")
        if facts.qkv_bias:
            a.append("--add-qkv-bias")
    return a


def _megatron_recompute(recompute: str, num_layers: int = 0,
                        modules: str = "core_attn") -> list[str]:
    if recompute == "selective":  # the modules scored (costmodel.recompute); no method
        return ["--recompute-granularity", "selective", "--recompute-modules",
                *modules.split("+")]
    if recompute == "full" and num_layers:  # the first N layers of each model chunk
        return ["--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", str(num_layers)]
    if recompute == "full":  # every layer checkpointed at its input
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    return []


def _megatron_data_parallel(config: ParallelConfig) -> list[str]:
    a: list[str] = []
    if config.zero_stage == 1:
        a.append("--use-distributed-optimizer")
    elif config.zero_stage >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
              "optim_grads" if config.zero_stage == 2 else "optim_grads_params",
              "--ckpt-format", "fsdp_dtensor"]  # validate_args: the only format Megatron FSDP takes
    if config.dp > 1:
        a.append("--overlap-grad-reduce")
        if config.zero_stage >= 1:  # needs dist-opt or FSDP, and --overlap-grad-reduce
            a.append("--overlap-param-gather")
    return a


def _megatron_precision(precision: str, cluster: ClusterSpec | None = None) -> list[str]:
    if precision == "bf16":
        return ["--bf16"]
    if precision == "fp16":
        return ["--fp16"]
    if precision == "fp8":  # FP8 GEMMs with BF16 everywhere else (Transformer Engine)
        if cluster is not None and cluster.gpu.compute_capability >= 100:
            return ["--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]
        # per-tensor current scaling: the recipe Transformer Engine recommends over the
        # legacy delayed-scaling default on Hopper/Ada
        return ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
    # fp32 / tf32: Megatron's full-precision path; Megatron has no TF32 switch: tf32 is set by
    # TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 in launch_env
    return []


# --------------------------------------------------------------------------------------------
# DeepSpeed
def deepspeed_config(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                     config: ParallelConfig) -> dict[str, Any]:
    """A DeepSpeed configuration (ecosystem.md section 2.3) satisfying the batch invariant
    ``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``.

    The target is DeepSpeed 0.19 (Megatron-DeepSpeed for pp > 1: its pipeline engine runs
    ZeRO 0 and 1 only, :func:`deepspeed_refusal`). ZeRO bucket sizes follow the Hugging Face Trainer's "auto" values
    (``transformers/integrations/deepspeed.py``): ``reduce_bucket_size = h*h``,
    ``stage3_prefetch_bucket_size = 0.9*h*h``, ``stage3_param_persistence_threshold = 10*h``.
    FP8 is not a DeepSpeed config switch (Transformer Engine in the model code): fp8 emits
    the bf16 block.
    """
    job_shape(cluster, config)
    gas = _microbatches(training, config)
    ds: dict[str, Any] = {
        "train_batch_size": config.micro_batch_size * gas * config.dp,
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": _DS_GRADIENT_CLIPPING,
    }
    if config.precision in ("bf16", "fp8"):
        ds["bf16"] = {"enabled": True}
    elif config.precision == "fp16":
        ds["fp16"] = dict(_DS_FP16)
    ds["zero_optimization"] = _deepspeed_zero(model.hidden_size, config.zero_stage)
    if config.pp > 1 and config.recompute == "full":
        # the only pipeline key the engine reads for the model (PipelineEngine.__init__); the
        # stage count and the partition are Megatron-DeepSpeed arguments
        # (--pipeline-model-parallel-size, --pp-partition-method), not config keys
        ds["pipeline"] = {"activation_checkpoint_interval": 1}
    if config.tp > 1 and config.pp == 1:  # AutoTP; with a pipeline TP is Megatron-DeepSpeed's
        ds["tensor_parallel"] = {"autotp_size": config.tp}
    if config.recompute != "none":
        ds["activation_checkpointing"] = {
            "partition_activations": config.tp > 1,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
        }
    return ds


DEEPSPEED_TARGET = "DeepSpeed 0.19 (DeepSpeedConfig; Megatron-DeepSpeed for pp > 1)"


def megatron_deepspeed_args(config: ParallelConfig) -> list[str]:
    """The layout arguments of Megatron-DeepSpeed, which owns TP and PP when DeepSpeed runs
    a pipeline (the JSON config carries batch, precision, ZeRO and checkpointing only);
    ``--deepspeed_config`` names the ``deepspeed_config`` file."""
    a = ["--tensor-model-parallel-size", str(config.tp),
         "--pipeline-model-parallel-size", str(config.pp)]
    if config.pp == 1:
        a.append("--no-pipeline-parallel")
    return [*a, "--deepspeed", "--deepspeed_config", "ds_config.json"]


def deepspeed_refusal(config: ParallelConfig) -> list[str]:
    """What DeepSpeed 0.19 cannot run of what was scored (empty: the config is faithful)."""
    r = []
    if config.pp > 1 and config.zero_stage >= 2:
        r.append(f"DeepSpeed: the pipeline engine allows ZeRO stage 0 or 1 only "
                 f"(PipelineEngine asserts it); pp={config.pp} with zero_stage="
                 f"{config.zero_stage} will not start")
    if config.recompute == "selective" and config.recompute_modules != "core_attn":
        r.append(f"DeepSpeed: selective recompute of {config.recompute_modules} is "
                 "Megatron-Core's --recompute-modules; Megatron-DeepSpeed checkpoints the "
                 "attention core only")
    if _partial_layers(config):
        r.append(f"DeepSpeed: recompute of {config.recompute_num_layers} layers per chunk "
                 "(Megatron-Core's block method) is not in the emitted config, which "
                 "checkpoints every layer")
    r += _megatron_core_only("DeepSpeed", config)
    if config.cp > 1:
        r.append(f"DeepSpeed: context parallelism (cp={config.cp}) has no switch in the "
                 "emitted deepspeed_config (DeepSpeed-Ulysses' sequence_parallel_size is "
                 "another engine)")
    return r


def _megatron_core_only(target: str, config: ParallelConfig) -> list[str]:
    """Megatron-Core memory levers the other targets' artefacts do not build (they would run
    another configuration than the scored one)."""
    r = []
    if config.cpu_offloading_num_layers > 0:
        r.append(f"{target}: activation CPU offloading of {config.cpu_offloading_num_layers} "
                 "layers is Megatron-Core's --cpu-offloading-num-layers; no equivalent in "
                 "the emitted artefacts")
    if config.precision_aware_optimizer != "off":
        r.append(f"{target}: the precision-aware optimizer ({config.precision_aware_optimizer}) "
                 "is Megatron-Core's --use-precision-aware-optimizer; no equivalent in the "
                 "emitted artefacts")
    return r


def _deepspeed_zero(hidden_size: int, stage: int) -> dict[str, Any]:
    if stage == 0:
        return {"stage": 0}
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": hidden_size * hidden_size,
    }
    if stage < 3:
        zero["allgather_bucket_size"] = hidden_size * hidden_size
    else:
        zero["stage3_prefetch_bucket_size"] = int(0.9 * hidden_size * hidden_size)
        zero["stage3_param_persistence_threshold"] = 10 * hidden_size
    return zero


# --------------------------------------------------------------------------------------------
# torchtitan
TORCHTITAN_TARGET = "torchtitan 0.3 (ConfigManager, Python config registry)"
TORCHTITAN_MODULE = "paraplan_torchtitan"  # the config registry module the bundle carries
TORCHTITAN_CONFIG = "paraplan"  # its config function


def _torchtitan_split(model: ModelSpec, config: ParallelConfig,
                      training: TrainingSpec | None = None, cluster: ClusterSpec | None = None
                      ) -> tuple[int, int, int]:
    """(layers per stage, first-stage-less-layers, last-stage-less-layers) that make
    torchtitan's ``_get_pipeline_metadata`` / ``_generate_llm_fqn_per_model_part`` build
    exactly the stages the cost model scored: ``pp*v`` stages of ``L/(pp*v)`` layers (v = 2
    for ZB-V and DualPipeV), or for an uneven plan (pp not dividing L, or a balanced plan)
    ``pp*v`` stages of ``middle/v`` layers whose first and last hold fewer layers (the "less
    layers" weights count the embedding and the output as that many layers)."""
    chunks = 2 if config.schedule in ("zb-v", "dualpipev") else (
        config.virtual_stages if _interleaved(config) else 1)
    split = _uneven_split(model, config, training, cluster)
    if split is None and not (config.stage_plan == "balanced" and _chunks_uneven(model, config)):
        if _interleaved(config):
            return _layers_per_virtual_stage(model, config), 0, 0
        if model.num_layers % (config.pp * chunks):
            raise InputError("parallel.pp", f"num_layers={model.num_layers} is not divisible "
                             f"by pp x {chunks} chunks", "pick pp so that the chunks are equal")
        return model.num_layers // (config.pp * chunks), 0, 0
    first, mid, last = _plan(model, cluster, training, config)
    return max(1, mid // chunks), mid - first, mid - last


def _chunks_uneven(model: ModelSpec, config: ParallelConfig) -> bool:
    """Interleaved stages whose layers the chunks do not divide into pp*v equal chunks."""
    return _interleaved(config) and model.num_layers % (config.pp * config.virtual_stages) != 0


def _torchtitan_chunk_gap(model: ModelSpec, config: ParallelConfig, training, cluster
                          ) -> list[str]:
    """torchtitan builds pp*v stages of one size with lighter first and last ones: a middle
    stage whose layers v does not divide (or an even plan in uneven chunks) is not that."""
    if config.pp < 2 or training is None or cluster is None:
        return []
    first, mid, last = _plan(model, cluster, training, config)
    if config.stage_plan == "balanced" and (config.pp == 2 or first > mid or last > mid):
        # its split makes the first and last stages lighter than the middle ones only
        return [f"torchtitan: the balanced plan {first}/{mid}/{last} layers (first/middle/"
                "last stage) cannot be built by its split (first/last-stage-less-layers make "
                "the end stages lighter than the middle ones only)"]
    if not _interleaved(config):
        return []
    n = _partial_layers(config)
    if n > 0:
        # PartialFullAC checkpoints the first n blocks of each model part; the cost model
        # prices v x min(n, layers / v) per rank, torchtitan's lighter first and last chunks
        # recompute fewer where n lies between a rank's smallest and largest chunk
        per, first_less, last_less = _torchtitan_split(model, config, training, cluster)
        for less in (first_less, last_less):
            if less > 0 and per - less < n < per:
                return [f"torchtitan: recompute of {n} layers per chunk on its lighter end "
                        f"chunks ({per - less} and {per} layers) is not the count scored"]
    even = first == mid == last
    if (not even and mid % config.virtual_stages == 0) or (even and not
                                                             _chunks_uneven(model, config)):
        return []
    return [f"torchtitan: {first}/{mid}/{last} layers per stage in {config.virtual_stages} "
            "chunks cannot be built by its equal-stage split (first/last-stage-less-layers)"]


def torchtitan_refusal(model: ModelSpec, config: ParallelConfig) -> list[str]:
    """What torchtitan 0.3 cannot express of what was scored (empty: the lists are faithful)."""
    facts = model_facts(model)
    r = []
    if not (model.causal and model.gated_mlp and facts.activation == "silu"
            and model.normalization == "rmsnorm" and not model.linear_bias
            and facts.position == "rope" and not facts.qkv_bias):
        r.append(f"torchtitan: {model.name} is not a Llama-style decoder (RoPE, RMSNorm, SwiGLU, "
                 "no biases); the emitted config builds torchtitan's Llama 3 model, which is "
                 "not the scored one")
    if model.head_dim * model.num_attention_heads != model.hidden_size:
        r.append("torchtitan: the Llama 3 builder has no head_dim != hidden/heads")
    if config.recompute == "selective":
        r.append("torchtitan: its selective AC (op/layer SAC) is not the selective recompute "
                 f"scored (Megatron-Core's {config.recompute_modules}); no torchtitan "
                 "equivalent")
    if config.precision == "fp16":
        r.append("torchtitan: mixed_precision_param takes bfloat16 or float32; fp16 cannot be "
                 "expressed")
    if config.zero_stage == 1:
        r.append("torchtitan: zero_stage 1 (sharded optimizer only) has no torchtitan "
                 "equivalent")
    if config.dp > 1 and not _fsdp(config) and (config.tp > 1 or config.pp > 1):
        r.append("torchtitan: data_parallel_replicate_degree > 1 without sharding is DDP, which "
                 "torchtitan supports only for 1-D parallelism")
    if config.cp > 1 and config.cp_comm_type != "all_gather":
        r.append(f"torchtitan: its context parallelism all-gathers K/V "
                 f"(context_parallel_rotate_method); cp_comm_type {config.cp_comm_type} was "
                 "scored")
    r += _megatron_core_only("torchtitan", config)
    from optimizer.launch.moe_flags import torchtitan_moe_refusal

    r += torchtitan_moe_refusal(model, config, config.dp if _fsdp(config) else 1)
    return r


def torchtitan_args(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                    config: ParallelConfig) -> list[str]:
    """torchtitan 0.3 ``ConfigManager`` arguments (``torchtitan.train``), for the config
    registry module :func:`torchtitan_config_source` (saved as ``paraplan_torchtitan.py`` on
    ``PYTHONPATH``), which carries what torchtitan's CLI cannot set (the model definition, the
    Float8 converter: ``model_spec`` is suppressed from its CLI).

    Batch mapping: with PP, ``local_batch_size`` (per DP rank per step) = gbs/dp is split into
    pipeline microbatches of ``micro_batch_size``; without PP, ``local_batch_size`` =
    ``micro_batch_size`` and torchtitan accumulates gbs/(mbs*dp) steps. Booleans use tyro's
    paired form (``--x`` / ``--no_x``); the activation-checkpoint policy is a subcommand
    (``activation_checkpoint:full`` / ``:none``), last, except partial full recompute
    (``recompute_num_layers`` N > 0), which no subcommand offers (torchtitan's
    ``ActivationCheckpointingConfig`` union: selective, full, memory-budget, none): the config
    module sets its ``PartialFullAC`` (the first N blocks of each model chunk) and the
    arguments name no policy, so ConfigManager keeps that default.
    """
    job_shape(cluster, config)
    m = _microbatches(training, config)
    shard = config.dp if _fsdp(config) else 1
    replicate = 1 if _fsdp(config) else config.dp
    a = [
        "--module", TORCHTITAN_MODULE, "--config", TORCHTITAN_CONFIG,
        "--parallelism.data_parallel_replicate_degree", str(replicate),
        "--parallelism.data_parallel_shard_degree", str(shard),
        "--parallelism.tensor_parallel_degree", str(config.tp),
        "--parallelism.pipeline_parallel_degree", str(config.pp),
    ]
    if config.cp > 1:  # torchtitan shards FSDP over dp_shard x cp itself
        a += ["--parallelism.context_parallel_degree", str(config.cp)]
    from optimizer.launch.moe_flags import torchtitan_moe_args

    a += torchtitan_moe_args(config)
    if _fsdp(config):  # ZeRO-2 keeps parameters gathered between forward and backward
        a += ["--parallelism.fsdp_reshard_after_forward",
              "never" if config.zero_stage == 2 else "always"]
    if config.tp > 1:
        a.append("--parallelism.enable_sequence_parallel" if config.sequence_parallel
                 else "--parallelism.no_enable_sequence_parallel")
    # the compiled model where the score priced it compiled (TrainingSpec.torch_compile) or
    # where TP's communication overlap is torchtitan's async TP, which CompileConfig accepts
    # only with the compiled model; else torchtitan's default, eager
    async_tp = config.tp > 1 and training.tp_comm_overlap
    if training.torch_compile or async_tp:
        a.append("--compile.enable")
    if async_tp:
        a.append("--compile.enable_async_tensor_parallel")
    if config.pp > 1:
        per_stage, first_less, last_less = _torchtitan_split(model, config, training, cluster)
        # torchtitan has no single-stage ZB-H1: 1F1B (launch_warnings says so)
        a += ["--parallelism.pipeline_parallel_schedule",
              _TORCHTITAN_SCHEDULES.get(config.schedule, "1F1B"),
              "--parallelism.pipeline_parallel_microbatch_size", str(config.micro_batch_size),
              "--parallelism.pipeline_parallel_layers_per_stage", str(per_stage),
              "--parallelism.pipeline_parallel_first_stage_less_layers", str(first_less),
              "--parallelism.pipeline_parallel_last_stage_less_layers", str(last_less),
              "--training.disable_cuda_graphs"]  # torchtitan: CUDA graphs do not support PP
    local = config.micro_batch_size * m if config.pp > 1 else config.micro_batch_size
    a += [
        "--training.seq_len", str(training.seq_length),
        "--training.global_batch_size", str(training.global_batch_size),
        "--training.local_batch_size", str(local),
    ]
    if config.precision in ("bf16", "fp8"):
        a += ["--training.mixed_precision_param", "bfloat16"]
    elif config.precision in ("fp32", "tf32"):
        a += ["--training.mixed_precision_param", "float32"]
    if not _partial_layers(config):  # partial: the config module's PartialFullAC
        a.append("activation_checkpoint:" + ("full" if config.recompute == "full" else
                                             "selective" if config.recompute == "selective"
                                             else "none"))
    return a


def _partial_layers(config: ParallelConfig) -> int:
    """Layers per model chunk that partial full recompute (``recompute_num_layers``)
    recomputes: what torchtitan's config module's ``PartialFullAC`` checkpoints; 0 where the
    recompute is not partial."""
    return config.recompute_num_layers if config.recompute == "full" else 0


_TT_SOURCE = '''"""torchtitan 0.3 config registry written by paraplan: {name} as scored.

Save as {module}.py on PYTHONPATH and run
  torchrun ... -m torchtitan.train --module {module} --config {config} <torchtitan_args>
"""
from dataclasses import dataclass

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.distributed.activation_checkpoint import FullAC, _disable_dynamo_lru_cache
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.models import llama3 as L3
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import config_registry as R
from torchtitan.protocols.model_spec import ModelSpec

MODEL = {model!r}
FLOAT8 = {float8!r}
RECOMPUTE_NUM_LAYERS = {recompute_num_layers!r}  # 0: the AC policy the CLI names


class PartialFullAC(FullAC):
    """Partial full recompute, Megatron-Core's --recompute-method block
    --recompute-num-layers N: FullAC's checkpoint wrapper on the first N transformer blocks
    of the model it is applied to, the others keep their activations. pipeline_llm applies
    the policy to each pipeline stage's model part (parallelize_fn per model chunk), so
    that is the first N blocks of every model chunk, as Megatron-Core recomputes them."""

    @dataclass(kw_only=True, slots=True)
    class Config(FullAC.Config):
        num_layers: int = 1
        """Blocks checkpointed at the start of each model part."""

    def apply(self, model):
        _disable_dynamo_lru_cache()
        layers = model.get_submodule("layers")
        for layer_id, block in list(layers.named_children())[:self.config.num_layers]:
            layers.register_module(layer_id,
                                   self._wrap_block(block, base_fqn=f"layers.{{layer_id}}"))


def _model():
    m = MODEL
    dim, vocab = m["dim"], m["vocab_size"]
    rope = ComplexRoPE.Config(dim=m["head_dim"], max_seq_len=m["max_seq_len"],
                              theta=m["rope_theta"], scaling=m["rope_scaling"],
                              scaling_factor=m["rope_scaling_factor"])
    layers = L3._build_llama3_layers(
        n_layers=m["n_layers"], dim=dim, n_heads=m["n_heads"], n_kv_heads=m["n_kv_heads"],
        hidden_dim=m["ffn_hidden_dim"], rope=rope, fuse_qkv=True, attn_backend="flex")
    for layer in layers:
        layer.attention_norm.eps = m["norm_eps"]
        layer.ffn_norm.eps = m["norm_eps"]
    model = L3.Llama3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=m["tied_embeddings"],
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=L3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, eps=m["norm_eps"], param_init=L3._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab,
                              param_init=L3._output_linear_init(dim)),
        layers=layers)
    if FLOAT8:
        from torchtitan.components.quantization import Float8LinearConverter

        # rowwise scaling; the LM head stays in bf16 (as Transformer Engine leaves it)
        model = Float8LinearConverter.Config(filter_fqns=["lm_head"]).build().convert(model)
    return ModelSpec(name="llama3", flavor="paraplan", model=model,
                     parallelize_fn=L3.parallelize_llama, pipelining_fn=pipeline_llm,
                     post_optimizer_build_fn=None,
                     state_dict_adapter=L3.Llama3StateDictAdapter)


def {config}():
    config = R.llama3_8b()
    config.model_spec = _model()
    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(
        global_vocab_size=decoder_vocab_size(config.model_spec)))
    if RECOMPUTE_NUM_LAYERS:
        # no activation_checkpoint subcommand selects a policy of the module's own (the CLI
        # offers selective, full, memory-budget and none): the arguments name none, and
        # tyro keeps this default
        config.activation_checkpoint = PartialFullAC.Config(num_layers=RECOMPUTE_NUM_LAYERS)
    return config
'''


def torchtitan_model(model: ModelSpec, training: TrainingSpec) -> dict[str, Any]:
    """The model definition the torchtitan config module builds (torchtitan's Llama 3)."""
    facts = model_facts(model)
    return {
        "name": model.name, "n_layers": model.num_layers, "dim": model.hidden_size,
        "n_heads": model.num_attention_heads, "n_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim, "ffn_hidden_dim": model.ffn_hidden_size,
        "vocab_size": model.vocab_size, "tied_embeddings": model.tied_embeddings,
        "norm_eps": float(facts.norm_eps), "rope_theta": float(facts.rope_base or 10000.0),
        "rope_scaling": "llama" if facts.rope_scaling_factor else "none",
        "rope_scaling_factor": float(facts.rope_scaling_factor or 8.0),
        "max_seq_len": max(model.max_position_embeddings or 0, training.seq_length),
    }


def torchtitan_config_source(model: ModelSpec, training: TrainingSpec,
                             config: ParallelConfig) -> str:
    """Python source of the torchtitan 0.3 config registry module ``paraplan_torchtitan``:
    the scored model definition (layers, width, heads and KV heads, FFN width, vocabulary,
    tying, norm epsilon, rotary base and scaling) and, for fp8, torchtitan's Float8 converter
    (torchao ``Float8Linear``, rowwise), and for partial full recompute its ``PartialFullAC``
    policy (FullAC's wrapper on the first ``recompute_num_layers`` blocks of each model chunk,
    costmodel.stages.recomputed_layers)."""
    return _TT_SOURCE.format(name=model.name, module=TORCHTITAN_MODULE, config=TORCHTITAN_CONFIG,
                             model=torchtitan_model(model, training),
                             float8=config.precision == "fp8",
                             recompute_num_layers=_partial_layers(config))


# --------------------------------------------------------------------------------------------
# NCCL_ALGO / NCCL_PROTO
_ALGO_NAMES = {"ring": "Ring", "tree": "Tree", "nvls": "NVLS", "nvlstree": "NVLSTree",
               "collnet": "CollNetDirect", "collnetdirect": "CollNetDirect",
               "collnetchain": "CollNetChain", "pat": "PAT"}
_PROTO_NAMES = {"simple": "Simple", "ll": "LL", "ll128": "LL128"}
_FUNCS = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
          "broadcast": "Broadcast", "reduce": "Reduce"}
# ecosystem.md section 2.5, "Valid combinations".
_ALGO_SUPPORT = {
    "AllReduce": frozenset({"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"}),
    "AllGather": frozenset({"Ring", "PAT", "NVLS", "CollNetDirect"}),
    "ReduceScatter": frozenset({"Ring", "PAT", "NVLS", "CollNetDirect"}),
    "Broadcast": frozenset({"Ring"}),
    "Reduce": frozenset({"Ring"}),
}


def _protos_for(algo: str) -> frozenset[str]:
    return frozenset({"LL", "LL128", "Simple"}) if algo in ("Tree", "Ring") else frozenset({"Simple"})


@dataclass(frozen=True)
class _NcclEntry:
    func: str | None  # NCCL function name (AllReduce, ...) or None = every collective
    exclude: bool
    names: tuple[str, ...]  # canonical NCCL spellings


def _parse_nccl(field_name: str, value: str, names: dict[str, str]) -> tuple[_NcclEntry, ...]:
    """Parse paraplan's lower-case form (``ring``, ``ring,tree``, ``^ll128``,
    ``allreduce:tree;allgather:ring``, NCCL >= 2.24 syntax) with the search space's parser,
    then spell it NCCL's way. Empty for ``auto``. The entry without a collective is moved
    first (NCCL lets only the first entry omit it); the result is equivalent to the input.
    """
    from search_spaces.space import parse_nccl

    entries = [_NcclEntry(None if e.collective is None else _FUNCS[e.collective], e.exclude,
                          tuple(dict.fromkeys(names[t] for t in e.names)))
               for e in parse_nccl(value, (*names, "auto"), field_name)]
    return tuple(sorted(entries, key=lambda e: e.func is not None))  # stable: default first


def _render_nccl(entries: Sequence[_NcclEntry]) -> str | None:
    if not entries:
        return None
    out = []
    for e in entries:
        prefix = "" if e.func is None else e.func.lower() + ":"
        out.append(prefix + ("^" if e.exclude else "") + ",".join(e.names))
    return ";".join(out)


def nccl_algo_env(nccl_algo: str) -> str | None:
    """The ``NCCL_ALGO`` value for paraplan's ``nccl_algo`` (None for ``auto``).

    ``collnet`` becomes ``CollNetDirect``; per-collective entries keep NCCL's syntax, e.g.
    ``allreduce:tree;allgather:ring`` -> ``allreduce:Tree;allgather:Ring``.
    """
    return _render_nccl(_parse_nccl("parallel.nccl_algo", nccl_algo, _ALGO_NAMES))


def nccl_proto_env(nccl_proto: str) -> str | None:
    """The ``NCCL_PROTO`` value for paraplan's ``nccl_proto`` (None for ``auto``)."""
    return _render_nccl(_parse_nccl("parallel.nccl_proto", nccl_proto, _PROTO_NAMES))


def _allowed_per_func(entries: Iterable[_NcclEntry], universe: Iterable[str]
                      ) -> dict[str, frozenset[str]]:
    """What each collective may use: the function-less entry sets the default, a
    per-collective entry replaces it for that collective."""
    every = frozenset(universe)
    allowed = dict.fromkeys(_FUNCS.values(), every)
    for e in entries:
        chosen = every - set(e.names) if e.exclude else frozenset(e.names)
        for f in (_FUNCS.values() if e.func is None else (e.func,)):
            allowed[f] = chosen
    return allowed


def _named(entries: Iterable[_NcclEntry]) -> set[str]:
    return {n for e in entries if not e.exclude for n in e.names}


def _nccl_warnings(config: ParallelConfig, cluster: ClusterSpec | None) -> list[str]:
    algos = _parse_nccl("parallel.nccl_algo", config.nccl_algo, _ALGO_NAMES)
    protos = _parse_nccl("parallel.nccl_proto", config.nccl_proto, _PROTO_NAMES)
    if not algos and not protos:
        return []
    w = [NCCL_PRODUCTION_WARNING]
    if "LL128" in _named(protos):
        w.append(LL128_WARNING)
    algo_ok = _allowed_per_func(algos, set(_ALGO_NAMES.values()))
    proto_ok = _allowed_per_func(protos, set(_PROTO_NAMES.values()))
    dead = [f for f, support in _ALGO_SUPPORT.items()
            if not any(p in _protos_for(a) for a in algo_ok[f] & support for p in proto_ok[f])]
    if dead:
        w.append(f"NCCL_ALGO={_render_nccl(algos) or '(auto)'} NCCL_PROTO="
                 f"{_render_nccl(protos) or '(auto)'} leave no algorithm/protocol pair that can "
                 f"run {', '.join(dead)}: since NCCL 2.24 those calls fail (no fallback to Ring); "
                 "limit the setting to the collectives it suits, e.g. 'allreduce:tree'")
    named = _named(algos)
    if cluster is not None:
        if named & {"NVLS", "NVLSTree"} and (cluster.intra_node.fabric != "nvswitch"
                                            or cluster.gpu.compute_capability < 90):
            w.append("NVLS/NVLSTree need an NVSwitch (gen 3+) and sm90+ GPUs; "
                     f"{cluster.gpu.name} on {cluster.intra_node.fabric} cannot run them")
        if "NVLSTree" in named and cluster.num_nodes == 1:
            w.append("NVLSTree is multi-node only; NCCL disables it on a single node")
        if "PAT" in named and cluster.gpus_per_node > 1:
            w.append(f"PAT needs exactly one GPU per node; this cluster has "
                     f"{cluster.gpus_per_node}")
    if named & {"CollNetDirect", "CollNetChain"}:
        w.append("CollNet needs a network plugin with in-network reduction (IB SHARP); "
                 "NCCL_COLLNET_ENABLE=1 is set")
    return w


# --------------------------------------------------------------------------------------------
# Environment and warnings
def launch_env(cluster: ClusterSpec, config: ParallelConfig,
               training: TrainingSpec | None = None,
               model: ModelSpec | None = None) -> dict[str, str]:
    """Environment variables for every rank (ecosystem.md sections 2.1, 2.5, 2.6).

    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` orders TP communication before compute on pre-Blackwell
    GPUs (compute capability < 10.0); Megatron FSDP (zero_stage >= 2) requires it unset.
    Megatron's EP all-to-all overlap needs more than one connection (Megatron-LM MoE README,
    "Requirements for EP A2A Overlap"; core_v0.16.1 ``arguments.py``: "1 or 32, which depends
    on which parallelization you want to prioritize"): where it applies the variable is 32,
    and :func:`launch_warnings` says what TP / CP lose on Hopper.
    ``NCCL_ALGO``/``NCCL_PROTO`` appear only when forced. ``tf32`` sets
    ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (PyTorch runs fp32 matmuls as fp32 by default, and
    neither Megatron-LM nor torchtitan has a TF32 switch).
    """
    env: dict[str, str] = {}
    if config.tp > 1 and cluster.gpu.compute_capability < 100 and not _fsdp(config):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if _ep_overlap(model, training, config):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
    algo = nccl_algo_env(config.nccl_algo)
    if algo is not None:
        env["NCCL_ALGO"] = algo
        if {"CollNetDirect", "CollNetChain"} & _named(
                _parse_nccl("parallel.nccl_algo", config.nccl_algo, _ALGO_NAMES)):
            env["NCCL_COLLNET_ENABLE"] = "1"
    proto = nccl_proto_env(config.nccl_proto)
    if proto is not None:
        env["NCCL_PROTO"] = proto
    if config.precision == "tf32":  # scored at the TF32 peak; PyTorch's default is fp32 GEMMs
        env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = "1"
    env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
    return env


def _ep_overlap(model: ModelSpec | None, training: TrainingSpec | None,
                config: ParallelConfig) -> bool:
    """Whether the launch runs Megatron's EP all-to-all overlap (the flag is emitted)."""
    from costmodel.moe_overlap import applies_to

    return (model is not None and model.moe is not None and training is not None
            and applies_to(training, config))


def launch_warnings(config: ParallelConfig, *, model: ModelSpec | None = None,
                    cluster: ClusterSpec | None = None,
                    training: TrainingSpec | None = None) -> list[str]:
    """Human-readable caveats about the launch artefacts of ``config``.

    The optional records add checks that need them (Megatron's divisibility rules, NCCL
    algorithms the cluster cannot run, a world size smaller than the cluster).
    """
    w = _nccl_warnings(config, cluster)
    if config.sequence_parallel and config.tp == 1:
        w.append("sequence_parallel has no effect with tp=1 (Megatron switches it off)")
    if config.precision == "fp8":
        w.append("fp8: Megatron gets Transformer Engine's current-scaling recipe (--fp8-recipe "
                 "tensorwise; mxfp8 on Blackwell), torchtitan the Float8 converter (rowwise); "
                 "DeepSpeed's config has no FP8 switch (bf16 block; FP8 is Transformer Engine "
                 "in the model code)")
    if config.precision == "tf32":
        w.append("tf32: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 lets PyTorch's matmuls use TF32; "
                 "Transformer Engine's own GEMMs follow TE's choice of compute type")
    w += deepspeed_refusal(config)
    if config.cp > 1:
        w.append(f"context parallelism (cp={config.cp}, {config.cp_comm_type}): the "
                 "deepspeed_config has none (DeepSpeed-Ulysses' sequence_parallel_size is a "
                 "different engine); torchtitan's CP rotates K/V by all-gather "
                 "(context_parallel_rotate_method), whatever cp_comm_type says")
    if model is not None:
        refusal = megatron_refusal(model)
        if refusal is not None:
            w.append(refusal)
        else:
            w += _megatron_activation_note(model)
        w += unexpressed(model) + definition_gaps(model)
        if not model.causal:
            w.append(f"{model.name} is an encoder: the Megatron-LM arguments are for "
                     "pretrain_bert.py (BERT's pooler, binary head and MLM transform are not "
                     "scored)")
        facts = model_facts(model)
        if not facts.exact:
            w.append(f"{model.name}: the rotary base, rope scaling and norm epsilon are not "
                     f"carried by the model record; the flags use {facts.source} (rotary base "
                     f"{facts.rope_base}, epsilon {facts.norm_eps}): check them against the "
                     "checkpoint's config.json")
        w += torchtitan_refusal(model, config)
        w += megatron_moe_notes(model, config, training)
        if (_ep_overlap(model, training, config) and (config.tp > 1 or config.cp > 1)
                and cluster is not None and cluster.gpu.compute_capability < 100):
            w.append("moe_ep_overlap: CUDA_DEVICE_MAX_CONNECTIONS=32 for the EP overlap; on "
                     "Hopper and before Megatron advises against TP or CP with it (their "
                     "collectives then lose the ordering one connection gives), and the score "
                     "does not price that")
        if model.num_attention_heads % config.tp or model.num_kv_heads % config.tp:
            w.append(f"Megatron needs num_attention_heads ({model.num_attention_heads}) and "
                     f"num_query_groups ({model.num_kv_heads}) divisible by tp={config.tp}")
        if config.schedule in _NOT_IN_MEGATRON:
            w.append(f"Megatron-LM has no {config.schedule} schedule: the Megatron flags run "
                     f"1F1B; use {_NOT_IN_MEGATRON[config.schedule]}"
                     + ("; torchtitan has no single-stage ZB-H1 (its overrides say 1F1B)"
                        if config.schedule == "zb-h1" else ""))
        split = _uneven_split(model, config, training, cluster)
        if training is not None and training.pipeline_layout is not None:
            split = None  # the explicit layout: _layout_gap says what builds it
            w += _layout_gap(training, config)
        if split is not None:
            megatron = ("--pipeline-model-parallel-layout (the interleaved chunks)"
                        if _interleaved(config) else
                        "--decoder-first/last-pipeline-num-layers")
            w.append(f"uneven pipeline split ({model.num_layers} layers on pp={config.pp}: "
                     f"{split[0]} on the first stage, {split[1]} on the last, the rest evenly): "
                     f"Megatron gets {megatron}, torchtitan "
                     "first/last_stage_less_layers; Megatron-DeepSpeed needs a partition "
                     "method that counts the embedding and the head as layers (BLOOM's "
                     "type:transformer|embedding), not the default type:transformer")
    if training is not None and training.fp8_dot_product_attention and config.precision == "fp8":
        w.append("fp8_dot_product_attention: Megatron-LM has no command-line flag for "
                 "Transformer Engine's FP8 attention (modern-training.md 5.2): set "
                 "fp8_dot_product_attention in the TransformerConfig (Megatron-Bridge recipes: "
                 "mixed_precision.fp8_dot_product_attention), else the attention core "
                 "runs in 16 bits and the step is slower than scored")
    if training is not None and _interleaved(config):
        m = _microbatches(training, config)
        if m % config.pp:
            w.append(f"interleaved schedule: {m} microbatches per step is not a multiple of "
                     f"pp={config.pp}; Megatron refuses this with the default group size")
    if cluster is not None:
        nodes, per_node = job_shape(cluster, config)
        if nodes * per_node < cluster.num_gpus:
            w.append(f"the configuration uses {nodes * per_node} of the cluster's "
                     f"{cluster.num_gpus} GPUs; the launch scripts request {nodes} node(s)")
    return w


def unexpressed(model: ModelSpec) -> list[str]:
    """Model features the cost model may score that the Megatron-DeepSpeed artefacts do not
    express (Mixture-of-Experts or MLA layers; Megatron-LM's flags carry them,
    :func:`optimizer.launch.moe_flags.megatron_moe_args`, torchtitan's refusal names its own
    limits)."""
    r = []
    if getattr(model, "moe", None) is not None:
        r.append(f"{model.name} has Mixture-of-Experts layers: the Megatron-DeepSpeed "
                 "artefacts do not emit expert flags and would build a dense model")
    if getattr(model, "mla", None) is not None:
        r.append(f"{model.name} uses multi-head latent attention: the Megatron-DeepSpeed "
                 "artefacts do not emit MLA flags")
    act = model_facts(model).activation
    if (model.gated_mlp, act) not in ((True, "silu"), (False, "gelu"), (False, "gelu_tanh")):
        # Megatron-DeepSpeed's legacy MLP: --swiglu, else GELU (--openai-gelu: tanh)
        r.append(f"{model.name}'s MLP is {_activation_name(model, act)}: Megatron-DeepSpeed "
                 "builds SwiGLU (--swiglu) or a plain GELU only")
    return r


def _layout_gap(training: TrainingSpec | None, config: ParallelConfig) -> list[str]:
    """An explicit pipeline layout (``training.pipeline_layout``) only Megatron's
    ``--pipeline-model-parallel-layout`` builds: torchtitan's and Megatron-DeepSpeed's split
    flags build their own split of the layers."""
    if training is None or training.pipeline_layout is None or config.pp < 2:
        return []
    return [f"the pipeline layout {training.pipeline_layout!r} is Megatron's "
            "--pipeline-model-parallel-layout: torchtitan's and Megatron-DeepSpeed's flags "
            "build their own split of the layers, not the scored one"]


def definition_gaps(model: ModelSpec) -> list[str]:
    """Model-definition features the cost model counts that no target's artefacts build
    (every target is then not faithful): other than two norms per layer."""
    norms = getattr(model, "norms_per_layer", None)
    if norms in (None, 2):
        return []
    kind = "a parallel block with one input norm" if norms == 1 else "pre and post norms"
    return [f"{model.name} has {norms} norms per layer ({kind}): the launch artefacts build "
            "the usual pre-attention and pre-MLP norms"]


def launch_targets(model: ModelSpec, config: ParallelConfig, training: TrainingSpec | None = None,
                   cluster: ClusterSpec | None = None) -> dict[str, Any]:
    """Per framework target: its name and version, whether its artefacts train what was
    scored (``supported``) and, if not, why (``reasons``)."""
    mr = megatron_refusal(model)
    common = unexpressed(model)
    gaps = definition_gaps(model)
    mr_list = ([] if mr is None else [mr]) + gaps
    layout = _layout_gap(training, config)
    ds = deepspeed_refusal(config) + common + gaps + layout
    tt = torchtitan_refusal(model, config) + _torchtitan_chunk_gap(model, config, training,
                                                                   cluster) + gaps + layout
    return {
        "megatron": {"target": MEGATRON_TARGET, "script": megatron_script(model),
                     "supported": not mr_list, "reasons": mr_list},
        "deepspeed": {"target": DEEPSPEED_TARGET, "supported": not ds, "reasons": ds,
                      "megatron_deepspeed_args": megatron_deepspeed_args(config)},
        "torchtitan": {"target": TORCHTITAN_TARGET, "module": TORCHTITAN_MODULE + ".py",
                       "supported": not tt, "reasons": tt},
    }


def launch_bundle(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                  config: ParallelConfig) -> dict[str, Any]:
    """The ``launch`` object of the JSON output (contract.md section 4), plus ``targets``
    (:func:`launch_targets`) and ``torchtitan_config`` (the config registry module source
    the torchtitan arguments name)."""
    return {
        "megatron_args": megatron_args(model, cluster, training, config),
        "deepspeed_config": deepspeed_config(model, cluster, training, config),
        "torchtitan_args": torchtitan_args(model, cluster, training, config),
        "torchtitan_config": torchtitan_config_source(model, training, config),
        "env": launch_env(cluster, config, training, model),
        "warnings": launch_warnings(config, model=model, cluster=cluster, training=training),
        "targets": launch_targets(model, config, training, cluster),
    }
