"""Cluster topology: the networkx graph of a cluster, rank placement, and per-group paths.

A cluster is a graph whose nodes are GPUs, switches, NICs and the inter-node fabric, and whose
edges carry one-direction bandwidth and latency (ecosystem.md section 5; link classes after
NCCL's ``src/graph/topo.h``, nccl.md section 1.1). Ranks are placed by a
:class:`costmodel.layout.Layout` (named axes in Megatron-Core's order, tensor parallel
innermost: ``tp-cp-ep-dp-pp``; Narayanan et al. 2021, section 3) and each communication group
is scored by the slowest hop of the ring that runs through it (:func:`layout_group_path`;
:func:`layout_topology` for the tp/dp/pp triple the cost model reads).

Short form -> graph (:func:`build_graph`)
-----------------------------------------
Per node ``n`` (``g`` = ``gpus_per_node``):

* GPUs ``("gpu", n, l)`` (``kind="gpu"``, ``node``, ``local``, ``gpu`` = catalog key);
* intra fabric ``nvswitch``: one ``("nvswitch", n)``; every GPU links to it with the per-GPU
  bandwidth and half the intra-node latency (GPU -> switch -> GPU adds up to the latency);
  ``nvlink`` (no switch): direct GPU-GPU NVLink edges, the per-GPU bandwidth split evenly over
  the ``g - 1`` peers; ``pcie``: a host bridge ``("pcie_switch", n)`` as the switch;
* NICs ``("nic", n, i)`` (``bandwidth_bytes_per_s`` = port speed). With as many NICs as GPUs
  every GPU owns one (rail, a direct PCIe edge); with a different count the GPUs share them
  round-robin through PCIe switches ``("pcie_switch", n, s)`` (GPU ``l`` and NIC ``i`` hang off
  switch ``l % s`` and ``i % s``, ``s = min(nics, g)``) -- on PCIe-only nodes through the host
  bridge. GPU-NIC edges use the GPU's PCIe bandwidth and no latency;
* one fabric switch ``("fabric", 0)`` (``kind="fabric"``); each NIC's uplink carries the NIC
  bandwidth divided by the oversubscription and half the inter-node latency.

Graph JSON (``cluster.graph_data``, :func:`cluster_from_graph`)
---------------------------------------------------------------
A networkx node-link document; the edge list may be under ``"edges"`` (networkx >= 3.6 default,
what :func:`graph_to_data` writes) or ``"links"``, not both::

    {
      "directed": false, "multigraph": false,
      "graph": {"name": "2x4-a100", "source": "where the numbers come from"},
      "nodes": [
        {"id": "n0-gpu0", "kind": "gpu", "gpu": "a100-sxm-80gb", "node": 0, "local": 0},
        {"id": "n0-nvswitch", "kind": "nvswitch", "node": 0},
        {"id": "n0-pcie0", "kind": "pcie_switch", "node": 0},
        {"id": "n0-nic0", "kind": "nic", "node": 0, "bandwidth_bytes_per_s": 25e9},
        {"id": "spine", "kind": "fabric", "fabric": "infiniband"}
      ],
      "edges": [
        {"source": "n0-gpu0", "target": "n0-nvswitch", "link": "nvlink",
         "bandwidth_bytes_per_s": 300e9, "latency_s": 0.35e-6}
      ]
    }

* ``graph``: optional ``name``, ``source`` and ``gpus_per_domain`` (GPUs per NVLink domain,
  whole nodes; default one node: see :class:`costmodel.specs.ClusterSpec`; the graph's own
  links still decide what a hop costs).
* ``id``: a string, an integer or an array (arrays become tuples, so the output of
  :func:`graph_to_data` reads back).
* ``kind``: one of :data:`NODE_KINDS`; may be omitted on a node that has a ``gpu`` attribute.
* GPUs: ``gpu`` (catalog key; all GPUs the same), ``node`` (integer node index; nodes are
  numbered in sorted order of these values) and optionally ``local`` (0..g-1 in each node;
  default: order of appearance). Every node holds the same number of GPUs.
* Switches and NICs belong to the node of the GPUs they connect to (``node`` may be given or is
  inferred from their neighbours); ``fabric`` nodes belong to no node. NIC ``bandwidth_bytes_
  per_s`` is the port speed (default: its fastest network edge).
* Every edge: ``bandwidth_bytes_per_s`` (> 0, one direction) and ``latency_s`` (>= 0);
  ``link`` one of ``nvlink``, ``pcie``, ``network`` (inferred when omitted: an edge touching a
  fabric node or joining two NICs is ``network``, one touching an NVSwitch or joining two GPUs
  ``nvlink``, anything else ``pcie``).
* Network edges carry what one NIC's traffic can use: a NIC's uplink on an oversubscribed
  fabric is ``port speed / oversubscription`` (the short form writes it that way).

Path model
----------
Paths are networkx shortest paths whose weight is the edge latency plus a penalty per link
class (NVLink 0, PCIe 1 s, network 1000 s), so, as in NCCL, an NVLink path always beats a PCIe
path and PCIe beats the network (NCCL path types NVL < PIX/PXB < PHB < NET, nccl.md 1.1); among
equal classes the lowest latency wins. A path's bandwidth is the smallest edge bandwidth on it,
its latency the sum, its link the worst class. Refinements that follow NCCL's behaviour:

* an intra-node hop of a ring may use several paths (NCCL runs several channels over different
  links): its bandwidth is the max-flow between the two GPUs over links of the path's class,
  relaying only through switches and the group's own GPUs on that node (never less than the
  shortest path's bandwidth). On an NVSwitch this equals the GPU's switch bandwidth; in a
  direct NVLink mesh a group of ``k`` GPUs of a node gets ``(k - 1)`` of the ``g - 1`` links;
* an inter-node hop runs GPU -> its nearest NIC(s) -> fabric -> peer NIC -> peer GPU. All GPUs
  of a layout communicate at once, so a NIC shared by ``c`` GPUs gives each ``1/c`` of its port
  and uplink: per GPU ``min(GPU->NIC path, sum over its NICs of min(port, uplink) / c)``; the
  hop is the smaller of both ends and the fabric path between the NICs.

Short-form clusters are scored by closed-form expressions of the same model (no graph is built);
``use_graph=True`` forces the graph engine, and the tests check that both agree.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from costmodel.errors import InputError, check_nesting, did_you_mean
from costmodel.layout import (
    Layout,
    _offsets_and_starts,
    group_geometry,
    group_of,
    group_offsets,
    parse_axes,
    start_residues,
)
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

__all__ = [
    "BANDWIDTH_ATTR", "LATENCY_ATTR", "LINK_TYPES", "NODE_KINDS",
    "GroupPath", "LayoutTopology", "NodeBandwidths",
    "build_graph", "cluster_from_graph", "graph_to_data",
    "rank_of", "rank_coords", "rank_location", "tp_group", "dp_group", "pp_group",
    "pp_neighbours", "group_path", "layout_group_path", "layout_topology", "node_bandwidths",
]

NODE_KINDS: tuple[str, ...] = ("gpu", "nvswitch", "pcie_switch", "nic", "fabric")
#: Link classes, best to worst; ``local`` is a group of one rank (no communication).
LINK_TYPES: tuple[str, ...] = ("local", "nvlink", "pcie", "network")
EDGE_LINKS: tuple[str, ...] = ("nvlink", "pcie", "network")
BANDWIDTH_ATTR = "bandwidth_bytes_per_s"
LATENCY_ATTR = "latency_s"

_RANK = {name: i for i, name in enumerate(LINK_TYPES)}
_NVLINK, _PCIE, _NETWORK = _RANK["nvlink"], _RANK["pcie"], _RANK["network"]
_PENALTY_S = {"nvlink": 0.0, "pcie": 1.0, "network": 1e3}
_HOP_S = 1e-12  # tie-break: fewer hops among equal-latency paths
_TIE_S = 1e-13
_INF = math.inf


class _LazyNetworkx:
    """networkx, imported on first use: short-form clusters are scored in closed form and
    never build a graph, so ``optimize`` does not pay networkx's ~0.2 s import."""

    def __getattr__(self, name: str) -> Any:
        import networkx

        globals()["nx"] = networkx
        return getattr(networkx, name)


nx: Any = _LazyNetworkx()


def _weight(u: Any, v: Any, d: Mapping[str, Any]) -> float:
    return d[LATENCY_ATTR] + _PENALTY_S[d["link"]] + _HOP_S


# ============================================================================================
# Records
# ============================================================================================
@dataclass(frozen=True)
class GroupPath:
    """How one communication group is connected.

    ``bottleneck_bandwidth_bytes_per_s`` is the smallest per-rank bandwidth (one direction)
    over the hops of the ring through the group in rank order, ``latency_s`` the largest hop
    latency, ``link`` the worst link class on any hop (:data:`LINK_TYPES`). A group of one rank
    has infinite bandwidth, no latency and link ``"local"``. In a :class:`LayoutTopology` each
    field is the worst over all groups of that kind. ``n_nodes``/``ranks_per_node`` count
    hosts, ``n_domains``/``ranks_per_domain`` NVLink domains
    (:class:`costmodel.layout.GroupGeometry`).
    """

    n_ranks: int
    n_nodes: int
    ranks_per_node: int
    crosses_nodes: bool
    bottleneck_bandwidth_bytes_per_s: float
    latency_s: float
    link: str
    # NVLink domains (one host each unless ClusterSpec.gpus_per_domain says otherwise)
    n_domains: int = 1
    ranks_per_domain: int = 1
    crosses_domains: bool = False


@dataclass(frozen=True)
class LayoutTopology:
    """The three groups of a (tp, pp, dp) layout. ``pp`` scores the point-to-point hop between
    consecutive stages (rank r and the rank with the same tp/dp index one stage later), worst
    over stages and over pipelines; its ``n_ranks`` is ``pp``."""

    tp: GroupPath
    dp: GroupPath
    pp: GroupPath


@dataclass(frozen=True)
class NodeBandwidths:
    """Per-node figures for the NCCL model, derived from the cluster graph.

    ``gpu_to_switch_bytes_per_s``: one GPU's aggregate intra-node bandwidth over its best link
    class (NVSwitch links summed, NVLink mesh links summed, or its PCIe link); ``inf`` when a
    GPU has no intra-node link. ``nic_bytes_per_s_per_gpu``: mean per-GPU share of the node's
    network injection (node NIC total / gpus_per_node / oversubscription, capped by each GPU's
    PCIe path to its NIC); 0 without a network. ``intra_latency_s``: largest GPU-GPU path
    latency in a node; ``inter_latency_s``: GPU-to-GPU latency across two nodes (the cluster's
    inter-node latency when there is one node).
    """

    gpu_to_switch_bytes_per_s: float
    nic_bytes_per_s_per_gpu: float
    intra_latency_s: float
    inter_latency_s: float
    intra_fabric: str
    nics_per_node: int = 0


# ============================================================================================
# Placement (Megatron order: TP innermost, then DP, then PP)
# ============================================================================================
def _check_layout(tp: int, pp: int, dp: int) -> None:
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise InputError(f"parallel.{name}", f"must be an integer >= 1, got {v!r}")


def _check_rank(rank: int, world: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or not 0 <= rank < world:
        raise InputError("rank", f"must be an integer in 0..{world - 1}, got {rank!r}")


def rank_of(tp_idx: int, dp_idx: int, pp_idx: int, tp: int, dp: int) -> int:
    """Global rank of a (tp, dp, pp) coordinate: ``tp_idx + tp * (dp_idx + dp * pp_idx)``
    (Megatron-LM ``parallel_state`` order, TP fastest: :class:`costmodel.layout.Layout`'s
    default order with cp = ep = 1; groups of other axes: :func:`costmodel.layout.group_of`)."""
    return tp_idx + tp * (dp_idx + dp * pp_idx)


def rank_coords(rank: int, tp: int, dp: int) -> tuple[int, int, int]:
    """Inverse of :func:`rank_of`: ``(tp_idx, dp_idx, pp_idx)``."""
    rest, tp_idx = divmod(rank, tp)
    pp_idx, dp_idx = divmod(rest, dp)
    return tp_idx, dp_idx, pp_idx


def rank_location(rank: int, gpus_per_node: int) -> tuple[int, int]:
    """``(node, local GPU)`` of a rank: ranks fill nodes in order."""
    return divmod(rank, gpus_per_node)


def _dense(tp: int, pp: int, dp: int) -> Layout:
    return Layout(tp=tp, dp=dp, pp=pp)  # InputError parallel.<axis> for a bad degree


def tp_group(rank: int, tp: int, pp: int, dp: int) -> list[int]:
    """Ranks of the tensor-parallel group holding ``rank`` (consecutive ranks):
    :func:`costmodel.layout.group_of` on the (tp, dp, pp) layout."""
    return list(group_of(_dense(tp, pp, dp), ("tp",), rank))


def dp_group(rank: int, tp: int, pp: int, dp: int) -> list[int]:
    """Ranks of the data-parallel group holding ``rank`` (stride ``tp``)."""
    return list(group_of(_dense(tp, pp, dp), ("dp",), rank))


def pp_group(rank: int, tp: int, pp: int, dp: int) -> list[int]:
    """Ranks of the pipeline holding ``rank``, first stage first (stride ``tp * dp``)."""
    return list(group_of(_dense(tp, pp, dp), ("pp",), rank))


def pp_neighbours(rank: int, tp: int, pp: int, dp: int) -> list[int]:
    """The previous and next pipeline stage's rank (those that exist; no wrap-around)."""
    stages = pp_group(rank, tp, pp, dp)
    i = stages.index(rank)
    return stages[max(i - 1, 0):i] + stages[i + 1:i + 2]


# ============================================================================================
# Building the graph
# ============================================================================================
@functools.lru_cache(maxsize=16)
def build_graph(cluster: ClusterSpec) -> nx.Graph:
    """The cluster as a frozen undirected networkx graph (see the module docstring).

    Built from ``cluster.graph_data`` when set (validated; its node and GPU counts must match
    the cluster), otherwise from the short form. Cached per cluster; the graph is frozen
    (``nx.Graph(g)`` makes an editable copy).
    """
    if cluster.graph_data is not None:
        graph = _graph_from_data(cluster.graph_data)
        table = _GpuTable(graph)
        if (table.num_nodes, table.g) != (cluster.num_nodes, cluster.gpus_per_node):
            raise InputError("cluster.graph",
                             f"has {table.num_nodes} nodes x {table.g} GPUs, the cluster says "
                             f"{cluster.num_nodes} x {cluster.gpus_per_node}",
                             "build the cluster with cluster_from_graph")
        return nx.freeze(graph)
    return nx.freeze(_build_short_form(cluster))


def _edge(graph: nx.Graph, u: Any, v: Any, bw: float, lat: float, link: str) -> None:
    graph.add_edge(u, v, **{BANDWIDTH_ATTR: bw, LATENCY_ATTR: lat, "link": link})


def _build_short_form(cluster: ClusterSpec) -> nx.Graph:
    g = cluster.gpus_per_node
    intra, inter, gpu = cluster.intra_node, cluster.inter_node, cluster.gpu
    nics = inter.nics_per_node if inter.fabric != "none" else 0
    pcie = gpu.pcie_bandwidth_bytes_per_s
    graph = nx.Graph(name=cluster.name, source=cluster.source)
    fabric = ("fabric", 0)
    if nics:
        graph.add_node(fabric, kind="fabric", fabric=inter.fabric,
                       oversubscription=inter.oversubscription)
    uplink = inter.nic_bandwidth_bytes_per_s / inter.oversubscription
    for n in range(cluster.num_nodes):
        gpus = [("gpu", n, j) for j in range(g)]
        for j, v in enumerate(gpus):
            graph.add_node(v, kind="gpu", node=n, local=j, gpu=gpu.name)
        switch = None
        if intra.fabric == "nvswitch":
            switch = ("nvswitch", n)
            graph.add_node(switch, kind="nvswitch", node=n)
        elif intra.fabric == "pcie":
            switch = ("pcie_switch", n)
            graph.add_node(switch, kind="pcie_switch", node=n, role="host_bridge")
        if switch is not None:
            link = "nvlink" if intra.fabric == "nvswitch" else "pcie"
            for v in gpus:
                _edge(graph, v, switch, intra.bandwidth_bytes_per_s, intra.latency_s / 2, link)
        else:  # direct NVLink mesh
            for a in range(g):
                for b in range(a + 1, g):
                    _edge(graph, gpus[a], gpus[b], intra.bandwidth_bytes_per_s / (g - 1),
                          intra.latency_s, "nvlink")
        if not nics:
            continue
        nic_ids = [("nic", n, i) for i in range(nics)]
        for i, x in enumerate(nic_ids):
            graph.add_node(x, kind="nic", node=n, local=i,
                           **{BANDWIDTH_ATTR: inter.nic_bandwidth_bytes_per_s})
            _edge(graph, x, fabric, uplink, inter.latency_s / 2, "network")
        if nics == g:  # rail: every GPU owns a NIC
            for v, x in zip(gpus, nic_ids, strict=True):
                _edge(graph, v, x, pcie, 0.0, "pcie")
        elif intra.fabric == "pcie":  # NICs behind the host bridge, shared by all GPUs
            for x in nic_ids:
                _edge(graph, switch, x, pcie, 0.0, "pcie")
        else:
            s = min(nics, g)
            switches = [("pcie_switch", n, j) for j in range(s)]
            for sw in switches:
                graph.add_node(sw, kind="pcie_switch", node=n)
            for j, v in enumerate(gpus):
                _edge(graph, v, switches[j % s], pcie, 0.0, "pcie")
            for i, x in enumerate(nic_ids):
                _edge(graph, switches[i % s], x, pcie, 0.0, "pcie")
    return graph


def graph_to_data(graph: nx.Graph) -> dict[str, Any]:
    """A node-link dict of ``graph`` (key ``"edges"``) that :func:`cluster_from_graph` and
    ``ClusterSpec(graph_data=...)`` read back (tuple ids become JSON arrays)."""
    return nx.node_link_data(graph, edges="edges")


# --------------------------------------------------------------------------------------------
def _ident(value: Any) -> Any:
    """JSON ids: arrays become tuples (hashable)."""
    if isinstance(value, list | tuple):
        return tuple(_ident(v) for v in value)
    return value


def _check_attr_names(field: str, raw: Mapping[Any, Any]) -> None:
    bad = next((k for k in raw if not isinstance(k, str)), None)
    if bad is not None:
        raise InputError(field, f"attribute names must be strings, got {bad!r}")


def _valid_id(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_valid_id(v) for v in value)
    return isinstance(value, str | int) and not isinstance(value, bool)


def _number(field: str, value: Any, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value \
            or math.isinf(value):
        raise InputError(field, f"must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(field, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def _graph_from_data(data: Mapping[str, Any]) -> nx.Graph:
    """Validated undirected graph from a node-link mapping; infers ``kind`` (GPUs), ``link``
    and the ``node`` of switches and NICs."""
    f = "cluster.graph"
    if not isinstance(data, Mapping):
        raise InputError(f, f"must be a node-link mapping, got {type(data).__name__}")
    check_nesting(f, data)  # node ids are read recursively (_ident, _valid_id)
    if data.get("directed", False):
        raise InputError(f"{f}.directed", "must be false: links are bidirectional, their "
                                          "bandwidth is one direction")
    if data.get("multigraph", False):
        raise InputError(f"{f}.multigraph", "must be false (one link per pair of devices)")
    if "links" in data and "edges" in data:
        raise InputError(f, "has both 'links' and 'edges'", "keep one edge list")
    key = "edges" if "edges" in data else "links"
    nodes, links = data.get("nodes"), data.get(key)
    if not isinstance(nodes, list) or not nodes:
        raise InputError(f"{f}.nodes", "must be a non-empty list of node objects")
    if not isinstance(links, list):
        raise InputError(f"{f}.{key}", "must be a list of link objects")
    graph = nx.Graph()
    attrs = data.get("graph", {})
    if not isinstance(attrs, Mapping):
        raise InputError(f"{f}.graph", "must be a mapping of graph attributes")
    graph.graph.update(attrs)

    for i, raw in enumerate(nodes):
        if not isinstance(raw, Mapping) or "id" not in raw:
            raise InputError(f"{f}.nodes[{i}]", "must be an object with an 'id'")
        _check_attr_names(f"{f}.nodes[{i}]", raw)
        nid = _ident(raw["id"])
        if not _valid_id(nid):
            raise InputError(f"{f}.nodes[{i}].id", f"must be a string, an integer or an array "
                                                   f"of them, got {raw['id']!r}")
        where = f"{f}.nodes[{nid!r}]"
        if nid in graph:
            raise InputError(where, "duplicate node id")
        d = {k: v for k, v in raw.items() if k != "id"}
        kind = d.get("kind", "gpu" if "gpu" in d else None)
        if kind not in NODE_KINDS:
            raise InputError(f"{where}.kind", f"unknown kind {kind!r}",
                             did_you_mean(str(kind), NODE_KINDS))
        d["kind"] = kind
        if kind == "gpu":
            if not isinstance(d.get("gpu"), str) or not d["gpu"]:
                raise InputError(f"{where}.gpu", f"must be a GPU catalog key, got "
                                                 f"{d.get('gpu')!r}")
            if isinstance(d.get("node"), bool) or not isinstance(d.get("node"), int) \
                    or d["node"] < 0:
                raise InputError(f"{where}.node", f"must be an integer node index >= 0, got "
                                                  f"{d.get('node')!r}")
        elif "node" in d and (isinstance(d["node"], bool) or not isinstance(d["node"], int)):
            raise InputError(f"{where}.node", f"must be an integer, got {d['node']!r}")
        if kind == "fabric":
            d.pop("node", None)
        if kind == "nic" and BANDWIDTH_ATTR in d:
            d[BANDWIDTH_ATTR] = _number(f"{where}.{BANDWIDTH_ATTR}", d[BANDWIDTH_ATTR],
                                        allow_zero=False)
        graph.add_node(nid, **d)
    if not any(d["kind"] == "gpu" for _, d in graph.nodes(data=True)):
        raise InputError(f"{f}.nodes", "has no GPU (a node with kind 'gpu' and a 'gpu' key)")

    kinds = nx.get_node_attributes(graph, "kind")
    for i, raw in enumerate(links):
        if not isinstance(raw, Mapping) or "source" not in raw or "target" not in raw:
            raise InputError(f"{f}.{key}[{i}]", "must be an object with 'source' and 'target'")
        _check_attr_names(f"{f}.{key}[{i}]", raw)
        u, v = _ident(raw["source"]), _ident(raw["target"])
        where = f"{f}.{key}[{i}] ({u!r} - {v!r})"
        for end in (u, v):
            if end not in graph:
                raise InputError(where, f"unknown node {end!r}",
                                 did_you_mean(str(end), [str(n) for n in graph]))
        if u == v:
            raise InputError(where, "links a node to itself")
        if graph.has_edge(u, v):
            raise InputError(where, "duplicate link")
        d = {k: val for k, val in raw.items() if k not in ("source", "target", "key")}
        for attr, zero in ((BANDWIDTH_ATTR, False), (LATENCY_ATTR, True)):
            if attr not in d:
                raise InputError(f"{where}.{attr}", "missing", "every link needs "
                                 f"{BANDWIDTH_ATTR} (> 0, one direction) and {LATENCY_ATTR}")
            d[attr] = _number(f"{where}.{attr}", d[attr], allow_zero=zero)
        ku, kv = kinds[u], kinds[v]
        if "link" not in d:
            if "fabric" in (ku, kv) or ku == kv == "nic":
                d["link"] = "network"
            elif "nvswitch" in (ku, kv) or ku == kv == "gpu":
                d["link"] = "nvlink"
            else:
                d["link"] = "pcie"
        elif d["link"] not in EDGE_LINKS:
            raise InputError(f"{where}.link", f"unknown link {d['link']!r}",
                             did_you_mean(str(d["link"]), EDGE_LINKS))
        graph.add_edge(u, v, **d)
    _infer_nodes(graph)
    return graph


def _infer_nodes(graph: nx.Graph) -> None:
    """Give switches and NICs without a ``node`` the node of their GPU neighbours, then of
    their other neighbours that have one."""
    todo = [v for v, d in graph.nodes(data=True) if d["kind"] != "fabric" and "node" not in d]
    gpu_first = True
    while todo:
        found: dict[Any, int] = {}
        for v in todo:
            seen = {graph.nodes[u]["node"] for u in graph[v]
                    if "node" in graph.nodes[u] and graph.nodes[u]["kind"] != "fabric"
                    and (graph.nodes[u]["kind"] == "gpu" or not gpu_first)}
            if len(seen) > 1:
                raise InputError(f"cluster.graph.nodes[{v!r}].node",
                                 f"connects devices of nodes {sorted(seen)}",
                                 "give it a 'node', or make it kind 'fabric'")
            if seen:
                found[v] = seen.pop()
        for v, n in found.items():
            graph.nodes[v]["node"] = n
        left = [v for v in todo if v not in found]
        if len(left) == len(todo) and not gpu_first:
            raise InputError(f"cluster.graph.nodes[{left[0]!r}].node",
                             "cannot tell which node this device belongs to",
                             "give it a 'node', connect it to a GPU, or make it kind 'fabric'")
        gpu_first = False
        todo = left


def _check_graph(graph: nx.Graph) -> None:
    """The attributes the engine reads (graphs not made by this module may lack them)."""
    for v, d in graph.nodes(data=True):
        if d.get("kind") not in NODE_KINDS:
            raise InputError(f"cluster.graph.nodes[{v!r}].kind",
                             f"unknown kind {d.get('kind')!r}",
                             did_you_mean(str(d.get("kind")), NODE_KINDS))
        if d["kind"] != "fabric" and not isinstance(d.get("node"), numbers.Integral):
            raise InputError(f"cluster.graph.nodes[{v!r}].node",
                             f"must be an integer node index, got {d.get('node')!r}")
    for u, v, d in graph.edges(data=True):
        for attr in (BANDWIDTH_ATTR, LATENCY_ATTR, "link"):
            if attr not in d:
                raise InputError(f"cluster.graph.links[{u!r} - {v!r}].{attr}", "missing")
        if d["link"] not in EDGE_LINKS:
            raise InputError(f"cluster.graph.links[{u!r} - {v!r}].link",
                             f"unknown link {d['link']!r}", did_you_mean(str(d["link"]),
                                                                         EDGE_LINKS))


class _GpuTable:
    """GPU ids by (node index, local index), nodes numbered in sorted order of ``node``."""

    def __init__(self, graph: nx.Graph) -> None:
        by_node: dict[int, list[tuple[Any, Mapping[str, Any]]]] = {}
        for v, d in graph.nodes(data=True):
            if d.get("kind") == "gpu":
                by_node.setdefault(d["node"], []).append((v, d))
        if not by_node:
            raise InputError("cluster.graph.nodes", "has no GPU")
        self.node_values = sorted(by_node)
        counts = {k: len(v) for k, v in by_node.items()}
        if len(set(counts.values())) != 1:
            raise InputError("cluster.graph.nodes",
                             f"nodes hold different numbers of GPUs {counts}",
                             "every node needs the same gpus_per_node")
        self.num_nodes = len(by_node)
        self.g = next(iter(counts.values()))
        self.gpus: list[list[Any]] = []
        for k in self.node_values:
            entries = by_node[k]
            if all("local" in d for _, d in entries):
                locals_ = [d["local"] for _, d in entries]
                if sorted(map(_order, locals_)) != [(0, i) for i in range(self.g)]:
                    raise InputError(f"cluster.graph.nodes[node={k}].local",
                                     f"must number the GPUs 0..{self.g - 1}, got "
                                     f"{sorted(locals_, key=str)}")
                entries = sorted(entries, key=lambda e: e[1]["local"])
            self.gpus.append([v for v, _ in entries])


# ============================================================================================
# Graph engine: paths on the graph, exploiting identical nodes
# ============================================================================================
def _order(value: Any) -> tuple[int, Any]:
    """Sort key: integers first, numerically, then anything else by its text."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (0, int(value))
    return (1, str(value))


def _path_stats(graph: nx.Graph, path: Sequence[Any]) -> tuple[float, float, int]:
    bw, lat, rank = _INF, 0.0, 0
    for u, v in zip(path, path[1:], strict=False):
        d = graph.edges[u, v]
        bw = min(bw, d[BANDWIDTH_ATTR])
        lat += d[LATENCY_ATTR]
        rank = max(rank, _RANK[d["link"]])
    return bw, lat, rank


def _uplink(graph: nx.Graph, nic: Any) -> float:
    """A NIC's fastest network edge (0 when it has none)."""
    return max((d[BANDWIDTH_ATTR] for _, _, d in graph.edges(nic, data=True)
                if d["link"] == "network"), default=0.0)


class _Template:
    """Paths inside one node, in local indices; shared by all nodes with the same signature."""

    def __init__(self, graph: nx.Graph, gpus: list[Any], local: list[Any],
                 nics: list[Any]) -> None:
        self.rep_gpus = gpus
        self.rep_local = set(local)
        g = len(gpus)
        nic_set = set(nics)
        core = graph.subgraph([v for v in local if v not in nic_set])
        # GPU pairs: shortest path inside the node, NICs excluded.
        self.pair: dict[tuple[int, int], tuple[float, float, int]] = {}
        for a, ga in enumerate(gpus):
            _, paths = nx.single_source_dijkstra(core, ga, weight=_weight)
            for b, gb in enumerate(gpus):
                if b != a and gb in paths:
                    self.pair[(a, b)] = _path_stats(graph, paths[gb])
        self.intra_latency_s = max((s[1] for s in self.pair.values()), default=0.0)
        # Aggregate intra-node bandwidth per GPU over its best link class.
        self.gpu_to_switch: list[float] = []
        self.has_nvswitch = self.has_gpu_nvlink = False
        for ga in gpus:
            best, total = None, 0.0
            for u in graph[ga]:
                d = graph.edges[ga, u]
                kind = graph.nodes[u]["kind"]
                if u not in self.rep_local or kind == "nic":
                    continue
                self.has_nvswitch |= kind == "nvswitch" and d["link"] == "nvlink"
                self.has_gpu_nvlink |= kind == "gpu" and d["link"] == "nvlink"
                r = _RANK[d["link"]]
                if best is None or r < best:
                    best, total = r, 0.0
                if r == best:
                    total += d[BANDWIDTH_ATTR]
            self.gpu_to_switch.append(total if best is not None else _INF)
        # GPU -> nearest NIC(s); NIC sharing.
        live = [x for x in nics if _uplink(graph, x) > 0]
        self.nic_labels = {x: i for i, x in enumerate(nics)}
        whole = graph.subgraph(local)
        self.near: list[tuple[int, ...]] = []
        self.nic_path: list[tuple[float, float]] = []  # (max path bw, latency to near[0])
        for ga in gpus:
            dist, paths = nx.single_source_dijkstra(whole, ga, weight=_weight)
            reach = [(dist[x], self.nic_labels[x]) for x in live if x in dist]
            if not reach:
                self.near.append(())
                self.nic_path.append((0.0, 0.0))
                continue
            dmin = min(d for d, _ in reach)
            near = tuple(sorted(i for d, i in reach if d <= dmin + _TIE_S))
            stats = {i: _path_stats(graph, paths[nics[i]]) for i in near}
            self.near.append(near)
            self.nic_path.append((max(s[0] for s in stats.values()), stats[near[0]][1]))
        share = [0] * len(nics)
        for near in self.near:
            for i in near:
                share[i] += 1
        self.nic_port: list[float] = []
        self.nic_uplink: list[float] = []
        for x in nics:
            up = _uplink(graph, x)
            self.nic_uplink.append(up)
            self.nic_port.append(graph.nodes[x].get(BANDWIDTH_ATTR, up))
        self.nic_gpu_bw: list[float] = []
        for j in range(g):
            if not self.near[j]:
                self.nic_gpu_bw.append(0.0)
                continue
            inject = sum(min(self.nic_port[i], self.nic_uplink[i]) / share[i]
                         for i in self.near[j])
            self.nic_gpu_bw.append(min(self.nic_path[j][0], inject))
        self.live_nics = len(live)


class _GraphEngine:
    """Hop costs on a cluster graph. Nodes with identical local structure share one
    :class:`_Template`; with one template and a single fabric switch the cluster is
    symmetric and groups that differ by whole nodes score the same."""

    def __init__(self, graph: nx.Graph) -> None:
        _check_graph(graph)
        self.graph = graph
        table = _GpuTable(graph)
        self.g, self.num_nodes = table.g, table.num_nodes
        self.gpu_ids = table.gpus
        index = {val: i for i, val in enumerate(table.node_values)}
        local: list[list[Any]] = [[] for _ in table.node_values]
        for v, d in graph.nodes(data=True):
            if d["kind"] != "fabric":
                if d["node"] not in index:
                    raise InputError(f"cluster.graph.nodes[{v!r}].node",
                                     f"node {d['node']!r} holds no GPU")
                local[index[d["node"]]].append(v)
        self.local = local
        self.fabric = [v for v, d in graph.nodes(data=True) if d["kind"] == "fabric"]
        self.templates: list[_Template] = []
        self.tmpl_of: list[int] = []
        self.nic_ids: list[list[Any]] = []
        sigs: dict[Any, int] = {}
        for n in range(self.num_nodes):
            sig, nics = self._signature(n)
            self.nic_ids.append(nics)
            if sig not in sigs:
                sigs[sig] = len(self.templates)
                self.templates.append(_Template(graph, self.gpu_ids[n], local[n], nics))
            self.tmpl_of.append(sigs[sig])
        uplinks = {u for n in range(self.num_nodes) for x in self.nic_ids[n]
                   for u in graph[x] if graph.edges[x, u]["link"] == "network"}
        # Anything but a NIC linked outside its node (a GPU wired to another node's GPU, a
        # switch on the fabric) breaks the node-by-node symmetry.
        node_of = {v: n for n in range(self.num_nodes) for v in local[n]}
        external = any(node_of.get(u) != node_of[v]
                       for n in range(self.num_nodes) for v in local[n]
                       if graph.nodes[v]["kind"] != "nic" for u in graph[v])
        self.symmetric = self.num_nodes == 1 or (
            len(self.templates) == 1 and len(self.fabric) <= 1 and uplinks <= set(self.fabric)
            and not external)
        self._flow: dict[Any, float] = {}
        self._inter: dict[Any, tuple[float, float, int]] = {}
        self._fabric_paths: dict[Any, tuple[float, float]] = {}
        self._from_switch: dict[Any, dict[Any, list[Any]]] = {}
        self._full: dict[Any, tuple[float, float, int]] = {}

    def _signature(self, n: int) -> tuple[Any, list[Any]]:
        graph = self.graph
        label: dict[Any, tuple[str, int]] = {v: ("gpu", j)
                                             for j, v in enumerate(self.gpu_ids[n])}
        others = sorted((v for v in self.local[n] if v not in label),
                        key=lambda v: (graph.nodes[v]["kind"], _order(graph.nodes[v].get("local")),
                                       str(v)))
        count: dict[str, int] = {}
        for v in others:
            kind = graph.nodes[v]["kind"]
            label[v] = (kind, count.get(kind, 0))
            count[kind] = count.get(kind, 0) + 1
        edges = set()
        for v in self.local[n]:
            for u, d in graph[v].items():
                if u in label:
                    a, b = sorted((label[u], label[v]))
                    edges.add((a, b, d[BANDWIDTH_ATTR], d[LATENCY_ATTR], d["link"]))
        nics = [v for v in others if graph.nodes[v]["kind"] == "nic"]
        nic_info = tuple((graph.nodes[x].get(BANDWIDTH_ATTR), _uplink(graph, x)) for x in nics)
        return (self.g, tuple(sorted(edges)), nic_info), nics

    # -- hops ----------------------------------------------------------------------------------
    def intra(self, node: int, a: int, b: int, relay: frozenset[int]) -> tuple[float, float, int]:
        t = self.tmpl_of[node]
        stats = self.templates[t].pair.get((a, b))
        if stats is None:  # no path inside the node: go round through the network
            return self._full_path(self.gpu_ids[node][a], self.gpu_ids[node][b])
        key = (t, a, b, relay)
        bw = self._flow.get(key)
        if bw is None:
            bw = max(stats[0], self._max_flow(t, a, b, relay, stats[2]))
            self._flow[key] = bw
        return bw, stats[1], stats[2]

    def _max_flow(self, t: int, a: int, b: int, relay: frozenset[int], rank: int) -> float:
        tmpl = self.templates[t]
        graph = self.graph
        members = {tmpl.rep_gpus[i] for i in relay}
        allowed = {v for v in tmpl.rep_local
                   if graph.nodes[v]["kind"] not in ("gpu", "nic") or v in members}
        link = LINK_TYPES[rank]
        view = nx.subgraph_view(graph, filter_node=allowed.__contains__,
                                filter_edge=lambda u, v: graph.edges[u, v]["link"] == link)
        return float(nx.maximum_flow_value(view, tmpl.rep_gpus[a], tmpl.rep_gpus[b],
                                           capacity=BANDWIDTH_ATTR))

    def inter(self, na: int, a: int, nb: int, b: int) -> tuple[float, float, int]:
        key = (a, b) if self.symmetric else (na, a, nb, b)
        hit = self._inter.get(key)
        if hit is not None:
            return hit
        ta, tb = self.templates[self.tmpl_of[na]], self.templates[self.tmpl_of[nb]]
        if not ta.near[a] or not tb.near[b]:
            res = self._full_path(self.gpu_ids[na][a], self.gpu_ids[nb][b])
        else:
            x, y = self.nic_ids[na][ta.near[a][0]], self.nic_ids[nb][tb.near[b][0]]
            fbw, flat = self._fabric_path(x, y)
            res = (min(ta.nic_gpu_bw[a], tb.nic_gpu_bw[b], fbw),
                   ta.nic_path[a][1] + flat + tb.nic_path[b][1], _NETWORK)
        self._inter[key] = res
        return res

    def _fabric_path(self, x: Any, y: Any) -> tuple[float, float]:
        """(bandwidth, latency) of the network path between two NICs."""
        hit = self._fabric_paths.get((x, y))
        if hit is not None:
            return hit
        graph = self.graph
        fab = set(self.fabric)
        sx = [u for u in graph[x] if graph.edges[x, u]["link"] == "network"]
        sy = [u for u in graph[y] if graph.edges[y, u]["link"] == "network"]
        path = None
        if len(sx) == 1 and len(sy) == 1 and sx[0] in fab and sy[0] in fab:
            if sx[0] == sy[0]:
                path = [x, sx[0], y]
            else:
                paths = self._from_switch.get(sx[0])
                if paths is None:
                    _, paths = nx.single_source_dijkstra(graph.subgraph(fab), sx[0],
                                                         weight=_weight)
                    self._from_switch[sx[0]] = paths
                if sy[0] in paths:
                    path = [x, *paths[sy[0]], y]
        if path is None:
            try:
                path = nx.dijkstra_path(graph.subgraph(fab | {x, y}), x, y, weight=_weight)
            except nx.NetworkXNoPath:
                raise InputError("cluster.graph", f"no network path between NICs {x!r} and "
                                                  f"{y!r}") from None
        bw, lat, _ = _path_stats(graph, path)
        self._fabric_paths[(x, y)] = (bw, lat)
        return bw, lat

    def _full_path(self, ga: Any, gb: Any) -> tuple[float, float, int]:
        hit = self._full.get((ga, gb))
        if hit is None:
            try:
                path = nx.dijkstra_path(self.graph, ga, gb, weight=_weight)
            except nx.NetworkXNoPath:
                raise InputError("cluster.inter_node",
                                 f"no path between GPUs {ga!r} and {gb!r}",
                                 "a group spans nodes but the cluster has no inter-node "
                                 "network (fabric 'none' or no NICs)") from None
            hit = self._full[(ga, gb)] = _path_stats(self.graph, path)
        return hit

    # -- node figures --------------------------------------------------------------------------
    def node_bandwidths(self, fabric: str, inter: float) -> NodeBandwidths:
        """``fabric`` and ``inter`` are used when the graph cannot tell (one GPU per node
        without intra-node links; a single node)."""
        t0 = self.templates[self.tmpl_of[0]]
        if t0.has_nvswitch:
            fabric = "nvswitch"
        elif t0.has_gpu_nvlink:
            fabric = "nvlink"
        elif t0.pair:
            fabric = "pcie"
        if self.num_nodes > 1 and t0.near[0]:
            inter = self.inter(0, 0, 1, 0)[1]
        return NodeBandwidths(
            gpu_to_switch_bytes_per_s=min(t0.gpu_to_switch),
            nic_bytes_per_s_per_gpu=sum(t0.nic_gpu_bw) / self.g,
            intra_latency_s=t0.intra_latency_s, inter_latency_s=inter,
            intra_fabric=fabric, nics_per_node=t0.live_nics)


# ============================================================================================
# Analytic engine: the same model in closed form for short-form clusters
# ============================================================================================
class _AnalyticEngine:
    """Hop costs of :func:`_build_short_form`'s graph without building it."""

    symmetric = True

    def __init__(self, cluster: ClusterSpec) -> None:
        intra, inter = cluster.intra_node, cluster.inter_node
        g = self.g = cluster.gpus_per_node
        self.num_nodes = cluster.num_nodes
        self.cluster = cluster
        self.fabric = intra.fabric
        self.intra_bw, self.intra_lat = intra.bandwidth_bytes_per_s, intra.latency_s
        self.intra_rank = _PCIE if intra.fabric == "pcie" else _NVLINK
        self.nics = nics = inter.nics_per_node if inter.fabric != "none" else 0
        pcie = cluster.gpu.pcie_bandwidth_bytes_per_s
        uplink = inter.nic_bandwidth_bytes_per_s / inter.oversubscription
        inject = min(inter.nic_bandwidth_bytes_per_s, uplink)
        self.uplink = uplink
        self.gpu_nic_lat = 0.0
        if not nics:
            self.nic_gpu_bw = [0.0] * g
        elif nics == g:  # rail
            self.nic_gpu_bw = [min(pcie, inject)] * g
        elif intra.fabric == "pcie":  # all NICs behind the host bridge, shared by all GPUs
            self.nic_gpu_bw = [min(self.intra_bw, pcie, sum([inject / g] * nics))] * g
            self.gpu_nic_lat = intra.latency_s / 2
        else:  # PCIe switches: GPU l and NIC i on switch l % s and i % s
            s = min(nics, g)
            gpus_on = [len(range(j, g, s)) for j in range(s)]
            nics_on = [len(range(j, nics, s)) for j in range(s)]
            self.nic_gpu_bw = [min(pcie, sum([inject / gpus_on[j % s]] * nics_on[j % s]))
                               for j in range(g)]
        self.inter_lat = inter.latency_s

    def intra(self, node: int, a: int, b: int, relay: frozenset[int]) -> tuple[float, float, int]:
        if self.fabric == "nvlink":  # mesh: the group's own links, (k - 1) of g - 1
            bw = self.intra_bw / (self.g - 1) * (len(relay) - 1)
            return bw, self.intra_lat, _NVLINK
        return self.intra_bw, self.intra_lat, self.intra_rank

    def inter(self, na: int, a: int, nb: int, b: int) -> tuple[float, float, int]:
        if not self.nics:
            raise InputError("cluster.inter_node",
                             f"no path between GPU {a} of node {na} and GPU {b} of node {nb}",
                             "a group spans nodes but the cluster has no inter-node network "
                             "(fabric 'none' or no NICs)")
        bw = min(self.nic_gpu_bw[a], self.nic_gpu_bw[b], self.uplink)
        lat = self.gpu_nic_lat + self.inter_lat / 2 + self.inter_lat / 2 + self.gpu_nic_lat
        return bw, lat, _NETWORK

    def node_bandwidths(self, fabric: str, inter: float) -> NodeBandwidths:
        g = self.g
        to_switch = _INF if (self.fabric == "nvlink" and g == 1) else self.intra_bw
        if self.num_nodes > 1 and self.nics:
            inter = self.inter(0, 0, 1, 0)[1]
        return NodeBandwidths(
            gpu_to_switch_bytes_per_s=to_switch,
            nic_bytes_per_s_per_gpu=sum(self.nic_gpu_bw) / g,
            intra_latency_s=self.intra_lat if g > 1 else 0.0, inter_latency_s=inter,
            intra_fabric=self.fabric, nics_per_node=self.nics)


# ============================================================================================
# Groups
# ============================================================================================
_Engine = _GraphEngine | _AnalyticEngine


@functools.lru_cache(maxsize=32)
def _graph_engine(graph: nx.Graph) -> _GraphEngine:
    """Keyed by graph identity (graphs from :func:`build_graph` are frozen)."""
    return _GraphEngine(graph)


@functools.lru_cache(maxsize=32)
def _cluster_engine(cluster: ClusterSpec, use_graph: bool) -> _Engine:
    if use_graph or cluster.graph_data is not None:
        return _graph_engine(build_graph(cluster))
    return _AnalyticEngine(cluster)


class _Worst:
    """Accumulates the worst of several groups of one kind."""

    __slots__ = ("bw", "lat", "rank", "n_nodes", "rpn")

    def __init__(self) -> None:
        self.bw, self.lat, self.rank, self.n_nodes, self.rpn = _INF, 0.0, 0, 1, 1

    def result(self, n_ranks: int) -> GroupPath:
        return GroupPath(n_ranks=n_ranks, n_nodes=self.n_nodes, ranks_per_node=self.rpn,
                         crosses_nodes=self.n_nodes > 1,
                         bottleneck_bandwidth_bytes_per_s=self.bw if n_ranks > 1 else _INF,
                         latency_s=self.lat if n_ranks > 1 else 0.0,
                         link=LINK_TYPES[self.rank] if n_ranks > 1 else "local")


def _score(engine: _Engine, ranks: Sequence[int], acc: _Worst, *, ring: bool) -> None:
    """Fold the hops of one group into ``acc``: a ring in rank order (relaying through the
    group's GPUs on each node), or a chain of point-to-point hops (``ring=False``)."""
    g = engine.g
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(r // g, []).append(r % g)
    acc.n_nodes = max(acc.n_nodes, len(by_node))
    acc.rpn = max(acc.rpn, max(len(v) for v in by_node.values()))
    n = len(ranks)
    if n < 2:
        return
    relay = {k: frozenset(v) for k, v in by_node.items()} if ring else None
    hops = n if (ring and n > 2) else n - 1
    intra, inter = engine.intra, engine.inter
    bw, lat, rank = acc.bw, acc.lat, acc.rank
    seen = set()
    for i in range(hops):
        n1, a = divmod(ranks[i], g)
        n2, b = divmod(ranks[i + 1] if i + 1 < n else ranks[0], g)
        if n1 == n2:
            rel = relay[n1] if relay is not None else frozenset((a, b))
            if engine.symmetric:
                key = (a, b, rel)
                if key in seen:
                    continue
                seen.add(key)
            hb, hl, hr = intra(n1, a, b, rel)
        else:
            if engine.symmetric:
                key = (a, b)
                if key in seen:
                    continue
                seen.add(key)
            hb, hl, hr = inter(n1, a, n2, b)
        if hb < bw:
            bw = hb
        if hl > lat:
            lat = hl
        if hr > rank:
            rank = hr
    acc.bw, acc.lat, acc.rank = bw, lat, rank


def _check_world(engine: _Engine, layout: Layout) -> None:
    if layout.world_size > engine.g * engine.num_nodes:
        raise InputError("parallel", f"the layout's {layout.world_size} ranks exceed the "
                                     f"cluster's {engine.g * engine.num_nodes} GPUs")


def _group_path(engine: _Engine, domain_gpus: int, layout: Layout, axes: tuple[str, ...],
                p2p: bool) -> GroupPath:
    """Worst hop over the groups of ``axes`` (one group per start offset within a node on a
    symmetric cluster: groups are translates of each other, see :mod:`costmodel.layout`)."""
    offsets = group_offsets(layout, axes)
    if len(offsets) == 1:  # one rank: no link, and one host and domain
        return GroupPath(n_ranks=1, n_nodes=1, ranks_per_node=1, crosses_nodes=False,
                         bottleneck_bandwidth_bytes_per_s=_INF, latency_s=0.0, link="local",
                         n_domains=1, ranks_per_domain=1, crosses_domains=False)
    if engine.symmetric:  # groups whole hosts apart score the same: one per host residue
        starts: Any = (s for _, s in start_residues(layout, axes, engine.g))
    else:
        starts = _offsets_and_starts(layout, axes)[1]
    acc = _Worst()
    for s in starts:
        _score(engine, [s + o for o in offsets], acc, ring=not p2p)
    n = len(offsets)
    if domain_gpus == engine.g:  # a domain is a host: the scored groups counted them
        domains, per_domain = acc.n_nodes, acc.rpn
    else:
        geo = group_geometry(engine.g, domain_gpus, layout, axes)
        domains, per_domain = geo.domains, geo.ranks_per_domain
    return GroupPath(n_ranks=n, n_nodes=acc.n_nodes, ranks_per_node=acc.rpn,
                     crosses_nodes=acc.n_nodes > 1,
                     bottleneck_bandwidth_bytes_per_s=acc.bw if n > 1 else _INF,
                     latency_s=acc.lat if n > 1 else 0.0,
                     link=LINK_TYPES[acc.rank] if n > 1 else "local",
                     n_domains=domains, ranks_per_domain=per_domain,
                     crosses_domains=domains > 1)


@functools.lru_cache(maxsize=8192)
def layout_group_path(cluster: ClusterSpec, layout: Layout, axes: str | tuple[str, ...], *,
                      p2p: bool = False, use_graph: bool = False) -> GroupPath:
    """How the groups over ``axes`` of ``layout`` are connected, worst over all groups.

    A ring through each group in rank order (:func:`costmodel.layout.group_ranks`), or with
    ``p2p`` the chain of point-to-point hops between consecutive members (pipeline stages).
    Engines as in :func:`layout_topology`; cached per (cluster, layout, axes, p2p, engine).

    >>> from costmodel.specs import ClusterSpec, GPUSpec
    >>> gpu = GPUSpec("x", {"bf16": 1e15}, 80e9, 2e12, 300e9)
    >>> c = ClusterSpec("c", 2, 8, gpu)
    >>> layout_group_path(c, Layout(tp=2, cp=4, dp=2), "dp-cp").link
    'network'
    """
    engine = _cluster_engine(cluster, use_graph)
    _check_world(engine, layout)
    return _group_path(engine, cluster.domain_gpus, layout, parse_axes(axes), p2p)


def _layout(engine: _Engine, tp: int, pp: int, dp: int,
            domain_gpus: int | None = None) -> LayoutTopology:
    layout = Layout(tp=int(tp), dp=int(dp), pp=int(pp))
    _check_world(engine, layout)
    d = engine.g if domain_gpus is None else domain_gpus
    return LayoutTopology(tp=_group_path(engine, d, layout, ("tp",), False),
                          dp=_group_path(engine, d, layout, ("dp",), False),
                          pp=_group_path(engine, d, layout, ("pp",), True))


def _check_ranks(ranks: Sequence[int], world: int) -> list[int]:
    out = []
    for r in ranks:
        _check_rank(r, world)
        out.append(int(r))
    if len(set(out)) != len(out) or not out:
        raise InputError("ranks", f"must be a non-empty list of distinct ranks, got {out}")
    return out


def group_path(graph: nx.Graph, cluster: ClusterSpec, ranks: Sequence[int]) -> GroupPath:
    """Score the ring through ``ranks`` (in the given order) on ``graph``.

    Hops between GPUs of one node use the intra-node paths (max-flow over the group's own
    GPUs and the switches, see the module docstring); hops between nodes are limited by
    ``min(GPU->NIC path, NIC share, fabric path)``. Results are cached per graph (do not
    modify a graph after scoring on it).

    >>> from costmodel.specs import ClusterSpec, GPUSpec
    >>> gpu = GPUSpec("x", {"bf16": 1e15}, 80e9, 2e12, 300e9)
    >>> c = ClusterSpec("c", 2, 8, gpu)
    >>> group_path(build_graph(c), c, range(16)).link
    'network'
    """
    engine = _graph_engine(graph)
    if engine.g != cluster.gpus_per_node:
        raise InputError("cluster.gpus_per_node", f"{cluster.gpus_per_node} but the graph has "
                                                  f"{engine.g} GPUs per node")
    ranks = _check_ranks(list(ranks), engine.g * engine.num_nodes)
    acc = _Worst()
    _score(engine, ranks, acc, ring=True)
    return acc.result(len(ranks))


@functools.lru_cache(maxsize=4096)
def layout_topology(cluster: ClusterSpec, tp: int, pp: int, dp: int, *,
                    use_graph: bool = False) -> LayoutTopology:
    """TP, DP and PP group paths of a layout, worst over all groups of each kind.

    The (tp, pp, dp) layout in the default order (:class:`costmodel.layout.Layout`), its
    ``tp`` and ``dp`` groups scored as rings and ``pp`` as point-to-point hops
    (:func:`layout_group_path`). Short-form clusters use the closed-form engine unless
    ``use_graph``; clusters with ``graph_data`` always use the graph. Cached per (cluster,
    tp, pp, dp). On symmetric clusters (identical nodes behind one fabric switch) one group
    per start offset within a node is scored (well under a millisecond at 1024 GPUs); other
    graphs score every group (about 5 ms per new layout at 1024 GPUs).
    """
    _check_layout(tp, pp, dp)
    return _layout(_cluster_engine(cluster, use_graph), tp, pp, dp, cluster.domain_gpus)


@functools.lru_cache(maxsize=64)
def node_bandwidths(cluster: ClusterSpec, *, use_graph: bool = False) -> NodeBandwidths:
    """Per-node bandwidths and latencies for the NCCL model (see :class:`NodeBandwidths`)."""
    return _cluster_engine(cluster, use_graph).node_bandwidths(cluster.intra_node.fabric,
                                                                cluster.inter_node.latency_s)


# ============================================================================================
# Graph JSON -> ClusterSpec
# ============================================================================================
def cluster_from_graph(data: Mapping[str, Any], *,
                       gpu_lookup: Callable[[str], GPUSpec] | None = None) -> ClusterSpec:
    """A :class:`ClusterSpec` from a node-link cluster graph (schema in the module docstring).

    ``num_nodes`` and ``gpus_per_node`` come from the GPUs' ``node`` attributes; the short-form
    fields are inferred from node 0 (intra fabric from the GPU links, per-GPU bandwidth
    summed over the best link class; NIC count, port speed, oversubscription = port / uplink,
    and the NIC-to-NIC latency between nodes 0 and 1). The graph itself is kept as
    ``graph_data`` and is what :func:`layout_topology` scores. ``gpu_lookup`` maps the GPU key
    to a spec (default :func:`costmodel.hardware.get_gpu`).
    """
    graph = _graph_from_data(data)
    keys = sorted({d["gpu"] for _, d in graph.nodes(data=True) if d["kind"] == "gpu"})
    if len(keys) != 1:
        raise InputError("cluster.graph.nodes", f"mixes GPU types {keys}",
                         "paraplan models homogeneous clusters")
    if gpu_lookup is None:
        from costmodel.hardware import get_gpu  # lazy: the catalog imports specs only

        gpu_lookup = get_gpu
    try:
        gpu = gpu_lookup(keys[0])
    except InputError as e:
        first = next(v for v, d in graph.nodes(data=True) if d["kind"] == "gpu")
        raise InputError(f"cluster.graph.nodes[{first!r}].gpu", e.message, e.hint) from None
    engine = _GraphEngine(graph)
    t0 = engine.templates[engine.tmpl_of[0]]
    nb = engine.node_bandwidths("pcie", InterNodeSpec().latency_s)
    if math.isinf(nb.gpu_to_switch_bytes_per_s):  # a lone GPU per node: no intra links
        intra = IntraNodeSpec(fabric="pcie", bandwidth_bytes_per_s=gpu.pcie_bandwidth_bytes_per_s,
                              latency_s=0.0)
    else:
        intra = IntraNodeSpec(fabric=nb.intra_fabric,
                              bandwidth_bytes_per_s=nb.gpu_to_switch_bytes_per_s,
                              latency_s=nb.intra_latency_s)
    live = [i for i, x in enumerate(engine.nic_ids[0]) if t0.nic_uplink[i] > 0]
    if not live:
        inter = InterNodeSpec(fabric="none", nics_per_node=0)
    else:
        port = min(t0.nic_port[i] for i in live)
        uplink = min(t0.nic_uplink[i] for i in live)
        x = engine.nic_ids[0][live[0]]
        switch = next((u for u in graph[x] if graph.nodes[u]["kind"] == "fabric"), None)
        kind = graph.nodes[switch].get("fabric", "infiniband") if switch is not None \
            else "infiniband"
        latency = InterNodeSpec().latency_s
        if engine.num_nodes > 1:
            t1 = engine.templates[engine.tmpl_of[1]]
            peers = [y for i, y in enumerate(engine.nic_ids[1]) if t1.nic_uplink[i] > 0]
            if peers:
                latency = engine._fabric_path(x, peers[0])[1]
        try:
            inter = InterNodeSpec(fabric=kind, nics_per_node=len(live),
                                  nic_bandwidth_bytes_per_s=port,
                                  oversubscription=max(1.0, port / uplink), latency_s=latency)
        except InputError as e:
            raise InputError(f"cluster.graph.nodes[{switch!r}].fabric", e.message,
                             e.hint) from None
    name = graph.graph.get("name") or "graph-cluster"
    source = graph.graph.get("source", "")
    try:
        return ClusterSpec(name=str(name), num_nodes=engine.num_nodes, gpus_per_node=engine.g,
                           gpu=gpu, intra_node=intra, inter_node=inter, graph_data=data,
                           source=str(source),
                           gpus_per_domain=graph.graph.get("gpus_per_domain"))
    except InputError as e:
        if e.field == "cluster.gpus_per_domain":
            raise InputError("cluster.graph.graph.gpus_per_domain", e.message, e.hint) from None
        raise
