"""Configurations as columns of numpy arrays: the cost model's only input format.

Scoring one configuration is a batch of one, so the exhaustive path and the Optuna path go
through the same vectorised code. Categorical fields are stored as integer codes into the
tuples of :mod:`costmodel.specs`; NCCL algorithm/protocol strings (which may be per-collective
forms such as ``allreduce:tree;allgather:ring``) are codes into the batch's own tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from costmodel.specs import PRECISIONS, RECOMPUTE, SCHEDULES, ParallelConfig

INT_FIELDS = ("tp", "pp", "dp", "micro_batch_size", "zero_stage", "virtual_stages")


@dataclass(frozen=True)
class ConfigBatch:
    """n configurations, one array per field (all of length n)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    micro_batch_size: np.ndarray
    precision: np.ndarray  # code into PRECISIONS
    recompute: np.ndarray  # code into RECOMPUTE
    sequence_parallel: np.ndarray  # bool
    zero_stage: np.ndarray
    schedule: np.ndarray  # code into SCHEDULES
    virtual_stages: np.ndarray
    nccl_algo: np.ndarray  # code into nccl_algo_table
    nccl_proto: np.ndarray  # code into nccl_proto_table
    nccl_algo_table: tuple[str, ...] = ("auto",)
    nccl_proto_table: tuple[str, ...] = ("auto",)

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def from_columns(cls, *, nccl_algo_table: Sequence[str] = ("auto",),
                     nccl_proto_table: Sequence[str] = ("auto",), **cols: np.ndarray
                     ) -> ConfigBatch:
        n = len(cols["tp"])
        out = {}
        for f in fields(cls):
            if f.name.endswith("_table"):
                continue
            v = cols.get(f.name)
            if v is None:
                default = {"virtual_stages": 1, "micro_batch_size": 1, "dp": 1, "pp": 1}
                v = np.full(n, default.get(f.name, 0))
            dtype = bool if f.name == "sequence_parallel" else np.int64
            out[f.name] = np.ascontiguousarray(np.asarray(v, dtype=dtype))
        return cls(**out, nccl_algo_table=tuple(nccl_algo_table),
                   nccl_proto_table=tuple(nccl_proto_table))

    @classmethod
    def from_configs(cls, configs: Sequence[ParallelConfig]) -> ConfigBatch:
        algos = tuple(dict.fromkeys(["auto", *(c.nccl_algo for c in configs)]))
        protos = tuple(dict.fromkeys(["auto", *(c.nccl_proto for c in configs)]))
        cols = {name: np.array([getattr(c, name) for c in configs], dtype=np.int64)
                for name in INT_FIELDS}
        cols["precision"] = np.array([PRECISIONS.index(c.precision) for c in configs])
        cols["recompute"] = np.array([RECOMPUTE.index(c.recompute) for c in configs])
        cols["schedule"] = np.array([SCHEDULES.index(c.schedule) for c in configs])
        cols["sequence_parallel"] = np.array([c.sequence_parallel for c in configs], dtype=bool)
        cols["nccl_algo"] = np.array([algos.index(c.nccl_algo) for c in configs])
        cols["nccl_proto"] = np.array([protos.index(c.nccl_proto) for c in configs])
        return cls.from_columns(nccl_algo_table=algos, nccl_proto_table=protos, **cols)

    def take(self, index: np.ndarray | slice) -> ConfigBatch:
        """A sub-batch (boolean mask, index array or slice)."""
        cols = {f.name: getattr(self, f.name)[index] for f in fields(self)
                if not f.name.endswith("_table")}
        return ConfigBatch(**cols, nccl_algo_table=self.nccl_algo_table,
                           nccl_proto_table=self.nccl_proto_table)

    def config(self, i: int) -> ParallelConfig:
        return ParallelConfig(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]),
            micro_batch_size=int(self.micro_batch_size[i]),
            precision=PRECISIONS[int(self.precision[i])],
            recompute=RECOMPUTE[int(self.recompute[i])],
            sequence_parallel=bool(self.sequence_parallel[i]),
            zero_stage=int(self.zero_stage[i]),
            schedule=SCHEDULES[int(self.schedule[i])],
            virtual_stages=int(self.virtual_stages[i]),
            nccl_algo=self.nccl_algo_table[int(self.nccl_algo[i])],
            nccl_proto=self.nccl_proto_table[int(self.nccl_proto[i])],
        )

    def configs(self) -> list[ParallelConfig]:
        return [self.config(i) for i in range(len(self))]

    @staticmethod
    def concat(batches: Sequence[ConfigBatch]) -> ConfigBatch:
        first = batches[0]
        if any(b.nccl_algo_table != first.nccl_algo_table
               or b.nccl_proto_table != first.nccl_proto_table for b in batches):
            raise ValueError("cannot concatenate batches with different NCCL tables")
        cols = {f.name: np.concatenate([getattr(b, f.name) for b in batches])
                for f in fields(ConfigBatch) if not f.name.endswith("_table")}
        return ConfigBatch(**cols, nccl_algo_table=first.nccl_algo_table,
                           nccl_proto_table=first.nccl_proto_table)
