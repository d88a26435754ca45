"""The search space as data: one tuple of candidate values per dimension.

``dp`` is not a dimension: it is derived as ``world_size / (tp * pp)`` (Megatron-LM's
``validate_args``; ecosystem.md section 2.1), so a sampler never proposes an inconsistent
data-parallel size. Optuna needs one fixed categorical choice list per parameter name for the
whole study (``check_distribution_compatibility``; ecosystem.md section 1.5):
:func:`optuna_choices` gives exactly those lists, and invalid combinations are rejected by the
rules of :mod:`search_spaces.rules` instead of by changing the lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.errors import InputError, did_you_mean
from costmodel.specs import (
    NCCL_ALGOS,
    NCCL_PROTOS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)

#: The searched dimensions, in the order that defines the enumeration order (tp varies slowest).
DIMENSIONS: tuple[str, ...] = (
    "tp", "pp", "micro_batch_size", "precision", "recompute", "sequence_parallel",
    "zero_stage", "schedule", "virtual_stages", "nccl_algo", "nccl_proto",
)
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
#: Collective names accepted as per-collective prefixes in NCCL_ALGO / NCCL_PROTO (NCCL 2.24+).
NCCL_COLLECTIVES: tuple[str, ...] = ("allreduce", "allgather", "reducescatter", "broadcast",
                                     "reduce")

_POSITIVE_INT_DIMS = ("tp", "pp", "micro_batch_size", "virtual_stages")
_CODE_DIMS: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS, "recompute": RECOMPUTE, "schedule": SCHEDULES,
}
_NCCL_DIMS: dict[str, tuple[str, ...]] = {"nccl_algo": NCCL_ALGOS, "nccl_proto": NCCL_PROTOS}
DEFAULT_MICRO_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)


# --------------------------------------------------------------------------------------------
# NCCL_ALGO / NCCL_PROTO strings
@dataclass(frozen=True)
class NcclEntry:
    """One ``;``-separated entry of an NCCL_ALGO/NCCL_PROTO value (ecosystem.md section 2.5).

    ``collective`` is None for the entry that applies to every collective; ``exclude`` is True
    for a ``^``-list (everything but ``names``).
    """

    collective: str | None
    exclude: bool
    names: tuple[str, ...]


def parse_nccl(value: str, vocabulary: Sequence[str], field: str) -> tuple[NcclEntry, ...]:
    """Parse ``auto``, ``ring``, ``ring,tree``, ``^ll128`` or per-collective forms such as
    ``allreduce:tree;allgather:ring`` into entries; ``auto`` alone gives ``()`` (nothing forced).

    Raises InputError naming ``field`` for unknown tokens or collectives.
    """
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {value!r}",
                         did_you_mean(str(value), vocabulary))
    text = value.strip().lower()
    if text == "auto":
        return ()
    entries: list[NcclEntry] = []
    seen: set[str | None] = set()
    for raw in text.split(";"):
        raw = raw.strip()
        if not raw:
            continue
        collective: str | None = None
        if ":" in raw:
            collective, raw = (s.strip() for s in raw.split(":", 1))
            if collective not in NCCL_COLLECTIVES:
                raise InputError(field, f"unknown collective {collective!r} in {value!r}",
                                 did_you_mean(collective, NCCL_COLLECTIVES))
        if collective in seen:
            raise InputError(field, f"{collective or 'the default entry'} is given twice in "
                                    f"{value!r}")
        seen.add(collective)
        exclude = raw.startswith("^")
        names = tuple(s.strip() for s in raw.lstrip("^").split(",") if s.strip())
        if not names:
            raise InputError(field, f"empty list in {value!r}")
        for name in names:
            if name not in vocabulary or name == "auto":
                valid = [v for v in vocabulary if v != "auto"]
                raise InputError(field, f"unknown value {name!r} in {value!r}",
                                 did_you_mean(name, valid))
        entries.append(NcclEntry(collective, exclude, names))
    if not entries:
        raise InputError(field, f"empty value {value!r}", "use 'auto' to force nothing")
    return tuple(entries)


# --------------------------------------------------------------------------------------------
def _values(dim: str, raw: Any) -> tuple[Any, ...]:
    """Validate and normalise one dimension's candidate values (order kept, duplicates
    dropped). A scalar is a one-value list."""
    field = f"space.{dim}"
    if isinstance(raw, str | bytes) or not isinstance(raw, Iterable):
        raw = (raw,)
    out: list[Any] = []
    for v in raw:
        if dim in _POSITIVE_INT_DIMS or dim == "zero_stage":
            if isinstance(v, bool) or not isinstance(v, int | float | np.integer) or int(v) != v:
                raise InputError(field, f"must be integers, got {v!r}")
            v = int(v)
            if dim == "zero_stage" and v not in ZERO_STAGES:
                raise InputError(field, f"unknown value {v!r}", "valid: 0, 1, 2, 3")
            if dim != "zero_stage" and v < 1:
                raise InputError(field, f"must be >= 1, got {v!r}")
        elif dim == "sequence_parallel":
            if not isinstance(v, bool | np.bool_):
                raise InputError(field, f"must be true or false, got {v!r}")
            v = bool(v)
        elif dim in _CODE_DIMS:
            vocab = _CODE_DIMS[dim]
            if not isinstance(v, str) or v.strip().lower() not in vocab:
                raise InputError(field, f"unknown value {v!r}", did_you_mean(str(v), vocab))
            v = v.strip().lower()
        else:  # nccl_algo / nccl_proto
            parse_nccl(v, _NCCL_DIMS[dim], field)
            v = v.strip().lower()
        if v not in out:
            out.append(v)
    if not out:
        raise InputError(field, "must list at least one value")
    return tuple(out)


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values per dimension. Defaults are a single point (``ParallelConfig``'s
    defaults); :func:`default_space` gives the space paraplan searches by default."""

    tp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] = (1,)
    micro_batch_size: tuple[int, ...] = (1,)
    precision: tuple[str, ...] = ("bf16",)
    recompute: tuple[str, ...] = ("none",)
    sequence_parallel: tuple[bool, ...] = (False,)
    zero_stage: tuple[int, ...] = (0,)
    schedule: tuple[str, ...] = ("1f1b",)
    virtual_stages: tuple[int, ...] = (1,)
    nccl_algo: tuple[str, ...] = ("auto",)
    nccl_proto: tuple[str, ...] = ("auto",)

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _values(f.name, getattr(self, f.name)))

    def values(self, dim: str) -> tuple[Any, ...]:
        return getattr(self, check_dimension(dim))

    def as_dict(self) -> dict[str, tuple[Any, ...]]:
        return {d: getattr(self, d) for d in DIMENSIONS}

    @property
    def product_size(self) -> int:
        """Size of the cartesian product (before any validity rule)."""
        return count_product(self)


def check_dimension(dim: str) -> str:
    """``dim`` if it is a search dimension, else InputError ``space.<dim>`` with a hint."""
    if dim == "dp":
        raise InputError("space.dp", "dp is not a search dimension",
                         "it is derived as world_size / (tp * pp); search tp and pp instead")
    if dim not in DIMENSIONS:
        raise InputError(f"space.{dim}", "unknown dimension", did_you_mean(str(dim), DIMENSIONS))
    return dim


def count_product(space: SearchSpace) -> int:
    """Number of points in the cartesian product of all dimensions (dp is derived)."""
    n = 1
    for d in DIMENSIONS:
        n *= len(getattr(space, d))
    return n


def restrict(space: SearchSpace, /, **overrides: Any) -> SearchSpace:
    """``space`` with the given dimensions replaced (a scalar means a single value).

    Used by CLI flags (``--tp 8``) and study files. Unknown dimensions and values outside the
    vocabulary raise InputError with field ``space.<dim>`` and a did-you-mean hint.
    """
    for dim in overrides:
        check_dimension(dim)
    return replace(space, **overrides)


def space_from_mapping(mapping: Mapping[str, Any] | None, base: SearchSpace) -> SearchSpace:
    """The study file's ``space:`` section applied over ``base`` (omitted dimensions keep
    ``base``'s values)."""
    if mapping is None:
        return base
    if not isinstance(mapping, Mapping):
        raise InputError("space", f"must be a mapping of dimension -> values, got "
                                  f"{type(mapping).__name__}")
    for key in mapping:
        if not isinstance(key, str):
            raise InputError(f"space.{key}", "unknown dimension", did_you_mean(str(key),
                                                                               DIMENSIONS))
    return restrict(base, **dict(mapping))


def optuna_choices(space: SearchSpace) -> dict[str, tuple[Any, ...]]:
    """Fixed categorical choice list per dimension, in :data:`DIMENSIONS` order.

    Optuna rejects a parameter name whose choice list changes within a study
    (ecosystem.md section 1.5), so these lists depend only on the space; combinations that
    break a rule are rejected by :func:`search_spaces.rules.check`, not by narrowing a list.
    Values are plain ``int``/``bool``/``str`` (what ``CategoricalDistribution`` accepts).
    """
    return {d: tuple(getattr(space, d)) for d in DIMENSIONS}


# --------------------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec
                  ) -> SearchSpace:
    """The space searched when the user gives none.

    - tp: powers of two and divisors of ``gpus_per_node``, up to
      ``min(2 * gpus_per_node, num_attention_heads, num_gpus)``. Cross-node values
      (``tp > gpus_per_node``) are kept so the search can show why they are bad; the
      ``tp_within_node`` rule rejects them unless cross-node TP is allowed.
    - pp: divisors of ``num_layers`` or of ``num_gpus``, up to both (pp that does not
      divide the layers gets an uneven split: ``costmodel.schedule.stage_layers``).
    - micro_batch_size: 1, 2, 4, 8, 16 up to the global batch size.
    - precision: bf16 where the GPU has it, else fp16 (else tf32, fp32).
    - recompute: none, selective, full; sequence_parallel: off, on; zero_stage: 0, 1;
      schedule: 1f1b, interleaved; virtual_stages: 1, 2, 4; NCCL algorithm and protocol: auto.
    """
    world = cluster.num_gpus
    gpn = cluster.gpus_per_node
    tp_cap = min(2 * gpn, model.num_attention_heads, world)
    powers = [1 << k for k in range(tp_cap.bit_length()) if (1 << k) <= tp_cap]
    tp = sorted(set(powers) | {d for d in _divisors(gpn) if d <= tp_cap})
    # pp values that tile the GPUs need not divide the layers (uneven split, see the
    # pp_splits_layers rule): Llama 3 405B's 126 layers on 16 stages
    pp = sorted(d for d in set(_divisors(model.num_layers)) | set(_divisors(world))
                if d <= min(world, model.num_layers))
    mbs = [b for b in DEFAULT_MICRO_BATCH_SIZES if b <= training.global_batch_size]
    precision = next((p for p in ("bf16", "fp16", "tf32", "fp32") if cluster.gpu.supports(p)),
                     next(iter(cluster.gpu.peak_flops_per_s)))
    return SearchSpace(
        tp=tuple(tp), pp=tuple(pp), micro_batch_size=tuple(mbs), precision=(precision,),
        recompute=RECOMPUTE, sequence_parallel=(False, True), zero_stage=(0, 1),
        schedule=("1f1b", "interleaved"), virtual_stages=(1, 2, 4),
        nccl_algo=("auto",), nccl_proto=("auto",),
    )


# --------------------------------------------------------------------------------------------
_DEFAULTS = ParallelConfig()


def batch_from_choices(choices: Sequence[Mapping[str, Any]], world_size: int, *,
                       space: SearchSpace | None = None) -> ConfigBatch:
    """A ConfigBatch from raw per-dimension choices (e.g. k Optuna trials' parameters).

    Unlike ``ParallelConfig`` this does not reject inconsistent combinations: that is the
    rules' job, so the caller learns *which* rule a sampled point breaks. ``dp`` is derived as
    ``world_size // (tp * pp)`` unless given (it is then 0 when tp*pp > world_size, and the
    ``world_size`` rule rejects a non-dividing tp*pp). Missing dimensions take
    ``ParallelConfig``'s defaults. With ``space``, the NCCL tables are the space's lists.
    """
    if not choices:
        raise InputError("space", "no configurations given")
    rows: list[dict[str, Any]] = []
    for c in choices:
        row = {}
        for key, v in c.items():
            if key == "dp":
                continue
            check_dimension(key)
            (row[key],) = _values(key, (v,))
        for d in DIMENSIONS:
            row.setdefault(d, getattr(_DEFAULTS, d))
        tp_pp = row["tp"] * row["pp"]
        if "dp" in c:
            dp = c["dp"]
            if isinstance(dp, bool) or not isinstance(dp, int | np.integer) or dp < 1:
                raise InputError("parallel.dp", f"must be a positive integer, got {dp!r}")
            row["dp"] = int(dp)
        else:
            row["dp"] = world_size // tp_pp
        rows.append(row)
    algos = tuple(space.nccl_algo) if space else ()
    protos = tuple(space.nccl_proto) if space else ()
    algos = tuple(dict.fromkeys([*algos, *(r["nccl_algo"] for r in rows)]))
    protos = tuple(dict.fromkeys([*protos, *(r["nccl_proto"] for r in rows)]))
    cols: dict[str, np.ndarray] = {
        name: np.array([r[name] for r in rows], dtype=np.int64)
        for name in ("tp", "pp", "dp", "micro_batch_size", "zero_stage", "virtual_stages")
    }
    for dim, vocab in _CODE_DIMS.items():
        cols[dim] = np.array([vocab.index(r[dim]) for r in rows], dtype=np.int64)
    cols["sequence_parallel"] = np.array([r["sequence_parallel"] for r in rows], dtype=bool)
    cols["nccl_algo"] = np.array([algos.index(r["nccl_algo"]) for r in rows], dtype=np.int64)
    cols["nccl_proto"] = np.array([protos.index(r["nccl_proto"]) for r in rows], dtype=np.int64)
    return ConfigBatch.from_columns(nccl_algo_table=algos, nccl_proto_table=protos, **cols)
