"""The problem a search solves: resolved model, cluster, training and memory limit.

:func:`resolve_problem` turns names, files and mappings into a frozen :class:`Problem`;
:func:`document_head` starts every contract document (schema version, tool, inputs with the
problem's fingerprint). Imports only :mod:`costmodel` and :mod:`optimizer.core`, so every
optimizer package can use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costmodel import COST_MODEL_VERSION
from costmodel.errors import InputError
from costmodel.specs import ClusterSpec, ModelSpec, TrainingSpec

SCHEMA_VERSION = 1
GIB = 1024**3


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("paraplan")
    except Exception:  # pragma: no cover - not installed
        return "0+unknown"


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
        if self.training.tp_comm_overlap:  # only when set: older fingerprints stay valid
            doc["training"]["tp_comm_overlap"] = True
        if self.training.overlap_p2p_comm:  # likewise
            doc["training"]["overlap_p2p_comm"] = True
        return doc

    def fingerprint(self) -> str:
        blob = json.dumps(self.inputs_json(), sort_keys=True).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()



def resolve_problem(*, model: Any, gpus: int | None = None, cluster: Any = None,
                    gpu: str = "a100-sxm-80gb", gpus_per_node: int = 8,
                    seq_length: int | None = None, global_batch_size: int | None = None,
                    training: TrainingSpec | Mapping | None = None,
                    memory_limit_gib: float | None = None, memory_fraction: float = 0.9,
                    allow_cross_node_tp: bool = False) -> Problem:
    """Resolve names, files and mappings into a :class:`Problem` (raises InputError)."""
    from costmodel import hardware, loaders

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
        tdict = dict(training or {})
        if seq_length is not None:
            tdict["seq_length"] = seq_length
        if global_batch_size is not None:
            tdict["global_batch_size"] = global_batch_size
        from costmodel.errors import check_keys

        check_keys("training", tdict, TrainingSpec.__dataclass_fields__)
        train = TrainingSpec(**tdict)
    hbm = cluster_spec.gpu.memory_bytes
    if memory_limit_gib is not None:
        if isinstance(memory_limit_gib, bool) or not isinstance(memory_limit_gib, int | float) \
                or not 0 < memory_limit_gib < float("inf"):
            raise InputError("memory_limit_gib", f"must be a positive number, got "
                             f"{memory_limit_gib!r}")
        limit = float(memory_limit_gib) * GIB
    else:
        if not (isinstance(memory_fraction, int | float) and 0 < memory_fraction <= 1):
            raise InputError("memory_fraction", f"must be in (0, 1], got {memory_fraction!r}")
        limit = memory_fraction * hbm
    return Problem(model_spec, cluster_spec, train, limit, allow_cross_node_tp)
