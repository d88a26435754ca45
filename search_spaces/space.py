"""The search space as data: one tuple of candidate values per dimension.

``dp`` is not a dimension: it is derived as ``world_size / (tp * cp * pp)`` (Megatron-LM's
``validate_args``; ecosystem.md section 2.1), so a sampler never proposes an inconsistent
data-parallel size. Optuna needs one fixed categorical choice list per parameter name for the
whole study (``check_distribution_compatibility``; ecosystem.md section 1.5):
:func:`optuna_choices` gives exactly those lists, and invalid combinations are rejected by the
rules of :mod:`search_spaces.rules` instead of by changing the lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field, fields, make_dataclass, replace
from typing import Any

import numpy as np

from costmodel.batch import TABLE_DIMENSIONS, ConfigBatch
from costmodel.dimensions import (
    BOOL,
    CHOICE,
    DEFAULT_MICRO_BATCH_SIZES,  # noqa: F401  (re-exported: search_spaces.space.DEFAULT_...)
    INT,
    Dimension,
    searched,
)
from costmodel.errors import InputError, did_you_mean
from costmodel.nccl_grammar import ALGORITHMS, PROTOCOLS, NcclEntry, parse_nccl_setting
from costmodel.specs import (
    DIMENSIONS_BY_NAME,
    PARALLEL_DIMENSIONS,
    ClusterSpec,
    ModelSpec,
    TrainingSpec,
)

#: The searched dimensions' declarations, in the order that defines the enumeration order
#: (tp varies slowest): ``ParallelConfig``'s field order without the derived ``dp``.
SEARCH_DIMENSIONS: tuple[Dimension, ...] = searched(PARALLEL_DIMENSIONS)
#: Their names.
DIMENSIONS: tuple[str, ...] = tuple(d.name for d in SEARCH_DIMENSIONS)
ZERO_STAGES: tuple[int, ...] = tuple(range(DIMENSIONS_BY_NAME["zero_stage"].minimum,
                                           DIMENSIONS_BY_NAME["zero_stage"].maximum + 1))


# --------------------------------------------------------------------------------------------
# NCCL_ALGO / NCCL_PROTO strings: costmodel.nccl_grammar is the one parser
_KIND_NAMES = {"algo": frozenset(ALGORITHMS) | {"collnet"}, "proto": frozenset(PROTOCOLS)}


def parse_nccl(value: str, kind: str | Sequence[str], field: str) -> tuple[NcclEntry, ...]:
    """The entries of an ``NCCL_ALGO`` (``kind='algo'``) / ``NCCL_PROTO`` (``'proto'``) value,
    parsed by :func:`costmodel.nccl_grammar.parse_nccl_setting` (InputError naming ``field``);
    ``()`` for ``auto``. Each entry's ``names`` are the names as written (``collnet`` stays
    ``collnet``; ``collective:auto`` is an ``exclude`` entry with no names).

    Deprecated form, kept for ``optimizer.launch.flags``: ``kind`` may be the vocabulary the
    caller maps names from (``(*names, "auto")``). The kind is then inferred from it, and
    explicitly: every name must be an NCCL protocol (``proto``) or every name an NCCL
    algorithm or ``collnet`` (``algo``), else ValueError; a name of the value outside the
    vocabulary is an InputError. New code passes ``kind``.
    """
    vocabulary: frozenset[str] | None = None
    if not isinstance(kind, str):
        vocabulary = frozenset(kind) - {"auto"}
        kinds = [k for k, names in _KIND_NAMES.items() if vocabulary <= names]
        if len(kinds) != 1:
            raise ValueError(f"cannot tell NCCL_ALGO from NCCL_PROTO by the vocabulary "
                             f"{sorted(vocabulary)}; pass kind='algo' or 'proto'")
        kind = kinds[0]
    entries = tuple(replace(e, names=e.written)
                    for e in parse_nccl_setting(value, kind, field).entries)
    for e in entries if vocabulary is not None else ():
        for name in e.names:
            if name not in vocabulary:
                raise InputError(field, f"unknown value {name!r} in {value!r}",
                                 did_you_mean(name, sorted(vocabulary)))
    return entries


# --------------------------------------------------------------------------------------------
def _value(d: Dimension, v: Any, field: str) -> Any:
    """One candidate value of dimension ``d``, validated and normalised."""
    if d.kind == INT:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer) or int(v) != v:
            raise InputError(field, f"must be integers, got {v!r}")
        v = int(v)
        if d.maximum is not None:
            if not d.minimum <= v <= d.maximum:
                raise InputError(field, f"unknown value {v!r}", f"valid: {d.valid_text}")
        elif v < d.minimum:
            raise InputError(field, f"must be >= {d.minimum}, got {v!r}")
        return v
    if d.kind == BOOL:
        if not isinstance(v, bool | np.bool_):
            raise InputError(field, f"must be true or false, got {v!r}")
        return bool(v)
    if d.kind == CHOICE:
        if not isinstance(v, str) or v.strip().lower() not in d.values:
            raise InputError(field, f"unknown value {v!r}", did_you_mean(str(v), d.values))
        return v.strip().lower()
    return d.parse(v, field)  # STRING: the dimension's own grammar


def _values(dim: str, raw: Any) -> tuple[Any, ...]:
    """Validate and normalise one dimension's candidate values (order kept, duplicates
    dropped). A scalar is a one-value list."""
    field = f"space.{dim}"
    d = DIMENSIONS_BY_NAME[dim]
    if isinstance(raw, str | bytes) or not isinstance(raw, Iterable):
        raw = (raw,)
    out: list[Any] = []
    for v in raw:
        v = _value(d, v, field)
        if v not in out:
            out.append(v)
    if not out:
        raise InputError(field, "must list at least one value")
    return tuple(out)


class _SearchSpaceMethods:
    """The methods of :class:`SearchSpace` (its fields are generated below)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _values(f.name, getattr(self, f.name)))

    def values(self, dim: str) -> tuple[Any, ...]:
        return getattr(self, check_dimension(dim))

    def as_dict(self) -> dict[str, tuple[Any, ...]]:
        """The dimensions' lists, less ``omit_default`` ones left at their default alone."""
        return {d: getattr(self, d) for d in DIMENSIONS
                if not (DIMENSIONS_BY_NAME[d].omit_default
                        and getattr(self, d) == (DIMENSIONS_BY_NAME[d].default,))}

    def fingerprint_dict(self) -> dict[str, tuple[Any, ...]]:
        """``as_dict`` without the ``new`` dimensions left at their default alone (what
        stored studies hash: a dimension added later, e.g. ``cp``, does not rename the
        studies of problems that do not search it; ``Dimension.in_fingerprint``)."""
        return {d.name: getattr(self, d.name) for d in SEARCH_DIMENSIONS
                if d.in_fingerprint(getattr(self, d.name))}

    @property
    def product_size(self) -> int:
        """Size of the cartesian product (before any validity rule)."""
        return count_product(self)


#: Candidate values per searched dimension (one tuple field each, in :data:`DIMENSIONS`
#: order). Defaults are a single point (``ParallelConfig``'s defaults); :func:`default_space`
#: gives the space paraplan searches by default.
SearchSpace = make_dataclass(
    "SearchSpace",
    [(d.name, tuple[Any, ...], field(default=(d.default,))) for d in SEARCH_DIMENSIONS],
    bases=(_SearchSpaceMethods,), frozen=True,
    namespace={"__doc__": "Candidate values per dimension (see search_spaces.space).",
               "__module__": __name__})


def check_dimension(dim: str) -> str:
    """``dim`` if it is a search dimension, else InputError ``space.<dim>`` with a hint."""
    d = DIMENSIONS_BY_NAME.get(dim) if isinstance(dim, str) else None
    if d is not None and not d.searched:
        raise InputError(f"space.{dim}", f"{dim} is not a search dimension",
                         f"it is derived as {d.derived}")
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
def default_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec
                  ) -> SearchSpace:
    """The space searched when the user gives none: each searched dimension's declared
    ``space_default`` (``costmodel.specs.ParallelConfig``; ``optimize --help`` lists them).

    Today: tp from :func:`costmodel.dimensions.default_tp` (cross-node values are kept so the
    search can show why they are bad; the ``tp_within_node`` rule rejects them unless
    cross-node TP is allowed), pp from :func:`~costmodel.dimensions.default_pp` (values that
    do not divide the layers get an uneven split: ``costmodel.schedule.stage_layers``),
    cp from :func:`~costmodel.dimensions.default_cp` (long sequences; 2 from 8k tokens; up
    to 8 from 4k where the batch has fewer sequences than GPUs), micro-batch sizes 1-16 up to
    the global batch, the GPU's best 16-bit precision and fp8 where it has fp8 Tensor Cores,
    every recompute mode with 0, 1, 2, 4 or 8 recomputed layers per chunk (partial recompute,
    megatron), sequence parallelism off and on, ZeRO 0, 1 and 3 (FSDP, with pipelines too),
    1F1B and interleaved with every virtual-stage count up to 8 that some pp interleaves, the
    default and the balanced stage plan, NCCL algorithm and protocol auto.
    """
    return SearchSpace(**{d.name: d.default_values(model, cluster, training)
                          for d in SEARCH_DIMENSIONS})


# --------------------------------------------------------------------------------------------
def batch_from_choices(choices: Sequence[Mapping[str, Any]], world_size: int, *,
                       space: SearchSpace | None = None) -> ConfigBatch:
    """A ConfigBatch from raw per-dimension choices (e.g. k Optuna trials' parameters).

    Unlike ``ParallelConfig`` this does not reject inconsistent combinations: that is the
    rules' job, so the caller learns *which* rule a sampled point breaks. ``dp`` is derived as
    ``world_size // (tp * cp * pp)`` unless given (it is then 0 when tp*cp*pp > world_size,
    and the ``world_size`` rule rejects a non-dividing tp*cp*pp). Missing dimensions take
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
        for d in SEARCH_DIMENSIONS:
            row.setdefault(d.name, d.default)
        tp_pp = row["tp"] * row["pp"] * row["cp"]
        if "dp" in c:
            dp = c["dp"]
            if isinstance(dp, bool) or not isinstance(dp, int | np.integer) or dp < 1:
                raise InputError("parallel.dp", f"must be a positive integer, got {dp!r}")
            row["dp"] = int(dp)
        else:
            row["dp"] = world_size // tp_pp
        rows.append(row)
    tables = {d.table_name: tuple(dict.fromkeys([*(getattr(space, d.name) if space else ()),
                                                 *(r[d.name] for r in rows)]))
              for d in TABLE_DIMENSIONS}
    cols = {d.name: d.encode((r[d.name] for r in rows), tables.get(d.table_name, ()))
            for d in PARALLEL_DIMENSIONS}
    return ConfigBatch.from_columns(**tables, **cols)
