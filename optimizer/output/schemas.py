"""The JSON Schema (draft 2020-12) of paraplan's ``--json`` documents, shipped as package data.

One file, ``optimizer/schema.json``, holds a ``$defs`` entry per document kind and a top-level
``oneOf`` over them:

* ``front``: ``optimize --json`` / ``OptimizeResult.to_json()`` (contract.md section 4);
* ``infeasible``: ``optimize --json`` when nothing fits the memory limit (exit code 3);
* ``evaluate``: ``optimize evaluate --json`` / ``EvaluateResult.to_json()``;
* ``nccl``: ``optimize nccl --json``;
* ``plan``: ``optimize --gpus A-B --tokens N --json`` (planning across GPU counts).

:func:`validate_document` checks a document against one kind (or any, with ``kind=None``)
plus the few invariants JSON Schema cannot express (the recommended index points into the
front; every front point fits the memory limit). ``jsonschema`` is an optional (test) extra and
is imported only when validating.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["KINDS", "SchemaError", "detect_kind", "load_schema", "schema_for", "validate_document"]

KINDS: tuple[str, ...] = ("front", "infeasible", "evaluate", "nccl", "plan", "calibrate")
SCHEMA_FILE = "schema.json"
_DISTINCT_KEY = {"plan": "plan", "pareto_front": "front", "error": "infeasible", "chosen": "nccl",
                 "config": "evaluate", "efficiency_calibration": "calibrate"}


class SchemaError(ValueError):
    """A document does not match the schema: names the JSON path and what is wrong."""

    def __init__(self, kind: str, path: str, message: str) -> None:
        self.kind, self.path, self.message = kind, path, message
        super().__init__(f"{kind} document, at {path}: {message}")


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files("optimizer").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def load_schema() -> dict[str, Any]:
    """The whole schema (a fresh copy: callers may modify it)."""
    return json.loads(_schema_text())


def schema_for(kind: str | None = None) -> dict[str, Any]:
    """A standalone schema for one document kind (``None``: any of them)."""
    full = load_schema()
    if kind is None:
        return full
    if kind not in KINDS:
        from costmodel.errors import InputError, did_you_mean

        raise InputError("kind", f"unknown document kind {kind!r}", did_you_mean(kind, KINDS))
    return {"$schema": full["$schema"], "$id": full["$id"], "title": full["$defs"][kind].get(
        "title", kind), "$defs": full["$defs"], "$ref": f"#/$defs/{kind}"}


def detect_kind(doc: Mapping[str, Any]) -> str | None:
    """The kind a document claims by its distinctive top-level key, else ``None``."""
    if not isinstance(doc, Mapping):
        return None
    for key, kind in _DISTINCT_KEY.items():
        if key in doc:
            return kind
    return None


@lru_cache(maxsize=len(KINDS) + 1)
def _validator(kind: str | None):
    from jsonschema import Draft202012Validator

    schema = schema_for(kind)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def validate_document(doc: Any, kind: str | None = None) -> str:
    """Validate ``doc`` against the schema of ``kind`` (detected when ``None``); return the kind.

    Raises :class:`SchemaError` naming the first problem (by JSON path), and ``ImportError``
    with the install hint when ``jsonschema`` is missing.
    """
    try:
        import jsonschema
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("validating paraplan documents needs jsonschema: "
                          "pip install 'paraplan[test]'") from e
    kind = kind or detect_kind(doc)
    err = jsonschema.exceptions.best_match(_validator(kind).iter_errors(doc))
    if err is not None:
        raise SchemaError(kind or "paraplan", _path(err.absolute_path), err.message)
    kind = kind or "document"  # unreachable in practice: every kind has a distinct key
    _check_invariants(doc, kind)
    return kind


def _check_invariants(doc: Mapping[str, Any], kind: str) -> None:
    """What JSON Schema cannot say: cross-field relations of the document."""
    if kind == "front":
        front = doc["pareto_front"]
        if doc["recommended"] >= len(front):
            raise SchemaError(kind, "$.recommended", f"{doc['recommended']} is not an index of "
                                                     f"pareto_front (length {len(front)})")
        limit = doc["inputs"]["memory_limit_bytes"]
        for i, point in enumerate(front):
            peak = point["metrics"]["peak_memory_bytes"]
            if peak > limit:
                raise SchemaError(kind, f"$.pareto_front[{i}].metrics.peak_memory_bytes",
                                  f"{peak:.0f} exceeds the memory limit {limit:.0f}")
    if kind == "plan":
        n = len(doc["plan"])
        for key in ("plan_front",):
            for j, i in enumerate(doc[key]):
                if i >= n or doc["plan"][i]["status"] != "ok":
                    raise SchemaError(kind, f"$.{key}[{j}]", f"{i} is not a feasible plan entry")
        pick = doc["plan_pick"]
        if pick is not None and pick not in doc["plan_front"]:
            raise SchemaError(kind, "$.plan_pick", f"{pick} is not on plan_front")
    if kind == "infeasible":
        err = doc["error"]
        need = err["least_memory_bytes"]
        if need is not None and need <= err["memory_limit_bytes"]:
            raise SchemaError(kind, "$.error.least_memory_bytes",
                              f"{need:.0f} fits the limit {err['memory_limit_bytes']:.0f}, "
                              "so the run was not infeasible")
