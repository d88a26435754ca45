"""The problem a search solves: resolved model, cluster, training and memory limit.

:func:`resolve_problem` turns names, files and mappings into a frozen :class:`Problem`;
:func:`document_head` starts every contract document (schema version, tool, inputs with the
problem's fingerprint). Imports only :mod:`costmodel` and :mod:`optimizer.core`, so every
optimizer package can use it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costmodel import COST_MODEL_VERSION
from costmodel.errors import InputError
from costmodel.specs import ClusterSpec, ModelSpec, TrainingSpec
from optimizer.core.version import tool_version  # noqa: F401  (re-exported)

SCHEMA_VERSION = 1
GIB = 1024**3


def document_head(problem: Problem, **extra_inputs: Any) -> dict[str, Any]:
    """The fields every contract document starts with: schema version, tool, inputs (with the
    problem's fingerprint and any ``extra_inputs``)."""
    inputs = problem.inputs_json()
    inputs.update(extra_inputs)
    inputs["fingerprint"] = problem.fingerprint()
    return {"schema_version": SCHEMA_VERSION,
            "tool": {"name": "paraplan", "version": tool_version(),
                     "cost_model_version": COST_MODEL_VERSION},
            "inputs": inputs}


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """Everything a search needs besides the space: resolved inputs and the memory limit."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    memory_limit_bytes: float
    allow_cross_node_tp: bool = False

    def inputs_json(self) -> dict[str, Any]:
        from optimizer.core.serialize import cluster_to_dict, model_to_dict

        doc = {
            "model": model_to_dict(self.model),
            "cluster": cluster_to_dict(self.cluster),
            "training": {"seq_length": self.training.seq_length,
                         "global_batch_size": self.training.global_batch_size,
                         "flash_attention": self.training.flash_attention,
                         "overlap_grad_reduce": self.training.overlap_grad_reduce,
                         "dropout": self.training.dropout,
                         "framework": self.training.framework},
            "memory_limit_bytes": self.memory_limit_bytes,
        }
        # every other training field only where it differs from its default, so that
        # fingerprints made before the field existed stay valid (tp_comm_overlap, fp8_recipe,
        # the MoE fields, fp8_dot_product_attention, torch_compile, ...)
        for f in dataclasses.fields(self.training):
            if f.name in doc["training"] or f.default is dataclasses.MISSING:
                continue
            value = getattr(self.training, f.name)
            if value != f.default:
                doc["training"][f.name] = value
        return doc

    def fingerprint(self) -> str:
        blob = json.dumps(self.inputs_json(), sort_keys=True).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()



def resolve_problem(*, model: Any, gpus: int | None = None, cluster: Any = None,
                    gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8,
                    seq_length: int | None = None, global_batch_size: int | None = None,
                    training: TrainingSpec | Mapping | None = None,
                    memory_limit_gib: float | None = None, memory_fraction: float | None = None,
                    allow_cross_node_tp: bool = False) -> Problem:
    """Resolve names, files and mappings into a :class:`Problem` (raises InputError).

    Every input is checked here, before anything is searched or stored: types (the API's
    callers get InputError, never TypeError), the bounds of :mod:`costmodel.limits`, names
    without control characters. The memory constraint is ``memory_limit_gib`` or
    ``memory_fraction`` (default :data:`costmodel.memory_verdict.DEFAULT_MEMORY_FRACTION`: the GPU's
    memory less the one safety margin) of the GPU's memory, never both; a limit above the GPU's
    memory is refused (a plan needing more than the GPU has cannot run).
    """
    from costmodel import hardware, limits, loaders

    if gpus is not None:
        limits.check_count("gpus", gpus, maximum=limits.MAX_GPUS)
    limits.check_count("gpus_per_node", gpus_per_node, maximum=limits.MAX_GPUS_PER_NODE)
    if not isinstance(gpu, str):
        raise InputError("gpu", f"must be a GPU catalog key, got {type(gpu).__name__}")
    for name, value in (("seq_length", seq_length), ("global_batch_size", global_batch_size)):
        if value is not None:
            limits.check_count(name, value, maximum=2**62)
    if memory_limit_gib is not None and memory_fraction is not None:
        raise InputError("memory_fraction", "given together with memory_limit_gib",
                         "give one of them: a limit in GiB or a fraction of the GPU's memory")
    if not isinstance(allow_cross_node_tp, bool):
        raise InputError("allow_cross_node_tp", "must be true or false")
    model_spec = model if isinstance(model, ModelSpec) else loaders.load_model(model)
    if cluster is not None:
        cluster_spec = cluster if isinstance(cluster, ClusterSpec) else \
            loaders.load_cluster(cluster, default_gpus=gpus)
        if gpus is not None and gpus != cluster_spec.num_gpus:
            raise InputError("gpus", f"{gpus} differs from the cluster's "
                             f"{cluster_spec.num_gpus} GPUs", "omit --gpus or fix the cluster")
    else:
        if gpus is None:
            raise InputError("gpus", "missing", "give --gpus N or --cluster FILE")
        cluster_spec = hardware.default_cluster(gpus, gpus_per_node=gpus_per_node, gpu=gpu)
    if isinstance(training, TrainingSpec):
        train = training
    else:
        if training is not None and not isinstance(training, Mapping):
            raise InputError("training", f"must be a mapping of training settings, got "
                             f"{type(training).__name__}")
        tdict = dict(training or {})
        if seq_length is not None:
            tdict["seq_length"] = seq_length
        if global_batch_size is not None:
            tdict["global_batch_size"] = global_batch_size
        from costmodel.errors import check_keys

        check_keys("training", tdict, TrainingSpec.__dataclass_fields__)
        train = TrainingSpec(**tdict)
    limits.check_problem_inputs(model_spec, cluster_spec, train)
    hbm = cluster_spec.gpu.memory_bytes
    if memory_limit_gib is not None:
        if isinstance(memory_limit_gib, bool) or not isinstance(memory_limit_gib, int | float) \
                or not 0 < memory_limit_gib < float("inf"):
            raise InputError("memory_limit_gib", f"must be a positive number, got "
                             f"{memory_limit_gib!r}")
        limit = float(memory_limit_gib) * GIB
        limits.check_memory_limit(limit, cluster_spec.gpu)
    else:
        from costmodel.memory_verdict import DEFAULT_MEMORY_FRACTION

        fraction = DEFAULT_MEMORY_FRACTION if memory_fraction is None else memory_fraction
        if isinstance(fraction, bool) or not (isinstance(fraction, int | float)
                                              and 0 < fraction <= 1):
            raise InputError("memory_fraction", f"must be in (0, 1], got {fraction!r}")
        limit = fraction * hbm
    return Problem(model_spec, cluster_spec, train, limit, allow_cross_node_tp)
