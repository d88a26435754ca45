"""Study files (optimizer/studies/study_file.py): schema validation, run/resume, report, shipped studies."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import DATA, ROOT

from costmodel.errors import InfeasibleError, InputError
from optimizer import cli
from optimizer.studies import load_study_file, report_study, resolve_storage, run_study

STUDIES = sorted((ROOT / "studies").glob("*.yaml"))

# A small study: LLaMA-7B on one node of 8 A100-80GB, a space of a few hundred points.
SMALL = """\
schema_version: 1
name: small
model: llama-7b
cluster: {gpus: 8, gpu: a100-sxm-80gb, gpus_per_node: 8}
training: {seq_length: 2048, global_batch_size: 64}
space:
  tp: [1, 2, 4, 8]
  pp: [1, 2, 4]
  micro_batch_size: [1, 2]
  recompute: [none, selective, full]
  zero_stage: [0, 1]
  schedule: [1f1b]
  virtual_stages: [1]
  sequence_parallel: [false, true]
constraints: {memory_limit_gib: 76}
search: {sampler: exhaustive, seed: 0}
"""
SMALL_TPE = SMALL.replace("search: {sampler: exhaustive, seed: 0}",
                          "search: {sampler: tpe, trials: 40, seed: 3, batch_size: 8}")


def _write(directory: Path, text: str, name: str = "study.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_study_file(_write(tmp_path, text))
    return info.value


# ---- schema validation ----------------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "field", "words"), [
    ("search:", "serach:", "study.serach", "did you mean 'search'"),
    ("search: {sampler: exhaustive, seed: 0}", "search: {sampler: exhaustive, sed: 0}",
     "study.search.sed", "did you mean 'seed'"),
    ("training: {seq_length: 2048,", "training: {seq_len: 2048,", "study.training.seq_len",
     "seq_length"),
    ("  pp: [1, 2, 4]", "  ppp: [1, 2, 4]", "study.space.ppp", "'pp'"),
    ("constraints: {memory_limit_gib: 76}", "constraints: {memory_limt_gib: 76}",
     "study.constraints.memory_limt_gib", "memory_limit_gib"),
    ("search: {sampler: exhaustive,", "search: {sampler: tpee,", "study.search.sampler",
     "'tpe'"),
    ("seed: 0}", "seed: zero}", "study.search.seed", "integer"),
    ("search: {sampler: exhaustive, seed: 0}", "search: {sampler: tpe, trials: 0}",
     "study.search.trials", ">= 1"),
    ("search: {sampler: exhaustive, seed: 0}", "search: {sampler: tpe, trials: 1.5}",
     "study.search.trials", "integer"),
    ("search: {sampler: exhaustive, seed: 0}", "search: {allow_cross_node_tp: maybe}",
     "study.search.allow_cross_node_tp", "true or false"),
    ("training: {seq_length: 2048, global_batch_size: 64}", "training: 5", "study.training",
     "mapping"),
    ("global_batch_size: 64", "global_batch_size: -4", "study.training.global_batch_size",
     ">= 1"),
    ("  tp: [1, 2, 4, 8]", "  tp: [1, two]", "study.space.tp", "integers"),
    ("  recompute: [none, selective, full]", "  recompute: [sometimes]", "study.space.recompute",
     "unknown value"),
    ("  pp: [1, 2, 4]", "  dp: [1, 2]", "study.space.dp", "derived"),
    ("constraints: {memory_limit_gib: 76}", "constraints: {memory_limit_gib: -1}",
     "study.constraints.memory_limit_gib", "positive"),
    ("constraints: {memory_limit_gib: 76}", "constraints: {memory_fraction: 1.5}",
     "study.constraints.memory_fraction", "(0, 1]"),
    ("constraints: {memory_limit_gib: 76}",
     "constraints: {memory_limit_gib: 70, memory_fraction: 0.8}", "study.constraints",
     "not both"),
    ("model: llama-7b", "model: llama-7bb", "study.model", "did you mean"),
    ("model: llama-7b", "model: {name: x, num_layers: 2}", "study.model.hidden_size",
     "missing"),
    ("gpu: a100-sxm-80gb,", "gpu: a100-sxm-80,", "study.cluster.gpu", "a100-sxm-80gb"),
    ("{gpus: 8, gpu:", "{gpus: 8, num_nodes: 2, gpu:", "study.cluster.gpus", "16"),
    ("{gpus: 8, gpu:", "{gpus: eight, gpu:", "study.cluster.gpus", "integer"),
    ("schema_version: 1", "schema_version: 2", "study.schema_version", "unsupported"),
    ("schema_version: 1\n", "", "study.schema_version", "missing"),
    ("name: small\n", "", "study.name", "missing"),
    ("name: small", "name: ''", "study.name", "non-empty"),
    ("model: llama-7b\n", "", "study.model", "missing"),
    ("constraints:", "objectives: [maximize tokens_per_s, minimize mfu]\nconstraints:",
     "study.objectives[1]", "unsupported objective"),
    ("constraints:", "objectives: [minimize tokens_per_s, minimize peak_memory_bytes]\n"
     "constraints:", "study.objectives[0]", "maximized"),
    ("constraints:", "objectives: [maximise tokens_per_s, minimize peak_memory_bytes]\n"
     "constraints:", "study.objectives[0]", "'maximize'"),
    ("constraints:", "objectives: [maximize tokens_per_s]\nconstraints:", "study.objectives",
     "missing peak_memory_bytes"),
    ("constraints:", "objectives: maximize tokens_per_s\nconstraints:", "study.objectives",
     "must be a list"),
    ("constraints:", "objectives: [{metric: tokens_per_s, direction: maximize, weight: 2}, "
     "{metric: peak_memory_bytes}]\nconstraints:", "study.objectives[0].weight", "unknown key"),
    ("constraints:", "storage: 42\nconstraints:", "study.storage", "string"),
    ("constraints:", "study_name: [a]\nconstraints:", "study.study_name", "string"),
])
def test_schema_errors_name_the_field(tmp_path, old, new, field, words):
    assert old in SMALL, old
    err = _error(tmp_path, SMALL.replace(old, new, 1))
    assert err.field == field, str(err)
    assert words in str(err), str(err)


def test_duplicate_key_is_an_error(tmp_path):
    err = _error(tmp_path, SMALL + "name: again\n")
    assert err.field == "study" and "duplicate key 'name'" in str(err)


def test_malformed_yaml_names_the_line(tmp_path):
    err = _error(tmp_path, "schema_version: 1\nname: [unclosed\nmodel: llama-7b\n")
    assert err.field == "study" and "invalid YAML" in str(err) and "line" in str(err)


def test_yaml_tags_are_not_executed(tmp_path):
    # safe_load semantics: a python/object tag is an error, not a constructor call.
    err = _error(tmp_path, "schema_version: 1\nname: !!python/object/apply:os.system "
                           "['echo pwned']\n")
    assert err.field == "study" and "invalid YAML" in str(err)


def test_binary_garbage_is_rejected(tmp_path):
    path = tmp_path / "garbage.yaml"
    path.write_bytes((DATA / "garbage.bin").read_bytes())
    with pytest.raises(InputError) as info:
        load_study_file(path)
    assert info.value.field == "study"
    assert "binary" in str(info.value) or "UTF-8" in str(info.value)


@pytest.mark.parametrize("text", ["", "   \n", "- a\n- b\n", "just a string\n"])
def test_empty_or_non_mapping_documents(tmp_path, text):
    err = _error(tmp_path, text)
    assert err.field == "study"
    assert "empty" in str(err) or "mapping" in str(err)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError) as info:
        load_study_file(tmp_path / "nope.yaml")
    assert info.value.field == "study" and "not found" in str(info.value)
    with pytest.raises(InputError) as info:
        load_study_file(tmp_path)
    assert info.value.field == "study" and "directory" in str(info.value)


def test_paths_resolve_relative_to_the_study_file(tmp_path, monkeypatch):
    sub = tmp_path / "project"
    _write(sub / "models", "name: tiny\nnum_layers: 4\nhidden_size: 512\n"
           "num_attention_heads: 8\nffn_hidden_size: 2048\nvocab_size: 32000\n", "tiny.yaml")
    _write(sub / "clusters", "num_nodes: 1\ngpus_per_node: 4\ngpu: a100-sxm-40gb\n",
           "one.yaml")
    text = SMALL.replace("model: llama-7b", "model: models/tiny.yaml").replace(
        "cluster: {gpus: 8, gpu: a100-sxm-80gb, gpus_per_node: 8}", "cluster: clusters/one.yaml"
    ).replace("  tp: [1, 2, 4, 8]", "  tp: [1, 2, 4]").replace(
        "constraints:", "storage: out/s.journal\nconstraints:").replace(
        "memory_limit_gib: 76", "memory_limit_gib: 36")  # within the A100-40GB's memory
    path = _write(sub, text)
    monkeypatch.chdir(tmp_path)  # somewhere else: paths must not resolve against the cwd
    study = load_study_file("project/study.yaml")
    assert study.model.name == "tiny" and study.model.num_layers == 4
    assert study.cluster.num_gpus == 4 and study.cluster.gpu.name == "a100-sxm-40gb"
    assert study.storage == str(sub.resolve() / "out" / "s.journal")
    assert study.path == path.resolve()


def test_defaults(tmp_path):
    study = load_study_file(_write(tmp_path, SMALL, "my-study.yaml"))
    assert study.storage == str((tmp_path / "my-study.journal").resolve())
    assert study.study_name == "small"
    assert study.objectives == (("tokens_per_s", "maximize"), ("peak_memory_bytes", "minimize"))
    assert study.memory_limit_gib == 76.0
    assert study.space.tp == (1, 2, 4, 8) and study.space.precision == ("bf16",)
    assert (study.trials, study.batch_size, study.allow_cross_node_tp) == (300, 32, False)
    # omitted space dimensions keep the default space's values
    minimal = load_study_file(_write(tmp_path / "b", "schema_version: 1\nname: m\n"
                                     "model: llama-7b\ncluster: {gpus: 8, gpu: a100-sxm-80gb}\n"))
    assert minimal.space.recompute == ("none", "selective", "full")
    from costmodel.memory_verdict import DEFAULT_MEMORY_FRACTION

    assert minimal.memory_limit_gib is None
    assert minimal.memory_fraction == DEFAULT_MEMORY_FRACTION == 0.98
    assert minimal.training.seq_length == 2048  # TrainingSpec's default


def test_objective_mapping_form_and_order(tmp_path):
    text = SMALL.replace("constraints:", "objectives:\n  - {metric: peak_memory_bytes, "
                         "direction: minimize}\n  - {metric: tokens_per_s}\nconstraints:")
    study = load_study_file(_write(tmp_path, text))
    assert study.objectives == (("peak_memory_bytes", "minimize"), ("tokens_per_s", "maximize"))


def test_storage_urls(tmp_path):
    base = tmp_path.resolve()
    assert resolve_storage("sqlite:///x.db", base) == f"sqlite:///{base / 'x.db'}"
    assert resolve_storage("sqlite:////abs/x.db", base) == "sqlite:////abs/x.db"
    url = "postgresql+psycopg2://user@db.example/optuna"
    assert resolve_storage(url, base) == url
    assert resolve_storage("j/s.journal", base) == str(base / "j" / "s.journal")


def test_fingerprint_tracks_the_definition_not_the_storage(tmp_path):
    a = load_study_file(_write(tmp_path / "a", SMALL))
    b = load_study_file(_write(tmp_path / "b", SMALL.replace(
        "constraints:", "storage: elsewhere.journal\nstudy_name: other\nconstraints:")))
    c = load_study_file(_write(tmp_path / "c", SMALL.replace("seed: 0", "seed: 1")))
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint


# ---- running, resuming, reporting -----------------------------------------------------------
def _front(doc: dict) -> str:
    return json.dumps(doc["pareto_front"], sort_keys=True)


@pytest.mark.parametrize("text", [SMALL, SMALL_TPE], ids=["exhaustive", "tpe"])
def test_same_file_fresh_storage_same_front(tmp_path, text):
    first = run_study(load_study_file(_write(tmp_path / "one", text)))
    second = run_study(load_study_file(_write(tmp_path / "two", text)))
    assert first["pareto_front"], "empty front"
    assert _front(first) == _front(second)
    assert first["recommended"] == second["recommended"]
    assert first["study"]["definition_sha256"] == second["study"]["definition_sha256"]
    assert (tmp_path / "one" / "study.journal").is_file()


@pytest.mark.parametrize("text", [SMALL, SMALL_TPE], ids=["exhaustive", "tpe"])
def test_rerun_of_a_finished_study_does_not_recompute(tmp_path, monkeypatch, text):
    path = _write(tmp_path, text)
    first = run_study(load_study_file(path))

    def boom(*args, **kwargs):
        raise AssertionError("the search ran again")

    monkeypatch.setattr("optimizer.search.run", boom)
    again = run_study(load_study_file(path))
    assert again == first  # the stored document, stats and wall time included


def test_report_from_storage_alone(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, SMALL)
    assert cli.main(["--study", str(path), "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["study"]["name"] == "small" and ran["pareto_front"]

    def boom(*args, **kwargs):
        raise AssertionError("report must not search")

    monkeypatch.setattr("optimizer.search.run", boom)
    monkeypatch.setattr("optimizer.api.finish", boom)
    assert cli.main(["report", "--study", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran
    assert cli.main(["report", "--study", str(path)]) == 0
    human = capsys.readouterr().out
    assert "tokens/s" in human
    # re-running prints the same front, from storage
    assert cli.main(["--study", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran


def test_report_before_any_run_is_a_usage_error(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    assert cli.main(["report", "--study", str(path)]) == 2
    err = capsys.readouterr().err
    assert "study: no results in storage yet; run optimize --study FILE first" in err
    assert not (tmp_path / "study.journal").exists()  # report creates no storage
    with pytest.raises(InputError) as info:
        report_study(load_study_file(path))
    assert info.value.field == "study"


def test_report_of_an_unrun_study_in_existing_storage(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    assert cli.main(["--study", str(path), "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["report", "--study", str(path), "--study-name", "never-run"]) == 2
    assert "no results in storage yet" in capsys.readouterr().err


def test_storage_and_study_name_overrides(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    assert cli.main(["--study", str(path), "--storage", url, "--study-name", "s1",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["study"]["study_name"] == "s1"
    assert (tmp_path / "shared.db").is_file() and not (tmp_path / "study.journal").exists()
    assert cli.main(["report", "--study", str(path), "--storage", url, "--study-name", "s1",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    assert cli.main(["report", "--study", str(path)]) == 2  # the file's own storage is empty


def test_changed_definition_is_detected(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    run_study(load_study_file(path))
    path.write_text(SMALL.replace("global_batch_size: 64", "global_batch_size: 128"))
    with pytest.raises(InputError) as info:
        run_study(load_study_file(path))
    assert info.value.field == "study" and "different definition" in str(info.value)
    # report still shows the stored result, with a warning on stderr
    report_study(load_study_file(path))
    assert "changed since this result was stored" in capsys.readouterr().err


def test_study_flags_that_change_the_definition_are_refused(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    assert cli.main(["--study", str(path), "--trials", "500"]) == 2
    assert "--trials" in capsys.readouterr().err
    assert cli.main(["--study", str(path), "--model", "13b", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "--tp" in err
    assert cli.main(["--study", str(path), "--framework", "fsdp", "--tp-comm-overlap"]) == 2
    err = capsys.readouterr().err
    assert "--framework" in err and "--tp-comm-overlap" in err
    assert not (tmp_path / "study.journal").exists()


def test_infeasible_study_exits_3_and_is_stored(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, SMALL.replace("memory_limit_gib: 76", "memory_limit_gib: 1"))
    before = path.read_bytes()
    assert cli.main(["--study", str(path), "--json"]) == 3
    out = capsys.readouterr()
    payload = json.loads(out.out)
    assert payload["error"]["code"] == 3 and payload["least_violating"]
    assert "no configuration fits" in out.err

    def boom(*args, **kwargs):
        raise AssertionError("the search ran again")

    monkeypatch.setattr("optimizer.search.run", boom)
    with pytest.raises(InfeasibleError):
        run_study(load_study_file(path))
    assert cli.main(["report", "--study", str(path)]) == 3
    assert path.read_bytes() == before


def test_a_failed_run_never_touches_the_study_file(tmp_path, monkeypatch):
    path = _write(tmp_path, SMALL)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash in the middle of the search")

    monkeypatch.setattr("optimizer.search.run", crash)
    assert cli.main(["--study", str(path)]) == 1
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    monkeypatch.undo()
    run_study(load_study_file(path))  # a successful run does not write it either
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    with pytest.raises(InputError):
        report_study(load_study_file(path), study_name_override="x")
    assert path.read_bytes() == before


# ---- the shipped studies --------------------------------------------------------------------
def test_there_are_shipped_studies():
    names = {p.stem for p in STUDIES}
    assert {"llama65b-16xa100", "bert-large-dp-32xa100", "gpt3-175b-1024xa100",
            "llama3-70b-64xh100-fp8"} <= names


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_loads_and_is_documented(path):
    study = load_study_file(path)
    assert study.name == path.stem == study.study_name
    assert study.storage == str(path.with_suffix(".journal").resolve())
    assert study.description
    readme = (ROOT / "studies" / "README.md").read_text()
    assert f"`{path.name}`" in readme, f"{path.name} has no entry in studies/README.md"


def test_all_shipped_studies_run_in_under_60_s(tmp_path):
    for p in STUDIES:
        shutil.copy(p, tmp_path / p.name)  # fresh storage; the repository's journals untouched
    t0 = time.perf_counter()
    docs = {p.stem: run_study(load_study_file(tmp_path / p.name)) for p in STUDIES}
    wall_s = time.perf_counter() - t0
    assert wall_s < 60, f"shipped studies took {wall_s:.1f} s"
    for name, doc in docs.items():
        assert doc["pareto_front"], name
        rec = doc["pareto_front"][doc["recommended"]]
        assert rec["metrics"]["peak_memory_bytes"] <= rec["metrics"]["memory_limit_bytes"]
        assert (tmp_path / f"{name}.journal").is_file()


def test_interrupted_study_refuses_a_changed_definition(tmp_path, monkeypatch):
    path = _write(tmp_path, SMALL_TPE)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # killed after the study was created, before any result

    monkeypatch.setattr("optimizer.search.run", crash)
    with pytest.raises(KeyboardInterrupt):
        run_study(load_study_file(path))
    monkeypatch.undo()
    path.write_text(SMALL_TPE.replace("seed: 3", "seed: 4"))
    with pytest.raises(InputError) as info:
        run_study(load_study_file(path))
    assert info.value.field == "study" and "different definition" in str(info.value)
    path.write_text(SMALL_TPE)  # the original definition resumes and finishes
    assert run_study(load_study_file(path))["pareto_front"]


def test_storage_errors_name_where_the_storage_came_from(tmp_path, capsys):
    path = _write(tmp_path, SMALL)
    assert cli.main(["--study", str(path), "--storage", "foo://x"]) == 2
    assert capsys.readouterr().err.startswith("error: --storage: unknown storage URL scheme")
    bad = _write(tmp_path / "b", SMALL.replace("constraints:", "storage: foo://x\nconstraints:"))
    with pytest.raises(InputError) as info:
        run_study(load_study_file(bad))
    assert info.value.field == "study.storage"


def test_report_writes_the_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = _write(tmp_path, SMALL)
    run_study(load_study_file(path))
    png = tmp_path / "front.png"
    assert cli.main(["report", "--study", str(path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_study_documents_match_the_output_schema(tmp_path):
    pytest.importorskip("jsonschema")
    from optimizer.output.schemas import validate_document

    doc = run_study(load_study_file(_write(tmp_path / "ok", SMALL)))
    validate_document(doc, kind="front")
    bad = _write(tmp_path / "bad", SMALL.replace("memory_limit_gib: 76", "memory_limit_gib: 1"))
    with pytest.raises(InfeasibleError) as info:
        run_study(load_study_file(bad))
    validate_document(info.value.payload, kind="infeasible")


@pytest.mark.parametrize("field", [{"fp8_dot_product_attention": True},
                                   {"moe_dispatcher": "flex"}, {"moe_cuda_graph": True},
                                   {"moe_load_imbalance": 1.2}, {"tp_comm_overlap": True}])
def test_fingerprint_tracks_every_priced_training_field(field):
    """Two problems that the cost model prices differently never share a fingerprint (a
    resumed study would mix their scores); the defaults leave older fingerprints as they
    were."""
    from optimizer.core.problem import resolve_problem

    base = dict(model="7b", gpus=8, seq_length=2048, global_batch_size=256)
    plain = resolve_problem(**base)
    assert "moe_dispatcher" not in plain.inputs_json()["training"]  # defaults not recorded
    other = resolve_problem(**base, training={"seq_length": 2048, "global_batch_size": 256,
                                              **field})
    assert other.fingerprint() != plain.fingerprint()
    assert resolve_problem(**base).fingerprint() == plain.fingerprint()
