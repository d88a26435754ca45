"""Configurations as columns of numpy arrays: the cost model's only input format.

Scoring one configuration is a batch of one, so the exhaustive path and the Optuna path go
through the same vectorised code. ``ConfigBatch`` is generated from the dimensions declared on
:class:`costmodel.specs.ParallelConfig` (:data:`costmodel.specs.PARALLEL_DIMENSIONS`): one
column per dimension, named like the field (``batch.tp``, ``batch.precision``, ...). INT
dimensions are int64 columns, BOOL ones bool columns, CHOICE ones int64 codes into their
vocabulary tuple (``PRECISIONS``, ...; the codes are the members of ``Precision``,
``Recompute``, ``Schedule``), and STRING ones (NCCL algorithm/protocol strings, which may be
per-collective forms such as ``allreduce:tree;allgather:ring``) int64 codes into the batch's
own table, the field ``<name>_table`` (``nccl_algo_table``, ``nccl_proto_table``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, make_dataclass
from typing import Any

import numpy as np

from costmodel.dimensions import Dimension
from costmodel.specs import PARALLEL_DIMENSIONS, ParallelConfig

#: Dimensions stored as codes into a per-batch string table, and their table fields.
TABLE_DIMENSIONS: tuple[Dimension, ...] = tuple(d for d in PARALLEL_DIMENSIONS
                                                if d.table_name is not None)
TABLE_FIELDS: tuple[str, ...] = tuple(d.table_name for d in TABLE_DIMENSIONS)
#: The integer-valued (INT kind) columns.
INT_FIELDS: tuple[str, ...] = tuple(d.name for d in PARALLEL_DIMENSIONS if d.kind == "int")


class _ConfigBatchMethods:
    """The methods of :class:`ConfigBatch` (its fields are generated below)."""

    __slots__ = ()

    def __len__(self) -> int:
        return int(getattr(self, PARALLEL_DIMENSIONS[0].name).shape[0])

    @classmethod
    def from_columns(cls, **cols: Any) -> ConfigBatch:
        """A batch from columns (arrays or sequences of column entries) and, for STRING
        dimensions, ``<name>_table=`` string tables (default: the dimension's default alone).
        A missing column holds the dimension's default."""
        tables = {t: tuple(cols.pop(t, (d.default,)))
                  for d, t in zip(TABLE_DIMENSIONS, TABLE_FIELDS, strict=True)}
        unknown = set(cols) - set(_COLUMN_NAMES)
        if unknown:
            raise TypeError(f"unknown ConfigBatch columns: {sorted(unknown)}")
        n = len(next(iter(cols.values()))) if cols else 0
        out = {}
        for d in PARALLEL_DIMENSIONS:
            v = cols.get(d.name)
            if v is None:
                v = np.full(n, d.default_code)
            out[d.name] = np.ascontiguousarray(np.asarray(v, dtype=d.dtype))
        return cls(**out, **tables)

    @classmethod
    def from_configs(cls, configs: Sequence[ParallelConfig]) -> ConfigBatch:
        tables = {d.table_name: tuple(dict.fromkeys([d.default,
                                                     *(getattr(c, d.name) for c in configs)]))
                  for d in TABLE_DIMENSIONS}
        cols = {d.name: d.encode((getattr(c, d.name) for c in configs),
                                 tables.get(d.table_name, ()))
                for d in PARALLEL_DIMENSIONS}
        return cls.from_columns(**tables, **cols)

    def tables(self) -> dict[str, tuple[str, ...]]:
        """``<name>_table`` -> the batch's string table, for each STRING dimension."""
        return {t: getattr(self, t) for t in TABLE_FIELDS}

    def take(self, index: np.ndarray | slice) -> ConfigBatch:
        """A sub-batch (boolean mask, index array or slice)."""
        cols = {n: getattr(self, n)[index] for n in _COLUMN_NAMES}
        return type(self)(**cols, **self.tables())

    def row(self, i: int) -> dict[str, Any]:
        """Configuration ``i`` as plain values per dimension (unvalidated: a rule may break)."""
        return {d.name: d.decode(getattr(self, d.name)[i],
                                 getattr(self, d.table_name) if d.table_name else ())
                for d in PARALLEL_DIMENSIONS}

    def config(self, i: int) -> ParallelConfig:
        return ParallelConfig(**self.row(i))

    def configs(self) -> list[ParallelConfig]:
        return [self.config(i) for i in range(len(self))]

    @staticmethod
    def concat(batches: Sequence[ConfigBatch]) -> ConfigBatch:
        first = batches[0]
        if any(b.tables() != first.tables() for b in batches):
            raise ValueError("cannot concatenate batches with different NCCL tables")
        cols = {n: np.concatenate([getattr(b, n) for b in batches]) for n in _COLUMN_NAMES}
        return ConfigBatch(**cols, **first.tables())


_COLUMN_NAMES: tuple[str, ...] = tuple(d.name for d in PARALLEL_DIMENSIONS)


def _batch_fields() -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = [
        (d.name, np.ndarray, field(metadata={"dim": d})) for d in PARALLEL_DIMENSIONS]
    out += [(t, tuple[str, ...], field(default=(d.default,)))
            for d, t in zip(TABLE_DIMENSIONS, TABLE_FIELDS, strict=True)]
    return out


#: n configurations, one array per dimension (all of length n), plus the STRING dimensions'
#: tables. Frozen; built with :meth:`from_columns` or :meth:`from_configs`.
ConfigBatch = make_dataclass(
    "ConfigBatch", _batch_fields(), bases=(_ConfigBatchMethods,), frozen=True,
    namespace={"__doc__": "n configurations, one array per field (all of length n).",
               "__module__": __name__})


__all__ = ["INT_FIELDS", "TABLE_DIMENSIONS", "TABLE_FIELDS", "ConfigBatch"]
