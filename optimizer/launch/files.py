"""Scheduler files from a JSON document: ``optimize --emit slurm|k8s``.

The document (contract.md section 4) carries the resolved model, cluster and training inputs
and every configuration's parallel fields, so the frozen records are rebuilt from it directly
(``ModelSpec(**inputs["model"])`` and so on; the constructors re-validate every field) and the
recommended configuration goes through :func:`optimizer.launch.scripts.slurm_script` or
:func:`optimizer.launch.scripts.k8s_yaml`. A stored front (``optimize report``) can therefore be turned
into a job file without repeating the search.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from costmodel.errors import InputError, did_you_mean
from costmodel.specs import (
    ClusterSpec,
    GPUSpec,
    InterNodeSpec,
    IntraNodeSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)

__all__ = ["EMIT_KINDS", "emit_for_doc", "specs_from_doc", "chosen_config"]

EMIT_KINDS: tuple[str, ...] = ("slurm", "k8s")


def _known(cls: type, data: Any, field_name: str) -> dict[str, Any]:
    """The entries of ``data`` that are fields of dataclass ``cls`` (the document may carry
    additions, e.g. a cluster's ``num_gpus``, which are derived, not constructor fields)."""
    if not isinstance(data, Mapping):
        raise InputError(field_name, f"must be a mapping, got {type(data).__name__}",
                         "emit from a document printed by 'optimize --json'")
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _build(cls: Callable[..., Any], kwargs: dict[str, Any], field_name: str) -> Any:
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise InputError(field_name, f"incomplete in the document: {e}",
                         "emit from a document printed by 'optimize --json'") from None


def specs_from_doc(doc: Mapping[str, Any]) -> tuple[ModelSpec, ClusterSpec, TrainingSpec]:
    """Rebuild (model, cluster, training) from a front or evaluate document's ``inputs``.

    A custom graph topology is not part of the document; launch files only need the node
    shape, the GPU and the fabrics, which are.
    """
    inputs = doc.get("inputs") if isinstance(doc, Mapping) else None
    if not isinstance(inputs, Mapping):
        raise InputError("inputs", "missing from the document",
                         "emit from a document printed by 'optimize --json'")
    model = _build(ModelSpec, _known(ModelSpec, inputs.get("model"), "inputs.model"),
                   "inputs.model")
    cl = inputs.get("cluster")
    cdict = _known(ClusterSpec, cl, "inputs.cluster")
    gdict = _known(GPUSpec, cdict.get("gpu"), "inputs.cluster.gpu")
    cdict["gpu"] = _build(GPUSpec, gdict, "inputs.cluster.gpu")
    if cdict.get("intra_node") is not None:
        cdict["intra_node"] = _build(
            IntraNodeSpec, _known(IntraNodeSpec, cdict["intra_node"], "inputs.cluster.intra_node"),
            "inputs.cluster.intra_node")
    else:
        cdict.pop("intra_node", None)
    if cdict.get("inter_node") is not None:
        cdict["inter_node"] = _build(
            InterNodeSpec, _known(InterNodeSpec, cdict["inter_node"], "inputs.cluster.inter_node"),
            "inputs.cluster.inter_node")
    else:
        cdict.pop("inter_node", None)
    cluster = _build(ClusterSpec, cdict, "inputs.cluster")
    training = _build(TrainingSpec, _known(TrainingSpec, inputs.get("training"),
                                           "inputs.training"), "inputs.training")
    return model, cluster, training


def chosen_config(doc: Mapping[str, Any]) -> ParallelConfig:
    """The configuration to launch: the recommended front point, or an evaluate document's."""
    if "pareto_front" in doc:
        front = doc["pareto_front"]
        rec = doc.get("recommended", 0)
        if not isinstance(front, list) or not front or not isinstance(rec, int) \
                or not 0 <= rec < len(front):
            raise InputError("recommended", f"{rec!r} does not index the Pareto front",
                             "emit from a document printed by 'optimize --json'")
        cfg = front[rec].get("config")
    elif "config" in doc:
        cfg = doc["config"]
    else:
        raise InputError("pareto_front", "the document has no configuration to launch",
                         "a search that found no feasible configuration cannot be emitted")
    return _build(ParallelConfig, _known(ParallelConfig, cfg, "config"), "config")


def emit_for_doc(doc: Mapping[str, Any], kind: str, **options: Any) -> str:
    """The ``sbatch`` script (``kind="slurm"``) or the Kubeflow ``PyTorchJob`` YAML
    (``kind="k8s"``) for the recommended configuration of ``doc``.

    ``options`` go to :func:`optimizer.launch.scripts.slurm_script` (``job_name``, ``script``,
    ``partition``, ``time_limit``) or :func:`optimizer.launch.scripts.k8s_yaml` (``job_name``,
    ``image``, ``script``).
    """
    from optimizer.launch import scripts as launch

    if kind not in EMIT_KINDS:
        raise InputError("--emit", f"unknown kind {kind!r}", did_you_mean(str(kind), EMIT_KINDS))
    model, cluster, training = specs_from_doc(doc)
    config = chosen_config(doc)
    if kind == "slurm":
        return launch.slurm_script(model, cluster, training, config, **options)
    return launch.k8s_yaml(model, cluster, training, config, **options)
