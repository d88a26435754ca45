"""Golden characterisation of the cost model: every metric and breakdown term of ``score`` on
seven problems (15,000 configurations) against tests/golden/golden.npz, at a relative
tolerance of 1e-12.

The fixture was made by ``tests/golden/make_golden.py`` before the cost model was split into
phases; it may be regenerated only in a commit that bumps ``COST_MODEL_VERSION`` and says why
the numbers moved. The test re-scores the stored configuration columns, so it does not depend
on the enumerator or the default search space.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from golden.problems import PROBLEMS, flatten_scores

FIXTURE = Path(__file__).parent / "golden" / "golden.npz"
RTOL = 1e-12


@pytest.fixture(scope="module")
def golden():
    return np.load(FIXTURE)


def test_fixture_matches_cost_model_version(golden):
    from costmodel import COST_MODEL_VERSION

    assert str(golden["cost_model_version"]) == COST_MODEL_VERSION, (
        "the golden fixture belongs to another cost model version: regenerate it with "
        "tests/golden/make_golden.py in the commit that bumps COST_MODEL_VERSION")


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_golden_scores(golden, name):
    from costmodel.batch import ConfigBatch
    from costmodel.model import score
    from optimizer.api import resolve_problem

    kwargs, _space, _keep = PROBLEMS[name]
    problem = resolve_problem(**kwargs)
    prefix = f"{name}/batch/"
    cols = {k[len(prefix):]: golden[k] for k in golden.files if k.startswith(prefix)}
    batch = ConfigBatch.from_columns(
        nccl_algo_table=tuple(str(x) for x in golden[f"{name}/tables/nccl_algo"]),
        nccl_proto_table=tuple(str(x) for x in golden[f"{name}/tables/nccl_proto"]), **cols)
    got = flatten_scores(score(problem.model, problem.cluster, problem.training, batch))
    prefix = f"{name}/scores/"
    expected = {k[len(prefix):]: golden[k] for k in golden.files if k.startswith(prefix)}
    assert len(expected) >= 29
    missing = sorted(set(expected) - set(got))
    assert not missing, f"terms no longer reported: {missing}"
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, rtol=RTOL, atol=0.0, equal_nan=True,
                                   err_msg=f"{name}: {key}")
