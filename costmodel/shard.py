"""The per-rank shard of one micro-batch: the sizes every op of a layer reads.

A layer's ops are written on the shard, not on the model and the configuration: tensor
parallelism splits heads, the FFN and the vocabulary by ``tp`` (and, with sequence
parallelism, the sequence outside the TP regions); a later context-parallel axis divides the
sequence here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.compute import padded_vocab
from costmodel.specs import ModelSpec, TrainingSpec


@dataclass(frozen=True)
class Shard:
    """One micro-batch of one layer on one rank (arrays over the configurations)."""

    micro_batch: np.ndarray  # b, samples
    seq: float  # s, tokens per sample on this rank
    tokens: np.ndarray  # b s
    tp: np.ndarray  # t (float)
    tp_ranks: np.ndarray  # t (int), the TP group's size
    sp: np.ndarray  # sequence parallelism in effect (tp > 1)
    hidden: float  # h
    head_dim: float  # d_h
    heads: float  # a (split by t inside the layer)
    kv_heads: float  # g
    ffn: float  # f
    up: float  # FC1's output width: 2f gated, f plain
    vocab: np.ndarray  # V padded to a multiple of 128 t

    @property
    def seq_split(self) -> np.ndarray:
        """What divides tensors outside the TP regions: t with sequence parallelism, else 1."""
        return np.where(self.sp, self.tp, 1.0)

    @property
    def heads_local(self) -> np.ndarray:
        """Attention batches per rank: b a / t."""
        return self.micro_batch * self.heads / self.tp


def shard_of(model: ModelSpec, training: TrainingSpec, batch: ConfigBatch) -> Shard:
    b = batch.micro_batch_size.astype(float)
    s = float(training.seq_length)
    f = float(model.ffn_hidden_size)
    return Shard(micro_batch=b, seq=s, tokens=b * s, tp=batch.tp.astype(float),
                 tp_ranks=batch.tp, sp=batch.sequence_parallel & (batch.tp > 1),
                 hidden=float(model.hidden_size), head_dim=float(model.head_dim),
                 heads=float(model.num_attention_heads), kv_heads=float(model.num_kv_heads),
                 ffn=f, up=(2.0 if model.gated_mlp else 1.0) * f,
                 vocab=padded_vocab(model.vocab_size, batch.tp))
