"""The validation data ships inside the package (issue 25 item 6): ``optimize validate`` works
from any directory without the shared folder."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from optimizer.validation import published as v

SHIPPED = Path(v.__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "validation"
FILES = (v.PUBLISHED_FILE, v.PUBLISHED_2026_FILE, v.VTRAIN_FILE)


def test_default_is_the_shipped_copy(monkeypatch):
    monkeypatch.delenv(v.ENV_VAR, raising=False)
    assert v.resolve_data_dir() == SHIPPED
    for name in FILES:
        assert (SHIPPED / name).is_file(), name


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared validation folder here")
def test_shipped_copy_matches_the_shared_folder():
    for name in FILES:
        assert filecmp.cmp(SHIPPED / name, SHARED / name, shallow=False), (
            f"{name} differs from {SHARED}: cp ../shared/validation/*.yaml "
            "optimizer/validation/data/")


def test_validate_runs_from_a_temp_cwd(tmp_path):
    repo = Path(v.__file__).resolve().parents[2]
    env = {k: val for k, val in os.environ.items() if k != v.ENV_VAR}
    env["PYTHONPATH"] = str(repo)
    p = subprocess.run([sys.executable, "-m", "optimizer.cli", "validate", "--json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc and "Traceback" not in p.stderr
