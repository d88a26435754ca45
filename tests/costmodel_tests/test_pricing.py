"""costmodel.pricing: one function turns kernels into times."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.calibration import efficiency_for
from costmodel.compute import gemm_time_s, memory_op_time_s
from costmodel.hardware import get_gpu
from costmodel.pricing import ATTENTION, GEMM, MEMORY, Kernel, device_for, price
from costmodel.specs import PRECISIONS

GPU = get_gpu("h100-sxm-80gb")
EFF = efficiency_for(GPU.compute_capability)
PREC = np.array([PRECISIONS.index("bf16"), PRECISIONS.index("fp8")])


def test_device_peaks_by_precision():
    dev = device_for(GPU, EFF, PREC)
    assert dev.peak_flops_per_s.tolist() == [GPU.peak_flops_per_s["bf16"],
                                             GPU.peak_flops_per_s["fp8"]]
    # fp8 linears reach fp8_gemm_scale of their peak; attention stays at the 16-bit peak
    assert dev.gemm_peak_flops_per_s[1] == GPU.peak_flops_per_s["fp8"] * EFF.fp8_gemm_scale
    assert dev.attention_peak_flops_per_s.tolist() == [GPU.peak_flops_per_s["bf16"]] * 2
    assert dev.gemm_bytes.tolist() == [2.0, 1.0] and dev.act_bytes.tolist() == [2.0, 2.0]


def test_price_gemm_memory_attention_and_masks():
    dev = device_for(GPU, EFF, PREC)
    kerns = (Kernel("qkv", GEMM, 4096.0, 6144.0, 4096.0),
             Kernel("head", GEMM, 4096.0, 32000.0, 4096.0, peak="attention"),
             Kernel("norm", MEMORY, nbytes=np.array([1e8, 2e8]), kernels=2.0),
             Kernel("cast", MEMORY, nbytes=1e8, when=np.array([False, True])),
             Kernel("attn", ATTENTION, flops=np.array([1e12, 1e12])),
             Kernel("attn.bwd", ATTENTION, backward_of="attn"))
    t = price(kerns, dev)
    assert list(t) == ["qkv", "head", "norm", "cast", "attn", "attn.bwd"]
    want = gemm_time_s(4096.0, 6144.0, 4096.0, peak_flops_per_s=dev.gemm_peak_flops_per_s,
                       mem_bandwidth_bytes_per_s=GPU.memory_bandwidth_bytes_per_s,
                       elem_bytes=dev.gemm_bytes, eff=EFF, sm_count=GPU.sm_count)
    np.testing.assert_array_equal(t["qkv"], want)
    assert t["head"][0] == t["head"][1]  # 16-bit peak and operands in fp8 training too
    np.testing.assert_array_equal(t["norm"], memory_op_time_s(
        np.array([1e8, 2e8]), mem_bandwidth_bytes_per_s=GPU.memory_bandwidth_bytes_per_s,
        eff=EFF, n_kernels=2.0))
    assert t["cast"][0] == 0.0 and t["cast"][1] > 0.0
    ko = EFF.kernel_overhead_s
    assert t["attn"][0] == pytest.approx(1e12 / (EFF.attention * GPU.peak_flops_per_s["bf16"])
                                         + ko, rel=1e-12)
    # FlashAttention's backward: 2.5x the forward kernel, one launch
    assert t["attn.bwd"][0] == pytest.approx(2.5 * (t["attn"][0] - ko) + ko, rel=1e-12)


def test_fp8_dot_product_attention_speeds_up_the_fp8_attention_forward_only():
    """TE's FP8 dot-product attention (TrainingSpec.fp8_dot_product_attention): the fused
    attention core's forward runs FP8_ATTENTION_FORWARD_SPEEDUP faster where the precision
    is fp8, its backward keeps the 16-bit kernel's time; bf16 configurations and the other
    16-bit GEMMs (the head's) do not move."""
    from costmodel.pricing import FP8_ATTENTION_FORWARD_SPEEDUP

    kerns = (Kernel("head", GEMM, 4096.0, 32000.0, 4096.0, peak="attention"),
             Kernel("attn", ATTENTION, flops=np.array([1e12, 1e12])),
             Kernel("attn.bwd", ATTENTION, backward_of="attn"))
    plain = price(kerns, device_for(GPU, EFF, PREC))
    fast = price(kerns, device_for(GPU, EFF, PREC, fp8_attention=True))
    ko = EFF.kernel_overhead_s
    assert fast["attn"][0] == plain["attn"][0]  # bf16: no FP8 attention
    assert fast["attn"][1] - ko == pytest.approx((plain["attn"][1] - ko)
                                                 / FP8_ATTENTION_FORWARD_SPEEDUP, rel=1e-12)
    np.testing.assert_allclose(fast["attn.bwd"], plain["attn.bwd"], rtol=1e-12)
    np.testing.assert_array_equal(fast["head"], plain["head"])
    blockwise = price(kerns, device_for(GPU, EFF, PREC, "blockwise", fp8_attention=True))
    np.testing.assert_array_equal(blockwise["attn"], price(
        kerns, device_for(GPU, EFF, PREC, "blockwise"))["attn"])  # TE: not with blockwise


def test_mxfp8_linears_run_at_their_share_of_the_fp8_rate():
    """Blackwell's MXFP8 linears: mxfp8_gemm_scale x the per-tensor fp8 rate; bf16 and the
    attention peak do not move; Hopper's factor is 1."""
    b200 = get_gpu("b200")
    eff = efficiency_for(b200.compute_capability, "cudnn")
    assert 0.0 < eff.mxfp8_gemm_scale < 1.0
    fp8 = device_for(b200, eff, PREC, "tensorwise")
    mx = device_for(b200, eff, PREC, "mxfp8")
    assert mx.gemm_peak_flops_per_s[1] == pytest.approx(
        fp8.gemm_peak_flops_per_s[1] * eff.mxfp8_gemm_scale)
    assert mx.gemm_peak_flops_per_s[0] == fp8.gemm_peak_flops_per_s[0]
    assert mx.attention_peak_flops_per_s.tolist() == fp8.attention_peak_flops_per_s.tolist()
    assert EFF.mxfp8_gemm_scale == 1.0


def test_userbuffers_overlap_share_falls_back_to_overlap_hidden():
    assert EFF.tp_overlap == EFF.tp_overlap_hidden
    plain = EFF.with_(tp_overlap_hidden=None)
    assert plain.tp_overlap == plain.overlap_hidden
