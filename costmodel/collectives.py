"""NCCL's own collective cost model (NCCL 2.30.7), vectorised with numpy.

This reproduces what NCCL does at communicator creation and on each call [NCCL_TUNING]
(``src/graph/search.cc``, ``src/graph/tuning.cc``, ``src/enqueue.cc``; the formulas and
constants are written down in ``shared/reference/nccl.md``, cited below as "nccl.md §x"):

1. a graph search gives, per communication pattern, the number of channels and the per-channel
   bandwidth inside the node (``bwIntra``) and towards the network (``bwInter``) (§1.2);
2. ``ncclTopoTuneModel`` turns these into a latency ``L`` (µs) and an algorithm bandwidth
   ``B`` (GB/s) for every (collective, algorithm, protocol) (§3.1-3.4);
3. each call costs ``T = L + nBytes / (1000 B)`` µs with the tree correction table and the ring
   plateau factor (§3.5), and NCCL runs the enabled pair with the smallest ``T`` (§4).

Units: NCCL's constants are kept in its own units (``_us`` and ``_GBps`` names, exactly as in
the source) and converted once at the public boundary, which is SI (seconds, bytes, bytes/s).

Modelling choices, stated once (each is also tested or documented where it is used):

- **Graph search (§1.2) is simplified** to the rules that matter on homogeneous clusters:
  speed arrays, start speed ``<= maxBw``, most channels at a speed (a channel needs its speed on
  every link it crosses), "strictly larger ``nChannels x bw``" replacement, the 0.49 speed-drop
  stop, channel duplication, and pass-2 speed raising. It reproduces the nccl.md §1.3 table
  (8xA100 12x20, 8xH100 12x30 + NVLS 8x40/60, 8xH800 8x20 + NVLS 8x15/30, 8xB200 16x45 +
  NVLS 8x80/90, N x (8xA100 + 8xHDR) 8x24 (tree bwIntra 30 on 2 nodes), N x (8xH100 + 8xNDR)
  8x48 + NVLS 8x40/48). Topology details NCCL sees and paraplan does not (PCIe switch layout,
  PXN, GDR levels, the 6/5 CPU penalty) are not modelled; read the real graph from
  ``NCCL_DEBUG_SUBSYS=GRAPH`` when it matters (nccl.md §12.2).
- **One GPU per node is not duplicated**: the nccl.md §10.2 inputs for 64 x (1xH100 + 1xNDR)
  use a 1 x 48 ring, so duplication is skipped when the communicator has one rank per node.
- **Communicator geometry is per call** (``n_ranks``, ``n_nodes``, ``ppn = n_ranks // n_nodes``,
  ranks evenly spread). A multi-node group with ``ppn`` ranks per node can only use the NICs
  its own ranks own: ``ppn x (node NIC bandwidth / gpus_per_node / oversubscription)`` in total,
  spread over ``ceil(ppn x nics_per_node / gpus_per_node)`` NICs, because the other groups of
  the same node (other TP or PP ranks) use the other NICs at the same time. One ring channel
  uses one NIC (nccl.md §1.3, "one NIC per channel"). Oversubscription is modelled as a slower
  NIC (NCCL itself cannot see it).
- **NVLink bandwidth** is NCCL's per-link constant for the architecture (§1.1: 20 GB/s sm70/80,
  12 sm86, 20.6 sm90, 40.1 sm100) times the GPU's link count, scaled by the GPU's nominal
  per-link rate over the generation's nominal 25 GB/s (50 GB/s from sm100) so non-NVIDIA links
  stored in the NVLink fields keep their relative speed (exact for every NVIDIA part). PCIe is
  NCCL's ``width x lane rate / 80``, i.e. 0.75 of the nominal x16 rate (Gen3 12, Gen4 24, Gen5
  48 GB/s). An NVLink mesh without NVSwitch is treated as a switch whose single-peer path has
  ``links // (gpus - 1)`` links (at least one).
- **CollNet graphs** reuse the ring graph (NCCL searches its own; CollNet needs a SHARP plugin
  and is off by default, nccl.md §5.1).
- **Not modelled**: aggregation in group calls (``numPipeOps`` = 1, a single call), the fp8
  ring x1024 penalty (data types are not modelled), symmetric-memory kernels and the CTA policy
  (§4 steps 6-7), tuner plugins, the sm90 + CUDA 11.8 two-rank LL128 exception (CUDA >= 12 is
  assumed), and the post-selection channel/thread reduction (NCCL does not model it either).
- **Calibration** scales the *reported* time of the pair NCCL picks; the pick itself always
  uses NCCL's uncalibrated formulas, as NCCL does (nccl.md §12.1).
- P2P and all-to-all are outside NCCL's table; :func:`p2p_time_s` and :func:`alltoall_time_s`
  follow nccl.md §7 with the constants documented there.

Vectorisation (this is on the scoring path): inputs are reduced to their distinct
communicator geometries; per geometry the stored ``L`` and ``B`` of every candidate pair are
computed once, and per geometry and size octave ``[2^(k-1), 2^k)`` the winning pair is found
once (inside an octave the tree correction is constant and every ``T`` is linear in nBytes,
so the pair that wins at both ends wins throughout). Each element then costs a few gathers;
octaves where the winner changes, the ring plateau steps, or two pairs nearly tie are
evaluated pair by pair. Results equal pair-by-pair evaluation (tested).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from costmodel.calibration import arch_of  # NCCL's buckets are the same (nccl.md 3)
from costmodel.errors import InputError, did_you_mean
from costmodel.nccl_grammar import (
    ALGORITHMS,
    COLLECTIVES,
    PROTOCOLS,
    candidate_pairs,
    parse_nccl_setting,
)
from costmodel.specs import INTRA_FABRICS, ClusterSpec

__all__ = [
    "ALGORITHMS", "ALGORITHM_DISPLAY", "CANDIDATE_PAIRS", "COLLECTIVES", "NCCL_VERSION",
    "PROTOCOLS", "PROTOCOL_DISPLAY", "Alternative", "CollectiveTimes", "NcclCalibration",
    "NcclGraph", "NcclMeasurement", "NcclSystem", "all_alternatives", "alltoall_time_s",
    "arch_of", "busbw_factor", "collective_time_s", "collective_time_s_coded",
    "fit_calibration", "nccl_system", "nvlink_per_link_GBps", "p2p_time_s", "parse_nccl_spec",
    "tuning_table", "valid_pairs", "with_calibration",
]

NCCL_VERSION = "2.30.7"

# ---- names and indices (nccl.md §2: the index order breaks ties) ---------------------------
# ALGORITHMS, PROTOCOLS, COLLECTIVES: costmodel.nccl_grammar's (re-exported here)
ALGORITHM_DISPLAY: tuple[str, ...] = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS",
                                      "NVLSTree", "PAT")
PROTOCOL_DISPLAY: tuple[str, ...] = ("LL", "LL128", "Simple")
ARCHS: tuple[str, ...] = ("volta", "ampere", "hopper", "blackwell")
CPU_VENDORS: tuple[str, ...] = ("intel", "amd", "arm", "power")

TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
LL, LL128, SIMPLE = range(3)
_NVLINK, _PCI, _NET = range(3)
_NA, _NP = len(ALGORITHMS), len(PROTOCOLS)

# ---- NCCL 2.30.7 constants (nccl.md §3.1, ``ncclTunerConstantsDefaults`` in tuning.cc) -------
# Base latency baseLat[algo][proto], µs.
BASE_LAT_US = np.array([
    [6.8, 14.0, 8.4],   # Tree
    [6.6, 14.0, 8.4],   # Ring
    [0.0, 0.0, 0.0],    # CollNetDirect
    [0.0, 0.0, 0.0],    # CollNetChain
    [0.0, 0.0, 0.0],    # NVLS
    [0.0, 0.0, 0.0],    # NVLSTree
    [8.0, 8.0, 8.0],    # PAT
])
# Per-hop hardware latency hwLat[link][algo][proto], µs; link = NVLink, PCI, NET.
HW_LAT_US = np.array([
    [[0.6, 1.25, 4.0], [0.6, 1.9, 3.4], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
     [0.0, 0.0, 25.0], [0.0, 0.0, 25.0], [0.0, 0.0, 4.0]],
    [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
     [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 4.0]],
    [[5.0, 8.5, 14.0], [2.7, 4.0, 14.0], [0.0, 0.0, 31.0], [0.0, 0.0, 30.0],
     [0.0, 0.0, 18.0], [0.0, 0.0, 20.9], [0.0, 0.0, 14.0]],
])
# Bandwidth caps [arch][scale], GB/s; arch = Volta, Ampere, Hopper, Blackwell; scale = N1, N2, N4.
# On several nodes the llMaxBw row is chosen by CPU vendor (Intel/other -> 0, AMD -> 1).
LL_MAX_BW_GBPS = np.array([[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0],
                           [282.0, 90.0, 70.0]])
PER_CH_MAX_RING_LL128_BW_GBPS = np.array([[20.0] * 3, [20.0] * 3, [36.7] * 3, [40.0] * 3])
PER_CH_MAX_TREE_LL128_BW_GBPS = np.array([[20.0] * 3, [20.0] * 3, [36.7, 36.7, 29.0],
                                          [55.6, 31.67, 20.0]])
PER_CH_MAX_TREE_BW_GBPS = np.array([[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0],
                                    [70.0, 42.8, 24.0]])
PER_CH_MAX_NVLS_TREE_BW_GBPS = np.array([[26.5, 18.5, 10.0], [24.0, 23.6, 17.8],
                                         [0.0, 57.7, 45.5], [0.0, 96.0, 80.0]])
NVLS_EFFICIENCY = np.array([0.0, 0.0, 0.85, 0.74])
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0, "arm": 1.0, "power": 1.0}  # x3 for Simple
COLLNET_DIRECT_ARITY_US = 0.4
RING_PLATEAU = {True: 1.4, False: 1.9}  # sm >= 80, Volta
TREE_LL_DIVISOR = 3.8
PAT_NET_DIVISOR = 3.5
PAT_PER_RANK_US = 2.8
# Tree correction factors treeCorr[proto][floor(log2(nBytes/64))] (nccl.md §3.5).
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9],
])
MAX_CHANNELS = 64  # MAXCHANNELS since 2.25; rings search up to MAX_CHANNELS / 2
# Buffer bytes of one connection, all three protocols (nccl.md §2): Simple NCCL_BUFFSIZE
# 4 MiB, LL128 120 x 640 x 8 x 8 B, LL 8 x 512 x 8 x 16 B
CONNECTION_BUFFER_BYTES = 4 * 2**20 + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16
MAX_NVLS_ARITY = 32
COLLNET_MAX_LOCAL_RANKS = 8

# Graph-search speed arrays, GB/s (nccl.md §1.2, search.cc 2.30.7).
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                3.0, 2.4, 1.2, 0.24, 0.12)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SPEEDS_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                     2.4, 1.2, 0.24, 0.12)
SPEEDS_INTRA_SM100 = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SPEEDS_INTER_SM100 = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                      15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)

# NCCL's per-link NVLink bandwidth, GB/s one direction (nccl.md §1.1, topo.h) and the nominal
# per-link rate of that NVLink generation it corresponds to (NVLink2-4: 25 GB/s, NVLink5: 50).
NVLINK_NOMINAL_PER_LINK_BYTES_PER_S = 25e9
NVLINK5_NOMINAL_PER_LINK_BYTES_PER_S = 50e9
# PCIe: NCCL's width x lane rate / 80 = 0.75 of the nominal x16 rate (Gen4: 24 of 32 GB/s).
NCCL_PCIE_FRACTION = 0.75

# P2P (nccl.md §7): NCCL has no cost table for send/recv. paraplan uses the Ring/LL base
# latency (one kernel launch and one protocol step, 6.6 µs) plus one hop of NCCL's LL hardware
# latency (NVLink 0.6, PCI 1.0, NET 2.7 µs) and, across nodes, the per-step network overhead
# (1 µs Intel, 2 µs AMD) and the plugin's latencyInter: 7.2 µs over NVLink, 10.3 µs over IB.
P2P_BASE_LAT_US = 6.6
# All-to-all: NCCL schedules peers in rounds of 8 per work batch (nccl.md §7).
ALLTOALL_PEERS_PER_ROUND = 8

_S_PER_US = 1e-6
_BYTES_PER_GB = 1e9
_EPS = 1e-9


# ---- small helpers ---------------------------------------------------------------------------
def _norm_name(value: str) -> str:
    return "".join(ch for ch in value.lower() if ch.isalnum())


_COLLECTIVE_ALIASES = {"allreduce": "allreduce", "allgather": "allgather",
                       "reducescatter": "reducescatter", "broadcast": "broadcast",
                       "bcast": "broadcast", "reduce": "reduce"}


def _collective(collective: Any) -> str:
    key = _norm_name(collective) if isinstance(collective, str) else ""
    if key not in _COLLECTIVE_ALIASES:
        raise InputError("collective", f"unknown collective {collective!r}",
                         did_you_mean(str(collective), COLLECTIVES))
    return _COLLECTIVE_ALIASES[key]


def nvlink_per_link_GBps(compute_capability: int) -> float:
    """``ncclTopoNVLinkBw``: NCCL's per-link NVLink bandwidth for an sm (nccl.md §1.1)."""
    cc = compute_capability
    if cc >= 100:
        return 40.1
    if cc >= 90:
        return 20.6
    if cc == 86:
        return 12.0
    if cc >= 70:
        return 20.0
    if cc >= 60:
        return 18.0
    return 20.0


def _speed_array(compute_capability: int, multi_node: bool) -> tuple[float, ...]:
    if compute_capability >= 100:
        return SPEEDS_INTER_SM100 if multi_node else SPEEDS_INTRA_SM100
    if compute_capability >= 90:
        return SPEEDS_INTER_SM90 if multi_node else SPEEDS_INTRA_SM90
    return SPEEDS_INTER if multi_node else SPEEDS_INTRA


def _floor_div(a: float, b: float) -> int:
    return int(math.floor(a / b + _EPS)) if b > 0 else 0


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# ---- records -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NcclCalibration:
    """Scale factors fitted against nccl-tests (see :func:`fit_calibration`).

    ``time = latency_scale x L + nBytes / (B x bw_scale)`` with ``bw_scale`` =
    ``intra_bw_scale`` on one node and ``inter_bw_scale`` across nodes. They change the
    reported time only; NCCL's choice of algorithm and protocol stays uncalibrated.
    """

    intra_bw_scale: float = 1.0
    inter_bw_scale: float = 1.0
    latency_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("intra_bw_scale", "inter_bw_scale", "latency_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 \
                    or not math.isfinite(v):
                raise InputError(f"calibration.{name}", f"must be a positive number, got {v!r}")
            object.__setattr__(self, name, float(v))

    @property
    def is_identity(self) -> bool:
        return self.intra_bw_scale == self.inter_bw_scale == self.latency_scale == 1.0


@dataclass(frozen=True)
class NcclGraph:
    """One graph-search result: channels and per-channel bandwidth (nccl.md §1.2)."""

    n_channels: int
    bw_intra_bytes_per_s: float
    bw_inter_bytes_per_s: float

    @property
    def total_bytes_per_s(self) -> float:
        return self.n_channels * self.bw_intra_bytes_per_s


_PATTERNS = ("ring", "tree", "nvls", "collnet")


@dataclass(frozen=True)
class NcclSystem:
    """One homogeneous cluster as NCCL's model sees it.

    Bandwidths are NCCL's *link model* values in bytes/s, one direction: ``nvlink_bytes_per_s``
    is the GPU's aggregated NVLink bandwidth (links x NCCL's per-link constant: 240e9 for an
    A100, 370.8e9 for an H100), ``pcie_bytes_per_s`` NCCL's PCIe x16 value (24e9 Gen4, 48e9
    Gen5), ``nic_bytes_per_s`` one NIC after oversubscription. Build it with
    :func:`nccl_system`. The graph results per communicator geometry are computed once here.
    """

    name: str
    compute_capability: int
    gpus_per_node: int
    intra_fabric: str = "nvswitch"
    nvlink_bytes_per_s: float = 0.0
    nvlink_links: int = 0
    pcie_bytes_per_s: float = 24e9
    nic_bytes_per_s: float = 25e9
    nics_per_node: int = 0
    cpu_vendor: str = "intel"
    collnet_enabled: bool = False
    nvls_enabled: bool = True
    ll128_enabled: bool | None = None  # None: NCCL's default platform rule (nccl.md §5.3)
    net_latency_s: float = 0.0  # latencyInter from the network plugin (0 for IB)
    tree_simple_pattern: bool = False  # the x0.85 "simpler TREE pattern" (sm90+ searches)
    same_channels: bool = True  # broadcast/reduce latency rule (nccl.md §3.4)
    calibration: NcclCalibration = field(default_factory=NcclCalibration)
    # multi-node NVLink (NCCL_MNNVL_ENABLE, default auto): ``gpus_per_node`` is the NVLink
    # domain's, NCCL fusing its hosts into one node (groups.nccl_nodes)
    mnnvl: bool = False
    _graphs: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        s = "nccl_system"
        for name in ("compute_capability", "gpus_per_node", "nvlink_links", "nics_per_node"):
            v = getattr(self, name)
            lo = 0 if name in ("nvlink_links", "nics_per_node") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise InputError(f"{s}.{name}", f"must be an integer >= {lo}, got {v!r}")
        for name in ("nvlink_bytes_per_s", "pcie_bytes_per_s", "nic_bytes_per_s",
                     "net_latency_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0 \
                    or not math.isfinite(v):
                raise InputError(f"{s}.{name}", f"must be a number >= 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.pcie_bytes_per_s <= 0:
            raise InputError(f"{s}.pcie_bytes_per_s", "must be > 0")
        if self.intra_fabric not in INTRA_FABRICS:
            raise InputError(f"{s}.intra_fabric", f"unknown fabric {self.intra_fabric!r}",
                             did_you_mean(str(self.intra_fabric), INTRA_FABRICS))
        if self.cpu_vendor not in CPU_VENDORS:
            raise InputError(f"{s}.cpu_vendor", f"unknown CPU vendor {self.cpu_vendor!r}",
                             did_you_mean(str(self.cpu_vendor), CPU_VENDORS))
        if not isinstance(self.calibration, NcclCalibration):
            raise InputError(f"{s}.calibration", "must be an NcclCalibration")
        object.__setattr__(self, "_graphs", _readonly(_search_all(self)))

    # -- derived properties (nccl.md §1.1, §5) --
    @property
    def arch(self) -> str:
        return arch_of(self.compute_capability)

    @property
    def arch_index(self) -> int:
        return ARCHS.index(self.arch)

    @property
    def nvlink_intra(self) -> bool:
        """Intra-node paths are NVLink (typeIntra <= NVB), else PCIe."""
        return self.intra_fabric in ("nvswitch", "nvlink") and self.nvlink_bytes_per_s > 0

    @property
    def nvls_supported(self) -> bool:
        """NVLS needs an NVSwitch and sm >= 90 (nccl.md §5.2); ``NCCL_NVLS_ENABLE=0`` -> off."""
        return (self.nvls_enabled and self.intra_fabric == "nvswitch" and self.nvlink_intra
                and self.compute_capability >= 90)

    @property
    def ll128_default(self) -> bool:
        """LL128 on by default only over NVLink and sm >= 70 (nccl.md §5.3): never on
        PCIe-only nodes. ``ll128_enabled`` overrides."""
        if self.ll128_enabled is not None:
            return bool(self.ll128_enabled)
        return self.nvlink_intra and self.compute_capability >= 70

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """The NIC bandwidth available to one GPU: node NIC total / gpus_per_node."""
        return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node

    @property
    def has_network(self) -> bool:
        return self.nics_per_node > 0 and self.nic_bytes_per_s > 0

    @property
    def net_overhead_us(self) -> float:
        return NET_OVERHEAD_US[self.cpu_vendor]

    @property
    def intra_path_bytes_per_s(self) -> float:
        """Best single GPU -> GPU path inside the node (NCCL's maxBw on one node)."""
        return _intra_path_GBps(self) * _BYTES_PER_GB

    @property
    def nic_path_bytes_per_s(self) -> float:
        """Best GPU -> NIC path: min(PCIe, one NIC)."""
        return min(self.pcie_bytes_per_s, self.nic_bytes_per_s)

    def graph(self, pattern: str, ppn: int, n_nodes: int) -> NcclGraph:
        """The graph NCCL would search for a communicator with ``ppn`` ranks on each of
        ``n_nodes`` nodes; ``pattern`` is ring, tree, nvls or collnet. ``n_channels == 0``
        means the pattern is unavailable."""
        if pattern not in _PATTERNS:
            raise InputError("pattern", f"unknown graph pattern {pattern!r}",
                             did_you_mean(str(pattern), _PATTERNS))
        if not 1 <= ppn <= self.gpus_per_node:
            raise InputError("ppn", f"must be 1..{self.gpus_per_node}, got {ppn!r}")
        if n_nodes < 1:
            raise InputError("n_nodes", f"must be >= 1, got {n_nodes!r}")
        g = self._graphs[_PATTERNS.index(pattern), :, min(n_nodes - 1, 2), ppn]
        return NcclGraph(int(g[0]), float(g[1]) * _BYTES_PER_GB, float(g[2]) * _BYTES_PER_GB)

    def coll_channels(self, ppn: int, n_nodes: int) -> int:
        """Launched collective channels (comm->nChannels): 2 x the ring graph (nccl.md §1.2.6)."""
        return min(2 * self.graph("ring", ppn, n_nodes).n_channels, MAX_CHANNELS)

    def communicator_buffer_bytes(self, ppn: int, n_nodes: int) -> float:
        """GPU memory one rank's connection buffers take in a communicator of ``ppn`` ranks on
        each of ``n_nodes`` nodes (0 for a single rank).

        Every launched channel of the ring holds one receive connection (from the
        predecessor) with a buffer per protocol: Simple 4 MiB (NCCL_BUFFSIZE), LL128 ~4.69
        MiB, LL 512 KiB (nccl.md §2). Since 2.22 NCCL connects an algorithm when a job first
        uses it (NCCL_RUNTIME_CONNECT), and training's large collectives use the ring; older
        NCCL also connected the tree's two connections per channel at communicator creation
        (three times this). NVLS multicast buffers (Hopper) are not counted.
        """
        if ppn * n_nodes <= 1:
            return 0.0
        return float(self.coll_channels(ppn, n_nodes) * CONNECTION_BUFFER_BYTES)


def nccl_system(cluster: ClusterSpec, *, cpu_vendor: str = "intel", collnet_enabled: bool = False,
                nvls_enabled: bool = True, ll128_enabled: bool | None = None,
                calibration: NcclCalibration | None = None) -> NcclSystem:
    """The :class:`NcclSystem` of a :class:`~costmodel.specs.ClusterSpec` (nccl.md §1.1).

    NVLink: ``gpu.nvlink_links`` x NCCL's per-link constant for ``gpu.compute_capability``,
    scaled by the GPU's nominal per-link rate over its NVLink generation's (exact for NVIDIA
    parts); a GPU without a link count gets ``round(bandwidth / nominal per link)`` links. An
    NVLink fabric on a GPU without NVLink falls back to PCIe. PCIe: 0.75 x the nominal rate.
    Network: ``inter_node.nics_per_node`` NICs of ``nic_bandwidth / oversubscription`` (none
    when the fabric is ``none``). ``cluster.calibration`` may carry ``nccl_intra_bw_scale``,
    ``nccl_inter_bw_scale`` and ``nccl_latency_scale`` (other keys belong to other modules).
    """
    if not isinstance(cluster, ClusterSpec):
        raise InputError("cluster", f"must be a ClusterSpec, got {type(cluster).__name__}")
    from costmodel.topology import node_bandwidths

    gpu = cluster.gpu
    cc = gpu.compute_capability
    # the cluster graph's per-GPU links: equal to the catalog's for the standard nodes, and
    # what a custom cluster file or graph says otherwise (NCCL's constants scale with them)
    nb = node_bandwidths(cluster)
    fabric = cluster.intra_node.fabric
    nominal = gpu.nvlink_bandwidth_bytes_per_s
    intra_scale = (nb.gpu_to_switch_bytes_per_s / nominal
                   if nominal > 0 and fabric != "pcie" and nb.gpu_to_switch_bytes_per_s > 0
                   else 1.0)
    per_link_nominal = (NVLINK5_NOMINAL_PER_LINK_BYTES_PER_S if cc >= 100
                        else NVLINK_NOMINAL_PER_LINK_BYTES_PER_S)
    links = gpu.nvlink_links
    if nominal > 0 and links == 0:
        links = max(1, round(nominal / per_link_nominal))
    if nominal > 0 and fabric != "pcie":
        scale = (nominal / links) / per_link_nominal
        nvlink = links * nvlink_per_link_GBps(cc) * _BYTES_PER_GB * scale * intra_scale
    else:  # a PCIe fabric, or a GPU without NVLink: the node is PCIe-only
        nvlink, links, fabric = 0.0, 0, "pcie"
    inter = cluster.inter_node
    nics = inter.nics_per_node if inter.fabric != "none" else 0
    # an NVLink domain across hosts (NVL72) is one NCCL node of the domain's GPUs with all
    # its hosts' NICs (MNNVL; modern-training.md section 6, nccl.md)
    hosts_per_node = max(1, cluster.domain_gpus // cluster.gpus_per_node)
    mnnvl = hosts_per_node > 1 and nvlink > 0
    ppn = cluster.domain_gpus if mnnvl else cluster.gpus_per_node
    cal = calibration
    if cal is None:
        raw = cluster.calibration or {}
        cal = NcclCalibration(
            intra_bw_scale=raw.get("nccl_intra_bw_scale", 1.0),
            inter_bw_scale=raw.get("nccl_inter_bw_scale", 1.0),
            latency_scale=raw.get("nccl_latency_scale", 1.0))
    return NcclSystem(
        name=cluster.name, compute_capability=cc, gpus_per_node=ppn, mnnvl=mnnvl,
        intra_fabric=fabric, nvlink_bytes_per_s=nvlink, nvlink_links=links,
        pcie_bytes_per_s=NCCL_PCIE_FRACTION * gpu.pcie_bandwidth_bytes_per_s,
        nic_bytes_per_s=(nb.nic_bytes_per_s_per_gpu * cluster.gpus_per_node / nics if nics
                         else inter.nic_bandwidth_bytes_per_s / inter.oversubscription),
        nics_per_node=nics * (hosts_per_node if mnnvl else 1), cpu_vendor=cpu_vendor, collnet_enabled=collnet_enabled,
        nvls_enabled=nvls_enabled, ll128_enabled=ll128_enabled, calibration=cal)


# ---- graph search (nccl.md §1.2, simplified; see the module docstring) ------------------------
def _intra_total_GBps(sys: NcclSystem) -> float:
    """``totalBw``: the GPU's summed NVLink bandwidth, or its PCIe bandwidth."""
    return (sys.nvlink_bytes_per_s if sys.nvlink_intra else sys.pcie_bytes_per_s) / _BYTES_PER_GB


def _intra_path_GBps(sys: NcclSystem) -> float:
    """``maxBw`` on one node: the best GPU -> GPU path."""
    if not sys.nvlink_intra:
        return sys.pcie_bytes_per_s / _BYTES_PER_GB
    if sys.intra_fabric == "nvswitch":
        return sys.nvlink_bytes_per_s / _BYTES_PER_GB
    per_link = sys.nvlink_bytes_per_s / sys.nvlink_links / _BYTES_PER_GB
    return per_link * max(1, sys.nvlink_links // max(1, sys.gpus_per_node - 1))


def _nic_share(sys: NcclSystem, ppn: int) -> tuple[int, float]:
    """(NICs the group of ``ppn`` ranks uses, GB/s of each): the group owns
    ppn x nics / gpus_per_node NICs' worth of bandwidth, spread over ceil(...) NICs."""
    owned = ppn * sys.nics_per_node / sys.gpus_per_node
    if owned <= 0 or sys.nic_bytes_per_s <= 0:
        return 0, 0.0
    k = max(1, math.ceil(owned - _EPS))
    return k, sys.nic_bytes_per_s / _BYTES_PER_GB * owned / k


def _ring_search(sys: NcclSystem, ppn: int, multi: bool) -> tuple[int, float, float]:
    """Ring graph: pass 1, duplication, pass 2 (nccl.md §1.2 steps 1-4)."""
    cc = sys.compute_capability
    speeds = _speed_array(cc, multi)
    total = _intra_total_GBps(sys)
    cap = MAX_CHANNELS // 2
    if not multi:
        max_bw = _intra_path_GBps(sys)

        def channels(s: float) -> int:
            return 0 if s > max_bw + _EPS else _floor_div(total, s)
    else:
        k, share = _nic_share(sys, ppn)
        if k == 0:
            return 0, 0.0, 0.0
        max_bw = min(sys.pcie_bytes_per_s / _BYTES_PER_GB, share)
        # In-node traffic of a multi-node ring: on NVLink each GPU forwards (ppn-1)/ppn of the
        # channels (the entry/exit GPU uses PCIe to the NIC); on PCIe all of it shares the link.
        frac = 0.0 if ppn == 1 else ((ppn - 1) / ppn if sys.nvlink_intra else 1.0)

        def channels(s: float) -> int:
            if s > max_bw + _EPS:
                return 0
            c = k * _floor_div(share, s)
            return min(c, _floor_div(total, s * frac)) if frac > 0 else c

    best_c, best_s = 0, 0.0
    for s in speeds:
        if s > max_bw + _EPS:
            continue
        if best_c and s / best_s <= 0.49:
            break
        c = min(cap, channels(s))
        if c >= 1 and c * s > best_c * best_s + _EPS:
            best_c, best_s = c, s
            if c * s >= total - _EPS:  # "perfect"
                break
    if best_c == 0:  # slower than the slowest speed: one channel at what the path gives
        best_c, best_s = 1, min(max_bw, speeds[-1])
    c, bi, be = best_c, best_s, best_s
    # Duplication (ncclTopoDupChannels); skipped for one rank per node (nccl.md §10.2 inputs).
    if ppn > 1 and bi >= 25.0 and not (cc > 80 and bi < 50.0 and c > 4):
        dup = min(2 * c, cap)
        div = math.ceil(dup / c)
        c, bi, be = dup, bi / div, be / div
    # Pass 2: raise both speeds while the channel count still fits.
    higher = [s for s in reversed(speeds) if s > bi + _EPS]
    for s in higher:
        if channels(s) >= c:
            bi = be = s
        else:
            break
    return c, bi, be


def _tree_search(sys: NcclSystem, ppn: int, scale: int,
                 ring: tuple[int, float, float]) -> tuple[int, float, float]:
    """Tree graph: the ring's channels and speeds; on 2 nodes (ppn > 1) pass 2 raises bwIntra
    while bwIntra < 2 x bwInter and the in-node links allow it (nccl.md §1.2 step 4)."""
    c, bi, be = ring
    if scale != 1 or ppn == 1 or c == 0:
        return ring
    total = _intra_total_GBps(sys)
    frac = (ppn - 1) / ppn if sys.nvlink_intra else 1.0
    for s in reversed(_speed_array(sys.compute_capability, True)):
        if s <= bi + _EPS:
            continue
        if bi >= 2 * be - _EPS or c * s * frac > total + _EPS:
            break
        bi = s
    return c, bi, be


def _nvls_search(sys: NcclSystem, ppn: int, multi: bool) -> tuple[int, float, float]:
    """NVLS graph: heads = GPUs (one node) or GPUs with a NIC (several nodes); every GPU needs
    (heads + 1) x bwIntra of its NVLink; pass 2 raises bwInter while < 2 x bwIntra
    (nccl.md §1.2 steps 4, 8)."""
    if not sys.nvls_supported:
        return 0, 0.0, 0.0
    speeds = _speed_array(sys.compute_capability, multi)
    total = _intra_total_GBps(sys)
    if multi:
        k, share = _nic_share(sys, ppn)
        heads = min(ppn, k, MAX_NVLS_ARITY)
        max_bw = min(sys.pcie_bytes_per_s / _BYTES_PER_GB, share)
        inter_limit = max_bw
    else:
        heads = min(ppn, MAX_NVLS_ARITY)
        max_bw = _intra_path_GBps(sys)
        inter_limit = math.inf
    if heads < 2:
        return 0, 0.0, 0.0
    idx = next((i for i, s in enumerate(speeds)
                if s <= max_bw + _EPS and s * (heads + 1) <= total + _EPS), None)
    if idx is None:
        return 0, 0.0, 0.0
    bi = be = speeds[idx]
    while idx > 0 and be < 2 * bi - _EPS and speeds[idx - 1] <= inter_limit + _EPS:
        idx -= 1
        be = speeds[idx]
    return heads, bi, be


def _search_all(sys: NcclSystem) -> np.ndarray:
    """graphs[pattern, field (nCh, bwIntra, bwInter GB/s), scale (N1, N2, N>=3), ppn]."""
    g = sys.gpus_per_node
    out = np.zeros((len(_PATTERNS), 3, 3, g + 1))
    for ppn in range(1, g + 1):
        single = _ring_search(sys, ppn, False)
        multi = _ring_search(sys, ppn, True) if sys.has_network else (0, 0.0, 0.0)
        nvls1 = _nvls_search(sys, ppn, False)
        nvlsn = _nvls_search(sys, ppn, True) if sys.has_network else (0, 0.0, 0.0)
        for scale in range(3):
            ring = single if scale == 0 else multi
            out[0, :, scale, ppn] = ring
            out[1, :, scale, ppn] = _tree_search(sys, ppn, scale, ring)
            out[2, :, scale, ppn] = nvls1 if scale == 0 else nvlsn
            out[3, :, scale, ppn] = ring
    return out


# ---- NCCL_ALGO / NCCL_PROTO (nccl.md §4.2, ecosystem.md §2.5) ---------------------------------
# The grammar and the capability table live once, in costmodel.nccl_grammar.
def _indices(names: tuple[str, ...], kind: str) -> frozenset[int]:
    universe = ALGORITHMS if kind == "algo" else PROTOCOLS
    return frozenset(universe.index(n) for n in names)


def parse_nccl_spec(spec: str, kind: str) -> dict[str, tuple[str, ...]]:
    """Parse an ``NCCL_ALGO`` (``kind='algo'``) or ``NCCL_PROTO`` (``kind='proto'``) value.

    Returns ``{collective or '*': enabled names}``: ``'*'`` is the entry without a collective
    (it applies to every collective not named). Syntax (NCCL >= 2.24, nccl.md §4.2): ``auto``,
    a comma list, ``^`` to exclude, ``;``-separated ``collective:list`` entries, e.g.
    ``"ring,tree;allreduce:^tree;broadcast:ring"``. ``collnet`` means both CollNet variants.
    Unknown tokens raise :class:`InputError` (field ``nccl_algo`` / ``nccl_proto``). A view of
    :func:`costmodel.nccl_grammar.parse_nccl_setting`.
    """
    return parse_nccl_setting(spec, kind).as_dict()


@lru_cache(maxsize=1024)
def _spec_for(spec: str, kind: str, coll: str) -> tuple[frozenset[int], frozenset[int]]:
    """(enabled, positively named) indices for ``coll``."""
    setting = parse_nccl_setting(spec, kind)
    return _indices(setting.enabled(coll), kind), _indices(setting.named(coll), kind)


@lru_cache(maxsize=1024)
def _allowed(algo: str, proto: str, coll: str, ll128_default: bool) -> np.ndarray:
    """Enabled (algo, proto) entries after NCCL_ALGO/NCCL_PROTO; LL128 stays tri-state unless
    named explicitly, which bypasses the platform check (nccl.md §4.2)."""
    algos, _ = _spec_for(algo, "algo", coll)
    protos, named = _spec_for(proto, "proto", coll)
    mask = np.zeros((_NA, _NP), dtype=bool)
    for a in algos:
        for p in protos:
            mask[a, p] = p != LL128 or ll128_default or LL128 in named
    return _readonly(mask)


# Structural candidates per collective, in NCCL's (algo, proto) iteration order (nccl.md §2),
# from the capability table of costmodel.nccl_grammar.
CANDIDATE_PAIRS: dict[str, tuple[tuple[int, int], ...]] = {
    c: tuple((ALGORITHMS.index(a), PROTOCOLS.index(p)) for a, p in candidate_pairs(c))
    for c in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")}
_AR_PAIRS, _AG_PAIRS, _BC_PAIRS = (CANDIDATE_PAIRS[c] for c in ("allreduce", "allgather",
                                                                 "broadcast"))


# ---- the tuning model, vectorised over communicator geometries (nccl.md §3) -------------------
class _Geometries:
    """What every pair's formula reads, for arrays of valid geometries (``n`` ranks over
    ``nn`` nodes): :func:`_pair_tables` builds it once per call."""

    def __init__(self, sys: NcclSystem, coll: str, n: np.ndarray, nn: np.ndarray) -> None:
        self.sys, self.coll = sys, coll
        self.ar = coll == "allreduce"
        self.agrs = coll in ("allgather", "reducescatter")
        self.nf = nf = n.astype(np.float64)
        nnf = nn.astype(np.float64)
        self.nn = nn
        self.ppn = ppn = n // nn
        self.ppnf = ppn.astype(np.float64)
        self.scale = scale = np.minimum(nn - 1, 2)
        self.multi = multi = nn > 1
        self.le2 = nn <= 2
        self.arch = arch = sys.arch_index
        self.log2n = np.floor(np.log2(nnf))
        self.nsteps = 2.0 * (nf - 1.0) if self.ar else (nf - 1.0 if self.agrs else nf)
        self.ninter = np.where(multi, 2.0 * (nnf - 1.0) if self.ar else nnf - 1.0, 0.0)
        row = _NVLINK if sys.nvlink_intra else _PCI
        vendor_row = 1 if sys.cpu_vendor == "amd" else 0
        self.llmax = np.where(multi, LL_MAX_BW_GBPS[vendor_row][scale], LL_MAX_BW_GBPS[arch, 0])
        self.li = sys.net_latency_s / _S_PER_US
        self.ppn1 = ppn == 1
        self.hw_intra = HW_LAT_US[row].copy()
        if sys.cpu_vendor == "power" and row == _PCI:
            self.hw_intra[TREE, SIMPLE] = HW_LAT_US[_PCI, RING, SIMPLE]

    def graph(self, pattern: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(channels, intra bandwidth, inter bandwidth) of a search pattern's graph."""
        g = self.sys._graphs[pattern][:, self.scale, self.ppn]
        return g[0], g[1], g[2]

    def inter_lat(self, a: int, p: int) -> np.ndarray:
        net = np.where(self.ppn1, HW_LAT_US[_NET, TREE, p], HW_LAT_US[_NET, a, p])
        return net + self.li + (self.li if p == SIMPLE else 0.0)


_Pair = tuple[np.ndarray, np.ndarray, np.ndarray]  # latency (µs), bandwidth (GB/s), runs


def _ring(g: _Geometries, p: int, nch: np.ndarray, bus: np.ndarray) -> _Pair:
    arch, scale, sys = g.arch, g.scale, g.sys
    hw_intra, multi, nsteps = g.hw_intra, g.multi, g.nsteps
    if p == LL:
        bus = np.minimum(g.llmax, 0.5 * bus)
    elif p == LL128:
        bus = np.minimum(0.92 * bus, nch * PER_CH_MAX_RING_LL128_BW_GBPS[arch][scale])
    b = bus * g.nf / nsteps
    if g.coll in ("broadcast", "reduce"):
        hop = np.where(multi, HW_LAT_US[_NET, RING, p], hw_intra[RING, p])
        if sys.same_channels:
            lt = BASE_LAT_US[RING, p] + hop
        else:
            tree_s = np.where(multi, HW_LAT_US[_NET, TREE, SIMPLE], hw_intra[TREE, SIMPLE])
            lt = BASE_LAT_US[RING, p] + nsteps * (tree_s if p == SIMPLE else hop)
    else:
        ov = np.where(multi, sys.net_overhead_us * (3.0 if p == SIMPLE else 1.0), 0.0)
        lt = (BASE_LAT_US[RING, p] + (nsteps - g.ninter) * np.maximum(hw_intra[RING, p], ov)
              + g.ninter * g.inter_lat(RING, p))
    return lt, b, nch > 0


def _tree(g: _Geometries, p: int, nch: np.ndarray, bus: np.ndarray) -> _Pair:
    arch, scale = g.arch, g.scale
    bus = np.minimum(0.92 * bus, nch * PER_CH_MAX_TREE_BW_GBPS[arch][scale])
    if p == LL:
        bus = np.minimum(bus / TREE_LL_DIVISOR, g.llmax)
    elif p == LL128:
        bus = np.minimum(bus * np.where(g.nn == 1, 7.0 / 9.0, 120.0 / 128.0),
                         nch * PER_CH_MAX_TREE_LL128_BW_GBPS[arch][scale])
    if g.sys.tree_simple_pattern:
        bus = bus * 0.85
    b = bus * 0.5
    lt = BASE_LAT_US[TREE, p] + 2.0 * ((g.ppnf - 1.0) * g.hw_intra[TREE, p]
                                       + g.log2n * g.inter_lat(TREE, p))
    return lt, b, nch > 0


def _pat(g: _Geometries, p: int, nch: np.ndarray, bus: np.ndarray) -> _Pair:
    """AllGather/ReduceScatter at one rank per node, sm >= 60 (nccl.md §5.1)."""
    b = bus * 0.75
    lt = (BASE_LAT_US[PAT, p] + g.log2n * g.inter_lat(PAT, p) / PAT_NET_DIVISOR
          + PAT_PER_RANK_US * g.nf)
    ok = (nch > 0) & g.ppn1 & g.multi & (g.sys.compute_capability >= 60)
    return lt, b, ok


def _nvls(g: _Geometries, a: int, p: int) -> _Pair:
    nch, bi, be = g.graph(2)
    ok = nch >= 2
    safe = np.where(ok, nch, 1.0)
    eff = NVLS_EFFICIENCY[g.arch]
    intra_bw = bi * eff * (safe - 1.0) / safe * (2.0 if g.ar else (g.ppnf - 1.0) / g.ppnf)
    multi = g.multi
    if a == NVLS:
        bus = nch * np.minimum(intra_bw, be)
        b = bus * g.nf / g.nsteps if g.ar else bus
        lt = g.hw_intra[NVLS, p] + np.where(multi, g.inter_lat(NVLS, p), 0.0)
        # NVLS across nodes needs CollNet (IB SHARP); AllGather/ReduceScatter there
        # also need every node to have at most nHeads local ranks (nccl.md §3.3, §4).
        ok = ok & (~multi | g.sys.collnet_enabled)
        if not g.ar:
            ok = ok & (g.ppn <= MAX_NVLS_ARITY) & (~multi | (g.ppn <= nch))
    else:
        inter_bw = be * np.where(g.le2, 2.0, 1.0)
        bwc = np.minimum(np.minimum(intra_bw, inter_bw),
                         PER_CH_MAX_NVLS_TREE_BW_GBPS[g.arch][g.scale])
        b = nch * bwc * g.nf / g.nsteps
        lt = g.hw_intra[NVLS_TREE, p] + 2.0 * g.log2n * g.inter_lat(NVLS_TREE, p)
        ok = ok & multi
    return lt, b, ok


def _collnet(g: _Geometries, a: int, p: int) -> _Pair:
    """CollNetDirect / CollNetChain (off unless collnet_enabled)."""
    nch, bi, be = g.graph(3)
    sys, ppn, ppnf = g.sys, g.ppn, g.ppnf
    ok = (nch > 0) & g.multi & (ppn <= COLLNET_MAX_LOCAL_RANKS) & sys.collnet_enabled
    safe = np.where(nch > 0, nch, 1.0)
    if a == COLLNET_DIRECT:
        ok = ok & (sys.intra_fabric == "nvswitch")
        if g.agrs:
            b = ppnf * np.minimum(bi, 0.9 * be)
            ok = ok & (ppn <= nch)
        else:
            f = ppnf / safe
            bus = nch * bi / (f - (f - 1.0) / 2.0)
            if g.arch >= ARCHS.index("hopper"):
                bus = bus * 0.85
            b = bus * 0.5
        lt = (2.0 * (np.minimum(1.0, ppnf - 1.0) * g.hw_intra[COLLNET_DIRECT, p]
                     + COLLNET_DIRECT_ARITY_US * (ppnf - 1.0))
              + g.inter_lat(COLLNET_DIRECT, p))
    else:
        b = nch * bi * 0.5
        lt = 2.0 * (ppnf - 1.0) * g.hw_intra[COLLNET_CHAIN, p] + g.inter_lat(COLLNET_CHAIN, p)
    return lt, b, ok


def _pair(g: _Geometries, a: int, p: int) -> _Pair:
    """Latency, bandwidth and where it runs, for one (algorithm, protocol) pair."""
    if a in (RING, TREE, PAT):
        nch, bi, be = g.graph(1 if a in (TREE, PAT) else 0)
        bus = nch * np.where(g.le2, bi, be)
        return {RING: _ring, TREE: _tree, PAT: _pat}[a](g, p, nch, bus)
    if a in (NVLS, NVLS_TREE):
        return _nvls(g, a, p)
    return _collnet(g, a, p)


def _pair_tables(sys: NcclSystem, coll: str, n: np.ndarray, nn: np.ndarray,
                 pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Stored latency L (µs) and algorithm bandwidth B (GB/s) for each pair and geometry.

    ``n``, ``nn`` are int arrays (nRanks >= 2, nNodes) of valid geometries. Returns two
    ``(len(pairs), len(n))`` arrays; ``B == 0`` marks a pair NCCL cannot run there.
    """
    g = _Geometries(sys, coll, n, nn)
    lat = np.zeros((len(pairs), n.shape[0]))
    bw = np.zeros((len(pairs), n.shape[0]))
    zero = np.zeros(n.shape[0])
    for k, (a, p) in enumerate(pairs):
        lt, b, ok = _pair(g, a, p)
        lat[k] = lt + zero
        bw[k] = np.where(ok & (b > 0), b, 0.0)
    return lat, bw


class _Terms:
    """Per-geometry pieces of ``ncclTopoGetAlgoTime`` (nccl.md §3.5) for a list of pairs:
    latency (µs; inf where the pair cannot run), inverse bandwidth (µs per byte; 0 there), the
    tree correction lookups and the ring plateau threshold. Elementwise work is then
    ``T = L x plateau + nBytes x invB / treeCorr``."""

    __slots__ = ("pairs", "lat", "inv_bw", "corr", "plateau_row", "plateau_threshold",
                 "plateau_factor", "_envelope")

    def __init__(self, sys: NcclSystem, coll: str, pairs: tuple[tuple[int, int], ...],
                 n: np.ndarray, nn: np.ndarray) -> None:
        with np.errstate(divide="ignore", invalid="ignore"):
            lat, bw = _pair_tables(sys, coll, n, nn, pairs)
        ok = bw > 0
        with np.errstate(divide="ignore"):
            self.inv_bw = _readonly(np.where(ok, 1.0 / (1000.0 * np.where(ok, bw, 1.0)), 0.0))
        self.lat = _readonly(np.where(ok, lat, np.inf))
        self.pairs = pairs
        # Tree correction (AllReduce Tree; NVLSTree on Blackwell + x86), stored as 1/factor in
        # a lookup indexed by clip(floor(log2(nBytes/64)), -1, 24) + 1.
        self.corr: dict[int, np.ndarray] = {}
        if coll == "allreduce":
            for k, (a, p) in enumerate(pairs):
                limit = 23 if a == TREE else 24
                if a == TREE or (a == NVLS_TREE and sys.arch == "blackwell"
                                 and sys.cpu_vendor in ("intel", "amd")):
                    lut = np.ones(26)
                    lut[1:limit + 1] = 1.0 / TREE_CORRECTION[p][:limit]
                    self.corr[k] = _readonly(lut)
        # Ring plateau: Ring/Simple AllReduce on > 1 node once nBytes/(comm.nChannels x nRanks)
        # >= 64 multiplies the latency by 1.4 (sm >= 80) or 1.9.
        self.plateau_row = -1
        self.plateau_threshold = np.full(n.shape[0], np.inf)
        self.plateau_factor = RING_PLATEAU[sys.compute_capability >= 80]
        if coll == "allreduce" and (RING, SIMPLE) in pairs:
            self.plateau_row = pairs.index((RING, SIMPLE))
            ring_nch = sys._graphs[0, 0][np.minimum(nn - 1, 2), n // nn]
            coll_ch = np.maximum(np.minimum(2.0 * ring_nch, MAX_CHANNELS), 1.0)
            self.plateau_threshold = np.where(nn > 1, 64.0 * coll_ch * n, np.inf)
        _readonly(self.plateau_threshold)
        self._envelope: _Envelope | None = None

    def envelope(self) -> _Envelope:
        if self._envelope is None:
            self._envelope = _Envelope(self)
        return self._envelope


_NB = 65  # size octaves: bucket 0 = [0, 1), bucket b = [2^(b-1), 2^b), 64 = [2^63, inf)
_OCT_LO = np.array([0.0] + [2.0 ** (b - 1) for b in range(1, _NB)])
_OCT_HI = np.array([1.0] + [2.0 ** b for b in range(1, _NB)])
_TIE_MARGIN = 1e-9


class _Envelope:
    """The winning pair per (geometry, size octave). Inside an octave the tree correction is
    constant and every ``T`` is linear in nBytes, so a pair that wins (by NCCL's tie order)
    at both ends wins throughout. Octaves where the winner changes, the ring plateau steps,
    or the top two are within a relative 1e-9 at an end are marked ``mixed`` and evaluated
    pair by pair."""

    __slots__ = ("win", "lat", "inv_bw", "mixed")

    def __init__(self, terms: _Terms) -> None:
        n_pairs, n_geo = terms.lat.shape
        lo, hi = _OCT_LO[None, None, :], _OCT_HI[None, None, :]
        lat = np.repeat(terms.lat[:, :, None], _NB, axis=2)
        ib = np.repeat(terms.inv_bw[:, :, None], _NB, axis=2)
        for k, lut in terms.corr.items():
            ib[k] = ib[k] * lut[np.clip(np.arange(_NB) - 7, -1, 24) + 1][None, :]
        step = np.zeros((n_geo, _NB), dtype=bool)
        if terms.plateau_row >= 0:
            thr = terms.plateau_threshold[:, None]
            on = thr <= _OCT_LO[None, :]
            step = ~on & (thr < _OCT_HI[None, :])
            lat[terms.plateau_row] = np.where(on, lat[terms.plateau_row] * terms.plateau_factor,
                                              lat[terms.plateau_row])
        with np.errstate(invalid="ignore"):
            t_lo = lat + lo * ib
            t_hi = lat + hi * ib
        w_lo, w_hi = np.argmin(t_lo, axis=0), np.argmin(t_hi, axis=0)
        mixed = (w_lo != w_hi) | step
        mixed[:, _NB - 1] = True
        if n_pairs > 1:
            for t in (t_lo, t_hi):
                two = np.partition(t, 1, axis=0)[:2]
                with np.errstate(invalid="ignore"):
                    mixed |= np.isfinite(two[0]) & (two[1] - two[0] <= _TIE_MARGIN * two[0])
        g = np.arange(n_geo)[:, None]
        b = np.arange(_NB)[None, :]
        best_lat = lat[w_lo, g, b]
        runnable = np.isfinite(best_lat)
        self.win = _readonly(np.where(runnable, w_lo, -1).ravel())
        self.lat = _readonly(best_lat.ravel())
        self.inv_bw = _readonly(np.where(runnable, ib[w_lo, g, b], 0.0).ravel())
        self.mixed = _readonly((mixed & runnable).ravel())


@lru_cache(maxsize=4096)
def _terms_cached(sys: NcclSystem, coll: str, pairs: tuple[tuple[int, int], ...],
                  n: tuple[int, ...], nn: tuple[int, ...]) -> _Terms:
    return _Terms(sys, coll, pairs, np.array(n, dtype=np.int64), np.array(nn, dtype=np.int64))


def _terms(sys: NcclSystem, coll: str, pairs: tuple[tuple[int, int], ...], n: np.ndarray,
           nn: np.ndarray) -> _Terms:
    if n.shape[0] <= 16:
        return _terms_cached(sys, coll, pairs, tuple(n.tolist()), tuple(nn.tolist()))
    return _Terms(sys, coll, pairs, n, nn)


def _log_index(terms: _Terms, x: np.ndarray) -> np.ndarray | None:
    """clip(floor(log2(nBytes/64)), -1, 24) + 1, exact at powers of two (frexp)."""
    if not terms.corr:
        return None
    _, e = np.frexp(x)
    return np.clip(e.astype(np.int64) - 7, -1, 24) + 1


_CHUNK = 1 << 15  # elements per block: keeps the temporaries in cache


def _select(terms: _Terms, x: np.ndarray, inv: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NCCL's argmin with strict '<' in (algo, proto) order (nccl.md §4 step 5), through the
    per-octave envelope. Returns (best row or -1, T µs, L µs of the best row); T is inf
    where nothing runs."""
    env = terms.envelope()
    _, e = np.frexp(x)
    cell = np.clip(e, 0, _NB - 1)
    if inv is not None:
        cell = inv * _NB + cell
    k = env.win.take(cell)
    lat = env.lat.take(cell)
    t = lat + x * env.inv_bw.take(cell)
    mixed = env.mixed.take(cell)
    if mixed.any():
        idx = np.flatnonzero(mixed)
        kk, tt, ll = _select_full(terms, x[idx], None if inv is None else inv[idx], True)
        k[idx], t[idx], lat[idx] = kk, tt, ll
    return k, t, lat


def _select_full(terms: _Terms, x: np.ndarray, inv: np.ndarray | None, need_lat: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The same argmin, pair by pair (octaves the envelope marks ``mixed``)."""
    m = x.shape[0]
    best_k = np.full(m, -1, dtype=np.int64)
    best_t = np.full(m, np.inf)
    best_l = np.full(m, np.inf) if need_lat else None
    live = [k for k in range(len(terms.pairs)) if np.isfinite(terms.lat[k]).any()]
    if not live or m == 0:
        return best_k, best_t, best_l
    if m == 1:
        gi = 0 if inv is None else int(inv[0])
        xf = float(x[0])
        for k in live:
            t, lat = _row_scalar(terms, k, gi, xf)
            if t < best_t[0]:
                best_t[0], best_k[0] = t, k
                if best_l is not None:
                    best_l[0] = lat
        return best_k, best_t, best_l
    for lo in range(0, m, _CHUNK):
        hi = min(m, lo + _CHUNK)
        _select_block(terms, live, x[lo:hi], None if inv is None else inv[lo:hi],
                      best_k[lo:hi], best_t[lo:hi], None if best_l is None else best_l[lo:hi])
    best_k[~np.isfinite(best_t)] = -1
    return best_k, best_t, best_l


def _row_scalar(terms: _Terms, k: int, gi: int, x: float) -> tuple[float, float]:
    lat, ib = float(terms.lat[k, gi]), float(terms.inv_bw[k, gi])
    if k in terms.corr:
        ib *= float(terms.corr[k][_log_index_scalar(x)])
    if k == terms.plateau_row and x >= terms.plateau_threshold[gi]:
        lat *= terms.plateau_factor
    return lat + x * ib, lat


def _log_index_scalar(x: float) -> int:
    return min(max(math.frexp(x)[1] - 7, -1), 24) + 1


def _select_block(terms: _Terms, live: list[int], x: np.ndarray, inv: np.ndarray | None,
                  best_k: np.ndarray, best_t: np.ndarray, best_l: np.ndarray | None) -> None:
    log_idx = _log_index(terms, x)
    t = np.empty(x.shape[0])
    mask = np.empty(x.shape[0], dtype=bool)
    thr = None
    for j, k in enumerate(live):
        if inv is None:
            lat: Any = terms.lat[k, 0]
            ib: Any = terms.inv_bw[k, 0]
        else:
            lat = terms.lat[k].take(inv)
            ib = terms.inv_bw[k].take(inv)
        if k in terms.corr and log_idx is not None:
            ib = terms.corr[k].take(log_idx) * ib
        if k == terms.plateau_row:
            thr = terms.plateau_threshold[0] if inv is None else terms.plateau_threshold.take(inv)
            lat = lat * (1.0 + (terms.plateau_factor - 1.0) * (x >= thr))
        np.multiply(x, ib, out=t)
        t += lat
        if j == 0:
            best_t[:] = t
            best_k[:] = k
            if best_l is not None:
                best_l[:] = lat
            continue
        np.less(t, best_t, out=mask)
        np.copyto(best_t, t, where=mask)
        np.copyto(best_k, k, where=mask)
        if best_l is not None:
            np.copyto(best_l, lat, where=mask)


# ---- public API --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveTimes:
    """Per-element result of :func:`collective_time_s` (arrays of the broadcast shape).

    ``algo_index``/``proto_index`` index :data:`ALGORITHMS`/:data:`PROTOCOLS`; -1 where no
    pair can run (``time_s`` is inf there, only with ``on_invalid="inf"``).
    """

    time_s: np.ndarray
    algo_index: np.ndarray
    proto_index: np.ndarray

    def __post_init__(self) -> None:
        for name in ("time_s", "algo_index", "proto_index"):
            getattr(self, name).setflags(write=False)

    @property
    def valid(self) -> np.ndarray:
        return self.algo_index >= 0

    def algo_names(self) -> np.ndarray:
        """Algorithm names per element ('' where invalid), an object array of the same shape."""
        return _names(ALGORITHMS, self.algo_index)

    def proto_names(self) -> np.ndarray:
        """Protocol names per element ('' where invalid)."""
        return _names(PROTOCOLS, self.proto_index)


def _names(table: tuple[str, ...], index: np.ndarray) -> np.ndarray:
    out = np.empty(index.shape, dtype=object)
    out[...] = np.array(("",) + table, dtype=object)[index + 1]
    return out


_DENSE_KEY_LIMIT = 1 << 22


class _Geo:
    """Broadcast inputs, flattened, with their distinct communicator geometries."""

    __slots__ = ("shape", "extra", "n", "nn", "inv", "bad", "one")

    def __init__(self, sys: NcclSystem, n_ranks: Any, n_nodes: Any, *extra: Any) -> None:
        arrays = np.broadcast_arrays(np.asarray(n_ranks), np.asarray(n_nodes),
                                     *[np.asarray(e, dtype=np.float64) for e in extra])
        self.shape = arrays[0].shape
        raw_n, raw_nn = arrays[0].ravel(), arrays[1].ravel()
        n, nn = _as_int(raw_n, "n_ranks"), _as_int(raw_nn, "n_nodes")
        self.extra = [a.ravel() for a in arrays[2:]]
        if n.size == 0:
            un, unn, inv = n[:0], nn[:0], np.zeros(0, dtype=np.intp)
        elif (n == n[0]).all() and (nn == nn[0]).all():
            un, unn, inv = n[:1], nn[:1], None
        else:
            lo = min(int(n.min()), int(nn.min()))
            nmax, nnmax = int(n.max()), int(nn.max())
            if lo >= 0 and (nmax + 1) * (nnmax + 1) <= _DENSE_KEY_LIMIT:
                key = n * (nnmax + 1) + nn
                present = np.zeros((nmax + 1) * (nnmax + 1), dtype=bool)
                present[key] = True
                uk = np.flatnonzero(present)
                lut = np.empty(present.size, dtype=np.intp)
                lut[uk] = np.arange(uk.size)
                inv = lut[key]
                un, unn = uk // (nnmax + 1), uk % (nnmax + 1)
            else:
                pairs_ = np.stack([n, nn], axis=1)
                u, inv = np.unique(pairs_, axis=0, return_inverse=True)
                un, unn, inv = u[:, 0].copy(), u[:, 1].copy(), inv.ravel()
        self.n, self.nn, self.inv = un.astype(np.int64), unn.astype(np.int64), inv
        safe = np.maximum(self.nn, 1)
        ppn = self.n // safe
        self.bad = ((self.n < 1) | (self.nn < 1) | (self.nn > self.n) | (self.n % safe != 0)
                    | (ppn > sys.gpus_per_node) | ((self.nn > 1) & (not sys.has_network)))
        self.one = ~self.bad & (self.n == 1)

    def standin(self, sys: NcclSystem, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The geometries, with a valid two-rank communicator where ``keep`` is False."""
        two_nodes = sys.gpus_per_node < 2
        return (np.where(keep, self.n, 2), np.where(keep, self.nn, 2 if two_nodes else 1))

    def spread(self, per_geometry: np.ndarray) -> np.ndarray:
        """A per-geometry array as a per-element one (broadcastable)."""
        return per_geometry[0] if self.inv is None else per_geometry[self.inv]

    def error(self, sys: NcclSystem) -> InputError:
        i = int(np.flatnonzero(self.bad)[0])
        rn, rnn = int(self.n[i]), int(self.nn[i])
        if rnn > 1 and not sys.has_network and rnn <= rn and rn % rnn == 0:
            return InputError("n_nodes", f"{rnn} nodes but the cluster {sys.name!r} has no "
                              "network", "give cluster.inter_node NICs or use one node")
        return InputError("n_ranks", f"n_ranks={rn}, n_nodes={rnn} is not a communicator of "
                          "this cluster", f"need n_ranks = n_nodes x ppn with 1 <= ppn <= "
                          f"{sys.gpus_per_node}")


def _as_int(a: np.ndarray, name: str) -> np.ndarray:
    if a.dtype.kind in "iu":
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "b" or a.dtype.kind not in "f":
        raise InputError(name, f"must be integers, got dtype {a.dtype}")
    out = a.astype(np.int64)
    if np.any(out != a):
        raise InputError(name, "must be integers")
    return out


def _check_sizes(x: np.ndarray, name: str) -> None:
    if x.size and not (x.min() >= 0 and np.isfinite(x.max())):
        raise InputError(name, "message sizes must be finite and >= 0")


def _forcing_error(sys: NcclSystem, coll: str, n: int, nn: int, algo: str, proto: str
                   ) -> InputError:
    """NCCL >= 2.24 fails when NCCL_ALGO/NCCL_PROTO leave nothing (nccl.md §4.2)."""
    pairs_all = CANDIDATE_PAIRS[coll]
    _, bw = _pair_tables(sys, coll, np.array([n]), np.array([nn]), pairs_all)
    possible = [(a, p) for (a, p), b in zip(pairs_all, bw[:, 0], strict=True) if b > 0
                and (p != LL128 or sys.ll128_default)]
    runnable = sorted({ALGORITHMS[a] for a, _ in possible})
    algo_ok = _allowed(algo, "auto", coll, sys.ll128_default)
    where = f"on {nn} node(s) x {n // nn} rank(s) of {sys.name!r}"
    if not any(algo_ok[a, p] for a, p in possible):
        return InputError("nccl_algo", f"NCCL cannot run {coll} with NCCL_ALGO={algo!r} {where}",
                          f"runnable here: {', '.join(runnable)}")
    protos = sorted({PROTOCOLS[p] for a, p in possible if algo_ok[a, p]})
    return InputError("nccl_proto", f"NCCL cannot run {coll} with NCCL_ALGO={algo!r} and "
                      f"NCCL_PROTO={proto!r} {where}",
                      f"protocols runnable with that algorithm: {', '.join(protos)}")


def _check_on_invalid(on_invalid: str) -> None:
    if on_invalid not in ("raise", "inf"):
        raise InputError("on_invalid", f"must be 'raise' or 'inf', got {on_invalid!r}")


def _pairs(system: NcclSystem, coll: str, algo: str, proto: str) -> tuple[tuple[int, int], ...]:
    allowed = _allowed(algo, proto, coll, system.ll128_default)
    return tuple(ap for ap in CANDIDATE_PAIRS[coll] if allowed[ap])


def collective_time_s(system: NcclSystem, collective: str, nbytes: Any, n_ranks: Any,
                      n_nodes: Any, algo: str = "auto", proto: str = "auto", *,
                      on_invalid: str = "raise") -> CollectiveTimes:
    """Time of one NCCL collective as NCCL's model predicts it, and the pair NCCL picks.

    ``nbytes`` is NCCL's nBytes (AllGather/ReduceScatter: the total gathered size);
    ``n_ranks``/``n_nodes`` the communicator (evenly spread); all three broadcast together.
    ``algo``/``proto`` follow ``NCCL_ALGO``/``NCCL_PROTO`` (lists, ``^``, per-collective
    entries, see :func:`parse_nccl_spec`). The pick is the argmin of ``T`` over the enabled
    table in NCCL's tie order (nccl.md §4 step 5), computed with NCCL's uncalibrated formulas;
    the returned time carries ``system.calibration``. ``n_ranks == 1`` costs 0 (Ring/Simple).
    Where forcing leaves no runnable pair (or the geometry is not a communicator of this
    system), ``on_invalid="raise"`` raises :class:`InputError` (field ``nccl_algo``,
    ``nccl_proto``, ``n_ranks`` or ``n_nodes``) and ``"inf"`` returns inf with index -1.
    [NCCL_TUNING: tuning.cc ncclTopoTuneModel, ncclTopoGetAlgoTime; enqueue.cc topoGetAlgoInfo]
    """
    _check_on_invalid(on_invalid)
    coll = _collective(collective)
    pairs = _pairs(system, coll, algo, proto)
    geo = _Geo(system, n_ranks, n_nodes, nbytes)
    x = geo.extra[0]
    _check_sizes(x, "nbytes")
    if on_invalid == "raise" and geo.bad.any():
        raise geo.error(system)
    work_u = ~geo.bad & ~geo.one
    cal = system.calibration
    if pairs and work_u.any():
        # Invalid or one-rank geometries get harmless stand-ins (fixed up below).
        terms = _terms(system, coll, pairs, *geo.standin(system, work_u))
        best_k, t_us, lat_us = _select(terms, x, geo.inv)
        ok = best_k >= 0
        if not cal.is_identity:
            bscale = geo.spread(np.where(geo.nn == 1, cal.intra_bw_scale, cal.inter_bw_scale))
            with np.errstate(invalid="ignore"):
                t_us = np.where(ok, lat_us * cal.latency_scale + (t_us - lat_us) / bscale,
                                np.inf)
        algo_i = np.array([a for a, _ in pairs] + [-1]).take(best_k)
        proto_i = np.array([p for _, p in pairs] + [-1]).take(best_k)
        if on_invalid == "raise" and not ok.all():
            bad_work = ~ok & geo.spread(work_u)
            if bad_work.any():
                i = int(np.flatnonzero(np.broadcast_to(bad_work, x.shape))[0])
                gi = 0 if geo.inv is None else int(geo.inv[i])
                raise _forcing_error(system, coll, int(geo.n[gi]), int(geo.nn[gi]), algo,
                                     proto)
        time_s = t_us * _S_PER_US
    else:
        if work_u.any() and on_invalid == "raise":
            gi = int(np.flatnonzero(work_u)[0])
            raise _forcing_error(system, coll, int(geo.n[gi]), int(geo.nn[gi]), algo, proto)
        time_s = np.full(x.shape, np.inf)
        algo_i = np.full(x.shape, -1, dtype=np.int64)
        proto_i = np.full(x.shape, -1, dtype=np.int64)
    if geo.one.any() or geo.bad.any():
        one, bad = geo.spread(geo.one), geo.spread(geo.bad)
        time_s = np.where(one, 0.0, np.where(bad, np.inf, time_s))
        algo_i = np.where(one, RING, np.where(bad, -1, algo_i))
        proto_i = np.where(one, SIMPLE, np.where(bad, -1, proto_i))
    return CollectiveTimes(*(_full(a, x.shape).reshape(geo.shape)
                             for a in (time_s, algo_i, proto_i)))


def _full(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return a if a.shape == shape and a.flags.writeable else np.array(np.broadcast_to(a, shape))


def collective_time_s_coded(system: NcclSystem, collective: str, nbytes: Any, n_ranks: Any,
                            n_nodes: Any, algo_code: Any, proto_code: Any,
                            algo_table: Sequence[str], proto_table: Sequence[str], *,
                            on_invalid: str = "inf") -> CollectiveTimes:
    """:func:`collective_time_s` for a :class:`~costmodel.batch.ConfigBatch`, whose NCCL
    settings are integer codes into ``nccl_algo_table``/``nccl_proto_table``: one vectorised
    call per distinct (algo, proto) string pair present."""
    arrays = np.broadcast_arrays(np.asarray(nbytes, dtype=np.float64), np.asarray(n_ranks),
                                 np.asarray(n_nodes), np.asarray(algo_code, dtype=np.int64),
                                 np.asarray(proto_code, dtype=np.int64))
    x, n, nn, ac, pc = (a.ravel() for a in arrays)
    shape = arrays[0].shape
    width = max(1, len(proto_table))
    key = ac * width + pc
    uk = np.unique(key)
    if uk.size == 1:
        a, p = divmod(int(uk[0]), width)
        return collective_time_s(system, collective, arrays[0], arrays[1], arrays[2],
                                 algo_table[a], proto_table[p], on_invalid=on_invalid)
    time_s = np.empty(x.size)
    algo_i = np.empty(x.size, dtype=np.int64)
    proto_i = np.empty(x.size, dtype=np.int64)
    for k in uk:
        sel = np.flatnonzero(key == k)
        a, p = divmod(int(k), width)
        r = collective_time_s(system, collective, x[sel], n[sel], nn[sel], algo_table[a],
                              proto_table[p], on_invalid=on_invalid)
        time_s[sel], algo_i[sel], proto_i[sel] = r.time_s, r.algo_index, r.proto_index
    return CollectiveTimes(time_s.reshape(shape), algo_i.reshape(shape), proto_i.reshape(shape))


def valid_pairs(system: NcclSystem, collective: str, n_ranks: Any, n_nodes: Any,
                algo: str = "auto", proto: str = "auto") -> np.ndarray:
    """True where NCCL can run ``collective`` under this NCCL_ALGO/NCCL_PROTO setting: at
    least one enabled pair is runnable for that communicator (``n_ranks == 1`` always is),
    and the geometry is a communicator of this system. Never raises for forcing; raises
    :class:`InputError` for unknown names only."""
    coll = _collective(collective)
    pairs = _pairs(system, coll, algo, proto)
    geo = _Geo(system, n_ranks, n_nodes)
    work_u = ~geo.bad & ~geo.one
    ok_u = geo.one.copy()
    if pairs and work_u.any():
        terms = _terms(system, coll, pairs, *geo.standin(system, work_u))
        ok_u |= work_u & np.isfinite(terms.lat).any(axis=0)
    size = int(np.prod(geo.shape, dtype=np.int64))
    return np.array(np.broadcast_to(geo.spread(ok_u), (size,))).reshape(geo.shape)


def tuning_table(system: NcclSystem, collective: str, n_ranks: int, n_nodes: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's stored table for one communicator, like ``NCCL_DEBUG_SUBSYS=TUNING``:
    ``(latency_s, bandwidth_bytes_per_s)``, both ``[len(ALGORITHMS), len(PROTOCOLS)]``;
    bandwidth 0 where the pair is unavailable (LL128 disabled by default counts as
    unavailable). Uncalibrated, before the per-call corrections of nccl.md §3.5."""
    coll = _collective(collective)
    geo = _Geo(system, n_ranks, n_nodes)
    if geo.shape:
        raise InputError("n_ranks", "tuning_table takes one communicator")
    if geo.bad.any():
        raise geo.error(system)
    lat = np.zeros((_NA, _NP))
    bw = np.zeros((_NA, _NP))
    if not geo.one.any():
        pairs = [ap for ap in CANDIDATE_PAIRS[coll] if ap[1] != LL128 or system.ll128_default]
        lt, bt = _pair_tables(system, coll, geo.n, geo.nn, pairs)
        for k, (a, p) in enumerate(pairs):
            if bt[k, 0] > 0:
                lat[a, p] = lt[k, 0] * _S_PER_US
                bw[a, p] = bt[k, 0] * _BYTES_PER_GB
    return _readonly(lat), _readonly(bw)


def busbw_factor(collective: str, n_ranks: Any) -> np.ndarray | float:
    """nccl-tests bus-bandwidth factor (nccl.md §6) [NCCL_TESTS_PERF]: allreduce 2(n-1)/n;
    allgather, reducescatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1."""
    key = _norm_name(collective) if isinstance(collective, str) else ""
    n = np.asarray(n_ranks, dtype=np.float64)
    if np.any(n < 1):
        raise InputError("n_ranks", "must be >= 1")
    if key == "allreduce":
        f = 2.0 * (n - 1.0) / n
    elif key in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        f = (n - 1.0) / n
    elif key in ("broadcast", "bcast", "reduce", "sendrecv"):
        f = np.ones_like(n)
    else:
        raise InputError("collective", f"unknown collective {collective!r}",
                         did_you_mean(str(collective), (*COLLECTIVES, "alltoall", "sendrecv")))
    return float(f) if f.ndim == 0 else f


@dataclass(frozen=True)
class Alternative:
    """One runnable (algorithm, protocol) for one call; nccl-tests bandwidths (nccl.md §6)."""

    algo: str
    proto: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    model_time_s: float  # NCCL's own (uncalibrated) estimate: the ranking key

    @property
    def label(self) -> str:
        return (f"{ALGORITHM_DISPLAY[ALGORITHMS.index(self.algo)]}/"
                f"{PROTOCOL_DISPLAY[PROTOCOLS.index(self.proto)]}")


def all_alternatives(system: NcclSystem, collective: str, nbytes: float, n_ranks: int,
                     n_nodes: int, algo: str = "auto", proto: str = "auto") -> list[Alternative]:
    """Every runnable (algo, proto) for one call, in NCCL's preference order: by NCCL's own
    estimate, ties in index order, so the first is NCCL's choice. ``time_s`` is calibrated;
    ``algbw = nbytes / time``, ``busbw = algbw x`` :func:`busbw_factor` (0 when time is 0).
    ``algo``/``proto`` restrict the table as NCCL_ALGO/NCCL_PROTO do; an empty result raises
    :class:`InputError` like :func:`collective_time_s`."""
    coll = _collective(collective)
    pairs = _pairs(system, coll, algo, proto)
    geo = _Geo(system, n_ranks, n_nodes, nbytes)
    if geo.shape:
        raise InputError("nbytes", "all_alternatives takes one call (scalars)")
    if geo.bad.any():
        raise geo.error(system)
    x = geo.extra[0]
    _check_sizes(x, "nbytes")
    xf = float(x[0])
    if geo.one.any():
        return [Alternative("ring", "simple", 0.0, 0.0, 0.0, 0.0)]
    out: list[tuple[float, int, Alternative]] = []
    if pairs:
        terms = _terms(system, coll, pairs, geo.n, geo.nn)
        cal = system.calibration
        bscale = cal.intra_bw_scale if int(geo.nn[0]) == 1 else cal.inter_bw_scale
        factor = busbw_factor(coll, int(geo.n[0]))
        for k, (a, p) in enumerate(pairs):
            t, lat = _row_scalar(terms, k, 0, xf)
            if not math.isfinite(t):
                continue
            tc = (lat * cal.latency_scale + (t - lat) / bscale) * _S_PER_US
            algbw = xf / tc if tc > 0 else 0.0
            out.append((t, k, Alternative(ALGORITHMS[a], PROTOCOLS[p], tc, algbw,
                                          algbw * factor, t * _S_PER_US)))
    if not out:
        raise _forcing_error(system, coll, int(geo.n[0]), int(geo.nn[0]), algo, proto)
    out.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in out]


# ---- point to point and all-to-all (nccl.md §7: outside NCCL's table) -------------------------
def _p2p_params(sys: NcclSystem) -> tuple[float, float, float, float]:
    """(intra bw B/s, inter bw B/s, intra latency s, inter latency s), calibrated."""
    cal = sys.calibration
    row = _NVLINK if sys.nvlink_intra else _PCI
    intra_bw = sys.intra_path_bytes_per_s * cal.intra_bw_scale
    inter_bw = min(sys.pcie_bytes_per_s, sys.nic_bytes_per_s_per_gpu) * cal.inter_bw_scale
    intra_lat = (P2P_BASE_LAT_US + HW_LAT_US[row, RING, LL]) * _S_PER_US * cal.latency_scale
    inter_lat = ((P2P_BASE_LAT_US + HW_LAT_US[_NET, RING, LL] + sys.net_overhead_us)
                 * _S_PER_US + sys.net_latency_s) * cal.latency_scale
    return intra_bw, inter_bw, intra_lat, inter_lat


def p2p_time_s(system: NcclSystem, nbytes: Any, inter_node: Any) -> np.ndarray:
    """Send/recv of ``nbytes`` between two ranks (nccl.md §7): inside a node over the best
    GPU -> GPU path (NVLink aggregate through an NVSwitch, else the per-peer links or PCIe),
    across nodes over the GPU's NIC share (min(PCIe, node NIC bandwidth / gpus_per_node)).
    Latency: Ring/LL base 6.6 µs + one LL hop (NVLink 0.6 / PCI 1.0 / NET 2.7 µs) + the network
    overhead (1 µs Intel) across nodes: 7.2 µs NVLink, 10.3 µs IB. 0 bytes cost 0."""
    x, inter = np.broadcast_arrays(np.asarray(nbytes, dtype=np.float64),
                                   np.asarray(inter_node, dtype=bool))
    if np.any(x < 0) or np.any(~np.isfinite(x)):
        raise InputError("nbytes", "message sizes must be finite and >= 0")
    if inter.any() and not system.has_network:
        raise InputError("inter_node", f"the cluster {system.name!r} has no network")
    intra_bw, inter_bw, intra_lat, inter_lat = _p2p_params(system)
    inter_bw = inter_bw if inter_bw > 0 else 1.0
    t = np.where(inter, inter_lat + x / inter_bw, intra_lat + x / intra_bw)
    return np.where(x > 0, t, 0.0)



def alltoall_time_s(system: NcclSystem, nbytes_per_rank: Any, n_ranks: Any, n_nodes: Any
                    ) -> np.ndarray:
    """All-to-all of ``nbytes_per_rank`` (nccl-tests' per-rank total S) per nccl.md §7's
    practical model: ``(ppn-1)/n x S`` over NVLink at the ring busBw per GPU (the one-node ring
    graph's nChannels x bwIntra), ``(n-ppn)/n x S`` over the GPU's NIC share; the larger of the
    two plus one P2P latency per round of 8 peers (inter-node latency when n_nodes > 1)."""
    geo = _Geo(system, n_ranks, n_nodes, nbytes_per_rank)
    if geo.bad.any():
        raise geo.error(system)
    x = geo.extra[0]
    _check_sizes(x, "nbytes_per_rank")
    cal = system.calibration
    _, inter_bw, intra_lat, inter_lat = _p2p_params(system)
    n, nn = geo.n, geo.nn
    ppn = n // nn
    g = system._graphs[0][:, 0, ppn]
    ring_bus = g[0] * g[1] * _BYTES_PER_GB * cal.intra_bw_scale
    nf, ppnf = n.astype(np.float64), ppn.astype(np.float64)
    intra_s_per_byte = np.where(ppn > 1, (ppnf - 1.0) / nf / np.where(ring_bus > 0, ring_bus, 1.0),
                                0.0)
    inter_s_per_byte = np.where(nn > 1, (nf - ppnf) / nf / (inter_bw if inter_bw > 0 else 1.0),
                                0.0)
    rounds = np.ceil((nf - 1.0) / ALLTOALL_PEERS_PER_ROUND)
    lat = rounds * np.where(nn > 1, inter_lat, intra_lat)
    t = geo.spread(lat) + x * geo.spread(np.maximum(intra_s_per_byte, inter_s_per_byte))
    t = np.where((geo.spread(n) > 1) & (x > 0), t, 0.0)
    return np.array(np.broadcast_to(t, x.shape)).reshape(geo.shape)


# ---- calibration against measurements ---------------------------------------------------------
@dataclass(frozen=True)
class NcclMeasurement:
    """One measured collective (e.g. one nccl-tests row). Give ``time_s`` or
    ``busbw_bytes_per_s`` (converted with the nccl-tests factor). ``algo``/``proto`` are the
    NCCL_ALGO/NCCL_PROTO the run used (auto by default)."""

    collective: str
    nbytes: float
    n_ranks: int
    n_nodes: int
    time_s: float | None = None
    busbw_bytes_per_s: float | None = None
    algo: str = "auto"
    proto: str = "auto"

    def __post_init__(self) -> None:
        if self.time_s is None and self.busbw_bytes_per_s is None:
            raise InputError("measurement", "needs time_s or busbw_bytes_per_s")

    @property
    def measured_time_s(self) -> float:
        if self.time_s is not None:
            return float(self.time_s)
        factor = busbw_factor(self.collective, self.n_ranks)
        return float(self.nbytes) * float(factor) / float(self.busbw_bytes_per_s)


def _as_measurement(row: Any) -> NcclMeasurement:
    if isinstance(row, NcclMeasurement):
        return row
    if isinstance(row, Mapping):
        return NcclMeasurement(**row)
    if isinstance(row, Sequence) and not isinstance(row, str) and len(row) == 5:
        return NcclMeasurement(row[0], row[1], row[2], row[3], time_s=row[4])
    raise InputError("measurements", f"cannot read measurement row {row!r}",
                     "use NcclMeasurement or (collective, nbytes, n_ranks, n_nodes, time_s)")


def _model_terms(system: NcclSystem, rows: Sequence[NcclMeasurement]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(latency term µs, bandwidth term µs, multi-node) of the pair NCCL picks, uncalibrated."""
    lat_t, bw_t, multi = [], [], []
    for r in rows:
        coll = _collective(r.collective)
        pairs = _pairs(system, coll, r.algo, r.proto)
        geo = _Geo(system, int(r.n_ranks), int(r.n_nodes), float(r.nbytes))
        if geo.bad.any():
            raise geo.error(system)
        if not pairs:
            raise _forcing_error(system, coll, int(r.n_ranks), int(r.n_nodes), r.algo, r.proto)
        terms = _terms(system, coll, pairs, geo.n, geo.nn)
        _, t, lat = _select(terms, geo.extra[0], None)
        if not np.isfinite(t[0]):
            raise _forcing_error(system, coll, int(r.n_ranks), int(r.n_nodes), r.algo, r.proto)
        lat_t.append(float(lat[0]))
        bw_t.append(float(t[0] - lat[0]))
        multi.append(int(r.n_nodes) > 1)
    return np.array(lat_t), np.array(bw_t), np.array(multi, dtype=bool)


def _mean_rel_error(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - meas) / meas))


def fit_calibration(system: NcclSystem, measurements: Iterable[Any]
                    ) -> tuple[NcclCalibration, float, float]:
    """Fit :class:`NcclCalibration` to measured collectives.

    The pick per row is NCCL's (uncalibrated); its time is ``s_L x L + X / s_B`` with ``X`` the
    bandwidth term and ``s_B`` the intra- (one node) or inter-node scale. That is linear in
    ``(s_L, 1/s_intra, 1/s_inter)``, so the scales minimise the summed squared *relative* error
    by weighted least squares; a scale whose rows are missing, or that would come out <= 0,
    stays 1. Returns (calibration, mean |relative error| before, after); "before" is the
    uncalibrated model. Rows with one rank are skipped.
    """
    rows = [m for m in (_as_measurement(r) for r in measurements) if int(m.n_ranks) > 1]
    if not rows:
        raise InputError("measurements", "no measurement with more than one rank")
    meas = np.array([r.measured_time_s for r in rows]) / _S_PER_US
    if np.any(~(meas > 0)) or np.any(~np.isfinite(meas)):
        raise InputError("measurements", "measured times must be finite and > 0")
    lat_t, bw_t, multi = _model_terms(system, rows)
    cols = [lat_t / meas, np.where(~multi, bw_t, 0.0) / meas, np.where(multi, bw_t, 0.0) / meas]
    free = [bool(np.any(lat_t > 0)), bool((~multi).any()), bool(multi.any())]
    coef = np.ones(3)
    for _ in range(3):
        idx = [i for i in range(3) if free[i]]
        if not idx:
            break
        rhs = np.ones(meas.size) - sum((cols[i] * coef[i] for i in range(3) if not free[i]),
                                       np.zeros(meas.size))
        sol, *_ = np.linalg.lstsq(np.stack([cols[i] for i in idx], axis=1), rhs, rcond=None)
        bad = [i for i, v in zip(idx, sol, strict=True) if not (v > 0 and math.isfinite(v))]
        for i, v in zip(idx, sol, strict=True):
            coef[i] = v
        for i in bad:
            free[i] = False
            coef[i] = 1.0
        if not bad:
            break
    cal = NcclCalibration(intra_bw_scale=1.0 / coef[1], inter_bw_scale=1.0 / coef[2],
                          latency_scale=coef[0])
    before = _mean_rel_error(lat_t + bw_t, meas)
    after = _mean_rel_error(lat_t * coef[0] + bw_t * np.where(multi, coef[2], coef[1]), meas)
    return cal, before, after


def with_calibration(system: NcclSystem, calibration: NcclCalibration) -> NcclSystem:
    """The same system carrying ``calibration``."""
    return replace(system, calibration=calibration)
