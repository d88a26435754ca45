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
    s = parse_nccl_setting("ring;allreduce:auto", "algo")  # one collective left to NCCL
    assert s.enabled("allreduce") == ALGORITHMS and s.named("allreduce") == ()
    assert s.enabled("reduce") == ("ring",)
    assert s.entries[1] == NcclEntry("allreduce", True, ())  # rendered as NCCL's allreduce:^
    s = parse_nccl_setting(" ring ; allreduce : tree ", "algo")  # spaces are ignored
    assert s.enabled("allreduce") == ("tree",) and s.enabled("reduce") == ("ring",)
    s = parse_nccl_setting("Collnet,ring", "algo")  # the spelling is kept for renderers
    assert s.entries[0].written == ("collnet", "ring")
    assert s.entries[0].names == ("collnetdirect", "collnetchain", "ring")


# The decisions of changelog-cost-model.md "grammar 2" (ebe5f60 -> main -> now):
# a value that means nothing is an error naming the field, though NCCL's strtok skips it.
@pytest.mark.parametrize("value, message", [
    ("^", "empty list in"),                       # ebe5f60 exit 2, main exit 0, now exit 2
    ("allreduce:^", "empty list for allreduce"),  # ebe5f60 exit 2, main exit 0; use :auto
    ("ring;", "empty entry"),                     # ebe5f60 exit 2, main exit 0, now exit 2
    ("ring;;allreduce:tree", "empty entry"),
    (";ring", "empty entry"),
    ("ring,,tree", "empty list item"),
    ("ring,tree,", "empty list item"),
    ("bcast:ring", "unknown collective 'bcast'"),  # NCCL knows only Broadcast
])
def test_values_that_mean_nothing_are_errors(value, message):
    with pytest.raises(InputError) as e:
        parse_nccl_setting(value, "algo", "space.nccl_algo")
    assert e.value.field == "space.nccl_algo" and message in e.value.message, e.value


def test_collnetdirect_is_an_nccl_name_everywhere():
    # ebe5f60: the space refused it (its vocabulary said only 'collnet'), `optimize nccl`
    # took it; now one grammar: both take it (the launch flags render CollNetDirect)
    assert parse_nccl_setting("collnetdirect", "algo").enabled("allreduce") == ("collnetdirect",)


@pytest.mark.parametrize("value", [["ring"], {"ring": 1}, 3, None])
def test_a_value_of_the_wrong_type_is_an_input_error_not_a_type_error(value):
    with pytest.raises(InputError) as e:
        parse_nccl_setting(value, "algo", "parallel.nccl_algo")
    assert e.value.field == "parallel.nccl_algo"


@pytest.mark.parametrize("value, kind, message, hint", [
    # the example: passed the search space, then failed inside scoring
    ("allreduce:tree;ring", "algo", "names no collective", "only the first entry"),
    ("ring;tree", "algo", "given twice", "only the first entry"),
    ("rign", "algo", "unknown token 'rign'", "ring"),
    ("allreduce:tree;allgathr:ring", "algo", "unknown collective 'allgathr'", "allgather"),
    ("allreduce:ring;allreduce:tree", "algo", "allreduce is given twice", None),
    ("allreduce:", "algo", "empty list for allreduce", "allreduce:auto"),
    ("allreduce:ring,auto", "algo", "unknown token 'auto'", "stands alone"),
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
