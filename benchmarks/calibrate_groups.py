"""Per-group calibration check (issue 25): fit the efficiency scales on 3 runs of a group of
published runs (one node type) and predict the rest; print MAPE before/after per group.

    PYTHONPATH=. python benchmarks/calibrate_groups.py [--min-runs 6] [--groups a,b] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from optimizer import calibrate as cal
from optimizer.validation import published as v

PRIOR = float(os.environ.get("PRIOR", cal.PRIOR_WEIGHT))


def observations(runs):
    return [cal.Observation(r.id, r.model, r.cluster, r.training, r.parallel, r.step_time_s)
            for r in runs]


def pick_train(obs, k=3):
    """k runs spread over the group's measured step times (sorted; first, middle, last)."""
    order = sorted(range(len(obs)), key=lambda i: obs[i].step_time_s)
    idx = sorted({order[round(j * (len(order) - 1) / (k - 1))] for j in range(k)})
    return idx


def group_check(obs, k=3):
    train = pick_train(obs, k)
    rest = [o for i, o in enumerate(obs) if i not in train]
    res = cal.fit([obs[i] for i in train], prior_weight=PRIOR)
    meas = np.array([o.step_time_s for o in rest])
    t0, _ = cal.predict(rest, res.previous)
    t1, _ = cal.predict(rest, res.scales)
    return {"runs": len(obs), "train": [obs[i].name for i in train],
            "scales": {n: res.scales[n] for n in res.fitted},
            "mape_before": float(np.mean(np.abs(t0 / meas - 1))),
            "mape_after": float(np.mean(np.abs(t1 / meas - 1)))}


def groups(min_runs=6):
    col = v.collect_runs(*v.load_data(v.resolve_data_dir()))
    by: dict[tuple, list] = {}
    for r in col.runs:
        if r.step_time_s:
            by.setdefault((r.group, r.cluster.gpu.name, cal._hardware_key(r.cluster)),
                          []).append(r)
    return {f"{g}/{gpu}": rs for (g, gpu, _), rs in by.items() if len(rs) >= min_runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-runs", type=int, default=6)
    ap.add_argument("--groups", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    want = [g for g in a.groups.split(",") if g]
    out = {}
    for name, rs in sorted(groups(a.min_runs).items()):
        if want and not any(w in name for w in want):
            continue
        t = time.time()
        try:
            out[name] = group_check(observations(rs))
        except Exception as e:  # report, go on
            out[name] = {"error": f"{type(e).__name__}: {e}"}
        out[name]["wall_s"] = round(time.time() - t, 1)
        d = out[name]
        if "error" in d:
            print(f"{name:60s} {d['error']}", flush=True)
        else:
            print(f"{name:60s} n={d['runs']:4d} MAPE {100 * d['mape_before']:5.1f}% -> "
                  f"{100 * d['mape_after']:5.1f}%  {d['scales']}  ({d['wall_s']}s)", flush=True)
    if a.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
