"""The per-rank shard of one micro-batch: the sizes every op of a layer reads.

A layer's ops are written on the shard, not on the model and the configuration: tensor
parallelism splits heads, the FFN and the vocabulary by ``tp`` (and, with sequence
parallelism, the sequence outside the TP regions); context parallelism divides the tokens by
``cp`` here and nowhere else (``tokens = b s / cp``; ``seq`` stays the whole sequence, the key
range every query chunk attends to: :mod:`costmodel.cp`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.compute import padded_vocab
from costmodel.cp import cp_a2a_size
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
    cp: np.ndarray = 1.0  # c (float), the context-parallel size
    cp_ranks: np.ndarray = 1  # c (int)
    cp_type: np.ndarray = 0  # CpCommType code
    cp_a2a: np.ndarray = 1  # hierarchical CP's all-to-all group (c1); 1 otherwise

    @property
    def local_samples(self) -> np.ndarray:
        """b / c: what every sequence-linear formula written for b whole samples of s tokens
        reads to get one CP rank's b s / c tokens (activations, the causal attention FLOPs of
        the local query chunks against the whole key range, load-balanced over 2c chunks)."""
        return self.micro_batch / self.cp

    @property
    def cp_steps(self) -> np.ndarray:
        """Ring steps of the p2p part: c (p2p), c / c1 (a2a+p2p); 1 without a ring."""
        hier = self.cp_type == 3
        return np.where(hier, self.cp / np.maximum(self.cp_a2a, 1), self.cp)

    @property
    def seq_split(self) -> np.ndarray:
        """What divides tensors outside the TP regions: t with sequence parallelism, else 1."""
        return np.where(self.sp, self.tp, 1.0)

    @property
    def heads_local(self) -> np.ndarray:
        """Attention batches per rank: b a / t."""
        return self.micro_batch * self.heads / self.tp


def shard_of(model: ModelSpec, training: TrainingSpec, batch: ConfigBatch,
             gpus_per_node: int | None = None) -> Shard:
    """The shard of every configuration; ``gpus_per_node`` places hierarchical CP's
    all-to-all group (:func:`costmodel.cp.cp_a2a_size`; None: no a2a+p2p group)."""
    b = batch.micro_batch_size.astype(float)
    s = float(training.seq_length)
    f = float(model.ffn_hidden_size)
    cp = batch.cp.astype(float)
    tokens = np.where(batch.cp > 1, b * s / cp, b * s)  # b s exactly where cp = 1
    c1 = (np.ones_like(batch.cp) if gpus_per_node is None else
          cp_a2a_size(gpus_per_node, model.num_attention_heads, model.num_kv_heads, batch.tp,
                      batch.cp))
    return Shard(micro_batch=b, seq=s, tokens=tokens, tp=batch.tp.astype(float),
                 tp_ranks=batch.tp, sp=batch.sequence_parallel & (batch.tp > 1),
                 hidden=float(model.hidden_size), head_dim=float(model.head_dim),
                 heads=float(model.num_attention_heads), kv_heads=float(model.num_kv_heads),
                 ffn=f, up=(2.0 if model.gated_mlp else 1.0) * f,
                 vocab=padded_vocab(model.vocab_size, batch.tp), cp=cp, cp_ranks=batch.cp,
                 cp_type=batch.cp_comm_type, cp_a2a=c1)
