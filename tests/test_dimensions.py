"""The dimension declarations on ParallelConfig and what is generated from them."""

from __future__ import annotations

import pickle
from dataclasses import fields
from enum import IntEnum

import numpy as np
import pytest

from costmodel.batch import TABLE_FIELDS, ConfigBatch
from costmodel.dimensions import BOOL, CHOICE, INT, STRING, Dimension, optuna_params
from costmodel.errors import InputError
from costmodel.specs import (
    DIMENSIONS_BY_NAME,
    PARALLEL_DIMENSIONS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    ParallelConfig,
    Precision,
    Recompute,
    Schedule,
)
from search_spaces.enumerate import _STAGES
from search_spaces.space import DIMENSIONS, SearchSpace, check_dimension

CONFIGS = [
    ParallelConfig(),
    ParallelConfig(tp=4, pp=2, dp=2, micro_batch_size=2, precision="fp8", recompute="full",
                   sequence_parallel=True, zero_stage=1, schedule="interleaved",
                   virtual_stages=2, nccl_algo="allreduce:tree;allgather:ring",
                   nccl_proto="simple"),
    ParallelConfig(tp=2, pp=4, schedule="gpipe", precision="fp16", zero_stage=0,
                   nccl_algo="ring", nccl_proto="^ll128"),
]


def test_every_field_is_declared_once() -> None:
    names = [f.name for f in fields(ParallelConfig)]
    assert [d.name for d in PARALLEL_DIMENSIONS] == names
    assert set(DIMENSIONS_BY_NAME) == set(names)
    assert DIMENSIONS == tuple(n for n in names if n != "dp")


def test_batch_and_space_fields_are_generated() -> None:
    assert [f.name for f in fields(ConfigBatch)] == [
        *(d.name for d in PARALLEL_DIMENSIONS), "nccl_algo_table", "nccl_proto_table"]
    assert TABLE_FIELDS == ("nccl_algo_table", "nccl_proto_table")
    assert [f.name for f in fields(SearchSpace)] == list(DIMENSIONS)
    assert SearchSpace() == SearchSpace(**{d: (DIMENSIONS_BY_NAME[d].default,)
                                           for d in DIMENSIONS})


def test_enums_number_the_vocabularies() -> None:
    for dim, vocab, enum in (("precision", PRECISIONS, Precision),
                             ("recompute", RECOMPUTE, Recompute),
                             ("schedule", SCHEDULES, Schedule)):
        d = DIMENSIONS_BY_NAME[dim]
        assert d.kind == CHOICE and d.values == vocab and d.codes is enum
        assert [m.value for m in enum] == list(range(len(vocab)))
    assert Schedule.INTERLEAVED == SCHEDULES.index("interleaved")
    assert Precision.FP8 == PRECISIONS.index("fp8")
    assert Recompute.FULL == RECOMPUTE.index("full")


def test_columns_keep_their_dtypes_and_codes() -> None:
    b = ConfigBatch.from_configs(CONFIGS)
    for d in PARALLEL_DIMENSIONS:
        col = getattr(b, d.name)
        assert col.dtype == (bool if d.kind == BOOL else np.int64), d.name
        assert col.flags.c_contiguous
    assert b.precision.tolist() == [Precision.BF16, Precision.FP8, Precision.FP16]
    assert b.schedule.tolist() == [Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.GPIPE]
    assert b.nccl_algo_table == ("auto", "allreduce:tree;allgather:ring", "ring")
    assert b.nccl_proto_table == ("auto", "simple", "^ll128")
    assert b.nccl_algo.tolist() == [0, 1, 2]


def test_batch_round_trip_take_concat_pickle() -> None:
    b = ConfigBatch.from_configs(CONFIGS)
    assert b.configs() == CONFIGS
    assert b.take(np.array([2, 0])).configs() == [CONFIGS[2], CONFIGS[0]]
    assert ConfigBatch.concat([b, b.take(slice(1, 2))]).configs() == [*CONFIGS, CONFIGS[1]]
    again = pickle.loads(pickle.dumps(b))
    assert type(again) is ConfigBatch and again.configs() == CONFIGS
    assert b.row(1)["nccl_algo"] == "allreduce:tree;allgather:ring"
    with pytest.raises(ValueError, match="NCCL tables"):
        ConfigBatch.concat([b, ConfigBatch.from_configs(CONFIGS[:1])])


def test_from_columns_fills_defaults_and_rejects_unknown_columns() -> None:
    b = ConfigBatch.from_columns(tp=[2, 4])
    assert b.configs() == [ParallelConfig(tp=2), ParallelConfig(tp=4)]
    assert b.nccl_algo_table == ("auto",)
    with pytest.raises(TypeError, match="no_such_column"):
        ConfigBatch.from_columns(tp=[1], no_such_column=[1])


@pytest.mark.parametrize(("kw", "field", "message"), [
    ({"tp": 0}, "parallel.tp", "must be >= 1, got 0"),
    ({"dp": 1.5}, "parallel.dp", "must be an integer, got 1.5"),
    ({"zero_stage": 4}, "parallel.zero_stage", "must be 0..3, got 4"),
    ({"zero_stage": -1}, "parallel.zero_stage", "must be >= 0, got -1"),
    ({"precision": "bf61"}, "parallel.precision", "unknown value 'bf61'"),
    ({"sequence_parallel": 1}, "parallel.sequence_parallel", "must be true or false, got 1"),
    ({"nccl_algo": ""}, "parallel.nccl_algo", "must be a non-empty string, got ''"),
    ({"virtual_stages": 2}, "parallel.virtual_stages", "2 needs schedule: interleaved"),
])
def test_config_validation_names_the_field(kw, field, message) -> None:
    with pytest.raises(InputError) as e:
        ParallelConfig(**kw)
    assert e.value.field == field and message in str(e.value)


@pytest.mark.parametrize(("kw", "field", "message"), [
    ({"tp": (0,)}, "space.tp", "must be >= 1, got 0"),
    ({"tp": (True,)}, "space.tp", "must be integers, got True"),
    ({"zero_stage": (4,)}, "space.zero_stage", "unknown value 4"),
    ({"zero_stage": (-1,)}, "space.zero_stage", "unknown value -1"),
    ({"schedule": ("zb",)}, "space.schedule", "unknown value 'zb'"),
    ({"sequence_parallel": ("yes",)}, "space.sequence_parallel", "must be true or false"),
    ({"nccl_proto": ("ll256",)}, "space.nccl_proto", "unknown token 'll256'"),
    ({"pp": ()}, "space.pp", "must list at least one value"),
])
def test_space_validation_names_the_field(kw, field, message) -> None:
    with pytest.raises(InputError) as e:
        SearchSpace(**kw)
    assert e.value.field == field and message in str(e.value)


def test_space_normalises_values() -> None:
    s = SearchSpace(tp=(np.int64(2), 2.0, 4), precision=(" BF16", "fp16"),
                    sequence_parallel=(np.bool_(True),), nccl_algo=("Ring",))
    assert s.tp == (2, 4) and s.precision == ("bf16", "fp16")
    assert s.sequence_parallel == (True,) and s.nccl_algo == ("ring",)
    assert SearchSpace(zero_stage=(0, 1, 2, 3)).zero_stage == (0, 1, 2, 3)


def test_derived_dp_is_not_a_search_dimension() -> None:
    with pytest.raises(InputError) as e:
        check_dimension("dp")
    assert e.value.field == "space.dp" and "derived" in e.value.hint
    assert not DIMENSIONS_BY_NAME["dp"].searched


# The tests below pin what existing dimensions generate (names, order), so that stored
# studies, study files, scripts and the human table keep working; a new dimension may add
# entries anywhere without breaking them.
def _known(generated, known):
    return [x for x in generated if x in known]


def test_enumeration_order_puts_the_ruled_dimensions_first() -> None:
    known = ("tp", "pp", "precision", "micro_batch_size", "schedule", "virtual_stages",
             "zero_stage", "sequence_parallel", "nccl_algo", "nccl_proto", "recompute")
    assert _known(_STAGES, known) == list(known)


def test_optuna_parameters_keep_their_names_and_order() -> None:
    params = optuna_params(PARALLEL_DIMENSIONS)
    # ep and etp join the layout (their tokens are the old ones at ep = etp = 1)
    known = [("layout", ("tp", "pp", "ep", "etp")), ("micro_batch_size", ("micro_batch_size",)),
             ("recompute", ("recompute",)), ("sequence_parallel", ("sequence_parallel",)),
             ("zero_stage", ("zero_stage",)), ("schedule", ("schedule", "virtual_stages")),
             ("precision", ("precision",)), ("nccl_algo", ("nccl_algo",)),
             ("nccl_proto", ("nccl_proto",))]
    assert _known([(p.name, tuple(d.name for d in members)) for p, members in params],
                  known) == known
    by_name = {p.name: p for p, _ in params}
    layout, schedule = by_name["layout"], by_name["schedule"]
    assert layout.token(4, 2) == "tp4_pp2" and layout.log_steps
    assert schedule.token("interleaved", 2) == "interleaved_v2"
    assert schedule.token("1f1b", 1) == "1f1b"


def test_a_dimension_of_each_kind_encodes_and_decodes() -> None:
    for d, values, table in (
            (Dimension(INT, 1, "x", name="x"), [1, 3], ()),
            (Dimension(BOOL, False, "x", name="x"), [True, False], ()),
            (Dimension(CHOICE, "b", "x", values=("a", "b"), codes=IntEnum("AB", "A B", start=0),
                       name="x"), ["b", "a"], ()),
            (Dimension(STRING, "auto", "x", values=("auto", "y"), parse=_layout_string,
                       grammar="stage letters E, t, L", name="x"), ["y", "auto"],
             ("auto", "y"))):
        col = d.encode(values, table)
        assert d.decode_column(col, table) == values
        assert [d.decode(c, table) for c in col] == values
    with pytest.raises(ValueError, match="codes"):
        Dimension(CHOICE, "a", "x", values=("a", "b"))
    with pytest.raises(ValueError, match="needs parse and grammar"):
        Dimension(STRING, "auto", "x")


def _layout_string(value, field):
    if set(value) - set("EtL|"):
        raise InputError(field, f"bad layout {value!r}")
    return value


def test_a_string_dimension_brings_its_own_grammar() -> None:
    # a future STRING dimension (a pipeline layout string) is not checked as NCCL_ALGO
    d = Dimension(STRING, "Et|tL", "pipeline layout", parse=_layout_string,
                  grammar="stage letters E (embedding), t (layer), L (loss), | between stages")
    assert d.valid_text.startswith("stage letters") and d.parse("Ett|tL", "f") == "Ett|tL"
    nccl = DIMENSIONS_BY_NAME["nccl_algo"]
    assert nccl.parse(" Ring,TREE ", "space.nccl_algo") == "ring,tree"
    assert "NCCL's grammar" in nccl.valid_text
    with pytest.raises(InputError) as e:
        DIMENSIONS_BY_NAME["nccl_proto"].parse("ring", "parallel.nccl_proto")
    assert e.value.field == "parallel.nccl_proto"


def test_cli_flags_are_generated() -> None:
    from optimizer.cli.options import SPACE_FLAGS

    known = ["tp", "pp", "micro-batch-size", "precision", "recompute", "sequence-parallel",
             "zero-stage", "schedule", "virtual-stages", "nccl-algo", "nccl-proto"]
    assert _known(SPACE_FLAGS, known) == known
    # pinned, not generated: the flags' dimensions in the space's order
    assert [v[0] for v in SPACE_FLAGS.values()] == [
        "tp", "pp", "cp", "micro_batch_size", "precision", "recompute", "sequence_parallel",
        "zero_stage", "schedule", "virtual_stages", "stage_plan", "recompute_num_layers",
        "recompute_modules", "precision_aware_optimizer", "cpu_offloading_num_layers",
        "nccl_algo", "nccl_proto", "cp_comm_type", "ep", "etp"]
    dim, parse, text, metavar = SPACE_FLAGS["zero-stage"]
    assert parse("0, 1") == (0, 1) and "valid: 0, 1, 2, 3" in text and "default space: 0, 1" in text
    assert SPACE_FLAGS["nccl-algo"][1]("ring,tree") == ("ring,tree",)
    assert SPACE_FLAGS["nccl-algo"][3] == "V"
    assert SPACE_FLAGS["sequence-parallel"][1]("on,off") == (True, False)


def test_report_columns_are_generated() -> None:
    from optimizer.output.report import FRONT_COLUMNS

    known = ["#", "tp", "pp", "dp", "mbs", "m", "schedule", "recompute", "SP", "ZeRO", "prec",
             "NCCL", "tokens/s", "MFU", "step s", "peak GiB", "bottleneck"]
    assert _known(FRONT_COLUMNS, known) == known
    assert FRONT_COLUMNS[0] == "#" and FRONT_COLUMNS[-5:] == tuple(known[-5:])


def test_optuna_encoding_tokens() -> None:
    from optimizer.api import resolve_problem
    from optimizer.search import optuna_engine as osr
    from optimizer.search.base import problem_space
    from search_spaces.enumerate import enumerate_valid
    from search_spaces.rules import Context

    problem = resolve_problem(model="65b", gpus=16)
    space = problem_space(problem, None)
    valid = enumerate_valid(Context(problem.model, problem.cluster, problem.training), space)
    enc = osr.Encoding.build(valid, space)
    desc = enc.description()
    # the new dimensions at their default alone (cp at 2k tokens, the stage plan where
    # balanced moves no layer, the optimizer and offload levers) are left out of the
    # description (the study fingerprint); partial recompute is in the default space since
    # issue 21's reach work, so it is described
    new = ("cp", "cp_comm_type", "stage_plan", "precision_aware_optimizer",
           "cpu_offloading_num_layers")
    assert list(desc) == [p for p in osr.PARAM_ORDER if p not in new]
    assert desc["recompute_num_layers"] == [0, 1, 2, 4, 8]
    # every v <= 8 that pp x v divides 80 layers with, and the fine-grained 10 and 20
    # (chunks of one or two layers; 16, on pp 5 alone, breaks a batch rule there)
    assert "tp4_pp4" in desc["layout"] and desc["schedule"] == [
        "1f1b", "interleaved_v2", "interleaved_v4", "interleaved_v5", "interleaved_v8",
        "interleaved_v10", "interleaved_v20"]
    assert desc["recompute"] == ["none", "selective", "full"]
    assert desc["sequence_parallel"] == [False, True] and desc["nccl_algo"] == ["auto"]
    row = 7
    c = valid.config(row)
    params = enc.params_for(row)
    assert params["layout"] == f"tp{c.tp}_pp{c.pp}"
    assert enc.decode(params) == row


_BAD = {"tp": 0, "pp": 0, "cp": 0, "dp": 0, "micro_batch_size": 0, "precision": "bf61",
        "recompute": "nope", "sequence_parallel": 3, "zero_stage": 9, "schedule": "x",
        "virtual_stages": 0, "stage_plan": "lopsided", "recompute_num_layers": -1,
        "recompute_modules": "moe", "precision_aware_optimizer": "fp4", "cpu_offloading_num_layers": -1, "nccl_algo": "rign",
        "nccl_proto": "simpel", "cp_comm_type": "ring", "ep": 0, "etp": 0}


@pytest.mark.parametrize(("kw", "field"), [
    # ebe5f60 checked the integers first and named the second field of these pairs
    # (changelog-cost-model.md); now the first bad field in declaration order is named
    ({"zero_stage": 9, "recompute": "nope"}, "parallel.recompute"),
    ({"zero_stage": 9, "precision": "bf61"}, "parallel.precision"),
    ({"virtual_stages": 0, "schedule": "x"}, "parallel.schedule"),
    ({"virtual_stages": 0, "zero_stage": 9}, "parallel.zero_stage"),
    ({"schedule": "x", "sequence_parallel": 3}, "parallel.sequence_parallel"),
    ({"nccl_proto": "simpel", "nccl_algo": "rign"}, "parallel.nccl_algo"),  # ebe5f60: no error
])
def test_two_bad_fields_name_the_first_in_declaration_order(kw, field) -> None:
    with pytest.raises(InputError) as e:
        ParallelConfig(**kw)
    assert e.value.field == field


def test_every_pair_of_bad_fields_names_the_earlier_one() -> None:
    order = [d.name for d in PARALLEL_DIMENSIONS]
    assert order == list(_BAD)  # the declaration order this pins
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            with pytest.raises(InputError) as e:
                ParallelConfig(**{a: _BAD[a], b: _BAD[b]})
            assert e.value.field == f"parallel.{a}", (a, b)
