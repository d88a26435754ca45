"""No password appears in any output or stored attribute (issue 26, defect 4).

One test per URL form: ``user:password@``, a password with ``/``, ``:`` or ``@`` in it, a
percent-encoded one, ``?password=`` (alone or after other parameters), ``?sslpassword=``,
Redis ``:password@``. Outputs checked: the JSON document, the human table, ``report``, error
messages; stored: every study, trial and system attribute in PostgreSQL.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
import yaml
from conftest import run_cli

PG_HOST = "127.0.0.1:5432/test"
SECRET = "Hunter2Secret"
FORMS = {
    "userinfo": f"postgresql+psycopg2://postgres:{SECRET}@{PG_HOST}",
    "slash": f"postgresql+psycopg2://postgres:{SECRET}/x/y@{PG_HOST}",
    "colon": f"postgresql+psycopg2://postgres:{SECRET}:z@{PG_HOST}",
    "percent": f"postgresql+psycopg2://postgres:{SECRET}%40%2F@{PG_HOST}",
    "query": f"postgresql+psycopg2://postgres@{PG_HOST}?password={SECRET}",
    "query-later": f"postgresql+psycopg2://postgres@{PG_HOST}?application_name=pp&password={SECRET}",
    "sslpassword": f"postgresql+psycopg2://postgres@{PG_HOST}?sslpassword={SECRET}",
    "no-driver": f"postgresql://postgres:{SECRET}@{PG_HOST}",
}
ERROR_FORMS = {
    "at-sign": f"postgresql+psycopg2://postgres:{SECRET}@x@{PG_HOST}",
    "query-upper": f"postgresql+psycopg2://postgres@{PG_HOST}?PASSWORD={SECRET}",
    "pg-refused": f"postgresql+psycopg2://postgres:{SECRET}@127.0.0.1:1/test",
    "pg-refused-slash": f"postgresql+psycopg2://postgres:{SECRET}/a@127.0.0.1:1/test",
    "pg-refused-query": f"postgresql+psycopg2://postgres@127.0.0.1:1/test?password={SECRET}",
    "bad-port": f"postgresql+psycopg2://postgres:{SECRET}@127.0.0.1:notaport/test",
    "redis-user": f"redis://default:{SECRET}@127.0.0.1:1/0",
    "unknown-scheme": f"mongodb://u:{SECRET}@h/x",
    "mysql-no-driver": f"mysql+nosuchdriver://u:{SECRET}@h/x",
}


def _pg_available() -> bool:
    try:
        import psycopg2

        psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="test",
                         connect_timeout=3).close()
        return True
    except Exception:
        return False


needs_pg = pytest.mark.skipif(not _pg_available(), reason="PostgreSQL at 127.0.0.1:5432 "
                              "(database test, user postgres) is not reachable")


def _stored_text(url_without_secret: str, study_name: str) -> str:
    import optuna

    storage = optuna.storages.RDBStorage(url_without_secret)
    study = optuna.load_study(study_name=study_name, storage=storage)
    parts = [json.dumps(study.user_attrs, default=str),
             json.dumps(storage.get_study_system_attrs(study._study_id), default=str)]
    for t in study.get_trials(deepcopy=False):
        parts.append(json.dumps(t.user_attrs, default=str))
        parts.append(json.dumps(t.system_attrs, default=str))
    return "\n".join(parts)


#: The forms run end to end against PostgreSQL (each ~2 s); every form goes through
#: test_redact_function and the error paths.
PG_RUN = ("userinfo", "slash", "query-later", "sslpassword")


@needs_pg
@pytest.mark.parametrize("form", PG_RUN)
def test_password_never_printed_or_stored(form, tmp_path):
    url = FORMS[form]
    name = f"secret-{form}-{uuid.uuid4().hex[:8]}"
    base = ["--model", "7b", "--gpus", "8", "--sampler", "random", "--trials", "4",
            "--storage", url, "--study-name", name]
    rc, out, err = run_cli([*base, "--json"])
    assert rc == 0, err
    assert SECRET not in out and SECRET not in err
    assert json.loads(out)["stats"]
    if form == "slash":
        rc, out, err = run_cli([*base, "-q"])  # the human table (resumed)
        assert rc == 0 and SECRET not in out + err
    assert SECRET not in _stored_text(f"postgresql+psycopg2://postgres@{PG_HOST}", name)


@needs_pg
@pytest.mark.parametrize("form", ["slash", "query"])
def test_study_file_report_and_stored_result(form, tmp_path):
    name = f"secret-study-{form}-{uuid.uuid4().hex[:8]}"
    study = {"schema_version": 1, "name": name, "model": "7b",
             "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb"},
             "training": {"seq_length": 2048, "global_batch_size": 256},
             "search": {"sampler": "random", "trials": 4}, "storage": FORMS[form]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    for argv in (["--study", str(path), "--json"], ["--study", str(path)],
                 ["report", "--study", str(path)], ["report", "--study", str(path), "--json"]):
        rc, out, err = run_cli(argv)
        assert rc == 0, err
        assert SECRET not in out + err, argv
    assert SECRET not in _stored_text(f"postgresql+psycopg2://postgres@{PG_HOST}", name)


@pytest.mark.parametrize("form", ERROR_FORMS, ids=list(ERROR_FORMS))
def test_password_not_in_error_messages(form):
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "--sampler", "random",
                            "--trials", "4", "--storage", ERROR_FORMS[form], "-q"])
    assert rc == 2, err
    assert SECRET not in out + err
    assert "storage" in err


def test_redis_password_not_printed():
    """Redis URLs (a server without AUTH may accept any password): never echoed."""
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "--sampler", "random", "--trials",
                            "4", "--storage", f"redis://:{SECRET}@127.0.0.1:6379/0",
                            "--study-name", f"r-{uuid.uuid4().hex[:8]}", "--json"])
    assert rc in (0, 2), err
    assert SECRET not in out + err


@pytest.mark.parametrize("url", list(FORMS.values()) + list(ERROR_FORMS.values()))
def test_redact_function(url):
    """The public redaction helper hides the password of every form, and keeps the host."""
    from optimizer.storage import redact
    shown = redact(url)
    assert SECRET not in shown
    assert "***" in shown
    assert shown.split("://", 1)[0] == url.split("://", 1)[0]


def test_api_info_is_redacted():
    pytest.importorskip("psycopg2")
    if not _pg_available():
        pytest.skip("PostgreSQL not reachable")
    from optimizer.api import optimize

    res = optimize("7b", 8, sampler="random", trials=4, storage=FORMS["slash"],
                   study_name=f"secret-api-{uuid.uuid4().hex[:8]}")
    assert SECRET not in res.to_json()
    assert SECRET not in repr(res.search)
    assert os.environ.get("PARAPLAN_CHECK_SCHEMA") == "1"
