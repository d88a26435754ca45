"""The same-layout MLPerf pairs of benchmarks/calibration_report.py (issue 23): every row it
names maps from the shipped data, and the table it writes compares their ratios."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from optimizer.validation import published as v

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "calibration_report.py"
_spec = importlib.util.spec_from_file_location("calibration_report", _PATH)
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


@pytest.fixture(scope="module")
def pair_runs():
    entries, rows = v.load_data(v.resolve_data_dir(None))
    ids = {i for _, a, b in report.PAIRS for i in (a, b)}
    runs = [r for r in v.collect_runs([e for e in entries if e.get("id") in ids], []).runs
            if r.step_time_s is not None]
    return ids, runs


def test_every_pair_row_maps_with_a_step_time(pair_runs):
    ids, runs = pair_runs
    assert {r.id for r in runs} == ids


def test_pairs_differ_in_the_gpu_or_the_recipe_only(pair_runs):
    _, runs = pair_runs
    by = {r.id: r for r in runs}
    for _, a, b in report.PAIRS:
        ra, rb = by[a], by[b]
        assert ra.model == rb.model
        assert (ra.cluster.gpu.name, ra.training.fp8_recipe) != (rb.cluster.gpu.name,
                                                                 rb.training.fp8_recipe)
        pa, pb = ra.parallel, rb.parallel
        assert (pa.tp, pa.pp, pa.cp, pa.dp) == (pb.tp, pb.pp, pb.cp, pb.dp)


def test_pair_checks_report_finite_ratios(pair_runs):
    _, runs = pair_runs
    out = report.pair_checks(runs)
    assert len(out) == len(report.PAIRS)
    for _, measured, predicted in out:
        assert math.isfinite(measured) and measured > 0
        assert math.isfinite(predicted) and predicted > 0
    lines = report._pair_lines(out)
    assert sum(line.startswith("| ") for line in lines) == len(out) + 1
