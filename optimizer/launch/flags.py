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
from costmodel.schedule import stage_layers
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from optimizer.launch.moe_flags import megatron_moe_args

__all__ = [
    "NCCL_PRODUCTION_WARNING",
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
_TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}


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
        raise InputError("parallel", f"tp*pp*dp = {world} ranks exceed the cluster's "
                                     f"{cluster.num_gpus} GPUs",
                         "lower dp (or tp/pp) or use a larger cluster")
    if world < per_node:
        return 1, world
    if world % per_node:
        raise InputError("parallel", f"tp*pp*dp = {world} ranks do not fill whole nodes of "
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


def _uneven_split(model: ModelSpec, config: ParallelConfig) -> tuple[int, int] | None:
    """(first, last) stage layers where pp does not divide the layers, else None: the split
    the cost model scores (costmodel.schedule.stage_layers)."""
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
def megatron_args(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                  config: ParallelConfig) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` argv tokens (ecosystem.md section 2.1).

    ``--vocab-size`` is the unpadded vocabulary: Megatron pads it to a multiple of
    ``--make-vocab-size-divisible-by`` (128) times TP. Megatron normally takes the vocabulary
    from ``--tokenizer-type``/``--tokenizer-model`` (add those for real data);
    ``--vocab-size`` is what the null tokenizer and mock data use.
    """
    job_shape(cluster, config)
    _microbatches(training, config)
    a: list[str] = [
        "--tensor-model-parallel-size", str(config.tp),
        "--pipeline-model-parallel-size", str(config.pp),
    ]
    if _interleaved(config):
        a += ["--num-layers-per-virtual-pipeline-stage",
              str(_layers_per_virtual_stage(model, config))]
    split = _uneven_split(model, config)
    if split is not None:  # Megatron-Core: the middle stages split the rest evenly
        a += ["--decoder-first-pipeline-num-layers", str(split[0]),
              "--decoder-last-pipeline-num-layers", str(split[1])]
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
    a += megatron_moe_args(model, config)  # MoE / MLA (none for dense models)
    a += _megatron_recompute(config.recompute)
    a += _megatron_data_parallel(config)
    a += _megatron_precision(config.precision)
    return a


def _megatron_shape(model: ModelSpec) -> list[str]:
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
    if model.gated_mlp:
        a.append("--swiglu")
    a += ["--normalization", "RMSNorm" if model.normalization == "rmsnorm" else "LayerNorm"]
    a += ["--position-embedding-type",
          "learned_absolute" if model.learned_position_embeddings else "rope"]
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not model.linear_bias:
        a.append("--disable-bias-linear")
    return a


def _megatron_recompute(recompute: str) -> list[str]:
    if recompute == "selective":  # selective takes no method (Megatron validate_args)
        return ["--recompute-granularity", "selective"]
    if recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    return []


def _megatron_data_parallel(config: ParallelConfig) -> list[str]:
    a: list[str] = []
    if config.zero_stage == 1:
        a.append("--use-distributed-optimizer")
    elif config.zero_stage >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
              "optim_grads" if config.zero_stage == 2 else "optim_grads_params"]
    if config.dp > 1:
        a.append("--overlap-grad-reduce")
        if config.zero_stage >= 1:  # needs dist-opt or FSDP, and --overlap-grad-reduce
            a.append("--overlap-param-gather")
    return a


def _megatron_precision(precision: str) -> list[str]:
    if precision == "bf16":
        return ["--bf16"]
    if precision == "fp16":
        return ["--fp16"]
    if precision == "fp8":  # FP8 GEMMs with BF16 everywhere else (Transformer Engine)
        return ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed"]
    return []  # fp32 / tf32: Megatron's default full-precision path


# --------------------------------------------------------------------------------------------
# DeepSpeed
def deepspeed_config(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                     config: ParallelConfig) -> dict[str, Any]:
    """A DeepSpeed configuration (ecosystem.md section 2.3) satisfying the batch invariant
    ``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``.

    ZeRO bucket sizes follow the Hugging Face Trainer's "auto" values
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
    if config.pp > 1:
        # an uneven split counts the embedding and the LM head as one layer each, which puts
        # fewer transformer layers on the first and last stage (BLOOM's --pp-partition-method)
        uneven = _uneven_split(model, config) is not None
        pipe: dict[str, Any] = {"stages": config.pp,
                                "partition": "type:transformer|embedding" if uneven
                                else "uniform"}
        if config.recompute == "full":
            pipe["activation_checkpoint_interval"] = 1
        ds["pipeline"] = pipe
    if config.tp > 1:
        ds["tensor_parallel"] = {"autotp_size": config.tp}
    if config.recompute != "none":
        ds["activation_checkpointing"] = {
            "partition_activations": config.tp > 1,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
        }
    return ds


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
def torchtitan_args(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                    config: ParallelConfig) -> list[str]:
    """torchtitan ``--section.field value`` overrides (ecosystem.md section 2.4).

    Batch mapping: with PP, ``local_batch_size`` (per DP rank per step) = gbs/dp is split into
    pipeline microbatches of ``micro_batch_size``; without PP, ``local_batch_size`` =
    ``micro_batch_size`` and torchtitan accumulates gbs/(mbs*dp) steps. Booleans use tyro's
    paired form (``--x`` / ``--no_x``).
    """
    job_shape(cluster, config)
    m = _microbatches(training, config)
    shard = config.dp if _fsdp(config) else 1
    replicate = 1 if _fsdp(config) else config.dp
    a = [
        "--parallelism.data_parallel_replicate_degree", str(replicate),
        "--parallelism.data_parallel_shard_degree", str(shard),
        "--parallelism.tensor_parallel_degree", str(config.tp),
        "--parallelism.pipeline_parallel_degree", str(config.pp),
    ]
    if config.zero_stage == 2:  # ZeRO-2: keep parameters gathered between forward and backward
        a += ["--parallelism.fsdp_reshard_after_forward", "never"]
    if config.tp > 1:
        a.append("--parallelism.enable_sequence_parallel" if config.sequence_parallel
                 else "--parallelism.no_enable_sequence_parallel")
    if config.pp > 1:
        a += ["--parallelism.pipeline_parallel_schedule", _TORCHTITAN_SCHEDULES[config.schedule],
              "--parallelism.pipeline_parallel_microbatch_size", str(config.micro_batch_size)]
        if _interleaved(config):
            a += ["--parallelism.pipeline_parallel_layers_per_stage",
                  str(_layers_per_virtual_stage(model, config))]
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
    a += ["--activation_checkpoint.mode", config.recompute]
    return a


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
def launch_env(cluster: ClusterSpec, config: ParallelConfig) -> dict[str, str]:
    """Environment variables for every rank (ecosystem.md sections 2.1, 2.5, 2.6).

    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` orders TP communication before compute on pre-Blackwell
    GPUs (compute capability < 10.0); Megatron FSDP (zero_stage >= 2) requires it unset.
    ``NCCL_ALGO``/``NCCL_PROTO`` appear only when forced.
    """
    env: dict[str, str] = {}
    if config.tp > 1 and cluster.gpu.compute_capability < 100 and not _fsdp(config):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    algo = nccl_algo_env(config.nccl_algo)
    if algo is not None:
        env["NCCL_ALGO"] = algo
        if {"CollNetDirect", "CollNetChain"} & _named(
                _parse_nccl("parallel.nccl_algo", config.nccl_algo, _ALGO_NAMES)):
            env["NCCL_COLLNET_ENABLE"] = "1"
    proto = nccl_proto_env(config.nccl_proto)
    if proto is not None:
        env["NCCL_PROTO"] = proto
    env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
    return env


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
        w.append("fp8: Megatron gets --fp8-format hybrid (Transformer Engine); the DeepSpeed and "
                 "torchtitan outputs use bf16 and need FP8 enabled in the model code")
    if config.precision == "fp16":
        w.append("torchtitan: mixed_precision_param takes bfloat16 or float32, so no fp16 "
                 "precision override is emitted")
    if config.pp > 1 and config.zero_stage >= 2:
        w.append("DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; the deepspeed_config "
                 f"with pp={config.pp} and zero_stage={config.zero_stage} will not start")
    if config.dp > 1 and not _fsdp(config) and (config.tp > 1 or config.pp > 1):
        w.append("torchtitan: data_parallel_replicate_degree > 1 without sharding is DDP, which "
                 "torchtitan supports only for 1-D parallelism; use zero_stage 3 (FSDP) there")
    if config.zero_stage == 1:
        w.append("torchtitan: zero_stage 1 has no torchtitan equivalent; torchtitan_args use "
                 "plain data parallelism")
    if model is not None:
        if model.num_attention_heads % config.tp or model.num_kv_heads % config.tp:
            w.append(f"Megatron needs num_attention_heads ({model.num_attention_heads}) and "
                     f"num_query_groups ({model.num_kv_heads}) divisible by tp={config.tp}")
        split = _uneven_split(model, config)
        if split is not None:
            w.append(f"uneven pipeline split ({model.num_layers} layers on pp={config.pp}: "
                     f"{split[0]} on the first stage, {split[1]} on the last, the rest evenly): "
                     "Megatron gets --decoder-first/last-pipeline-num-layers, DeepSpeed the "
                     "type:transformer|embedding partition; torchtitan's own split may differ")
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


def launch_bundle(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                  config: ParallelConfig) -> dict[str, Any]:
    """The ``launch`` object of the JSON output (contract.md section 4)."""
    return {
        "megatron_args": megatron_args(model, cluster, training, config),
        "deepspeed_config": deepspeed_config(model, cluster, training, config),
        "torchtitan_args": torchtitan_args(model, cluster, training, config),
        "env": launch_env(cluster, config),
        "warnings": launch_warnings(config, model=model, cluster=cluster, training=training),
    }
