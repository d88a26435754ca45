"""costmodel.shard: the per-rank sizes the layer's ops read."""

from __future__ import annotations

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.shard import shard_of
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec

MODEL = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                  num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000, gated_mlp=True)


def test_shard_splits_heads_ffn_and_vocabulary_by_tp_and_the_sequence_with_sp():
    batch = ConfigBatch.from_configs([
        ParallelConfig(tp=1, micro_batch_size=2),
        ParallelConfig(tp=4, micro_batch_size=1, sequence_parallel=True),
        ParallelConfig(tp=4, micro_batch_size=1, sequence_parallel=False)])
    sh = shard_of(MODEL, TrainingSpec(seq_length=2048, global_batch_size=8), batch)
    assert sh.tokens.tolist() == [4096.0, 2048.0, 2048.0]
    assert sh.heads_local.tolist() == [64.0, 8.0, 8.0]  # b a / t
    # sequence parallelism only where there is a TP group to split over
    assert sh.sp.tolist() == [False, True, False]
    assert sh.seq_split.tolist() == [1.0, 4.0, 1.0]
    assert sh.up == 2 * 14336  # gate and up
    # Megatron pads the vocabulary to a multiple of 128 t
    assert sh.vocab.tolist() == [32000.0, 32256.0, 32256.0]
    assert np.all(np.mod(sh.vocab, 128 * sh.tp) == 0)


def test_sequence_parallelism_needs_tp():
    batch = ConfigBatch.from_configs([ParallelConfig(tp=1, sequence_parallel=True)])
    sh = shard_of(MODEL, TrainingSpec(seq_length=1024, global_batch_size=8), batch)
    assert not sh.sp[0]
