"""CI sample of the parser fuzzing (issue 8): a few hundred inputs per parser.

The strategies and targets live in ``benchmarks/fuzz_parsers.py`` (10,000 inputs per parser
there). Every input must either parse or raise :class:`costmodel.errors.InputError`; any
other exception fails the test and hypothesis shrinks it to a minimal input. The regression
tests below pin the bugs the full run found, one input each.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from conftest import DATA, ROOT
from hypothesis import HealthCheck, given, settings

from costmodel import loaders
from costmodel.errors import InputError
from optimizer import studies

EXAMPLES_PER_PARSER = 300


def _load_fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_parsers",
                                                  ROOT / "benchmarks" / "fuzz_parsers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_parsers"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


FZ = _load_fuzz_module()
TARGETS = FZ.targets()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return FZ.prepare_workdir(tmp_path_factory.mktemp("fuzz"))


def test_all_parsers_are_fuzzed():
    expected = {"model_file", "model_mapping", "cluster_file", "cluster_mapping", "run_file",
                "run_mapping", "study_file"}
    assert expected <= set(TARGETS)
    if importlib.util.find_spec("costmodel.nccl_tests") is not None:
        assert "nccl_tests" in TARGETS, "costmodel/nccl_tests.py exists but is not fuzzed"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_parser_never_raises_anything_but_input_error(name, workdir):
    target = TARGETS[name]

    @settings(max_examples=EXAMPLES_PER_PARSER, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much,
                                     HealthCheck.large_base_example])
    @given(target.strategy)
    def run(example):
        try:
            target.call(example, workdir)
        except InputError:
            pass

    run()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_inputs_reach_both_outcomes(name, workdir):
    # The strategies must produce valid documents too (mutations of valid fixtures that still
    # parse), or the fuzzing only tests the first line of validation.
    target = FZ.Target(name, TARGETS[name].strategy, TARGETS[name].call)
    FZ.fuzz(target, 150, workdir, seed=0)
    assert target.counts["input_error"] > 0, target.counts
    assert target.counts["ok"] > 0, target.counts


def test_classify_records_a_bug(workdir):
    # the benchmark's bookkeeping: anything but InputError is recorded as a bug
    def boom(_ex, _wd):
        raise KeyError("x")

    t = FZ.Target("boom", None, boom)
    assert FZ.classify(t, {"a": 1}, workdir) == "bug"
    assert t.counts["bug"] == 1 and list(t.bugs) == [("KeyError", next(iter(t.bugs))[1])]


# ==== regressions found by the full fuzz run ===============================================
_MODEL = {"name": "x", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
          "ffn_hidden_size": 256, "vocab_size": 100}


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_integer_in_model_is_input_error(value):
    # YAML `num_layers: .inf` / `1e400` / `.nan`: int(inf) raised OverflowError and
    # int(nan) ValueError inside costmodel.specs._int
    from costmodel.loaders import load_model

    with pytest.raises(InputError) as e:
        load_model(dict(_MODEL, num_layers=value))
    assert e.value.field == "model.num_layers"


@pytest.mark.parametrize("doc", [{"gpu": "a100", "num_nodes": math.inf},
                                 {"gpu": "a100", "gpus_per_node": math.inf},
                                 {"gpu": "a100", "inter_node": {"nics_per_node": math.inf}}])
def test_non_finite_integer_in_cluster_is_input_error(doc):
    # costmodel.loaders._num(integer=True) called int(inf)
    from costmodel.loaders import load_cluster

    with pytest.raises(InputError):
        load_cluster(doc)


@pytest.mark.parametrize("doc", [
    {"gpu": {"base": "a100", "memory_GB": math.inf}},
    {"gpu": "a100", "intra_node": {"bandwidth_GBps": math.inf}},
    {"gpu": "a100", "inter_node": {"nic_bandwidth_Gbps": math.inf}},
    {"gpu": "a100", "inter_node": {"latency_us": math.inf}},
])
def test_infinite_quantities_in_cluster_are_rejected(doc):
    # `memory_GB: .inf` gave an infinite memory limit and JSON output with the invalid token
    # `Infinity`; `bandwidth_GBps: .inf` failed later naming an internal field
    # (nccl_system.nic_bytes_per_s). A finite number is required, named at the input field.
    from costmodel.loaders import load_cluster

    with pytest.raises(InputError) as e:
        load_cluster(doc)
    assert e.value.field.startswith("cluster."), e.value.field


def test_deeply_nested_json_is_input_error(tmp_path):
    # json.loads raised RecursionError on ~100,000 nested arrays (the YAML loader already
    # reports "exceeded maximum nesting depth")
    from costmodel.loaders import load_model

    f = tmp_path / "m.json"
    f.write_text("[" * 100_000)
    with pytest.raises(InputError) as e:
        load_model(f)
    assert e.value.field == "model"


@pytest.mark.parametrize("node_id", [None, {"a": 1}, [{"a": 1}]])
def test_bad_graph_node_id_is_input_error(node_id):
    # networkx raised ValueError("None cannot be a node") / TypeError (unhashable dict) from
    # costmodel.topology._graph_from_data
    import json

    from costmodel.loaders import load_cluster

    doc = json.loads((DATA / "cluster_graph.json").read_text())
    doc["nodes"][0]["id"] = node_id
    with pytest.raises(InputError) as e:
        load_cluster(doc)
    assert e.value.field.startswith("cluster.graph.nodes"), e.value.field


@pytest.mark.parametrize("where", ["nodes", "edges"])
def test_non_string_graph_attribute_names_are_input_errors(where):
    # a YAML graph may carry integer keys; graph.add_node(nid, **attrs) raised
    # TypeError("keywords must be strings") in costmodel.topology._graph_from_data
    import json

    from costmodel.loaders import load_cluster

    doc = json.loads((DATA / "cluster_graph.json").read_text())
    items = doc[where] if where in doc else doc["links"]
    items[0][1] = "x"
    with pytest.raises(InputError) as e:
        load_cluster(doc)
    assert e.value.field.startswith("cluster.graph."), e.value.field


def test_nccl_tests_binary_file_is_input_error(tmp_path):
    # load_nccl_tests caught OSError only; Path.read_text raised UnicodeDecodeError
    nccl_tests = pytest.importorskip("costmodel.nccl_tests")
    f = tmp_path / "all_reduce_perf.txt"
    f.write_bytes((DATA / "garbage.bin").read_bytes())
    with pytest.raises(InputError) as e:
        nccl_tests.load_nccl_tests(f)
    assert e.value.field == "nccl_tests"


def test_nccl_tests_deeply_nested_json_is_input_error():
    nccl_tests = pytest.importorskip("costmodel.nccl_tests")
    with pytest.raises(InputError):
        nccl_tests.parse_nccl_tests("[" * 100_000)


def test_non_finite_json_constants_are_rejected(tmp_path):
    # json.loads accepts the non-standard NaN / Infinity tokens; a strict JSON document
    # never contains them, and `"seq_length": NaN` then crashed in specs._int
    from costmodel.loaders import load_run

    f = tmp_path / "run.json"
    f.write_text('{"model": "7b", "cluster": {"gpu": "a100", "num_nodes": 1}, '
                 '"training": {"seq_length": NaN}, "parallel": {"tp": 8}}')
    with pytest.raises(InputError):
        load_run(f)


@pytest.mark.parametrize("text", [
    "num_layers: !!timestamp x\n",  # PyYAML: AttributeError ('NoneType' ... 'groupdict')
    "!!float name\n",  # ValueError: could not convert string to float
    "!!float \n",  # IndexError: string index out of range
    "num_layers: !!int 0x\n",  # ValueError: invalid literal for int() with base 16
    "num_layers: !!int ''\n",  # IndexError
    "!!bool x\n",  # KeyError: 'x'
    "num_layers: !!set 4096\n",  # paraplan's duplicate-key check iterated a scalar node
])
def test_badly_tagged_yaml_scalars_are_input_errors(tmp_path, text):
    # PyYAML's safe constructors raise plain Python exceptions (not YAMLError) for explicitly
    # tagged scalars they cannot convert; the loader must report them as invalid YAML
    from costmodel.loaders import load_model, parse_document

    with pytest.raises(InputError):
        parse_document(text, field="model")
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_model(f)
    assert e.value.field == "model"


def test_space_section_named_space_is_input_error(tmp_path):
    # `space: {space: ...}` in a study file: restrict(space, **overrides) received the
    # override "space" twice -> TypeError (search_spaces.space.restrict)
    from search_spaces.space import SearchSpace, space_from_mapping

    with pytest.raises(InputError) as e:
        space_from_mapping({"space": [1]}, SearchSpace())
    assert e.value.field == "space.space"


@pytest.mark.parametrize("call", [
    lambda: loaders.load_run({"model": "~x", "cluster": "x"}),
    lambda: loaders.load_model("~x"),
    lambda: loaders.load_cluster("~x"),
    lambda: loaders.load_run("~x/run.yaml"),
    lambda: studies.load_study_file("~x"),
], ids=["run_mapping", "model", "cluster", "run_file", "study_file"])
def test_tilde_of_an_unknown_user_is_input_error(call):
    # found by the fuzzer (seed 106): pathlib's expanduser raises RuntimeError for '~x' when
    # user x does not exist
    with pytest.raises(InputError, match="cannot expand"):
        call()


# ==== nesting depth (issue 20): a deep document is exit 2, never RecursionError ==============
_DEEP = 10_000


def _deep_list(n: int = _DEEP) -> list:
    value: list = []
    for _ in range(n):
        value = [value]
    return value


def _deep_dict(n: int = _DEEP, key: str = "gpu") -> dict:
    value: dict = {}
    for _ in range(n):
        value = {key: value}
    return value


_DEEP_TEXT = {
    "list": "[" * _DEEP + "]" * _DEEP,
    "dict": "{a: " * _DEEP + "1" + "}" * _DEEP,
    "block": "- " * _DEEP + "1",
}


@pytest.mark.parametrize("kind", sorted(_DEEP_TEXT))
@pytest.mark.parametrize("section", ["model", "cluster", "run", "study"])
def test_deeply_nested_yaml_file_is_input_error_naming_the_field(tmp_path, section, kind):
    # 10,000 nested collections: libyaml parses them, then repr() in loaders._short raised
    # RecursionError (exit 1); ~100,000 crashed the C composer. The depth is now bounded on
    # the YAML event stream before anything is built.
    from costmodel.errors import MAX_NESTING_DEPTH

    deep = _DEEP_TEXT[kind]
    f = tmp_path / f"{section}.yaml"
    f.write_text(f"name: x\nsource:\n  {deep}\n")
    with pytest.raises(InputError) as e:
        if section == "model":
            loaders.load_model(f)
        elif section == "cluster":
            loaders.load_cluster(f)
        elif section == "run":
            loaders.load_run(f)
        else:
            studies.load_study_file(f)
    assert e.value.field.startswith(f"{section}.source"), e.value.field
    assert f"more than {MAX_NESTING_DEPTH} levels" in e.value.message
    assert e.value.exit_code == 2


@pytest.mark.parametrize("section", ["model", "cluster", "graph"])
def test_deeply_nested_json_file_is_input_error(tmp_path, section):
    import json

    doc: dict = {"name": "x", "source": _deep_list()}
    if section == "graph":
        doc = json.loads((DATA / "cluster_graph.json").read_text())
        doc["nodes"][0]["id"] = _deep_list(500)  # json.dumps itself recurses
    else:
        doc["source"] = _deep_list(500)
    f = tmp_path / f"{section}.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        (loaders.load_model if section == "model" else loaders.load_cluster)(f)
    expected = "cluster" if section == "graph" else section
    assert e.value.field.startswith(expected), e.value.field
    assert "levels deep" in e.value.message


@pytest.mark.parametrize("make", [_deep_list, _deep_dict])
@pytest.mark.parametrize("section", ["model", "cluster", "graph", "run"])
def test_deeply_nested_mapping_is_input_error(section, make):
    # the library entry points take mappings too (no document parser in between)
    import json

    deep = make()
    with pytest.raises(InputError) as e:
        if section == "model":
            loaders.load_model(dict(_MODEL, name=deep))
        elif section == "cluster":
            loaders.load_cluster({"gpu": "a100", "intra_node": deep})
        elif section == "graph":
            from costmodel.topology import cluster_from_graph

            doc = json.loads((DATA / "cluster_graph.json").read_text())
            doc["nodes"][0]["id"] = deep
            cluster_from_graph(doc)
        else:
            loaders.load_run({"model": "7b", "cluster": {"gpu": deep}})
    assert "levels deep" in e.value.message, e.value
    assert e.value.field.split(".")[0].split("[")[0] in ("model", "cluster", "run")


def test_short_repr_of_a_deep_value_is_bounded():
    # loaders._short names the bad value in messages; a plain repr recursed once per level
    text = loaders._short(_deep_list())
    assert len(text) <= 60 and text.startswith("[[[")
    assert loaders._short([1, {"a": 2}]) == "[1, {'a': 2}]"  # shallow values: plain repr


def test_shared_yaml_aliases_are_not_expanded_by_the_depth_check():
    # a billion-laughs document: containers shared by aliases are walked once per depth
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    doc = loaders.parse_document("\n".join(lines), field="x")
    assert len(doc["a11"]) == 10
    with pytest.raises(InputError, match="levels deep"):  # a self-referencing alias
        loaders.parse_document("a: &x [*x]", field="x")


@pytest.mark.parametrize("value", [None, 1, "x", 1.5, True, [], {}, (), [1, {"a": [2]}]])
def test_nesting_check_accepts_shallow_values(value):
    from costmodel.errors import check_nesting

    check_nesting("x", value)


def test_yaml_depth_is_counted_in_the_one_load(monkeypatch):
    # the composer counts the levels (aliases included), so YAML needs no second pass over
    # the events nor a walk of the built document
    from costmodel.errors import MAX_NESTING_DEPTH

    def no_walk(*a, **k):
        raise AssertionError("YAML documents are not walked again")

    monkeypatch.setattr(loaders, "check_nesting", no_walk)
    n = MAX_NESTING_DEPTH - 4  # the root mapping, then n lists, then the alias's 3 levels
    ok = "x: &y [[[1]]]\nz: " + "[" * n + "*y" + "]" * n
    assert loaders.parse_document(ok, field="f")["x"] == [[[1]]]
    deep = "x: &y [[[1]]]\nz: " + "[" * (n + 1) + "*y" + "]" * (n + 1)
    with pytest.raises(InputError, match="levels deep through an alias") as e:
        loaders.parse_document(deep, field="f")
    assert e.value.field == "f.z[0][0][0]"
    with pytest.raises(InputError, match=f"more than {MAX_NESTING_DEPTH} levels"):
        k = MAX_NESTING_DEPTH + 1
        loaders.parse_document("{a: " * k + "1" + "}" * k, field="f")
    loaders.parse_document("{a: " * MAX_NESTING_DEPTH + "1" + "}" * MAX_NESTING_DEPTH, field="f")
