"""GPU catalog and cluster presets: every hardware number paraplan uses lives here, once.

Conventions (ecosystem.md section 5):

- Peak FLOP/s are **dense** (no 2:4 sparsity): datasheets print the sparse Tensor-Core figure,
  the dense one is half. ``fp32`` is the CUDA-core (vector) FP32 rate, not TF32.
  A precision missing from ``peak_flops_per_s`` is not supported by the GPU (V100 has no
  BF16/TF32; only Hopper, Blackwell and MI300X have FP8).
- Memory is the total the driver reports (nvidia-smi / rocm-smi "total", in MiB): what
  training frameworks see and what a --memory-limit-gib compares against. An A100 80GB shows
  81920 MiB (80 GiB), an H100 80GB 81559 MiB, an H200 143771 MiB (read on this workplace's
  H200, 2026-10-27). The datasheets' decimal "80 GB" is the marketing rounding.
- Bandwidths are bytes per second, **one direction**, per GPU. NVLink figures are the
  datasheet's bidirectional number halved (A100 600 GB/s -> 300e9).
- PCIe x16, one direction: Gen3 16e9, Gen4 32e9, Gen5 64e9 (rounded lane-rate figures).
- Network: InfiniBand EDR 100 Gb/s = 12.5e9 B/s, HDR 200 Gb/s = 25e9, NDR 400 Gb/s = 50e9.

Sources were accessed on 2026-11-29 (``ACCESSED``); each entry's ``source`` names its pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from costmodel.errors import InputError, did_you_mean
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

ACCESSED = "accessed 2026-11-29"
MIB = 2**20

# ---- links, one direction, bytes/s --------------------------------------------------------
PCIE_GEN3_X16_BYTES_PER_S = 16e9
PCIE_GEN4_X16_BYTES_PER_S = 32e9
PCIE_GEN5_X16_BYTES_PER_S = 64e9
PCIE_GEN6_X16_BYTES_PER_S = 128e9
IB_EDR_BYTES_PER_S = 12.5e9  # 100 Gb/s
IB_HDR_BYTES_PER_S = 25e9  # 200 Gb/s
IB_NDR_BYTES_PER_S = 50e9  # 400 Gb/s
IB_XDR_BYTES_PER_S = 100e9  # 800 Gb/s (ConnectX-8)
ETH_100G_BYTES_PER_S = 12.5e9
ETH_200G_BYTES_PER_S = 25e9
ETH_400G_BYTES_PER_S = 50e9

# ---- latencies (per hop, seconds) ---------------------------------------------------------
# NVLink / NVSwitch and PCIe: NCCL's per-hop hardware latency for the LL protocol
# (hwLat NVLink 0.6 us, PCI 1.0 us; nccl.md section 3.1, src/graph/tuning.cc, NCCL 2.30.7).
NVLINK_LATENCY_S = 0.6e-6
PCIE_LATENCY_S = 1.0e-6
# InfiniBand: NCCL's NET tree LL hop latency (5.0 us, same table), which matches the
# default of specs.InterNodeSpec.
IB_LATENCY_S = 5.0e-6
# RoCE: assumption, no primary source: IB plus ~2 us for the Ethernet switch path and the
# RoCE stack. Calibrate against nccl-tests on the real cluster.
ROCE_LATENCY_S = 7.0e-6

# H100 with 96 GB of HBM2e (Meta's Grand Teton parts): six HBM2e stacks at the H100 PCIe's
# HBM2e rate (five stacks, 2,000 GB/s, its datasheet), derived in the catalog entry below
H100_PCIE_HBM2E_BYTES_PER_S = 2000e9
H100_HBM2E_96GB_BYTES_PER_S = H100_PCIE_HBM2E_BYTES_PER_S * 6 / 5

_NV_A100 = "https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet)"
_NV_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 datasheet)"

# The 2026 entries (H800, B300, GB200, GB300, MI325X, MI350X, MI355X) were transcribed on
# 2026-12-01 without network access: from the vendor pages named in each ``source`` as
# relayed by shared/reference/modern-training.md section 6 and ecosystem.md section 5, and
# the driver-reported memory totals from the MLPerf Training v5.1 system descriptions quoted
# in shared/validation/published_runs_2026.yaml. "(check)" marks a figure no primary source
# confirmed here (modern-training.md section 9 lists them).
TRANSCRIBED = "transcribed 2026-12-01 (not re-read at the primary source)"
_MODERN_REF = "shared/reference/modern-training.md section 6"
_MLPERF_MEM = ("driver-reported memory from the MLPerf Training v5.1 system description "
               "(shared/validation/published_runs_2026.yaml hardware.gpu_memory)")
_NV_GB200 = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (GB200 NVL72 spec table)"
_NV_GB300 = "https://www.nvidia.com/en-us/data-center/gb300-nvl72/ (GB300 NVL72 spec table)"
_NV_HGX = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200 / B300 spec table)"
_AMD_SPECS = ("https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html (CUs, "
              "VRAM, clocks)")

# ---- the GPU catalog ----------------------------------------------------------------------
_GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec(
            name="v100-sxm-32gb",
            # no BF16, no TF32, no FP8, no sparsity
            peak_flops_per_s={"fp32": 15.7e12, "fp16": 125.0e12},
            memory_bytes=32510 * MIB,  # nvidia-smi total (32 GB HBM2)
            memory_bandwidth_bytes_per_s=900e9,
            nvlink_bandwidth_bytes_per_s=150e9,  # NVLink2 300 GB/s bidirectional, 6 x 25 GB/s
            nvlink_links=6,
            sm_count=80,
            compute_capability=70,
            pcie_bandwidth_bytes_per_s=PCIE_GEN3_X16_BYTES_PER_S,
            source="NVIDIA Tesla V100 datasheet https://images.nvidia.com/content/technologies/"
            f"volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf (SXM2), {ACCESSED}",
        ),
        GPUSpec(
            name="a100-sxm-40gb",
            peak_flops_per_s={"fp32": 19.5e12, "tf32": 156.0e12,
                              "fp16": 312.0e12, "bf16": 312.0e12},
            memory_bytes=40960 * MIB,  # nvidia-smi total (40 GB HBM2)
            memory_bandwidth_bytes_per_s=1555e9,
            nvlink_bandwidth_bytes_per_s=300e9,  # NVLink3 600 GB/s bidirectional, 12 links
            nvlink_links=12,
            sm_count=108,
            compute_capability=80,
            pcie_bandwidth_bytes_per_s=PCIE_GEN4_X16_BYTES_PER_S,
            source=f"{_NV_A100} SXM 40GB column, {ACCESSED}",
        ),
        GPUSpec(
            name="a100-sxm-80gb",
            peak_flops_per_s={"fp32": 19.5e12, "tf32": 156.0e12,
                              "fp16": 312.0e12, "bf16": 312.0e12},
            memory_bytes=81920 * MIB,  # nvidia-smi total (80 GB HBM2e)
            memory_bandwidth_bytes_per_s=2039e9,
            nvlink_bandwidth_bytes_per_s=300e9,
            nvlink_links=12,
            sm_count=108,
            compute_capability=80,
            pcie_bandwidth_bytes_per_s=PCIE_GEN4_X16_BYTES_PER_S,
            source=f"{_NV_A100} SXM 80GB column, {ACCESSED}",
        ),
        GPUSpec(
            name="a100-pcie-80gb",
            peak_flops_per_s={"fp32": 19.5e12, "tf32": 156.0e12,
                              "fp16": 312.0e12, "bf16": 312.0e12},
            memory_bytes=81920 * MIB,  # nvidia-smi total (80 GB HBM2e)
            memory_bandwidth_bytes_per_s=1935e9,
            # The optional NVLink bridge joins only pairs of GPUs (600 GB/s bidirectional);
            # it is not a fabric across the node, so the catalog models no NVLink.
            nvlink_bandwidth_bytes_per_s=0.0,
            nvlink_links=0,
            sm_count=108,
            compute_capability=80,
            pcie_bandwidth_bytes_per_s=PCIE_GEN4_X16_BYTES_PER_S,
            source=f"{_NV_A100} PCIe 80GB column, {ACCESSED}",
        ),
        GPUSpec(
            name="h100-sxm-80gb",
            peak_flops_per_s={"fp32": 66.9e12, "tf32": 494.7e12,
                              "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
            memory_bytes=81559 * MIB,  # nvidia-smi total (80 GB HBM3 / HBM2e)
            memory_bandwidth_bytes_per_s=3350e9,
            nvlink_bandwidth_bytes_per_s=450e9,  # NVLink4 900 GB/s bidirectional, 18 links
            nvlink_links=18,
            sm_count=132,
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source=f"{_NV_H100} SXM column; dense = sparse/2; FP32 66.9 from the NVIDIA H100 "
            f"Tensor Core GPU Architecture whitepaper, {ACCESSED}",
        ),
        GPUSpec(
            # Meta's Grand Teton H100 SXM with 96 GB HBM2e at a lower power limit (500 W; the
            # parts of torchtitan's H100 benchmarks, which call them "94/95GB"): NVIDIA
            # publishes no datasheet for it. The source puts the true peak "between SXM and
            # NVL" (NVL: 835 bf16 dense), unknown: the SXM peaks are kept (torchtitan computes
            # its MFU with them; a derated peak leaves torchtitan's long-sequence CP rows on
            # these GPUs further off). Memory: 95830 MiB, the driver total of NVIDIA's 94 GB
            # parts (H100 NVL), assumed. HBM bandwidth (derived, not fitted): 96 GB of HBM2e
            # is six 16 GB stacks, where the 80 GB parts enable five; at the HBM2e pin rate of
            # the H100 PCIe (80 GB HBM2e on five stacks, 2,000 GB/s; ecosystem.md section 5)
            # six stacks give 6/5 x 2,000 = 2,400 GB/s, not the 3,350 GB/s of the SXM's HBM3.
            name="h100-sxm-96gb-hbm2e",
            peak_flops_per_s={"fp32": 66.9e12, "tf32": 494.7e12,
                              "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
            memory_bytes=95830 * MIB,
            memory_bandwidth_bytes_per_s=H100_HBM2E_96GB_BYTES_PER_S,
            nvlink_bandwidth_bytes_per_s=450e9,
            nvlink_links=18,
            sm_count=132,
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="torchtitan benchmarks/llama3_h100_202412_torchtitan.md and docs/"
            "performance.md (2024): 'H100 SXM 96GB HBM2e, 500 W power limit', 'lower TDP, "
            "actual peak between SXM and NVL'; peaks as h100-sxm-80gb (assumed), HBM "
            "bandwidth 6/5 of the H100 PCIe's HBM2e 2,000 GB/s (six stacks; derived), "
            f"{_NV_H100} NVL column for the 94 GB memory total (assumed), {ACCESSED}",
        ),
        GPUSpec(
            name="h100-pcie-80gb",
            peak_flops_per_s={"fp32": 51.2e12, "tf32": 378.0e12,
                              "fp16": 756.0e12, "bf16": 756.0e12, "fp8": 1513.0e12},
            memory_bytes=81559 * MIB,  # nvidia-smi total (80 GB HBM3 / HBM2e)
            memory_bandwidth_bytes_per_s=H100_PCIE_HBM2E_BYTES_PER_S,
            nvlink_bandwidth_bytes_per_s=0.0,  # bridge pairs only, see a100-pcie-80gb
            nvlink_links=0,
            sm_count=114,
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source=f"{_NV_H100} PCIe column; dense = sparse/2; FP32 51.2 from the H100 "
            f"whitepaper, {ACCESSED}",
        ),
        GPUSpec(
            name="h200-sxm-141gb",
            peak_flops_per_s={"fp32": 66.9e12, "tf32": 494.7e12,
                              "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
            memory_bytes=143771 * MIB,  # nvidia-smi total (141 GB HBM3e)
            memory_bandwidth_bytes_per_s=4800e9,
            nvlink_bandwidth_bytes_per_s=450e9,
            nvlink_links=18,
            sm_count=132,
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column; same die "
            f"and clocks as H100 SXM), {ACCESSED}",
        ),
        GPUSpec(
            name="b200",
            # HGX B200 (1000 W): dense TF32 1.1, BF16 2.25, FP8 4.5 PFLOP/s per GPU; FP32 is
            # the HGX B200 8-GPU figure (600 TFLOPS) / 8.
            peak_flops_per_s={"fp32": 75.0e12, "tf32": 1100.0e12,
                              "fp16": 2250.0e12, "bf16": 2250.0e12, "fp8": 4500.0e12},
            memory_bytes=183359 * MIB,  # nvidia-smi total; 192 GB physical, 180 GB usable
            memory_bandwidth_bytes_per_s=8000e9,  # DGX B200 64 TB/s / 8 (SKUs: 7.7-8 TB/s)
            nvlink_bandwidth_bytes_per_s=900e9,  # NVLink5 1.8 TB/s bidirectional, 18 links
            nvlink_links=18,
            sm_count=148,
            compute_capability=100,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="https://www.nvidia.com/en-us/data-center/dgx-b200/ and the HGX B200 spec "
            "table (https://www.nvidia.com/en-us/data-center/hgx/); dense values cross-checked "
            f"with glennklockwood.com B200 page, {ACCESSED}",
        ),
        GPUSpec(
            name="mi300x",
            peak_flops_per_s={"fp32": 163.4e12, "tf32": 653.7e12,
                              "fp16": 1307.4e12, "bf16": 1307.4e12, "fp8": 2614.9e12},
            memory_bytes=196592 * MIB,  # rocm-smi total (192 GB HBM3)
            memory_bandwidth_bytes_per_s=5300e9,
            # Infinity Fabric: 7 links x 64 GB/s one direction to the 7 peers of a fully
            # connected 8-GPU mesh (896 GB/s bidirectional); stored in the NVLink fields.
            nvlink_bandwidth_bytes_per_s=448e9,
            nvlink_links=7,
            sm_count=304,  # compute units
            # AMD gfx942 has no CUDA compute capability. 90 is a documented placeholder that
            # puts MI300X in the Hopper bucket of the NCCL-style collective model (RCCL's own
            # tuning differs: calibrate against rccl-tests).
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="AMD Instinct MI300X datasheet https://www.amd.com/en/products/accelerators/"
            f"instinct/mi300/mi300x.html (dense = sparse/2), {ACCESSED}",
        ),
        GPUSpec(
            name="h800-sxm-80gb",
            # the export variant of H100 SXM: same die, clocks and Tensor-Core peaks (FP64 cut),
            # NVLink cut to 8 links (400 GB/s bidirectional)
            peak_flops_per_s={"fp32": 66.9e12, "tf32": 494.7e12,
                              "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
            memory_bytes=81559 * MIB,  # as H100 SXM 80GB HBM3 (assumed; not read on an H800)
            memory_bandwidth_bytes_per_s=3350e9,
            nvlink_bandwidth_bytes_per_s=200e9,  # 8 links x 25 GB/s (DeepSeek-V3: ~160 usable)
            nvlink_links=8,
            sm_count=132,  # DeepSeek-V3 report section 3.5.1 ("20 out of the 132 SMs")
            compute_capability=90,
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="NVIDIA H800 SXM5 product brief (https://www.nvidia.cn/data-center/h800/; "
            "peaks (check) = H100 SXM, NVLink 400 GB/s bidirectional), DeepSeek-V3 technical "
            f"report arXiv:2412.19437 section 3.5.1 (132 SMs); {_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="b300",
            # HGX B300 (Blackwell Ultra, 1100 W): dense BF16 2.25, FP8 4.5, FP4 13.5 PFLOP/s per
            # GPU (108 PF dense FP4 per 8 GPUs; fp4 in FP4_DENSE_PEAK_FLOPS_PER_S below); TF32
            # and FP32 as B200 (check)
            peak_flops_per_s={"fp32": 75.0e12, "tf32": 1100.0e12,
                              "fp16": 2250.0e12, "bf16": 2250.0e12, "fp8": 4500.0e12},
            memory_bytes=275040 * MIB,  # nvidia-smi total (288 GB HBM3e, "B300-SXM-270GB")
            memory_bandwidth_bytes_per_s=8000e9,
            nvlink_bandwidth_bytes_per_s=900e9,  # NVLink5 1.8 TB/s bidirectional, 18 links
            nvlink_links=18,
            sm_count=160,  # (check): Blackwell Ultra, 2 dies x 80 SMs
            compute_capability=103,  # sm_103
            pcie_bandwidth_bytes_per_s=PCIE_GEN6_X16_BYTES_PER_S,
            source=f"{_NV_HGX} HGX B300 column and https://www.nvidia.com/en-us/data-center/"
            f"dgx-b300/; dense = sparse/2; {_MLPERF_MEM}; {_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="gb200",
            # one Blackwell GPU of a GB200 superchip in an NVL72 rack (1200 W): NVL72 totals
            # / 72 -- dense TF32 1.25, BF16 2.5, FP8 5, FP4 10 PFLOP/s, FP32 80 TFLOP/s
            peak_flops_per_s={"fp32": 80.0e12, "tf32": 1250.0e12,
                              "fp16": 2500.0e12, "bf16": 2500.0e12, "fp8": 5000.0e12},
            memory_bytes=189471 * MIB,  # nvidia-smi total (186 GB HBM3e)
            memory_bandwidth_bytes_per_s=8000e9,  # 576 TB/s per rack / 72
            nvlink_bandwidth_bytes_per_s=900e9,  # 130 TB/s per rack / 72, bidirectional, halved
            nvlink_links=18,
            sm_count=148,  # (check): as B200
            compute_capability=100,
            # the GPU's host link is NVLink-C2C to Grace; NICs (ConnectX-7) sit on PCIe Gen5
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source=f"{_NV_GB200}, per GPU = rack / 72, dense = sparse/2; {_MLPERF_MEM}; "
            f"{_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="gb300",
            # one Blackwell Ultra GPU of a GB300 NVL72 rack (1400 W): dense TF32 1.25, BF16 2.5,
            # FP8 5, FP4 15 PFLOP/s (1,080 PF dense FP4 per rack); FP32 (check)
            peak_flops_per_s={"fp32": 80.0e12, "tf32": 1250.0e12,
                              "fp16": 2500.0e12, "bf16": 2500.0e12, "fp8": 5000.0e12},
            memory_bytes=284208 * MIB,  # nvidia-smi total (288 GB HBM3e)
            memory_bandwidth_bytes_per_s=8000e9,
            nvlink_bandwidth_bytes_per_s=900e9,
            nvlink_links=18,
            sm_count=160,  # (check)
            compute_capability=103,
            pcie_bandwidth_bytes_per_s=PCIE_GEN6_X16_BYTES_PER_S,  # ConnectX-8 is PCIe Gen6
            source=f"{_NV_GB300}, per GPU = rack / 72, dense = sparse/2; {_MLPERF_MEM}; "
            f"{_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="mi325x",
            # MI300X's compute die and clocks (304 CUs, 2.1 GHz) with 256 GB HBM3E
            peak_flops_per_s={"fp32": 163.4e12, "tf32": 653.7e12,
                              "fp16": 1307.4e12, "bf16": 1307.4e12, "fp8": 2614.9e12},
            memory_bytes=262144 * MIB,  # 256 GiB (8 x 32 GiB stacks); rocm-smi total not read
            memory_bandwidth_bytes_per_s=6000e9,
            nvlink_bandwidth_bytes_per_s=448e9,  # Infinity Fabric as MI300X (check)
            nvlink_links=7,
            sm_count=304,  # compute units
            compute_capability=90,  # placeholder, as mi300x
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="AMD Instinct MI325X https://www.amd.com/en/products/accelerators/instinct/"
            f"mi300/mi325x.html (dense = sparse/2); {_AMD_SPECS}; {_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="mi350x",
            # CDNA 4, 256 CUs at 2.2 GHz (1000 W, air-cooled): dense FP16/BF16 = 256 x 2.2e9 x
            # 4096 = 2306.9 TFLOP/s, FP8 2x, MXFP4 4x; FP32 vector 144.2; no TF32 (CDNA 4 drops
            # the XF32 matrix type)
            peak_flops_per_s={"fp32": 144.2e12, "fp16": 2306.9e12, "bf16": 2306.9e12,
                              "fp8": 4613.7e12},
            memory_bytes=294912 * MIB,  # 288 GiB HBM3E; rocm-smi total not read
            memory_bandwidth_bytes_per_s=8000e9,
            nvlink_bandwidth_bytes_per_s=537.6e9,  # Infinity Fabric 7 x 153.6 GB/s, halved
            nvlink_links=7,
            sm_count=256,  # compute units
            compute_capability=90,  # placeholder, as mi300x (gfx950 has no CUDA capability)
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="AMD Instinct MI350X https://www.amd.com/en/products/accelerators/instinct/"
            f"mi350/mi350x.html (check all peaks); {_AMD_SPECS}; {_MODERN_REF}; {TRANSCRIBED}",
        ),
        GPUSpec(
            name="mi355x",
            # CDNA 4, 256 CUs at 2.4 GHz (1400 W, liquid-cooled): dense FP16/BF16 2516.6,
            # FP8 5033.2, MXFP4 10066.3 TFLOP/s; FP32 vector 157.3; no TF32
            peak_flops_per_s={"fp32": 157.3e12, "fp16": 2516.6e12, "bf16": 2516.6e12,
                              "fp8": 5033.2e12},
            memory_bytes=294912 * MIB,  # 288 GiB HBM3E; rocm-smi total not read
            memory_bandwidth_bytes_per_s=8000e9,
            nvlink_bandwidth_bytes_per_s=537.6e9,  # Infinity Fabric 1075.2 GB/s bidirectional
            nvlink_links=7,
            sm_count=256,
            compute_capability=90,  # placeholder, as mi300x
            pcie_bandwidth_bytes_per_s=PCIE_GEN5_X16_BYTES_PER_S,
            source="AMD Instinct MI355X https://www.amd.com/en/products/accelerators/instinct/"
            f"mi350/mi355x.html (dense = sparse/2; check FP8/FP4); {_AMD_SPECS}; "
            f"{_MODERN_REF}; {TRANSCRIBED}",
        ),
    )
}

# Dense FP4 Tensor-Core peaks (NVFP4 / MXFP4), FLOP/s, written into each catalog entry's
# ``GPUSpec.fp4_dense_peak_flops_per_s`` below (specs.PRECISIONS has no "fp4": NVFP4 is an
# fp8 recipe). A GPU missing here has no FP4 matrix type.
FP4_DENSE_PEAK_FLOPS_PER_S: dict[str, float] = {
    "b200": 9000.0e12,  # HGX B200: 144 PF sparse FP4 per 8 GPUs (check)
    "b300": 13500.0e12,  # HGX B300: 108 PF dense FP4 per 8 GPUs (check)
    "gb200": 10000.0e12,  # GB200 NVL72: 1,440 PF sparse FP4 per 72 GPUs (check)
    "gb300": 15000.0e12,  # GB300 NVL72: 1,080 PF dense FP4 per 72 GPUs (check)
    "mi350x": 9227.5e12,  # MXFP4, 4x FP16 (check)
    "mi355x": 10066.3e12,  # MXFP4, 4x FP16 (check)
}


# AMD architecture names (ROCm "GPU architecture specifications", _AMD_SPECS): CDNA 3
# (MI300X, MI325X) gfx942, CDNA 4 (MI350X, MI355X) gfx950
_AMD_ARCH: dict[str, str] = {"mi300x": "gfx942", "mi325x": "gfx942", "mi350x": "gfx950",
                             "mi355x": "gfx950"}
_GPUS = {name: replace(g, fp4_dense_peak_flops_per_s=FP4_DENSE_PEAK_FLOPS_PER_S.get(name),
                       arch=_AMD_ARCH.get(name, g.arch))
         for name, g in _GPUS.items()}


def fp4_peak_flops(gpu: GPUSpec | str) -> float | None:
    """The dense FP4 peak of a GPU (``GPUSpec.fp4_dense_peak_flops_per_s``; a name: the
    catalog entry's). None: no FP4 matrix type, or not a catalog GPU."""
    if isinstance(gpu, str):
        spec = _GPUS.get(gpu)
        return None if spec is None else spec.fp4_dense_peak_flops_per_s
    return gpu.fp4_dense_peak_flops_per_s

_GPU_ALIASES: dict[str, str] = {
    "v100": "v100-sxm-32gb",
    "v100-sxm": "v100-sxm-32gb",
    "v100-32gb": "v100-sxm-32gb",
    "a100": "a100-sxm-80gb",
    "a100-sxm": "a100-sxm-80gb",
    "a100-80gb": "a100-sxm-80gb",
    "a100-40gb": "a100-sxm-40gb",
    "a100-pcie": "a100-pcie-80gb",
    "h100": "h100-sxm-80gb",
    "h100-sxm": "h100-sxm-80gb",
    "h100-pcie": "h100-pcie-80gb",
    "h100-96gb": "h100-sxm-96gb-hbm2e",
    "h200": "h200-sxm-141gb",
    "h200-sxm": "h200-sxm-141gb",
    "b200-sxm": "b200",
    "b200-180gb": "b200",
    "mi300": "mi300x",
    "h800": "h800-sxm-80gb",
    "h800-sxm": "h800-sxm-80gb",
    "b300-sxm": "b300",
    "b300-270gb": "b300",
    "gb200-nvl72": "gb200",
    "gb300-nvl72": "gb300",
    "mi325": "mi325x",
    "mi350": "mi350x",
    "mi355": "mi355x",
}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


# The GPU's link to host memory where it is not its PCIe slot (what activation offload moves
# over, one direction): Grace-Blackwell superchips reach the Grace CPU's LPDDR5X over
# NVLink-C2C, 900 GB/s bidirectional (NVIDIA GB200 NVL72 spec table), 450 GB/s per direction;
# (check) whether the superchip's two GPUs share it. Every other GPU: pcie_bandwidth_bytes_per_s.
HOST_LINK_BYTES_PER_S: dict[str, float] = {"gb200": 450e9, "gb300": 450e9, "gh200": 450e9}


def host_link_bytes_per_s(gpu: GPUSpec) -> float:
    """One direction of the GPU's link to host memory (activation offload's D2H / H2D)."""
    return HOST_LINK_BYTES_PER_S.get(gpu.name, gpu.pcie_bandwidth_bytes_per_s)


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry for a GPU key or alias (case-insensitive)."""
    if not isinstance(name, str):
        raise InputError("gpu", f"must be a GPU catalog key, got {name!r}",
                         did_you_mean("", [*_GPUS, *_GPU_ALIASES]))
    key = _norm(name)
    key = _GPU_ALIASES.get(key, key)
    if key not in _GPUS:
        raise InputError("gpu", f"unknown GPU {name!r}",
                         did_you_mean(key, [*_GPUS, *_GPU_ALIASES]))
    return _GPUS[key]


def list_gpus() -> tuple[str, ...]:
    """Catalog keys in catalog order."""
    return tuple(_GPUS)


def gpu_aliases(key: str) -> tuple[str, ...]:
    """The aliases of a catalog key."""
    return tuple(a for a, t in _GPU_ALIASES.items() if t == key)


# ---- node fabrics -------------------------------------------------------------------------
def _nvswitch(gpu: GPUSpec) -> IntraNodeSpec:
    return IntraNodeSpec("nvswitch", gpu.nvlink_bandwidth_bytes_per_s, NVLINK_LATENCY_S)


def _mesh(gpu: GPUSpec) -> IntraNodeSpec:
    return IntraNodeSpec("nvlink", gpu.nvlink_bandwidth_bytes_per_s, NVLINK_LATENCY_S)


def _pcie(gpu: GPUSpec) -> IntraNodeSpec:
    return IntraNodeSpec("pcie", gpu.pcie_bandwidth_bytes_per_s, PCIE_LATENCY_S)


def _ib(nics: int, nic_bytes_per_s: float) -> InterNodeSpec:
    return InterNodeSpec("infiniband", nics, nic_bytes_per_s, 1.0, IB_LATENCY_S)


def _roce(nics: int, nic_bytes_per_s: float) -> InterNodeSpec:
    return InterNodeSpec("roce", nics, nic_bytes_per_s, 1.0, ROCE_LATENCY_S)


@dataclass(frozen=True)
class _Preset:
    name: str
    gpu: str
    gpus_per_node: int
    intra: Callable[[GPUSpec], IntraNodeSpec]
    inter: InterNodeSpec
    description: str
    source: str
    gpus_per_domain: int | None = None  # NVLink domain across hosts (NVL72: 72); None: a host


_DGX_A100_SRC = ("NVIDIA DGX A100 datasheet https://www.nvidia.com/en-us/data-center/dgx-a100/ "
                 "(6 NVSwitch 2.0, 8x ConnectX-6 HDR 200 Gb/s compute NICs)")
_DGX_H100_SRC = ("NVIDIA DGX H100/H200 user guide and DGX BasePOD reference architecture "
                 "https://docs.nvidia.com/dgx/dgxh100-user-guide/ (4 NVSwitch 3.0, 8x "
                 "ConnectX-7 NDR 400 Gb/s compute NICs)")

_PRESETS: dict[str, _Preset] = {
    p.name: p
    for p in (
        _Preset("dgx-1-v100", "v100-sxm-32gb", 8, _mesh, _ib(4, IB_EDR_BYTES_PER_S),
                "DGX-1 (V100): NVLink2 hybrid cube-mesh, 4x EDR InfiniBand",
                "NVIDIA DGX-1 datasheet https://www.nvidia.com/en-us/data-center/dgx-1/ (hybrid "
                f"cube-mesh NVLink, 4x IB EDR 100 Gb/s), {ACCESSED}"),
        _Preset("dgx-a100-40gb", "a100-sxm-40gb", 8, _nvswitch, _ib(8, IB_HDR_BYTES_PER_S),
                "DGX A100 40GB: NVSwitch, 8x HDR 200 Gb/s InfiniBand",
                f"{_DGX_A100_SRC}, {ACCESSED}"),
        _Preset("dgx-a100-80gb", "a100-sxm-80gb", 8, _nvswitch, _ib(8, IB_HDR_BYTES_PER_S),
                "DGX A100 80GB: NVSwitch, 8x HDR 200 Gb/s InfiniBand",
                f"{_DGX_A100_SRC}, {ACCESSED}"),
        _Preset("dgx-h100", "h100-sxm-80gb", 8, _nvswitch, _ib(8, IB_NDR_BYTES_PER_S),
                "DGX H100: NVLink4 + NVSwitch 3.0, 8x NDR 400 Gb/s InfiniBand",
                f"{_DGX_H100_SRC}, {ACCESSED}"),
        _Preset("dgx-h200", "h200-sxm-141gb", 8, _nvswitch, _ib(8, IB_NDR_BYTES_PER_S),
                "DGX H200: NVLink4 + NVSwitch 3.0, 8x NDR 400 Gb/s InfiniBand",
                f"{_DGX_H100_SRC}, {ACCESSED}"),
        _Preset("dgx-b200", "b200", 8, _nvswitch, _ib(8, IB_NDR_BYTES_PER_S),
                "DGX B200: NVLink5 + NVSwitch, 8x ConnectX-7 400 Gb/s InfiniBand",
                "NVIDIA DGX B200 datasheet https://www.nvidia.com/en-us/data-center/dgx-b200/ "
                f"(8x single-port ConnectX-7 VPI up to 400 Gb/s), {ACCESSED}"),
        _Preset("pcie-roce-a100", "a100-pcie-80gb", 8, _pcie, _roce(2, ETH_100G_BYTES_PER_S),
                "8x A100 PCIe 80GB on PCIe Gen4, 2x 100 Gb/s RoCE per node",
                "assumption: a generic 2-socket PCIe Gen4 server (GPU traffic through PCIe "
                "switches/CPU, no NVLink bridges) with two 100 GbE RoCE NICs; GPU numbers from "
                f"the A100 datasheet, {ACCESSED}"),
        _Preset("pcie-roce-h100", "h100-pcie-80gb", 8, _pcie, _roce(2, ETH_200G_BYTES_PER_S),
                "8x H100 PCIe on PCIe Gen5, 2x 200 Gb/s RoCE per node",
                "assumption: a generic PCIe Gen5 server (no NVLink bridges) with two 200 GbE "
                f"RoCE NICs; GPU numbers from the H100 datasheet, {ACCESSED}"),
        _Preset("mi300x-platform", "mi300x", 8, _mesh, _roce(8, ETH_400G_BYTES_PER_S),
                "8x MI300X (AMD Instinct platform): Infinity Fabric mesh, 8x 400 Gb/s RoCE",
                "AMD Instinct MI300X platform https://www.amd.com/en/products/accelerators/"
                "instinct/mi300/platform.html (8 GPUs, fully connected Infinity Fabric); "
                f"network assumption: one 400 GbE RoCE NIC per GPU, {ACCESSED}"),
        _Preset("dgx-h800", "h800-sxm-80gb", 8, _nvswitch, _ib(8, IB_NDR_BYTES_PER_S),
                "HGX H800: NVLink4 (8 links) + NVSwitch, 8x NDR 400 Gb/s InfiniBand",
                "DeepSeek-V3 technical report arXiv:2412.19437 section 3.1 (8 GPUs per node on "
                "NVLink/NVSwitch, InfiniBand across nodes) and DeepEP docs/legacy.md (one "
                f"ConnectX-7 400 Gb/s per GPU); {TRANSCRIBED}"),
        _Preset("dgx-b300", "b300", 8, _nvswitch, _ib(8, IB_XDR_BYTES_PER_S),
                "DGX B300: NVLink5 + NVSwitch, 8x ConnectX-8 800 Gb/s InfiniBand",
                "NVIDIA DGX B300 https://www.nvidia.com/en-us/data-center/dgx-b300/ (8x "
                "ConnectX-8 VPI up to 800 Gb/s; MLPerf v5.1 system JSON: '8x ConnectX-8 IB XDR "
                f"800Gb/s'); {TRANSCRIBED}"),
        _Preset("gb200-nvl72", "gb200", 4, _nvswitch, _ib(4, IB_NDR_BYTES_PER_S),
                "GB200 NVL72 rack: 18 hosts of 4 GPUs in one 72-GPU NVLink5 domain, "
                "4x NDR 400 Gb/s InfiniBand per host",
                f"{_NV_GB200} (18 compute trays of 2 Grace + 4 Blackwell, 9 NVLink-switch "
                "trays); MLPerf v5.1 system JSON '4x ConnectX-7 IB NDR 400 Gb/s' per tray; "
                f"Megatron-Bridge perf_plugins.py NVLINK_DOMAIN_SIZE=72; {TRANSCRIBED}",
                gpus_per_domain=72),
        _Preset("gb300-nvl72", "gb300", 4, _nvswitch, _ib(4, IB_XDR_BYTES_PER_S),
                "GB300 NVL72 rack: 18 hosts of 4 GPUs in one 72-GPU NVLink5 domain, "
                "4x ConnectX-8 800 Gb/s InfiniBand per host",
                f"{_NV_GB300} (one ConnectX-8 per GPU on the board); MLPerf v5.1 system JSON "
                f"'4x ConnectX-8 IB XDR 800 Gb/s' per tray; {TRANSCRIBED}",
                gpus_per_domain=72),
        _Preset("mi325x-platform", "mi325x", 8, _mesh, _roce(8, ETH_400G_BYTES_PER_S),
                "8x MI325X (AMD Instinct platform): Infinity Fabric mesh, 8x 400 Gb/s RoCE",
                "AMD Instinct MI325X platform https://www.amd.com/en/products/accelerators/"
                "instinct/mi300/platform.html (8 GPUs, fully connected Infinity Fabric); "
                f"network assumption: one 400 GbE RoCE NIC per GPU; {TRANSCRIBED}"),
        _Preset("mi350x-platform", "mi350x", 8, _mesh, _roce(8, ETH_400G_BYTES_PER_S),
                "8x MI350X (AMD Instinct platform): Infinity Fabric mesh, 8x 400 Gb/s RoCE",
                "AMD Instinct MI350 series platform https://www.amd.com/en/products/"
                "accelerators/instinct/mi350.html (8 GPUs, fully connected Infinity Fabric); "
                "network assumption: one 400 Gb/s RoCE NIC (Pollara 400 class) per GPU; "
                f"{TRANSCRIBED}"),
        _Preset("mi355x-platform", "mi355x", 8, _mesh, _roce(8, ETH_400G_BYTES_PER_S),
                "8x MI355X (AMD Instinct platform): Infinity Fabric mesh, 8x 400 Gb/s RoCE",
                "AMD Instinct MI350 series platform https://www.amd.com/en/products/"
                "accelerators/instinct/mi350.html (8 GPUs, fully connected Infinity Fabric); "
                "network assumption: one 400 Gb/s RoCE NIC (Pollara 400 class) per GPU; "
                f"{TRANSCRIBED}"),
    )
}

# The preset whose fabric default_cluster() uses for each catalog GPU.
_DEFAULT_PRESET: dict[str, str] = {p.gpu: p.name for p in _PRESETS.values()}


def list_cluster_presets() -> tuple[str, ...]:
    """Preset names."""
    return tuple(_PRESETS)


def cluster_preset_description(name: str) -> str:
    """One line describing a preset's node."""
    return _preset(name).description


def _preset(name: str) -> _Preset:
    key = _norm(name) if isinstance(name, str) else ""
    if key not in _PRESETS:
        raise InputError("cluster", f"unknown cluster preset {name!r}",
                         did_you_mean(key, _PRESETS))
    return _PRESETS[key]


def is_cluster_preset(name: object) -> bool:
    return isinstance(name, str) and _norm(name) in _PRESETS


def get_cluster_preset(name: str, num_nodes: int = 1, *,
                       gpus_per_node: int | None = None) -> ClusterSpec:
    """A preset's cluster of ``num_nodes`` nodes (``gpus_per_node`` < the preset's count
    describes a partially used node, which is then its own NVLink domain)."""
    p = _preset(name)
    gpu = get_gpu(p.gpu)
    per_node = p.gpus_per_node if gpus_per_node is None else gpus_per_node
    domain = p.gpus_per_domain if per_node == p.gpus_per_node else None
    return ClusterSpec(name=f"{num_nodes}x-{p.name}" if isinstance(num_nodes, int) else p.name,
                       num_nodes=num_nodes, gpus_per_node=per_node, gpu=gpu,
                       intra_node=p.intra(gpu), inter_node=p.inter, source=p.source,
                       gpus_per_domain=domain)


def default_node_fabric(gpu: GPUSpec) -> tuple[IntraNodeSpec, InterNodeSpec]:
    """Intra- and inter-node fabric of the DGX-like server for ``gpu``.

    Catalog GPUs use their preset (A100: NVSwitch + 8x HDR; H100/H200/H800/B200: NVSwitch + 8x
    NDR; B300: NVSwitch + 8x XDR; GB200 / GB300: NVL72 hosts of 4 with 4x NDR / 4x XDR; PCIe
    cards: PCIe + RoCE; V100: DGX-1; MI300X/MI325X/MI350X/MI355X: Infinity Fabric + RoCE). A GPU not in the
    catalog (an inline mapping) gets NVSwitch at its NVLink bandwidth when it has NVLink, else
    PCIe at its PCIe bandwidth, and the network of its generation (compute capability >= 90:
    8x NDR; >= 80: 8x HDR; else 4x EDR; no NVLink: 2x 100 Gb/s RoCE).
    """
    name = gpu.name
    if name in _DEFAULT_PRESET and _GPUS.get(name) == gpu:
        p = _PRESETS[_DEFAULT_PRESET[name]]
        return p.intra(gpu), p.inter
    if gpu.nvlink_bandwidth_bytes_per_s <= 0:
        return _pcie(gpu), _roce(2, ETH_100G_BYTES_PER_S)
    cc = gpu.compute_capability
    if cc >= 90:
        inter = _ib(8, IB_NDR_BYTES_PER_S)
    elif cc >= 80:
        inter = _ib(8, IB_HDR_BYTES_PER_S)
    else:
        inter = _ib(4, IB_EDR_BYTES_PER_S)
    return _nvswitch(gpu), inter


def split_gpus(num_gpus: int, gpus_per_node: int = 8, *, field: str = "gpus") -> tuple[int, int]:
    """``(num_nodes, gpus_per_node)`` for ``num_gpus``: full nodes, or one partial node when
    ``num_gpus < gpus_per_node``."""
    for v, name in ((num_gpus, field), (gpus_per_node, "gpus_per_node")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(name, f"must be a positive integer, got {v!r}")
    if num_gpus < gpus_per_node:
        return 1, num_gpus
    if num_gpus % gpus_per_node:
        lo = num_gpus // gpus_per_node * gpus_per_node
        raise InputError(field, f"{num_gpus} is not a multiple of gpus_per_node={gpus_per_node}",
                         f"use 1..{gpus_per_node} (one node) or a multiple of {gpus_per_node}, "
                         f"e.g. {lo} or {lo + gpus_per_node}")
    return num_gpus // gpus_per_node, gpus_per_node


def default_cluster(num_gpus: int, *, gpus_per_node: int = 8,
                    gpu: str | GPUSpec = "a100-sxm-80gb") -> ClusterSpec:
    """Nodes of ``gpus_per_node`` GPUs on the DGX-like fabric of ``gpu`` (contract section 1:
    ``--gpus N`` without ``--cluster``)."""
    spec = gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)
    nodes, per_node = split_gpus(num_gpus, gpus_per_node)
    intra, inter = default_node_fabric(spec)
    known = spec.name in _DEFAULT_PRESET and _GPUS.get(spec.name) == spec
    src = _PRESETS[_DEFAULT_PRESET[spec.name]].source if known else spec.source
    host, domain = default_host_and_domain(spec)
    return ClusterSpec(name=f"{nodes}x{per_node}-{spec.name}", num_nodes=nodes,
                       gpus_per_node=per_node, gpu=spec, intra_node=intra, inter_node=inter,
                       source=src, gpus_per_domain=domain if per_node == host else None)


def default_host_and_domain(gpu: GPUSpec) -> tuple[int, int | None]:
    """``(gpus_per_node, gpus_per_domain)`` of the preset system of a catalog GPU: (4, 72)
    for GB200/GB300 (NVL72 racks), (8, None) for the DGX/HGX-like ones and any GPU outside
    the catalog (``None``: the NVLink domain is one host)."""
    if gpu.name in _DEFAULT_PRESET and _GPUS.get(gpu.name) == gpu:
        p = _PRESETS[_DEFAULT_PRESET[gpu.name]]
        return p.gpus_per_node, p.gpus_per_domain
    return 8, None

