"""Specs -> plain JSON-ready dictionaries (for the output document and fingerprints)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from typing import Any

from costmodel.specs import ClusterSpec, GPUSpec, ModelSpec

#: ModelSpec fields added with MoE/MLA and the definition facts, written only when set: a dense model's document and
#: fingerprint stay what they were
_OPTIONAL_MODEL_FIELDS = {"moe": None, "mla": None, "qk_norm": None, "attention_sinks": False,
                          "position_embedding": None, "rope_theta": None,
                          "rope_scaling_factor": None, "norm_eps": None, "qkv_bias": None,
                          "norms_per_layer": None, "activation": None}


def model_to_dict(model: ModelSpec) -> dict[str, Any]:
    out = {}
    for f in fields(model):
        v = getattr(model, f.name)
        if f.name in _OPTIONAL_MODEL_FIELDS and v == _OPTIONAL_MODEL_FIELDS[f.name]:
            continue
        out[f.name] = {g.name: getattr(v, g.name) for g in fields(v)} if f.name in (
            "moe", "mla") else v
    if model.moe is not None:
        out["total_params"] = model.total_params()
        out["active_params"] = model.active_params()
    return out


def gpu_to_dict(gpu: GPUSpec) -> dict[str, Any]:
    out = {f.name: getattr(gpu, f.name) for f in fields(gpu)}
    out["peak_flops_per_s"] = dict(gpu.peak_flops_per_s)
    return out


def cluster_to_dict(cluster: ClusterSpec) -> dict[str, Any]:
    """The resolved cluster of a result document. ``gpus_per_domain`` (the NVLink domain) is
    written only when set, so documents and fingerprints of one-host domains are unchanged."""
    domain = ({"gpus_per_domain": cluster.gpus_per_domain}
              if cluster.gpus_per_domain is not None else {})
    return {
        "name": cluster.name,
        "num_nodes": cluster.num_nodes,
        "gpus_per_node": cluster.gpus_per_node,
        **domain,
        "num_gpus": cluster.num_gpus,
        "gpu": gpu_to_dict(cluster.gpu),
        "intra_node": {f.name: getattr(cluster.intra_node, f.name)
                       for f in fields(cluster.intra_node)},
        "inter_node": {f.name: getattr(cluster.inter_node, f.name)
                       for f in fields(cluster.inter_node)},
        "custom_graph": cluster.graph_data is not None,
        "graph_sha256": (hashlib.sha256(json.dumps(cluster.graph_data, sort_keys=True,
                                                   default=str).encode()).hexdigest()
                         if cluster.graph_data is not None else None),
        "calibration": dict(cluster.calibration) if cluster.calibration else None,
    }
