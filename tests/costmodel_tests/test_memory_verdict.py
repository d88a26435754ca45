"""The one memory verdict (issue 21 item 5): allocated and reserved peaks, the allocator
setting's fragmentation reserve, one safety margin, "does not fit" over the GPU's memory."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.memory_verdict import (
    DEFAULT_MEMORY_FRACTION,
    DEFAULT_MEMORY_MARGIN,
    DOES_NOT_FIT,
    FITS,
    OVER_LIMIT,
    verdict,
    verdicts,
)

GIB = 2.0**30


def test_three_verdicts():
    hbm, limit = 80 * GIB, 77 * GIB
    assert verdict(70 * GIB, limit, hbm) == FITS
    assert verdict(77 * GIB, limit, hbm) == FITS  # at the limit fits
    assert verdict(78 * GIB, limit, hbm) == OVER_LIMIT
    assert verdict(80.5 * GIB, limit, hbm) == DOES_NOT_FIT
    np.testing.assert_array_equal(verdicts(np.array([70, 78, 81]) * GIB, limit, hbm), [0, 1, 2])


def test_one_default_margin():
    assert DEFAULT_MEMORY_FRACTION == pytest.approx(1 - DEFAULT_MEMORY_MARGIN)
    assert 0 < DEFAULT_MEMORY_MARGIN <= 0.05
    from optimizer.core.results import SAFETY_MARGIN

    assert SAFETY_MARGIN == 0.0  # the recommendation adds no margin of its own


def _score(expandable: bool, **training_kw):
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec

    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=32000)
    training = TrainingSpec(seq_length=4096, global_batch_size=64,
                            expandable_segments=expandable, **training_kw)
    par = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=2, precision="bf16",
                         recompute="none", sequence_parallel=True, zero_stage=1)
    return score(model, default_cluster(8), training, ConfigBatch.from_configs([par]))


def test_expandable_segments_lower_the_reserve_not_the_allocated_peak():
    on, off = _score(True), _score(False)
    assert on.allocated_memory_bytes[0] == pytest.approx(off.allocated_memory_bytes[0],
                                                         rel=1e-12)
    assert on.reserved_memory_bytes[0] < off.reserved_memory_bytes[0]
    assert on.peak_memory_bytes[0] < off.peak_memory_bytes[0]
    for sc in (on, off):
        a, r, p = (sc.allocated_memory_bytes[0], sc.reserved_memory_bytes[0],
                   sc.peak_memory_bytes[0])
        assert a < r < p
        assert r - a == pytest.approx(sc.memory_breakdown_bytes["allocator_reserve"][0])
        row = sc.row(0)
        assert row["reserved_memory_bytes"] == r and row["allocated_memory_bytes"] == a


def test_evaluate_reports_the_verdict_and_margin():
    from optimizer.api import evaluate

    run = {"model": "llama-7b", "cluster": {"gpu": "a100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8},
           "training": {"seq_length": 2048, "global_batch_size": 128},
           "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1,
                        "recompute": "full", "zero_stage": 1}}
    m = evaluate(run).metrics
    assert m["memory_verdict"] == FITS
    assert m["memory_margin"] == pytest.approx(DEFAULT_MEMORY_MARGIN)
    assert m["memory_limit_bytes"] == pytest.approx(DEFAULT_MEMORY_FRACTION * 80 * GIB)
    assert m["allocated_memory_bytes"] < m["reserved_memory_bytes"] < m["peak_memory_bytes"]
    # micro-batch 16 without recompute and without ZeRO: over the GPU itself
    big = dict(run, parallel=dict(run["parallel"], micro_batch_size=16, recompute="none",
                                  zero_stage=0))
    res = evaluate(big)
    assert res.metrics["memory_verdict"] == DOES_NOT_FIT
    text = " ".join(res.candidate.bottlenecks)
    assert "does not fit" in text and "risk of OOM" not in text and "headroom" not in text


def _llama3_70b_fp8_64gpu(**training):
    # Megatron-LM's published Llama 3 70B FP8 layout on 64 H100: TP4 PP8 VP5, no recompute
    return {"model": "llama3-70b",
            "cluster": {"gpu": "h100-sxm-80gb", "num_nodes": 8, "gpus_per_node": 8},
            "training": {"seq_length": 8192, "global_batch_size": 128, "tp_comm_overlap": True,
                         "overlap_p2p_comm": True, **training},
            "parallel": {"tp": 4, "pp": 8, "dp": 2, "micro_batch_size": 1,
                         "precision": "fp8", "recompute": "none", "sequence_parallel": True,
                         "zero_stage": 1, "schedule": "interleaved", "virtual_stages": 5}}


def test_published_70b_fp8_layout_is_admitted_and_the_allocator_matters():
    from optimizer.api import evaluate

    ok = evaluate(_llama3_70b_fp8_64gpu())
    assert ok.metrics["memory_verdict"] == FITS
    assert ok.metrics["peak_memory_bytes"] <= ok.metrics["memory_limit_bytes"]
    assert not any("memory" in b or "fit" in b for b in ok.candidate.bottlenecks)
    # a tighter limit than the default: over the limit, and the message names the margin
    tight = evaluate(_llama3_70b_fp8_64gpu(), memory_fraction=0.9)
    assert tight.metrics["memory_verdict"] == OVER_LIMIT
    msg = [b for b in tight.candidate.bottlenecks if "over the memory limit" in b]
    assert msg and "10% safety margin" in msg[0]
    # without expandable segments the fixed-segment reserve takes it over the GPU itself
    fixed = evaluate(_llama3_70b_fp8_64gpu(expandable_segments=False))
    assert fixed.metrics["memory_verdict"] == DOES_NOT_FIT
    assert any(b.startswith("does not fit") for b in fixed.candidate.bottlenecks)


def test_grad_reduce_in_bf16_keeps_a_16_bit_gradient_buffer():
    # Megatron-Core's DDP buffer takes the parameters' dtype without
    # --accumulate-allreduce-grads-in-fp32: half the fp32 buffer in the backward's peak
    fp32, bf16 = _score(True), _score(True, grad_reduce_in_bf16=True)
    g32 = fp32.memory_breakdown_bytes["gradients"][0]
    g16 = bf16.memory_breakdown_bytes["gradients"][0]
    assert g16 == pytest.approx(g32 / 2, rel=1e-9)
    assert bf16.peak_memory_bytes[0] < fp32.peak_memory_bytes[0]
