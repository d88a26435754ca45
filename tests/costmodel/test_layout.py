"""Named parallel axes in a rank order, and group geometry on hosts and NVLink domains
(costmodel/layout.py; ClusterSpec.gpus_per_domain)."""

from __future__ import annotations

import itertools
import math

import pytest

from costmodel import topology as T
from costmodel.errors import InputError
from costmodel.layout import (
    DEFAULT_ORDER,
    Layout,
    group,
    group_of,
    group_ranks,
    parse_axes,
)
from costmodel.loaders import load_cluster
from costmodel.specs import ClusterSpec, GPUSpec, InterNodeSpec, IntraNodeSpec

GPU = GPUSpec("b200-like", {"bf16": 2.25e15}, 192e9, 8e12, 900e9, nvlink_links=18)


def cluster(num_nodes: int, gpus: int, domain: int | None = None, **kw) -> ClusterSpec:
    return ClusterSpec(kw.pop("name", f"{num_nodes}x{gpus}"), num_nodes, gpus, GPU,
                       kw.pop("intra", IntraNodeSpec()), InterNodeSpec(nics_per_node=gpus),
                       gpus_per_domain=domain, **kw)


def reference_groups(layout: Layout, axes: tuple[str, ...]) -> list[list[int]]:
    """Brute force: every rank's coordinates in the view, grouped by the fixed axes."""
    expert = any(a in ("etp", "ep", "edp") for a in axes)
    view = layout.expert_view if expert else layout.dense_view
    names = [a for a, _ in view]
    sizes = [s for _, s in view]
    groups: dict[tuple, list[int]] = {}
    for rank in range(layout.world_size):
        coords, rest = [], rank
        for s in sizes:
            rest, c = divmod(rest, s)
            coords.append(c)
        key = tuple(c for n, c in zip(names, coords, strict=True) if n not in axes)
        groups.setdefault(key, []).append(rank)
    # groups ordered by their fixed coordinates, first axis fastest (Megatron's group index)
    return [groups[k] for k in sorted(groups, key=lambda k: tuple(reversed(k)))]


# ------------------------------------------------------------------------------------------
# Megatron-Core's RankGenerator semantics (examples of megatron/core/parallel_state.py)
# ------------------------------------------------------------------------------------------
def test_megatron_docstring_example_tp2_pp4_on_16_gpus():
    # initialize_model_parallel's docstring: 16 GPUs, TP 2, PP 4 (so DP 2), order tp-dp-pp
    lay = Layout(tp=2, dp=2, pp=4, order="tp-dp-pp")
    assert group_ranks(lay, "dp") == ((0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11),
                                      (12, 14), (13, 15))
    assert group_ranks(lay, "tp") == tuple((i, i + 1) for i in range(0, 16, 2))
    assert group_ranks(lay, "pp") == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14),
                                      (3, 7, 11, 15))
    assert lay.order == "tp-dp-cp-ep-pp"  # axes left out (degree 1) go before the last


def test_masked_orthogonal_groups_example():
    # generate_masked_orthogonal_rank_groups' docstring: sizes [tp, dp, pp] = [2, 3, 4],
    # mask dp: dp_group[0] = [0, 2, 4], dp_group[1] = [1, 3, 5], dp_group[7] = [19, 21, 23]
    groups = group_ranks(Layout(tp=2, dp=3, pp=4), "dp")
    assert groups[0] == (0, 2, 4) and groups[1] == (1, 3, 5) and groups[7] == (19, 21, 23)
    # and the tp-pp-dp example: 8 GPUs, 2-2-2, dp groups [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert group_ranks(Layout(tp=2, pp=2, dp=2, order="tp-pp-dp"), "dp") \
        == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_groups_equal_brute_force_on_every_axis_set():
    layouts = [Layout(tp=2, cp=2, dp=3, pp=2), Layout(tp=4, cp=1, dp=4, pp=2, ep=4, etp=1),
               Layout(tp=2, cp=2, dp=2, pp=2, ep=2, etp=2), Layout(tp=2, dp=4, ep=8, etp=1),
               Layout(tp=2, cp=2, dp=2, pp=3, order="tp-dp-cp-pp"),
               Layout(tp=2, dp=2, pp=2, ep=2, etp=1, order="tp-ep-dp-pp")]
    for lay in layouts:
        for view in (("tp", "cp", "dp", "pp"), ("etp", "ep", "edp", "pp")):
            for k in range(1, 5):
                for axes in itertools.combinations(view, k):
                    assert [list(g) for g in group_ranks(lay, axes)] \
                        == reference_groups(lay, axes), (lay, axes)
                    for r in range(lay.world_size):
                        assert r in group_of(lay, axes, r)
                        assert group_of(lay, axes, r) in group_ranks(lay, axes)


def test_default_layout_matches_the_placement_functions():
    # topology.tp_group / dp_group / pp_group (TP innermost, then DP, then PP)
    tp, pp, dp = 4, 2, 3
    lay = Layout(tp=tp, dp=dp, pp=pp)
    assert lay.order == DEFAULT_ORDER
    for r in range(lay.world_size):
        assert list(group_of(lay, "tp", r)) == T.tp_group(r, tp, pp, dp)
        assert list(group_of(lay, "dp", r)) == T.dp_group(r, tp, pp, dp)
        assert list(group_of(lay, "pp", r)) == T.pp_group(r, tp, pp, dp)


def test_dense_and_expert_views_share_the_ranks():
    # 32 ranks: TP 2 x CP 2 x DP 4 x PP 2 dense; ETP 1 x EP 8 x EDP 2 x PP 2 expert
    lay = Layout(tp=2, cp=2, dp=4, pp=2, ep=8, etp=1)
    assert lay.world_size == 32 and lay.expert_dp == 2
    assert lay.dense_view == (("tp", 2), ("cp", 2), ("dp", 4), ("pp", 2))
    assert lay.expert_view == (("etp", 1), ("ep", 8), ("edp", 2), ("pp", 2))
    # the pipeline groups coincide (Megatron asserts it)
    assert group_ranks(lay, "pp") == group_ranks(lay, ("pp",))
    assert reference_groups(lay, ("pp",)) == [list(g) for g in group_ranks(lay, "pp")]
    # EP spans the dense tp x cp x (part of) dp ranks of one stage
    assert group_of(lay, "ep", 0) == tuple(range(8))
    assert group_of(lay, "edp", 0) == (0, 8)
    # the DP gradient group of context-parallel training is dp x cp
    assert group_of(lay, "dp-cp", 0) == (0, 2, 4, 6, 8, 10, 12, 14)
    assert parse_axes("cp-dp") == parse_axes(("dp", "cp")) == ("cp", "dp")
    assert Layout(tp=4) == Layout(tp=4, etp=4)  # etp defaults to tp


def test_layout_validation_names_the_field():
    with pytest.raises(InputError, match="parallel.cp"):
        Layout(cp=0)
    with pytest.raises(InputError, match="parallel.ep"):
        Layout(tp=2, dp=3, ep=2)  # etp*ep*pp = 4 does not divide 6 ranks
    with pytest.raises(InputError, match="parallel.order") as e:
        Layout(order="tp-xp-dp-pp")
    assert "unknown axis 'xp'" in e.value.message
    with pytest.raises(InputError, match="parallel.order"):
        Layout(cp=2, order="tp-dp-pp")  # cp > 1 must be placed
    with pytest.raises(InputError, match="parallel.order"):
        Layout(tp=1, dp=4, pp=2, ep=2, etp=1, order="tp-cp-ep-pp-dp")  # edp 2 != dp 4
    Layout(tp=1, dp=2, pp=2, order="tp-cp-ep-pp-dp")  # edp == dp: allowed
    with pytest.raises(InputError, match="axes"):
        parse_axes("tp-ep")  # mixes the views
    with pytest.raises(InputError, match="axes"):
        parse_axes("dp-dp")


# ------------------------------------------------------------------------------------------
# Geometry on hosts and NVLink domains
# ------------------------------------------------------------------------------------------
def test_nvl72_tp8_is_inside_one_domain_but_across_two_hosts():
    # GB200 NVL72, hand-built: 18 hosts of 4 GPUs in one 72-GPU NVLink domain
    nvl72 = cluster(18, 4, domain=72)
    assert (nvl72.num_gpus, nvl72.domain_gpus, nvl72.hosts_per_domain, nvl72.num_domains) \
        == (72, 72, 18, 1)
    lay = Layout(tp=8, dp=9)
    tp = group(nvl72, lay, "tp")
    assert (tp.n_ranks, tp.hosts, tp.ranks_per_host) == (8, 2, 4)
    assert tp.crosses_hosts and not tp.crosses_domains and tp.inside_domain
    assert (tp.domains, tp.ranks_per_domain) == (1, 8)
    # the same layout on DGX-style hosts (domain = host) crosses both
    dgx = cluster(18, 4)
    assert dgx.domain_gpus == 4
    g = group(dgx, lay, "tp")
    assert (g.hosts, g.domains) == (2, 2) and g.crosses_domains
    # and the topology's group path reports both levels
    path = T.layout_group_path(nvl72, lay, "tp")
    assert (path.n_nodes, path.n_domains, path.crosses_nodes, path.crosses_domains) \
        == (2, 1, True, False)


def test_dp_over_two_nvl72_racks_crosses_domains():
    racks = cluster(36, 4, domain=72)
    assert racks.num_domains == 2
    g = group(racks, Layout(tp=4, dp=36), "dp")  # stride 4: one rank per host
    assert (g.n_ranks, g.stride, g.hosts, g.ranks_per_host) == (36, 4, 36, 1)
    assert (g.domains, g.ranks_per_domain, g.crosses_domains) == (2, 18, True)
    ep = group(racks, Layout(tp=1, dp=144, ep=72, etp=1), "ep")
    assert (ep.hosts, ep.domains) == (18, 1)  # EP 72 is a rack...
    ep = group(racks, Layout(tp=1, dp=144, ep=48, etp=1), "ep")
    assert ep.domains == 2  # ...EP 48 straddles racks for some groups (ranks 48..95)


def test_geometry_is_the_worst_over_all_groups_and_memoised():
    c = cluster(4, 8)
    lay = Layout(tp=3, dp=10)  # TP 3 does not divide a host: some groups straddle two
    g = group(c, lay, "tp")
    brute = [len({r // 8 for r in grp}) for grp in group_ranks(lay, "tp")]
    assert g.hosts == max(brute) == 2 and g.n_groups == 10
    assert group(c, lay, "tp") is g
    assert group(c, lay, ("tp",)) is g
    with pytest.raises(InputError, match="parallel"):
        group(c, Layout(tp=8, dp=8), "tp")  # 64 ranks on 32 GPUs


def test_layout_topology_is_built_on_the_layout():
    c = cluster(2, 8)
    lay = T.layout_topology(c, 4, 2, 2)
    for name in ("tp", "dp", "pp"):
        path = T.layout_group_path(c, Layout(tp=4, dp=2, pp=2), name, p2p=name == "pp")
        assert path == getattr(lay, name)
    g = T.layout_group_path(c, Layout(tp=2, cp=2, dp=4), "dp-cp")
    assert (g.n_ranks, g.n_nodes, g.link) == (8, 2, "network")
    one = T.layout_group_path(c, Layout(dp=16), "tp")
    assert (one.link, one.bottleneck_bandwidth_bytes_per_s, one.latency_s) \
        == ("local", math.inf, 0.0)


# ------------------------------------------------------------------------------------------
# ClusterSpec: host, domain, fabric
# ------------------------------------------------------------------------------------------
def test_cluster_domain_defaults_to_the_host_and_enters_equality_and_hash():
    a, b = cluster(18, 4), cluster(18, 4, domain=4)
    assert b.gpus_per_domain is None and a == b and hash(a) == hash(b)  # domain = host
    c = ClusterSpec(a.name, 18, 4, GPU, a.intra_node, a.inter_node, gpus_per_domain=72)
    assert c != a and hash(c) != hash(a) and c.domain_gpus == 72
    assert {a: 1, c: 2}[c] == 2


@pytest.mark.parametrize("domain, fabric, match", [
    (6, "nvswitch", "whole number of hosts"),
    (0, "nvswitch", "must be >= 1"),
    (2.5, "nvswitch", "integer"),
    (8, "pcie", "NVSwitch"),
])
def test_cluster_domain_validation_names_the_field(domain, fabric, match):
    with pytest.raises(InputError, match=match) as e:
        cluster(4, 4, domain=domain, intra=IntraNodeSpec(fabric, 300e9, 1e-6))
    assert e.value.field == "cluster.gpus_per_domain"


def test_cluster_file_reads_gpus_per_domain(tmp_path):
    f = tmp_path / "nvl72.yaml"
    f.write_text("gpu: h100\nnum_nodes: 18\ngpus_per_node: 4\ngpus_per_domain: 72\n")
    c = load_cluster(f)
    assert (c.gpus_per_node, c.domain_gpus, c.num_domains) == (4, 72, 1)
    assert load_cluster({"gpu": "h100", "num_nodes": 2}).gpus_per_domain is None
    for bad, match in (("x", "must be a number"), (6, "whole number of hosts")):
        with pytest.raises(InputError, match=match) as e:
            load_cluster({"gpu": "h100", "num_nodes": 18, "gpus_per_node": 4,
                          "gpus_per_domain": bad})
        assert e.value.field == "cluster.gpus_per_domain"
    with pytest.raises(InputError, match="did you mean 'gpus_per_domain'") as e:
        load_cluster({"gpu": "h100", "gpus_per_domian": 72})
    assert e.value.field == "cluster.gpus_per_domian"


def test_graph_cluster_keeps_working_and_may_name_a_domain():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "data" / "cluster_graph.json").read_text())
    c = load_cluster(doc)
    assert c.gpus_per_domain is None and c.domain_gpus == c.gpus_per_node
    g = group(c, Layout(dp=c.num_gpus), "dp")
    assert g.hosts == c.num_nodes == g.domains
    doc["graph"]["gpus_per_domain"] = 3
    with pytest.raises(InputError) as e:
        load_cluster(doc)
    assert e.value.field == "cluster.graph.graph.gpus_per_domain"


def _brute_geometry(groups, unit):
    cells = [{r // unit for r in g} for g in groups]
    most = max(max(sum(1 for r in g if r // unit == c) for c in cs)
               for g, cs in zip(groups, cells, strict=True))
    return max(len(cs) for cs in cells), most


@pytest.mark.parametrize("gpus, hosts_per_domain", [(1, 1), (4, 1), (4, 3), (8, 2), (4, 18)])
def test_geometry_equals_brute_force_over_every_group(gpus, hosts_per_domain):
    import numpy as np

    from costmodel import layout as L

    domain = gpus * hosts_per_domain
    for tp, cp, dp, pp in itertools.product((1, 2, 3, 8), (1, 2), (1, 3, 4), (1, 2, 4)):
        lay = Layout(tp=tp, cp=cp, dp=dp, pp=pp)
        for axes in (("tp",), ("cp", "dp"), ("dp",), ("pp",), ("tp", "pp"), ("tp", "cp")):
            geo = L.group_geometry(gpus, domain, lay, axes)
            groups = group_ranks(lay, axes)
            assert (geo.hosts, geo.ranks_per_host) == _brute_geometry(groups, gpus)
            assert (geo.domains, geo.ranks_per_domain) == _brute_geometry(groups, domain)
            # the numpy path used for large groups agrees with the plain one
            offsets, starts = L._offsets_and_starts(lay, axes)
            rows = sorted({s % domain for s in starts})
            ranks = np.asarray(rows)[:, None] + np.asarray(offsets)[None, :]
            assert L._spans_np(ranks, gpus) == L._spans(rows, offsets, gpus)


def test_a_preset_may_declare_a_domain(monkeypatch):
    # no NVL72 preset ships yet (issue 23); a hand-made one shows presets carry the domain
    from costmodel import hardware as H

    base = H._preset("dgx-b200")
    nvl72 = H._Preset("test-nvl72", base.gpu, 4, base.intra, base.inter, "test rack",
                      "hand-made for a test", gpus_per_domain=72)
    monkeypatch.setitem(H._PRESETS, "test-nvl72", nvl72)
    c = H.get_cluster_preset("test-nvl72", 18)
    assert (c.gpus_per_node, c.domain_gpus, c.num_domains) == (4, 72, 1)
    assert load_cluster("test-nvl72", default_gpus=144).num_domains == 2
    assert load_cluster({"preset": "test-nvl72", "num_nodes": 2}).domain_gpus == 72
    # a partial host (3 GPUs) is its own domain; a changed host size drops the preset's
    assert load_cluster("test-nvl72", default_gpus=3).domain_gpus == 3
    assert load_cluster({"preset": "test-nvl72"}, default_gpus=2).domain_gpus == 2
    assert load_cluster({"preset": "test-nvl72", "gpus_per_node": 8,
                         "num_nodes": 2}).gpus_per_domain is None


def test_start_residues_match_every_group_start() -> None:
    """The arithmetic residues (no list of all groups) are those of the full start list, and
    each representative is a real group start with that residue."""
    from costmodel.layout import _offsets_and_starts, parse_axes, start_residues

    layouts = [Layout(tp=2, cp=2, dp=4, pp=2), Layout(tp=4, ep=2, dp=2, pp=4),
               Layout(tp=1, cp=3, dp=6, pp=2), Layout(tp=8, dp=16, pp=8),
               Layout(tp=2, dp=4, pp=2, order="tp-cp-ep-pp-dp")]
    for lay in layouts:
        for axes in ("tp", "dp", "pp", "cp", "dp-cp", "tp-pp", "ep", "edp", "etp-ep"):
            names = parse_axes(axes)
            _, starts = _offsets_and_starts(lay, names)
            for unit in (1, 2, 4, 8, 24, 72):
                got = start_residues(lay, names, unit)
                assert [r for r, _ in got] == sorted({s % unit for s in starts})
                assert all(s in starts and s % unit == r for r, s in got)


def test_result_documents_keep_the_nvlink_domain() -> None:
    """optimizer.core.serialize writes gpus_per_domain when set (schema-valid), and the
    domain comes back through the cluster loader; without a domain the key is absent, so
    existing fingerprints stay valid."""
    import json

    from optimizer.core.serialize import cluster_to_dict
    from optimizer.output.schemas import load_schema

    rack = cluster(18, 4, domain=72, name="nvl72")
    d = json.loads(json.dumps(cluster_to_dict(rack)))
    assert d["gpus_per_domain"] == 72
    props = load_schema()["$defs"]["cluster"]["properties"]
    assert props["gpus_per_domain"]["$ref"] == "#/$defs/degree"
    back = load_cluster({"name": d["name"], "num_nodes": d["num_nodes"],
                         "gpus_per_node": d["gpus_per_node"],
                         "gpus_per_domain": d["gpus_per_domain"], "gpu": "b200"})
    assert back.domain_gpus == rack.domain_gpus == 72
    assert "gpus_per_domain" not in cluster_to_dict(cluster(2, 8))
    jsonschema = pytest.importorskip("jsonschema")
    schema = load_schema()
    sub = {**schema["$defs"]["cluster"], "$defs": schema["$defs"]}
    jsonschema.validate(d, sub)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**d, "gpus_per_domain": 0}, sub)
