"""benchmarks/experts_layouts.py: the completion of runs whose layout leaves parts unstated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("experts_layouts",
                                                  ROOT / "benchmarks" / "experts_layouts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _entry(**par):
    base = {"tp": 2, "pp": 1, "dp": 4, "cp": 4, "global_batch": 32, "micro_batch": "not stated"}
    return {"id": "x", "group": "nemo_long_context_cp", "parallel": {**base, **par}}


def test_unstated_micro_batch_gets_every_dividing_candidate(bench):
    out, what = bench.completions(_entry())  # 32 / dp 4 = 8 sequences per replica
    assert what == "micro-batch"
    assert [c["parallel"]["micro_batch"] for c in out] == [1, 2, 4, 8]
    assert all(c["layout_complete"] is True for c in out)
    # a stated micro-batch, or a layout missing something else, is not completed
    assert bench.completions(_entry(micro_batch=2)) == ([], "")
    other = {**_entry(), "layout_complete": False, "layout_missing": ["tp"]}
    assert bench.completions(other) == ([], "")


def test_unstated_interleaving_gets_virtual_stage_candidates(bench):
    e = _entry(pp=8, dp=8, cp=1, global_batch=256, micro_batch=None,
               pp_schedule="Interleaved 1F1B (virtual stages per rank not stated)")
    e = {**e, "layout_complete": False, "layout_missing": ["micro_batch"]}
    out, what = bench.completions(e)
    assert what == "micro-batch and virtual stages"
    assert {c["parallel"]["vpp"] for c in out} == set(range(2, 9))
    assert {c["parallel"]["micro_batch"] for c in out} == {1, 2, 4, 8, 16}


def test_completed_runs_are_mapped_and_fit(bench):
    # the torchtitan 405B rows: FSDP x TP x PP (ZeRO-3 with pp)
    runs, skipped, completed = bench.production_runs(("torchtitan_llama3_h100_2412",),
                                                     "405b_512gpu_1f1b")
    assert not skipped and [r.id for r in runs] == ["torchtitan_2412_llama31_405b_512gpu_1f1b"]
    (r,) = runs
    assert r.parallel.zero_stage == 3 and r.parallel.pp == 8 and r.id in completed
    from costmodel.batch import ConfigBatch
    from costmodel.model import score
    from optimizer.core.problem import resolve_problem

    limit = resolve_problem(model=r.model, cluster=r.cluster,
                            training=r.training).memory_limit_bytes
    peak = score(r.model, r.cluster, r.training,
                 ConfigBatch.from_configs([r.parallel])).peak_memory_bytes[0]
    assert peak <= limit  # held to a candidate predicted to fit
