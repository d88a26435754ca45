"""The one NCCL_ALGO / NCCL_PROTO parser and NCCL's capability table (costmodel/nccl_grammar.py)."""

from __future__ import annotations

import pytest

from costmodel import collectives as C
from costmodel.errors import InputError
from costmodel.nccl_grammar import (
    ALGORITHMS,
    CAPABILITIES,
    COLLECTIVES,
    CONDITIONS,
    PROTOCOLS,
    NcclEntry,
    candidate_pairs,
    parse_nccl_setting,
)


def test_forms_of_the_grammar():
    s = parse_nccl_setting("auto", "algo")
    assert not s.forced and s.enabled("allreduce") == ALGORITHMS and s.named("allreduce") == ()
    s = parse_nccl_setting("Ring,TREE", "algo")
    assert s.entries == (NcclEntry(None, False, ("ring", "tree")),)
    assert s.enabled("broadcast") == ("tree", "ring")  # NCCL's index order
    s = parse_nccl_setting("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
                           "algo")
    assert s.enabled("allgather") == ("ring", "collnetdirect")
    assert s.enabled("allreduce") == ("tree", "collnetdirect")
    assert s.enabled("broadcast") == ("ring",)
    s = parse_nccl_setting("allreduce:^tree", "algo")  # other collectives stay auto
    assert "tree" not in s.enabled("allreduce") and s.enabled("allgather") == ALGORITHMS
    s = parse_nccl_setting("^LL128;allreduce:LL128", "proto")
    assert s.enabled("allgather") == ("ll", "simple") and s.named("allgather") == ()
    assert s.enabled("allreduce") == ("ll128",) and s.named("allreduce") == ("ll128",)
    assert parse_nccl_setting("collnet", "algo").enabled("allreduce") \
        == ("collnetdirect", "collnetchain")  # NCCL <= 2.13's single CollNet: both variants
    assert parse_nccl_setting("ring;allreduce:^", "algo").enabled("allreduce") == ALGORITHMS


def test_empty_pieces_are_skipped_as_strtok_does():
    assert parse_nccl_setting("ring;", "algo").enabled("allreduce") == ("ring",)
    assert parse_nccl_setting("ring,,tree,", "algo").enabled("reduce") == ("tree", "ring")
    s = parse_nccl_setting(" ring ; allreduce : tree ;; ", "algo")
    assert s.enabled("allreduce") == ("tree",) and s.enabled("reduce") == ("ring",)


@pytest.mark.parametrize("value, kind, message, hint", [
    # the example: passed the search space, then failed inside scoring
    ("allreduce:tree;ring", "algo", "names no collective", "only the first entry"),
    ("ring;tree", "algo", "given twice", "only the first entry"),
    (";ring", "algo", "names no collective", "first entry"),
    ("rign", "algo", "unknown token 'rign'", "ring"),
    ("allreduce:tree;allgathr:ring", "algo", "unknown collective 'allgathr'", "allgather"),
    ("allreduce:ring;allreduce:tree", "algo", "allreduce is given twice", None),
    ("allreduce:", "algo", "empty list for allreduce", "'^' for all"),
    ("allreduce:auto", "algo", "unknown token 'auto'", "stands alone"),
    ("simpel", "proto", "unknown token 'simpel'", "simple"),
    ("collnet", "proto", "unknown token 'collnet'", None),
    (";", "proto", "empty value", "auto"),
    ("", "proto", "non-empty string", "auto"),
])
def test_errors_name_the_field(value, kind, message, hint):
    with pytest.raises(InputError) as e:
        parse_nccl_setting(value, kind)
    assert e.value.field == f"nccl_{kind}" and message in e.value.message, e.value
    if hint:
        assert hint in (e.value.hint or ""), e.value
    with pytest.raises(InputError) as e:
        parse_nccl_setting(value, kind, "parallel.nccl_" + kind)
    assert e.value.field == "parallel.nccl_" + kind


def test_collectives_reads_the_same_parser():
    spec = "ring,tree;allreduce:^tree;broadcast:ring"
    assert C.parse_nccl_spec(spec, "algo") == parse_nccl_setting(spec, "algo").as_dict()
    assert C.ALGORITHMS is ALGORITHMS and C.PROTOCOLS is PROTOCOLS
    assert C.COLLECTIVES is COLLECTIVES


# ---- capability table ----------------------------------------------------------------------
def test_capability_table_is_nccl_section_2():
    T, R, CD, CC, NV, NT, PAT = range(7)
    LL, LL128, S = range(3)
    # the literal tables collectives.py carried before (NCCL's iteration order)
    assert C.CANDIDATE_PAIRS == {
        "allreduce": ((T, LL), (T, LL128), (T, S), (R, LL), (R, LL128), (R, S), (CD, S),
                      (CC, S), (NV, S), (NT, S)),
        "allgather": ((R, LL), (R, LL128), (R, S), (CD, S), (NV, S), (PAT, S)),
        "reducescatter": ((R, LL), (R, LL128), (R, S), (CD, S), (NV, S), (PAT, S)),
        "broadcast": ((R, LL), (R, LL128), (R, S)),
        "reduce": ((R, LL), (R, LL128), (R, S))}
    assert candidate_pairs("broadcast") == (("ring", "ll"), ("ring", "ll128"),
                                            ("ring", "simple"))
    nvls = {c for c in COLLECTIVES if "nvls" in CAPABILITIES[c]}
    assert nvls == {"allreduce", "allgather", "reducescatter"}
    assert {c for c in COLLECTIVES if "pat" in CAPABILITIES[c]} == {"allgather",
                                                                    "reducescatter"}
    assert {c for c in COLLECTIVES if "tree" in CAPABILITIES[c]} == {"allreduce"}
    for c in COLLECTIVES:
        for a, protos in CAPABILITIES[c].items():
            assert protos == (PROTOCOLS if a in ("ring", "tree") else ("simple",)), (c, a)
    assert CONDITIONS["pat"].one_rank_per_node and CONDITIONS["pat"].min_nccl == (2, 23)
    assert CONDITIONS["nvlstree"].multi_node_only and CONDITIONS["nvls"].min_sm == 90
    assert set(CONDITIONS) == set(ALGORITHMS)
