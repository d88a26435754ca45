"""Ad-hoc ``optimize --model ... --storage URL`` runs store their result like study-file runs
(issue 24 item 4): the Optuna samplers' studies keep their trials and gain the result
document; an exhaustive run gets a study (no trials) holding the document; ``optimize report
--storage URL [--study-name N]`` renders it from storage alone and a re-run finds the study."""

from __future__ import annotations

import json

import optuna
import pytest
from conftest import run_cli, run_cli_json

from costmodel.errors import InfeasibleError, InputError
from optimizer import optimize
from optimizer.storage import load_result, open_storage

ARGS = ["--model", "7b", "--gpus", "8"]


def _front(doc: dict) -> list:
    return [(c["config"], c["metrics"]["tokens_per_s"]) for c in doc["pareto_front"]]


def test_exhaustive_storage_run_stores_its_result_and_report_renders_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'ex.db'}"
    doc = run_cli_json([*ARGS, "--sampler", "exhaustive", "--storage", url], "front")
    name = doc["inputs"]["search"]["study_name"]
    assert name.startswith("paraplan-") and name.endswith("-exhaustive")
    assert doc["inputs"]["search"]["storage"] == url
    (summary,) = optuna.get_all_study_summaries(url)
    assert summary.study_name == name and summary.n_trials == 0  # stored like a study file
    stored = load_result(open_storage(url), name)
    assert _front(stored) == _front(doc)
    assert stored["stats"]["sampler"] == "exhaustive"
    # report, with and without the name (the only result in the storage)
    for extra in ([], ["--study-name", name]):
        rep = run_cli_json(["report", "--storage", url, *extra], "front")
        assert _front(rep) == _front(doc)
    rc, out, _ = run_cli(["report", "--storage", url])
    assert rc == 0 and "sampler exhaustive" in out
    # a re-run opens the same study (same name) and stores the same front again
    again = run_cli_json([*ARGS, "--sampler", "exhaustive", "--storage", url], "front")
    assert again["inputs"]["search"]["study_name"] == name
    assert _front(again) == _front(doc)
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == [name]


def test_tpe_storage_run_stores_trials_and_result_and_resumes(tmp_path):
    journal = str(tmp_path / "tpe.journal")
    res = optimize("7b", 8, sampler="tpe", trials=30, seed=0, batch_size=10, storage=journal)
    name = res.search["study_name"]
    store = open_storage(journal)
    study = optuna.load_study(study_name=name, storage=store)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) >= 30
    stored = load_result(store, name)
    assert stored is not None and _front(stored) == _front(json.loads(json.dumps(
        res.to_dict(), default=str)))
    # a re-run resumes: the budget is already spent, the same front comes back
    again = optimize("7b", 8, sampler="tpe", trials=30, seed=0, batch_size=10, storage=journal)
    assert again.search["study_name"] == name and again.search["resumed"] is True
    assert _front(again.to_dict()) == _front(res.to_dict())
    # two results in one storage: report needs the name, and lists the candidates
    run_cli_json([*ARGS, "--sampler", "exhaustive", "--storage", journal], "front")
    rc, _, err = run_cli(["report", "--storage", journal])
    assert rc == 2 and "--study-name" in err and name in err
    rep = run_cli_json(["report", "--storage", journal, "--study-name", name], "front")
    assert _front(rep) == _front(res.to_dict())


def test_infeasible_storage_run_stores_the_least_violating_document(tmp_path):
    url = f"sqlite:///{tmp_path / 'inf.db'}"
    with pytest.raises(InfeasibleError):
        optimize("65b", 8, sampler="exhaustive", storage=url)
    rc, out, err = run_cli(["report", "--storage", url, "--json"])
    assert rc == 3, err
    doc = json.loads(out)
    assert doc["error"]["code"] == 3 and doc["least_violating"]


def test_exhaustive_run_refuses_another_samplers_study(tmp_path):
    journal = str(tmp_path / "mix.journal")
    res = optimize("7b", 8, sampler="tpe", trials=10, seed=0, batch_size=10, storage=journal)
    with pytest.raises(InputError) as e:
        optimize("7b", 8, sampler="exhaustive", storage=journal,
                 study_name=res.search["study_name"])
    assert e.value.field == "study_name" and "exhaustive" in str(e.value)


def test_report_storage_errors(tmp_path):
    rc, _, err = run_cli(["report", "--storage", str(tmp_path / "none.journal")])
    assert rc == 2 and "does not exist" in err
    assert not (tmp_path / "none.journal").exists()  # nothing created
    url = f"sqlite:///{tmp_path / 'ex.db'}"
    run_cli_json([*ARGS, "--sampler", "exhaustive", "--storage", url], "front")
    rc, _, err = run_cli(["report", "--storage", url, "--study-name", "nope"])
    assert rc == 2 and "no result stored for study 'nope'" in err
    rc, _, err = run_cli(["report", "--storage", url, "--from", "x.json"])
    assert rc == 2 and "--from" in err
