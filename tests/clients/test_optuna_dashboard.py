"""A study paraplan ran, read through optuna-dashboard 0.21's own server code.

The dashboard's REST handler ``GET /api/studies/<id>`` (``optuna_dashboard.wsgi``, driven here
as a WSGI server would) serialises each trial with ``_serializer.serialize_frozen_trial``,
whose ``constraints`` is ``system_attrs.get("constraints", [])``; its pages then call a trial
feasible iff ``constraints.every(e => e <= 0)`` (bundle.js: the Pareto-front, history and
slice plots; an empty list is feasible). Optuna 5's ``Trial.set_constraint`` alone stores
``constraints:NAME``, which the dashboard never reads: every trial came back with ``[]`` and
every over-limit layout was drawn as feasible. paraplan stores the list too
(:func:`optimizer.storage.set_constraint`).
"""

from __future__ import annotations

import io
import json
import wsgiref.util

import pytest
import realclients as rc

from optimizer import optimize
from optimizer.search.optuna_engine import CONSTRAINT_KEY


def _get(app, path: str) -> dict:
    environ: dict = {}
    wsgiref.util.setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, REQUEST_METHOD="GET", QUERY_STRING="",
                   **{"wsgi.input": io.BytesIO()})
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, exc_info=None: status.append(s)))
    assert status and status[0].startswith("200"), (path, status, body[:300])
    return json.loads(body)


def _dashboard_feasible(trial_json: dict) -> bool:
    """The dashboard's rule (bundle.js): ``t.constraints.every(e => e <= 0)``."""
    return all(float(c) <= 0 for c in trial_json["constraints"])


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    od = rc.require("optuna_dashboard")
    db = tmp_path_factory.mktemp("dash") / "paraplan.db"
    url = f"sqlite:///{db}"
    # 65b on 16 x A100-80GB at 76 GiB: most layouts do not fit (many trials infeasible)
    res = optimize("65b", 16, sampler="tpe", trials=60, seed=0, batch_size=16,
                   memory_limit_gib=76, storage=url)
    return od.wsgi(url), res


def test_dashboard_shows_the_memory_constraint_on_every_trial(dashboard):
    import optuna

    app, res = dashboard
    limit = res.problem.memory_limit_bytes
    studies = _get(app, "/api/studies")["study_summaries"]
    (summary,) = [s for s in studies if s["study_name"] == res.search["study_name"]]
    detail = _get(app, f"/api/studies/{summary['study_id']}")
    complete = [t for t in detail["trials"] if t["state"] == "Complete"]
    assert len(complete) >= 60
    over = 0
    for t in complete:
        tokens, peak = (float(v) for v in t["values"])
        assert t["constraints"] == [pytest.approx((peak - limit) / limit)], t["number"]
        assert _dashboard_feasible(t) == (peak <= limit), t["number"]
        over += peak > limit
    assert 0 < over < len(complete)  # both kinds are there, and the dashboard tells them apart
    # Optuna 5's own reader agrees (it reads the list as constraint "0" beside the named one)
    study = optuna.load_study(study_name=summary["study_name"],
                              storage=res.search["storage"])
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        assert t.constraints[CONSTRAINT_KEY] == pytest.approx(t.constraints["0"])
    front_numbers = {t.number for t in study.best_trials}  # Optuna 5: feasible trials only
    assert all(t.values[1] <= limit for t in study.best_trials) and front_numbers


def test_dashboard_feasible_trials_hold_the_paraplan_front(dashboard):
    """Every point of paraplan's front is a trial the dashboard draws as feasible; the
    dashboard's server-side ``best_trials`` (``_pareto_front.get_pareto_front_trials``)
    ignores constraints by design, so it is not compared."""
    app, res = dashboard
    studies = _get(app, "/api/studies")["study_summaries"]
    (summary,) = [s for s in studies if s["study_name"] == res.search["study_name"]]
    detail = _get(app, f"/api/studies/{summary['study_id']}")
    feasible = {(float(t["values"][0]), float(t["values"][1])) for t in detail["trials"]
                if t["state"] == "Complete" and _dashboard_feasible(t)}
    for c in res.pareto_front:
        point = (c.metrics["tokens_per_s"], c.metrics["peak_memory_bytes"])
        assert any(point == pytest.approx(f, rel=1e-12) for f in feasible), point
