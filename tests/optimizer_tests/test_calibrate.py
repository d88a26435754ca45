"""optimize calibrate (issue 25 item 3): efficiency scales fitted to measured steps."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml

from costmodel import loaders
from costmodel.batch import ConfigBatch
from costmodel.model import score
from optimizer import calibrate as cal
from optimizer.cli.app import main

CLUSTER = {"gpu": "h100-sxm-80gb", "gpus_per_node": 8}
RUNS = [  # varied: GEMM-bound, long-sequence attention, host-bound small layers, multi-node DP
    ("8b-dp8", "llama3-8b", {"seq_length": 8192, "global_batch_size": 64},
     {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 1}),
    ("8b-tp2-32k", "llama3-8b", {"seq_length": 32768, "global_batch_size": 16},
     {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "sequence_parallel": True}),
    ("1b-tp8", "gpt-1.7b", {"seq_length": 1024, "global_batch_size": 64},
     {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1}),
    ("8b-dp32", "llama3-8b", {"seq_length": 4096, "global_batch_size": 256},
     {"tp": 1, "pp": 1, "dp": 32, "micro_batch_size": 2, "zero_stage": 1}),
    ("70b-tp8pp2", "llama3-70b", {"seq_length": 4096, "global_batch_size": 64},
     {"tp": 8, "pp": 2, "dp": 1, "micro_batch_size": 1, "sequence_parallel": True}),
    ("1b-dp16", "gpt-1.7b", {"seq_length": 2048, "global_batch_size": 128},
     {"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 1}),
]
TRUE = {"gemm": 0.85, "attention": 1.25, "host": 1.6, "comm": 0.7}


def _obs(scales=None):
    out = []
    for name, model, tr, par in RUNS:
        run = loaders.load_run({"model": model, "cluster": CLUSTER, "training": tr,
                                "parallel": par})
        out.append(cal.Observation(name, run.model, run.cluster, run.training, run.parallel,
                                   1.0))
    if scales is None:
        return out
    t, _ = cal.predict(out, scales)
    return [cal.replace(o, step_time_s=float(x)) for o, x in zip(out, t, strict=True)]


def test_synthetic_runs_recover_the_perturbed_efficiencies():
    obs = _obs(TRUE)
    res = cal.fit(obs, prior_weight=1e-6)
    for n, v in TRUE.items():
        assert res.scales[n] == pytest.approx(v, rel=0.03), (n, res.scales, res.sensitivity)
    assert res.mape_after < 1e-3 < 0.1 < res.mape_before


def test_selection_keeps_no_change_when_left_out_runs_do_not_confirm():
    """Unstructured scatter (+-3% to 5%, no common cause): no subset predicts a left-out run
    better than no change, so nothing is fitted and the cluster stays as it was."""
    base = _obs({"gemm": 1.0})
    for pert in ([0.04, -0.04, 0.01], [0.05, -0.03, 0.02, -0.05, 0.01, -0.02]):
        obs = [cal.replace(o, step_time_s=o.step_time_s * (1 + e))
               for o, e in zip(base, pert, strict=False)]
        res = cal.fit(obs)
        assert res.fitted == () and res.calibration_keys() == {}, res.candidates
        assert res.candidates[0].parameters == ()
        assert len(res.candidates) == 1 + sum(math.comb(4, k) for k in
                                              range(1, min(4, len(obs) - 1) + 1))
        # the old fit (every scale) moves them and does not predict the rest better
        assert cal.fit(obs, select=False).fitted


def test_selection_fits_a_shared_cause_from_three_runs_and_predicts_the_rest():
    """All six runs' GEMMs are 20% slower than assumed: three runs choose gemm (alone; the
    others do not beat it by the margin) and the three left out get at least 2x closer."""
    obs = _obs({"gemm": 0.8})
    res = cal.fit(obs[:3])
    assert res.fitted == ("gemm",) and 0.8 <= res.scales["gemm"] < 0.95
    meas = np.array([o.step_time_s for o in obs[3:]])
    before = np.mean(np.abs(cal.predict(obs[3:], res.previous)[0] / meas - 1))
    after = np.mean(np.abs(cal.predict(obs[3:], res.scales)[0] / meas - 1))
    assert after <= before / 2 and before > 0.1
    doc = res.to_dict()
    assert doc["selection"][0] == {"parameters": [], "held_out_error": pytest.approx(
        res.mape_before)}
    assert any("left-out error" in line for line in cal.describe(res))


def test_sensitivity_surrogate_matches_the_model_for_small_steps():
    obs = _obs()
    prev = {n: 1.0 for n in TRUE}
    t0, _ = cal.predict(obs, prev)
    jac = cal.sensitivity_matrix(obs, prev, t0)
    dx = np.log([TRUE[n] for n in cal.EFFICIENCY_PARAMETERS]) * 0.25  # a quarter of the way
    t1, _ = cal.predict(obs, {n: math.exp(v) for n, v in zip(TRUE, dx, strict=True)})
    assert np.max(np.abs(cal.surrogate_log_ratio(jac, dx) - np.log(t1 / t0))) < 0.01
    assert np.all(jac[:, 0] < 0) and np.all(jac[:, 2] > 0)  # gemm speeds up, host slows down


def test_uncalibrated_cluster_scores_as_before_and_scales_apply():
    run = loaders.load_run({"model": "llama3-8b", "cluster": CLUSTER,
                            "training": {"seq_length": 4096, "global_batch_size": 64},
                            "parallel": {"tp": 1, "pp": 1, "dp": 8}})
    b = ConfigBatch.from_configs([run.parallel])
    base = float(score(run.model, run.cluster, run.training, b).step_time_s[0])
    ones = cal._with_scales(run.cluster, {n: 1.0 for n in TRUE})
    assert ones.calibration is None or not ones.calibration
    slow = cal._with_scales(run.cluster, {"gemm": 0.5})
    assert float(score(run.model, slow, run.training, b).step_time_s[0]) > 1.4 * base


def _write_runs(tmp_path, scales=TRUE, extra=None):
    obs = _obs(scales)
    doc = copy.deepcopy({"cluster": CLUSTER, "runs": [
        {"name": n, "model": m, "training": tr, "parallel": par,
         "measured": {"step_time_s": o.step_time_s, **({"peak_memory_gib": 50} if i == 0
                                                       else {})}}
        for i, ((n, m, tr, par), o) in enumerate(zip(RUNS, obs, strict=True))]})
    if extra:
        extra(doc)
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_cli_fits_stores_and_later_runs_use_it(tmp_path, capsys):
    runs = _write_runs(tmp_path)
    out = tmp_path / "cluster.yaml"
    assert main(["calibrate", "--runs", str(runs), "--save-cluster", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["efficiency_calibration"]
    assert c["step_time_mape_after"] < c["step_time_mape_before"] / 2
    assert c["runs"][0]["measured_peak_memory_bytes"] == 50 * 2**30
    stored = yaml.safe_load(out.read_text())["calibration"]
    assert set(stored) <= {"eff_gemm_scale", "eff_attention_scale", "eff_host_scale",
                           "eff_comm_scale"} and stored
    # a later run on the stored cluster file predicts the measurement
    name, model, tr, par = RUNS[0]
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({"model": model, "cluster": str(out), "training": tr,
                                        "parallel": par}))
    assert main(["evaluate", str(run_file), "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    measured = yaml.safe_load(runs.read_text())["runs"][0]["measured"]["step_time_s"]
    fitted = c["runs"][0]["predicted_after_s"]
    assert ev["metrics"]["step_time_s"] == pytest.approx(fitted, rel=1e-6)
    assert abs(fitted / measured - 1) < abs(c["runs"][0]["predicted_before_s"] / measured - 1)
    # the printed report
    assert main(["calibrate", "--runs", str(runs)]) == 0
    text = capsys.readouterr().out
    assert "err before" in text and "eff_gemm_scale" in text and "MAPE" in text


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["runs"][1]["measured"].pop("step_time_s"), "runs[1].measured.step_time_s"),
    (lambda d: d["runs"][2]["measured"].update(step_time_s=-1), "runs[2].measured.step_time_s"),
    (lambda d: d["runs"][0]["measured"].update(peak_memory_gib="a lot"),
     "runs[0].measured.peak_memory_gib"),
    (lambda d: d["runs"][0].update(measurd={}), "runs[0].measurd"),
    (lambda d: d["runs"][3]["parallel"].update(tp=3), "runs[3].parallel (tp_divides_heads)"),
    (lambda d: d["runs"][1].update(cluster={"gpu": "a100-sxm-80gb", "gpus_per_node": 8}),
     "runs[1].cluster"),
    (lambda d: d.update(runs=[]), "runs"),
])
def test_bad_input_names_the_field_exit_2(tmp_path, capsys, edit, field):
    runs = _write_runs(tmp_path, extra=edit)
    assert main(["calibrate", "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_and_unknown_param(tmp_path, capsys):
    assert main(["calibrate", "--runs", str(tmp_path / "nope.yaml")]) == 2
    assert "--runs" in capsys.readouterr().err
    runs = _write_runs(tmp_path)
    assert main(["calibrate", "--runs", str(runs), "--params", "gemm,flops"]) == 2
    assert "error: --params" in capsys.readouterr().err


@pytest.mark.parametrize("group, want", [
    ("bloom_prequel_config_sweep/", "half"),  # the worst dense groups today: halved
    ("mbridge_perf_dense_blackwell/gb200", "half"),  # (or left alone once under 5%)
    ("mbridge_perf_moe/h100", "not worse"),  # the old fit took it from 11.9% to 30.8%
    ("mbridge_perf_moe/gb200", "not worse"),  # four scales fitted on all 20 runs: 14.4% (of 21%)
    ("llmfoundry_mpt_benchmarks/h100", "not worse"),  # the old fit: 4.0% -> 6.7%
])
def test_published_runs_three_fit_the_rest(group, want):
    """Real data: fit on 3 runs of a group (fastest, middle, slowest step) and predict the
    others; the worst groups' held-out step-time MAPE at least halves, and no group the old
    every-scale fit made worse is made worse (benchmarks/calibrate_groups.py has the table)."""
    from benchmarks.calibrate_groups import group_check, groups, observations

    rs = next(rs for name, rs in groups(6).items() if name.startswith(group))
    d = group_check(observations(rs))
    if want == "half" and d["mape_before"] > 0.05:
        assert d["mape_after"] <= d["mape_before"] / 2, d
    elif want == "half":
        # the cost model itself now predicts the group within 5% (dense GB200: 10.0% at 0.6.1,
        # 2.9% at 0.7.0 with the userbuffers overlap share): nothing left to halve, and the
        # fit must leave it alone rather than chase noise
        assert d["mape_after"] <= d["mape_before"] * 1.001, d
    else:
        assert d["mape_after"] <= d["mape_before"] * 1.001, d


def _sweep(tmp_path, gemm=0.9, attention=1.2):
    """A kernel_sweep.py file whose timings are the model's own at the given scales."""
    from dataclasses import replace

    from costmodel.calibration import efficiency_for
    from costmodel.hardware import get_gpu
    from optimizer import kernel_calibration as kc

    gpu = get_gpu("h100-sxm-80gb")
    eff = efficiency_for(gpu.compute_capability, "cudnn")
    g = [{"kind": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "time_s": 1.0}
         for m in (2048, 8192) for n, k in ((4096, 4096), (12288, 4096), (4096, 14336))]
    a = [{"kind": "attention", "dtype": "bf16", "b": 16384 // s, "heads": 32, "s": s,
          "head_dim": 128, "fwd_s": 1.0, "fwd_bwd_s": 1.0} for s in (2048, 8192)]
    sw = kc.Sweep("h100-sxm-80gb", "", tuple(g), tuple(a))
    tg = kc._gemm_times(sw, gpu, replace(eff, gemm=eff.gemm * gemm))
    ta = kc._attention_times(sw, gpu, replace(eff, attention=eff.attention * attention,
                                              attention_bwd=eff.attention_backward * attention))
    for r, t in zip(g, tg, strict=True):
        r["time_s"] = float(t)
    for i, r in enumerate(a):
        r["fwd_s"], r["fwd_bwd_s"] = float(ta[2 * i]), float(ta[2 * i + 1])
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps({"format": kc.FORMAT, "gpu": "h100-sxm-80gb", "records": g + a}))
    return p


def test_kernel_sweep_goes_into_the_same_store(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    out = tmp_path / "k.yaml"
    assert main(["calibrate", "--kernels", str(sweep), "--save-cluster", str(out),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["efficiency_calibration"]
    assert doc["kernels"]["scales"] == pytest.approx({"gemm": 0.9, "attention": 1.2}, rel=1e-3)
    stored = yaml.safe_load(out.read_text())["calibration"]
    assert stored == pytest.approx({"eff_gemm_scale": 0.9, "eff_attention_scale": 1.2},
                                   rel=1e-3)
    # with runs too: the kernels fix gemm and attention, the steps fit host and comm
    runs = _write_runs(tmp_path, scales={"gemm": 0.9, "attention": 1.2, "host": 1.5,
                                         "comm": 1.0})
    # (--fit-all: host moves one run of six by 10%; left out, the other five do not pin it,
    # so the default held-out selection keeps it at 1; see test_selection_*)
    assert main(["calibrate", "--kernels", str(sweep), "--runs", str(runs), "--fit-all",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["efficiency_calibration"]
    vals = {p["name"]: p["value"] for p in doc["parameters"]}
    assert vals["gemm"] == pytest.approx(0.9, rel=1e-3)
    assert vals["host"] > 1.0 and doc["kernels"]  # pulled towards 1 by the default prior
    assert doc["step_time_mape_after"] < doc["step_time_mape_before"]
    assert main(["calibrate", "--kernels", str(sweep), "--runs", str(runs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["efficiency_calibration"]
    vals = {p["name"]: p["value"] for p in doc["parameters"]}
    assert vals["gemm"] == pytest.approx(0.9, rel=1e-3) and vals["attention"] == pytest.approx(
        1.2, rel=1e-3)
    assert doc["step_time_mape_after"] <= doc["step_time_mape_before"]


def test_kernel_sweep_bad_input(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"format": "paraplan-kernel-sweep/1", "gpu": "h100-sxm-80gb",
                             "records": [{"kind": "gemm", "dtype": "bf16", "m": 1, "n": 1,
                                          "k": 1, "time_s": "fast"}]}))
    assert main(["calibrate", "--kernels", str(p)]) == 2
    assert capsys.readouterr().err.startswith("error: records[0].time_s")
    p.write_text(json.dumps({"records": []}))
    assert main(["calibrate", "--kernels", str(p)]) == 2
    assert capsys.readouterr().err.startswith("error: format")
