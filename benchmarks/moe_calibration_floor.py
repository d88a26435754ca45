"""Issue 25, exploratory: can MoE-specific efficiency scales bring the MoE groups' calibration
floor below half the uncalibrated step-time MAPE?

For each ``mbridge_perf_moe`` subgroup (one node type), fits on *every* run of the subgroup (the
in-sample floor, as ``calibrate_groups.py --floor``) the four scales of
``optimize calibrate`` plus up to four candidate MoE scales, applied here by wrapping
:mod:`costmodel.moe` (nothing is added to the cost model or to ``optimize calibrate``):

- ``expert``: the grouped expert GEMMs' throughput (``moe.fc1`` / ``moe.fc2`` rows' time / s);
- ``a2a``: the EP dispatch / combine (and expert-TP all-gather) bandwidth (``ep_comm_s`` / s);
- ``moehost``: the MoE layer's host time (``moe_host_launch_s`` x s: stall / padded host bound);
- ``a2ahost``: the alltoall dispatcher's extra host time (``MOE_ALLTOALL_HOST_S`` x s).

Also prints the spread of runs with identical specs (model, training, parallel): no model of
the specs can fit below it.

    PYTHONPATH=. python benchmarks/moe_calibration_floor.py [--groups mbridge_perf_moe] [-v]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.optimize import least_squares

from benchmarks import calibrate_groups as cg
from costmodel import moe as M
from optimizer import calibrate as cal

S = {"expert": 1.0, "a2a": 1.0, "moehost": 1.0, "a2ahost": 1.0}
A2A_HOST_S = M.MOE_ALLTOALL_HOST_S
_kern, _ep, _host = M.moe_kernels, M.ep_comm_s, M.moe_host_launch_s


def _kernels(*a, **k):
    ks, rows = _kern(*a, **k)
    return ks, [(n, kn, p, c, ((1.0 if r is None else r) / S["expert"]
                               if kn in ("moe.fc1", "moe.fc2") else r), parts)
                for n, kn, p, c, r, parts in rows]


def _ep_comm(*a, **k):
    return _ep(*a, **k) / S["a2a"]


def _host_launch(*a, **k):
    M.MOE_ALLTOALL_HOST_S = A2A_HOST_S * S["a2ahost"]
    try:
        return _host(*a, **k) * S["moehost"]
    finally:
        M.MOE_ALLTOALL_HOST_S = A2A_HOST_S


OLD = list(cal.EFFICIENCY_PARAMETERS)
NEW = list(S)
SETS = [("4 scales", OLD)] + [(f"4 + {n}", OLD + [n]) for n in NEW] + [
    ("4 + moehost + a2ahost", OLD + ["moehost", "a2ahost"]), ("4 + all 4 MoE", OLD + NEW)]


def predict(obs, s) -> np.ndarray:
    S.update({n: s.get(n, 1.0) for n in NEW})
    try:
        t, _ = cal.predict(obs, {n: s.get(n, 1.0) for n in OLD})
    finally:
        S.update(dict.fromkeys(NEW, 1.0))
    return t


def floor(obs, names):
    """(in-sample MAPE, scales, predictions) of a soft-L1 fit on every run (a tiny prior)."""
    meas = np.log([o.step_time_s for o in obs])
    lo, hi = (math.log(b) for b in cal.SCALE_BOUNDS)

    def res(x):
        t = predict(obs, dict(zip(names, np.exp(x), strict=True)))
        return np.concatenate([cal.robust_residual(np.log(t) - meas), 1e-3 * x])

    sol = least_squares(res, np.zeros(len(names)), bounds=(lo, hi), diff_step=1e-3,
                        max_nfev=300)
    s = dict(zip(names, np.exp(sol.x), strict=True))
    t = predict(obs, s)
    return float(np.mean(np.abs(t / np.exp(meas) - 1))), s, t


def same_spec_floor(obs) -> float:
    """Best MAPE any function of (model, training, parallel) can reach on ``obs``."""
    by: dict = {}
    for o in obs:
        by.setdefault((o.model, o.training, o.parallel), []).append(o.step_time_s)
    errs = []
    for t in map(np.array, by.values()):
        errs += [min(np.mean(np.abs(c / t - 1)) for c in np.linspace(t.min(), t.max(), 400))] \
            * len(t)
    return float(np.mean(errs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", default="mbridge_perf_moe")
    ap.add_argument("-v", action="store_true", help="print each run's residuals")
    a = ap.parse_args()
    M.moe_kernels, M.ep_comm_s, M.moe_host_launch_s = _kernels, _ep_comm, _host_launch
    want = a.groups.split(",")
    for name, rs in sorted(cg.groups(6).items()):
        if not any(w in name for w in want):
            continue
        t0 = time.time()
        obs = cg.observations(rs)
        meas = np.array([o.step_time_s for o in obs])
        base = predict(obs, {})
        sens = {n: float(np.max(np.abs(np.log(predict(obs, {n: 1.05}) / base))) / math.log(1.05))
                for n in NEW}
        print(f"== {name}: {len(obs)} runs, uncalibrated MAPE {100 * np.mean(np.abs(base / meas - 1)):.1f}%"
              f", same-spec floor {100 * same_spec_floor(obs):.1f}%; max sensitivity "
              + ", ".join(f"{n} {v:.2f}" for n, v in sens.items()), flush=True)
        for label, names in SETS:
            m, s, t = floor(obs, names)
            print(f"  {label:24s} floor {100 * m:5.1f}%  "
                  + " ".join(f"{k}={v:.3g}" for k, v in s.items()), flush=True)
        if a.v:
            for o, e, e0 in zip(obs, t / meas - 1, base / meas - 1, strict=True):
                print(f"    {100 * e0:+6.1f}% -> {100 * e:+6.1f}%  {o.name}")
        print(f"  ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
