"""Launch artefacts for one parallel configuration: Megatron-LM flags, a DeepSpeed config,
torchtitan overrides, the process environment, warnings, and Slurm / Kubernetes wrappers.

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

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.errors import InputError
from costmodel.schedule import stage_layers
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec

__all__ = [
    "NCCL_PRODUCTION_WARNING",
    "deepspeed_config",
    "job_shape",
    "k8s_manifest",
    "k8s_yaml",
    "launch_bundle",
    "launch_env",
    "launch_warnings",
    "megatron_args",
    "nccl_algo_env",
    "nccl_tuner_csv",
    "nccl_proto_env",
    "shell_join",
    "slurm_script",
    "torchrun_command",
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
_MASTER_PORT = 29500
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


# --------------------------------------------------------------------------------------------
# Launchers
def torchrun_command(cluster: ClusterSpec, script: str = "pretrain_gpt.py", *,
                     num_nodes: int | None = None, nproc_per_node: int | None = None,
                     rdzv_endpoint: str = "${MASTER_ADDR}:${MASTER_PORT}",
                     rdzv_id: str | None = None) -> list[str]:
    """``torchrun`` with c10d rendezvous (ecosystem.md section 2.6), ending with ``script``.

    The default endpoint is a shell expression: join the tokens with :func:`shell_join` in a
    script that sets ``MASTER_ADDR``/``MASTER_PORT``, or pass a literal ``host:port``.
    """
    nodes = cluster.num_nodes if num_nodes is None else num_nodes
    nproc = cluster.gpus_per_node if nproc_per_node is None else nproc_per_node
    cmd = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
    if rdzv_id is not None:
        cmd += ["--rdzv-id", rdzv_id]
    return [*cmd, script]


def shell_join(tokens: Iterable[str]) -> str:
    """Quote argv tokens for bash. Tokens made of ``${VAR}`` references and plain characters
    (``${MASTER_ADDR}:${MASTER_PORT}``) are double-quoted so that they still expand; all others
    are single-quoted where needed."""
    return " ".join(f'"{t}"' if "$" in t and _EXPANDABLE.fullmatch(t) else shlex.quote(t)
                    for t in tokens)


_EXPANDABLE = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z0-9_.:/@=+-])+")


def slurm_script(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 config: ParallelConfig, *, job_name: str = "paraplan",
                 script: str = "pretrain_gpt.py", partition: str | None = None,
                 time_limit: str | None = None) -> str:
    """An ``sbatch`` script (ecosystem.md section 6.1): one task per node running ``torchrun``
    with one process per GPU, rendezvous on the first node of the allocation."""
    nodes, per_node = job_shape(cluster, config)
    args = megatron_args(model, cluster, training, config)
    env = launch_env(cluster, config)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={shlex.quote(job_name)}",
             f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={per_node}",
             "#SBATCH --exclusive"]
    if partition:
        lines.append(f"#SBATCH --partition={shlex.quote(partition)}")
    if time_limit:
        lines.append(f"#SBATCH --time={shlex.quote(time_limit)}")
    lines += [f"# paraplan: {model.name} on {cluster.name or cluster.gpu.name}, "
              f"tp={config.tp} pp={config.pp} dp={config.dp} "
              f"micro_batch_size={config.micro_batch_size} precision={config.precision}"]
    lines += [f"# WARNING: {w}" for w in launch_warnings(config, model=model, cluster=cluster,
                                                          training=training)]
    lines += ["set -euo pipefail", "",
              'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "export MASTER_ADDR",
              f"export MASTER_PORT={_MASTER_PORT}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    run = ["srun", *torchrun_command(cluster, script, num_nodes=nodes, nproc_per_node=per_node,
                                     rdzv_id="${SLURM_JOB_ID}")]
    lines += ["", shell_join(run) + " \\"]
    pairs = _argv_lines(args)
    lines += [f"    {p}" + (" \\" if i < len(pairs) - 1 else "") for i, p in enumerate(pairs)]
    return "\n".join(lines) + "\n"


def _argv_lines(args: Sequence[str]) -> list[str]:
    """One ``--flag [value ...]`` group per line."""
    groups: list[list[str]] = []
    for t in args:
        if t.startswith("--") or not groups:
            groups.append([t])
        else:
            groups[-1].append(t)
    return [shell_join(g) for g in groups]


def k8s_manifest(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 config: ParallelConfig, *, job_name: str = "paraplan",
                 image: str = "megatron-lm:latest", script: str = "pretrain_gpt.py"
                 ) -> dict[str, Any]:
    """A Kubeflow Training Operator v1 ``PyTorchJob`` (ecosystem.md section 6.2).

    One Master and ``nodes - 1`` Workers, one pod per node; the container (named ``pytorch``)
    runs ``torchrun``, which reads the operator's ``PET_NODE_RANK``/``PET_MASTER_ADDR``/
    ``PET_MASTER_PORT``. ``image`` is a placeholder: the operator's templates usually own the
    image and volumes, so treat the replica counts, env and args as the patch to apply.
    """
    nodes, per_node = job_shape(cluster, config)
    env = launch_env(cluster, config)
    args = ["--nnodes", str(nodes), "--nproc-per-node", str(per_node), script,
            *megatron_args(model, cluster, training, config)]

    def replica(count: int) -> dict[str, Any]:  # fresh lists per replica: no YAML aliases
        container = {"name": "pytorch", "image": image, "command": ["torchrun"],
                     "args": list(args),
                     "env": [{"name": k, "value": v} for k, v in env.items()],
                     "resources": {"limits": {"nvidia.com/gpu": per_node}}}
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": job_name},
            "spec": {"nprocPerNode": str(per_node), "pytorchReplicaSpecs": specs}}


def k8s_yaml(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
             config: ParallelConfig, **kwargs: Any) -> str:
    """:func:`k8s_manifest` as YAML (keyword arguments are passed through)."""
    import yaml  # PyYAML, a declared dependency; imported here to keep module import light

    manifest = k8s_manifest(model, cluster, training, config, **kwargs)
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


# --------------------------------------------------------------------------------------------
# NCCL tuner plugin CSV
def nccl_tuner_csv(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   config: ParallelConfig) -> str:
    """NCCL's example tuner plugin configuration (``ext-tuner/example`` in the NCCL sources,
    read from ``NCCL_TUNER_CONFIG_FILE`` when ``NCCL_TUNER_PLUGIN`` loads that plugin) for the
    collectives ``config`` issues, one line per collective with the (algorithm, protocol)
    NCCL's model picks for it (:func:`costmodel.collectives.collective_time_s`, honouring the
    config's ``nccl_algo``/``nccl_proto``).

    Columns (``#`` lines are comments)::

        collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff

    ``collective_type`` is broadcast, reduce, allgather, reducescatter or allreduce;
    ``min_bytes``/``max_bytes`` the inclusive range of NCCL's nBytes (here the one modelled
    size); ``algorithm`` tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree or pat;
    ``protocol`` ll, ll128 or simple; ``channels`` -1 (NCCL's own count: the model's
    bandwidth is the graph's, nccl.md §11); ``nNodes``/``nRanks`` the communicator;
    ``numPipeOps`` and ``regBuff`` -1 (any).

    Collectives (the sizes :mod:`costmodel.model` scores): TP (``tp > 1``) one all-reduce of a
    layer's activations ``b x s x h`` x activation bytes, or with sequence parallelism an
    all-gather and a reduce-scatter of that total size; DP (``dp > 1``) the gradient reduction
    in buckets (all-reduce, or reduce-scatter + parameter all-gather with ZeRO): Megatron
    ``max(40M, 1M x dp)`` elements (one bucket without ``overlap_grad_reduce``), DeepSpeed
    ``reduce_bucket_size = h x h`` (500M elements without ZeRO; its BF16_Optimizer, bf16 or fp8
    weights at ZeRO 0/1, all-reduces 500M-element buffers and then all-gathers the updated
    parameters, the stage's partition in one call as the cost model scores it: DeepSpeed's
    all_gather_into_tensor path ignores ``allgather_bucket_size``), FSDP one transformer layer
    (PyTorch DDP's 25 MiB without ZeRO), ZeRO-3 one layer; a bucket never exceeds the stage's
    gradients. Tied embeddings with ``pp > 1``: the embedding-gradient all-reduce between the
    first and last stage. Pipeline send/recv is not in NCCL's table and has no line.
    """
    import numpy as np  # lazy: launch stays importable without the cost model's dependencies

    from costmodel import collectives as coll
    from costmodel import topology
    from costmodel.calibration import FRAMEWORKS
    from costmodel.compute import ACT_BYTES, padded_vocab
    from costmodel.memory import PARAM_BYTES
    from costmodel.model import grad_wire_bytes, uses_bf16_optimizer
    from costmodel.specs import PRECISIONS

    job_shape(cluster, config)
    prec = PRECISIONS.index(config.precision)
    ea, pb = float(ACT_BYTES[prec]), float(PARAM_BYTES[prec])
    gb = float(grad_wire_bytes(FRAMEWORKS[training.framework], prec))  # as the model scores
    t, p, d = config.tp, config.pp, config.dp
    h = float(model.hidden_size)
    lay = topology.layout_topology(cluster, t, p, d)
    vocab = float(padded_vocab(model.vocab_size, np.asarray(t)))
    layer = float(model.params_per_layer) / t
    stage_layers = -(-model.num_layers // p)  # the heaviest stage holds ceil(L/p) layers
    body = stage_layers * layer
    head = 0.0 if (model.tied_embeddings and p == 1) else vocab * h
    first = body + vocab * h / t + (head / t if p == 1 else 0.0)
    psi = max(first, body + head / t if p > 1 else 0.0)  # the largest stage's parameters
    calls: list[tuple[str, str, float, int, int]] = []  # (comment, collective, bytes, n, nodes)
    if t > 1:
        act = config.micro_batch_size * training.seq_length * h * ea
        what = f"a layer's activations (b*s*h*{ea:g} B)"
        if config.sequence_parallel:
            calls.append((f"TP all-gather of {what}", "allgather", act, t, lay.tp.n_nodes))
            calls.append((f"TP reduce-scatter of {what}", "reducescatter", act, t,
                          lay.tp.n_nodes))
        else:
            calls.append((f"TP all-reduce of {what}", "allreduce", act, t, lay.tp.n_nodes))
    if d > 1:
        z, fw = config.zero_stage, training.framework
        bf16_opt = bool(uses_bf16_optimizer(FRAMEWORKS[fw], prec, z))
        if z >= 3 or (fw == "fsdp" and z >= 1):
            grad_el = param_el = layer
            src = "one layer (FSDP unit)"
        elif bf16_opt:
            grad_el, param_el = 5e8, psi
            src = "DeepSpeed BF16_Optimizer"
        elif fw == "deepspeed":
            grad_el = param_el = h * h if z >= 1 else 5e8
            src = "DeepSpeed reduce_bucket_size" if z >= 1 else "DeepSpeed allreduce bucket"
        elif fw == "fsdp":
            grad_el = param_el = 25 * 2**20 / gb
            src = "PyTorch DDP bucket_cap_mb=25"
        else:
            grad_el = param_el = max(40e6, 1e6 * d) if training.overlap_grad_reduce else psi
            src = "Megatron DDP bucket" if training.overlap_grad_reduce else "one bucket"
        grad_el, param_el = min(grad_el, psi), min(param_el, psi)
        if z == 0 or bf16_opt:
            calls.append((f"DP gradient all-reduce, {src}", "allreduce", grad_el * gb, d,
                          lay.dp.n_nodes))
        if bf16_opt:
            calls.append((f"DP parameter all-gather, {src}", "allgather", param_el * pb, d,
                          lay.dp.n_nodes))
        elif z > 0:
            calls.append((f"DP gradient reduce-scatter, {src}", "reducescatter", grad_el * gb, d,
                          lay.dp.n_nodes))
            calls.append((f"DP parameter all-gather, {src}", "allgather", param_el * pb, d,
                          lay.dp.n_nodes))
    if model.tied_embeddings and p > 1:
        calls.append(("embedding-gradient all-reduce, first and last stage", "allreduce",
                      vocab * h / t * gb, 2, 2 if lay.pp.crosses_nodes else 1))

    system = coll.nccl_system(cluster)
    names = {"collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
             "nvlstree": "nvls_tree"}
    lines = [
        f"# NCCL tuner plugin CSV (ext-tuner/example) written by paraplan for tp={t} pp={p} "
        f"dp={d} on {cluster.name}",
        "# use: NCCL_TUNER_PLUGIN=<path>/libnccl-tuner-example.so "
        "NCCL_TUNER_CONFIG_FILE=<this file>",
        f"# picks from NCCL's {coll.NCCL_VERSION} cost model (NCCL_ALGO={config.nccl_algo}, "
        f"NCCL_PROTO={config.nccl_proto}); sizes are NCCL's nBytes",
        "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,"
        "numPipeOps,regBuff",
    ]
    seen: set[tuple[str, int, int, int]] = set()
    for comment, name, nbytes, n, nn in calls:
        size = int(round(nbytes))
        if size < 1 or (name, size, n, nn) in seen:
            continue
        seen.add((name, size, n, nn))
        r = coll.collective_time_s(system, name, float(size), n, nn, config.nccl_algo,
                                   config.nccl_proto)
        algo = str(r.algo_names()[()])
        proto = str(r.proto_names()[()])
        lines.append(f"# {comment}: predicted {float(r.time_s) * 1e6:.1f} us")
        lines.append(f"{name},{size},{size},{names.get(algo, algo)},{proto},-1,{nn},{n},-1,-1")
    return "\n".join(lines) + "\n"
