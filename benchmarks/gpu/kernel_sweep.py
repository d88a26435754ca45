"""Measure GEMM, fused-attention and memory-bound kernel throughput at transformer shapes.

Run on a machine with the GPU to calibrate (PyTorch with CUDA required; a few minutes):

    python benchmarks/gpu/kernel_sweep.py OUT.json --gpu h100-sxm-80gb [--quick]
    optimize calibrate --kernels OUT.json --cluster my-cluster.yaml --save-cluster calibrated.yaml

``--gpu`` is the paraplan catalog key of the GPU (``optimize gpus``). The JSON (format
``paraplan-kernel-sweep/1``, read by ``optimizer/kernel_calibration.py``) holds one record per
timing: bf16 GEMMs (m, n, k, time_s), fp8 GEMMs, causal SDPA attention (b, heads, s,
head_dim, fwd_s, fwd_bwd_s) and memory-bound passes. ``optimize calibrate --kernels`` fits the
cluster's ``eff_gemm_scale`` and ``eff_attention_scale`` from the bf16 GEMM and attention
records and stores them in the cluster file, the same store as ``optimize calibrate --runs``
(measured steps) and ``optimize nccl --save-cluster`` (nccl-tests); see docs/calibration.md.
"""

import json
import time

import torch
import torch.nn.functional as F

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True


def bench(fn, reps=None, warmup=3, budget_s=0.08):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = reps or int(min(50, max(3, budget_s / one)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def gemm_records():
    out = []
    shapes = set()
    for h, f in ((4096, 11008), (4096, 16384), (8192, 22016), (8192, 28672), (12288, 49152)):
        for t in (1, 2, 4, 8):
            for m in (1024, 2048, 4096, 8192, 16384):
                for n, k, op in ((3 * h // t, h, "qkv"), (h, h // t, "out"), (2 * f // t, h, "up"),
                                 (h, f // t, "down")):
                    shapes.add((m, n, k, op))
    for m, n, k, op in sorted(shapes):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        t = bench(lambda a=a, b=b: a @ b)
        out.append({"kind": "gemm", "dtype": "bf16", "op": op, "m": m, "n": n, "k": k,
                    "time_s": t, "tflops": 2 * m * n * k / t / 1e12})
    return out


def gemm_fp8_records():
    out = []
    if not hasattr(torch, "_scaled_mm"):
        return out
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192),
                    (8192, 3 * 8192 // 4, 8192), (8192, 8192, 22016 // 4), (4096, 28672 // 2, 8192)):
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=dev)
        try:
            t = bench(lambda a=a, b=b, one=one: torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        except Exception as e:  # noqa: BLE001
            out.append({"kind": "gemm", "dtype": "fp8", "error": str(e)[:200]})
            break
        out.append({"kind": "gemm", "dtype": "fp8", "op": "square", "m": m, "n": n, "k": k,
                    "time_s": t, "tflops": 2 * m * n * k / t / 1e12})
    return out


def attention_records():
    out = []
    for s in (1024, 2048, 4096, 8192):
        for heads in (8, 16, 32, 64):
            b = max(1, 16384 // s)
            q = torch.randn(b, heads, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn_like(q, requires_grad=True)
            v = torch.randn_like(q, requires_grad=True)
            fwd = bench(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v,
                                                                          is_causal=True))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            g = torch.randn_like(o)

            def fb(q=q, k=k, v=v, g=g):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                o.backward(g)
            fwdbwd = bench(fb)
            flops = 4 * b * s * s * heads * 128  # full square, paper convention
            out.append({"kind": "attention", "dtype": "bf16", "b": b, "heads": heads, "s": s,
                        "head_dim": 128, "fwd_s": fwd, "fwd_bwd_s": fwdbwd,
                        "fwd_tflops_full_square": flops / fwd / 1e12})
    return out


def memory_records():
    out = []
    for n in (1 << 24, 1 << 26, 1 << 28):
        x = torch.randn(n, device=dev, dtype=torch.bfloat16)
        y = torch.randn(n, device=dev, dtype=torch.bfloat16)
        t = bench(lambda x=x, y=y: torch.add(x, y))
        out.append({"kind": "memory", "op": "add", "elements": n, "bytes": 6 * n, "time_s": t,
                    "gbps": 6 * n / t / 1e9})
        h = 8192
        z = x[: (n // h) * h].view(-1, h)
        w = torch.ones(h, device=dev, dtype=torch.bfloat16)
        t = bench(lambda z=z, h=h, w=w: F.rms_norm(z, (h,), w))
        out.append({"kind": "memory", "op": "rmsnorm", "elements": z.numel(),
                    "bytes": 4 * z.numel(), "time_s": t, "gbps": 4 * z.numel() / t / 1e9})
    return out


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the JSON file to write")
    ap.add_argument("--gpu", required=True, help="the GPU's paraplan catalog key")
    ap.add_argument("--quick", action="store_true", help="GEMMs and attention only")
    a = ap.parse_args()
    path = a.out
    props = torch.cuda.get_device_properties(0)
    doc = {"format": "paraplan-kernel-sweep/1", "gpu": a.gpu, "device": props.name,
           "sm_count": props.multi_processor_count,
           "torch": torch.__version__, "cuda": torch.version.cuda, "records": []}
    fns = ((gemm_records, attention_records) if a.quick else
           (gemm_records, gemm_fp8_records, attention_records, memory_records))
    for fn in fns:
        t0 = time.time()
        try:
            doc["records"] += fn()
        except Exception as e:  # noqa: BLE001
            doc.setdefault("errors", []).append(f"{fn.__name__}: {e}")
        print(fn.__name__, f"{time.time() - t0:.1f}s", flush=True)
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
