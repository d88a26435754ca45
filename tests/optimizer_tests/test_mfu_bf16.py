"""MFU against the bf16 dense peak in the diagnosis and the text reports (issue 23): an fp8
run's utilisation of the fp8 peak is shown beside it, and "MFU low" reads the bf16 figure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from costmodel.hardware import get_gpu
from costmodel.specs import ParallelConfig
from optimizer.core.serialize import gpu_to_dict
from optimizer.output.diagnose import LOW_MFU, diagnose, mfu_against
from optimizer.output.report import _mfu

H100 = get_gpu("h100-sxm-80gb")


def _metrics(mfu):
    return {"step_time_s": 1.0, "mfu": mfu,
            "time_breakdown_s": {"compute": 0.9, "pipeline_bubble": 0.1}}


def _problem(gpu=H100):
    return SimpleNamespace(cluster=SimpleNamespace(gpus_per_node=8, gpu=gpu))


def test_mfu_against_the_bf16_peak():
    peaks = H100.peak_flops_per_s
    assert mfu_against(0.25, peaks, "fp8") == pytest.approx(0.5, rel=1e-3)
    assert mfu_against(0.25, peaks, "bf16") == 0.25
    assert mfu_against(0.25, None, "fp8") == 0.25  # peaks unknown: as given
    v100 = get_gpu("v100-sxm-32gb").peak_flops_per_s  # no bf16: the fp16 peak
    assert mfu_against(0.4, v100, "fp16") == 0.4


def test_low_mfu_reads_the_bf16_figure():
    fp8 = ParallelConfig(precision="fp8")
    # 20% of the fp8 peak is 40% of the bf16 peak: not low
    assert not [f for f in diagnose(_problem(), fp8, _metrics(0.20)) if f.kind == "low_mfu"]
    low = [f for f in diagnose(_problem(), fp8, _metrics(0.10)) if f.kind == "low_mfu"]
    assert low and "20% of the bf16 peak (10% of the fp8 peak)" in low[0].message
    bf16 = ParallelConfig(precision="bf16")
    low = [f for f in diagnose(_problem(), bf16, _metrics(LOW_MFU - 0.05))
           if f.kind == "low_mfu"]
    assert low and "of the bf16 peak is low" in low[0].message


def test_report_shows_both_peaks_for_low_precision():
    doc = {"inputs": {"cluster": {"gpu": gpu_to_dict(H100)}}}
    assert _mfu(doc, {"precision": "fp8"}, {"mfu": 0.25}) == \
        "MFU 50.0% (bf16 peak; 25.0% of the fp8 peak)"
    assert _mfu(doc, {"precision": "bf16"}, {"mfu": 0.4}) == "MFU 40.0%"
    assert _mfu({}, {"precision": "fp8"}, {"mfu": 0.25}) == "MFU 25.0%"
