"""Documented bounds on every input, checked once the inputs are resolved (issue 26).

The search enumerates divisors of the GPU count and the layer count and builds per-GPU
arrays, so a count of 10**12 would hang it; a GPU with 10**12 GB/s of NVLink or a limit above
the GPU's memory would give a confident but impossible answer. These bounds are far above any
real system and far below what would hang or mislead the tool. They are checked at the
boundary (the CLI and :mod:`optimizer.api`), before anything is searched or stored; the table
is docs/limits.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from costmodel.errors import InputError
from costmodel.safe_io import check_text

__all__ = ["CALIBRATION_KEYS", "LIMITS", "check_cluster", "MAX_BATCH_SIZE", "MAX_GPUS", "MAX_JOBS", "MAX_SEED", "MAX_TRIALS", "check_count", "check_memory_limit",
           "check_problem_inputs", "check_seed"]

MAX_GPUS = 2**20                # GPUs in one job (the largest runs use ~10**5)
MAX_GPUS_PER_NODE = 1024        # GPUs per node / NVLink domain (NVL72 racks: 72)
MAX_SEED = 2**32 - 1            # numpy / Optuna samplers take 32-bit seeds
MAX_TRIALS = 1_000_000          # Optuna trials per study
MAX_BATCH_SIZE = 100_000        # trials asked per batch
MAX_JOBS = 1024                 # scoring processes
GB, GIB = 1e9, 2**30

#: field -> (maximum, unit for the message); minimums are the specs' own (> 0).
LIMITS: dict[str, tuple[float, str]] = {
    "model.num_layers": (10_000, ""),
    "model.hidden_size": (2**20, ""),
    "model.num_attention_heads": (2**16, ""),
    "model.ffn_hidden_size": (2**22, ""),
    "model.vocab_size": (2**24, ""),
    "training.seq_length": (2**24, "tokens"),
    "training.global_batch_size": (2**32, "sequences"),
    "cluster.num_nodes": (MAX_GPUS, "nodes"),
    "cluster.gpus_per_node": (MAX_GPUS_PER_NODE, "GPUs"),
    "cluster.gpu.memory_GB": (10_000, "GB"),
    "cluster.gpu.memory_bandwidth_GBps": (100_000, "GB/s"),
    "cluster.gpu.peak_tflops": (100_000, "TFLOP/s"),
    "cluster.intra_node.bandwidth_GBps": (10_000, "GB/s"),
    "cluster.inter_node.nics_per_node": (64, "NICs"),
    "cluster.inter_node.nic_bandwidth_Gbps": (10_000, "Gb/s"),
}


def _over(field: str, value: float) -> None:
    top, unit = LIMITS[field]
    if not (isinstance(value, int | float) and math.isfinite(value)) or value > top:
        raise InputError(field, f"{value:g} {unit} is beyond what any machine has".replace(
            "  ", " "), f"at most {top:g}{' ' + unit if unit else ''}")


def check_count(field: str, value: Any, *, maximum: int, minimum: int = 1,
                what: str = "") -> int:
    """``value`` as an int in [minimum, maximum] (bool and float refused), else InputError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"must be an integer, got {type(value).__name__} "
                         f"{str(value)[:40]!r}")
    if not minimum <= value <= maximum:
        raise InputError(field, f"must be in {minimum}..{maximum}{what}, got {value}"[:300])
    return value


def check_seed(field: str, value: Any) -> int:
    """A sampler seed: an integer in 0..2**32-1 (what numpy and Optuna accept)."""
    return check_count(field, value, minimum=0, maximum=MAX_SEED)


def check_memory_limit(limit_bytes: float, gpu: Any, field: str = "memory_limit_gib") -> None:
    """A per-GPU memory limit above the GPU's own memory is refused: a plan that needs more
    than the GPU has cannot run (the limit would only hide it)."""
    if limit_bytes > gpu.memory_bytes * (1 + 1e-9):
        raise InputError(field, f"{limit_bytes / GIB:g} GiB is more than the "
                         f"{gpu.memory_bytes / GIB:.1f} GiB of memory of one {gpu.name}",
                         f"give at most {math.floor(gpu.memory_bytes / GIB * 10) / 10:g} or "
                         "omit it; the default is memory_fraction 0.9 of the GPU's memory")


#: The keys a cluster's ``calibration`` mapping may hold (read by
#: costmodel.collectives.nccl_system; written by 'optimize nccl --save-cluster'), and their range.
CALIBRATION_KEYS = ("nccl_intra_bw_scale", "nccl_inter_bw_scale", "nccl_latency_scale",
                    # optimize calibrate (costmodel/cluster_calibration.py)
                    "eff_gemm_scale", "eff_attention_scale", "eff_host_scale", "eff_comm_scale")
CALIBRATION_RANGE = (1e-3, 1e3)


def check_problem_inputs(model: Any, cluster: Any, training: Any) -> None:
    """Names (one printable line each) and sizes within :data:`LIMITS` for resolved specs."""
    check_text("model.name", str(model.name))
    for key in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                "vocab_size"):
        _over(f"model.{key}", getattr(model, key))
    _over("training.seq_length", training.seq_length)
    _over("training.global_batch_size", training.global_batch_size)
    check_cluster(cluster)


def check_cluster(cluster: Any) -> None:
    """A resolved cluster within :data:`LIMITS`, with a known calibration (a typo in a
    calibration key would otherwise be ignored silently)."""
    from costmodel.errors import did_you_mean

    if cluster.name is not None:
        check_text("cluster.name", str(cluster.name))
    check_text("cluster.gpu.name", str(cluster.gpu.name))
    for key, value in dict(cluster.calibration or {}).items():
        if key not in CALIBRATION_KEYS:
            raise InputError(f"cluster.calibration.{key}", "unknown key",
                             did_you_mean(str(key), CALIBRATION_KEYS))
        lo, hi = CALIBRATION_RANGE
        if not (isinstance(value, int | float) and lo <= value <= hi):
            raise InputError(f"cluster.calibration.{key}", f"{value!r} is not a plausible "
                             f"scale", f"between {lo:g} and {hi:g} (1 = uncalibrated)")
    _over("cluster.num_nodes", cluster.num_nodes)
    _over("cluster.gpus_per_node", cluster.gpus_per_node)
    if cluster.num_nodes * cluster.gpus_per_node > MAX_GPUS:
        raise InputError("gpus", f"{cluster.num_nodes * cluster.gpus_per_node:,} GPUs is more "
                         f"than the {MAX_GPUS:,} paraplan plans for")
    gpu = cluster.gpu
    _over("cluster.gpu.memory_GB", gpu.memory_bytes / GB)
    _over("cluster.gpu.memory_bandwidth_GBps", gpu.memory_bandwidth_bytes_per_s / GB)
    for flops in dict(gpu.peak_flops_per_s).values():
        _over("cluster.gpu.peak_tflops", flops / 1e12)
    if cluster.intra_node is not None:
        _over("cluster.intra_node.bandwidth_GBps", cluster.intra_node.bandwidth_bytes_per_s / GB)
    graph = getattr(cluster, "graph_data", None)
    if isinstance(graph, Mapping):
        edges = graph.get("edges", graph.get("links")) or ()
        for i, e in enumerate(edges if isinstance(edges, list | tuple) else ()):
            bw = e.get("bandwidth_bytes_per_s") if isinstance(e, Mapping) else None
            if isinstance(bw, int | float) and not (math.isfinite(bw) and bw <= 1e13):
                raise InputError(f"cluster.edges[{i}].bandwidth_bytes_per_s",
                                 f"{bw:g} B/s is beyond any link", "at most 1e13 (10 TB/s)")
    if cluster.inter_node is not None:
        _over("cluster.inter_node.nics_per_node", cluster.inter_node.nics_per_node)
        _over("cluster.inter_node.nic_bandwidth_Gbps",
              cluster.inter_node.nic_bandwidth_bytes_per_s * 8 / GB)
