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
from dataclasses import dataclass

from costmodel.errors import InputError, did_you_mean
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

ACCESSED = "accessed 2026-11-29"
MIB = 2**20

# ---- links, one direction, bytes/s --------------------------------------------------------
PCIE_GEN3_X16_BYTES_PER_S = 16e9
PCIE_GEN4_X16_BYTES_PER_S = 32e9
PCIE_GEN5_X16_BYTES_PER_S = 64e9
IB_EDR_BYTES_PER_S = 12.5e9  # 100 Gb/s
IB_HDR_BYTES_PER_S = 25e9  # 200 Gb/s
IB_NDR_BYTES_PER_S = 50e9  # 400 Gb/s
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

_NV_A100 = "https://www.nvidia.com/en-us/data-center/a100/ (A100 datasheet)"
_NV_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 datasheet)"

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
            name="h100-pcie-80gb",
            peak_flops_per_s={"fp32": 51.2e12, "tf32": 378.0e12,
                              "fp16": 756.0e12, "bf16": 756.0e12, "fp8": 1513.0e12},
            memory_bytes=81559 * MIB,  # nvidia-smi total (80 GB HBM3 / HBM2e)
            memory_bandwidth_bytes_per_s=2000e9,
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
    )
}

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
    "h200": "h200-sxm-141gb",
    "h200-sxm": "h200-sxm-141gb",
    "b200-sxm": "b200",
    "b200-180gb": "b200",
    "mi300": "mi300x",
}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


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

    Catalog GPUs use their preset (A100: NVSwitch + 8x HDR; H100/H200/B200: NVSwitch + 8x NDR;
    PCIe cards: PCIe + RoCE; V100: DGX-1; MI300X: Infinity Fabric + RoCE). A GPU not in the
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
    return ClusterSpec(name=f"{nodes}x{per_node}-{spec.name}", num_nodes=nodes,
                       gpus_per_node=per_node, gpu=spec, intra_node=intra, inter_node=inter,
                       source=src)

