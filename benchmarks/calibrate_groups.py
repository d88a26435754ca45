"""Per-group calibration check (issue 25): fit the efficiency scales on 3 runs of a group of
published runs (one node type) and predict the rest; print the held-out step-time MAPE before
(uncalibrated) and after, per group.

Two ways of choosing the 3 fitting runs: the fixed pick (the fastest, middle and slowest
measured step) and ``--draws`` random draws (seeded) of 3 runs with distinct parallel layouts;
the printed random-draw figure is the median over draws of the held-out MAPE. ``all-fit`` is
the in-sample MAPE of a fit on every run of the group (no selection): the floor these four
scales can reach on that group, so "cut in half" is only possible where it is below half.

    PYTHONPATH=. python benchmarks/calibrate_groups.py [--min-runs 6] [--groups a,b]
        [--draws 5] [--seed 0] [--no-select] [--floor] [--json]
    PYTHONPATH=. python benchmarks/calibrate_groups.py --coverage   # the 80% intervals
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


def draw_train(obs, rng, k=3):
    """k random runs with distinct parallel layouts (distinct model or layout when the group
    has fewer than k layouts)."""
    def key(o):
        return o.parallel if len({x.parallel for x in obs}) >= k else (o.model.name, o.parallel)

    idx: list[int] = []
    seen: set = set()
    for i in rng.permutation(len(obs)):
        if key(obs[i]) not in seen:
            seen.add(key(obs[i]))
            idx.append(int(i))
        if len(idx) == k:
            break
    return sorted(idx)


def held_out(obs, train, t_before, select=True):
    """(MAPE before, MAPE after, fitted scales) of the runs not in ``train``."""
    rest = [i for i in range(len(obs)) if i not in train]
    res = cal.fit([obs[i] for i in train], prior_weight=PRIOR, select=select)
    meas = np.array([obs[i].step_time_s for i in rest])
    t1, _ = cal.predict([obs[i] for i in rest], res.scales)
    return (float(np.mean(np.abs(t_before[rest] / meas - 1))),
            float(np.mean(np.abs(t1 / meas - 1))),
            {n: res.scales[n] for n in res.fitted})


def group_check(obs, k=3, draws=0, seed=0, select=True, floor=False):
    t_before, _ = cal.predict(obs, cal.scales_of(obs[0].cluster.calibration))
    train = pick_train(obs, k)
    before, after, scales = held_out(obs, train, t_before, select)
    out = {"runs": len(obs), "train": [obs[i].name for i in train], "scales": scales,
           "mape_before": before, "mape_after": after}
    if draws:
        rng = np.random.default_rng(seed)
        rows = [held_out(obs, draw_train(obs, rng, k), t_before, select) for _ in range(draws)]
        out["draws"] = [{"mape_before": b, "mape_after": a, "scales": s} for b, a, s in rows]
        out["draw_mape_before"] = float(np.median([b for b, _, _ in rows]))
        out["draw_mape_after"] = float(np.median([a for _, a, _ in rows]))
    if floor:
        res = cal.fit(obs, prior_weight=1e-6, select=False)
        out["all_fit_mape"] = res.mape_after
    return out


def groups(min_runs=6):
    col = v.collect_runs(*v.load_data(v.resolve_data_dir()))
    by: dict[tuple, list] = {}
    for r in col.runs:
        if r.step_time_s:
            by.setdefault((r.group, r.cluster.gpu.name, cal._hardware_key(r.cluster)),
                          []).append(r)
    return {f"{g}/{gpu}": rs for (g, gpu, _), rs in by.items() if len(rs) >= min_runs}


def moe_residual_rows():
    """The MoE runs' residual rows, in the table's format (for a table written before they
    were in it)."""
    from optimizer.planning import intervals as iv

    return [r for r in iv.collect_residuals()["step_time"] if iv.row_kind(r) == "moe"]


def coverage_report() -> None:
    """Share of runs inside their printed 80% interval, per validation group: in-sample, each
    run left out, and the run's whole group left out (the interval from the other sources
    only: runs the table has not seen); then the MoE runs against the dense interval (what
    an MoE problem got before the MoE classes) and pooled into the dense classes."""
    from optimizer.planning import intervals as iv

    rows = list(iv.residual_table()["step_time"])
    if not any(iv.row_kind(r) == "moe" for r in rows):
        print("(residuals.json has no MoE rows: adding them from the validation data)")
        rows += moe_residual_rows()
    ins = iv.coverage(rows)
    loo = iv.coverage(rows, leave_one_out=True)
    lgo = iv.coverage(rows, leave_group_out=True)
    print(f"{'group':44s} {'runs':>4s}  in-sample  left-out  group-left-out")
    for g, c in ins.items():
        print(f"{g:44s} {c['runs']:4d}  {c['inside']:8.1%}  {loo[g]['inside']:8.1%}"
              f"  {lgo[g]['inside']:8.1%}")
    n = sum(c["runs"] for c in ins.values())
    tot = [sum(c["runs"] * c["inside"] for c in t.values()) / n for t in (ins, loo, lgo)]
    print(f"{'all':44s} {n:4d}  {tot[0]:8.1%}  {tot[1]:8.1%}  {tot[2]:8.1%}")
    dense = [r for r in rows if iv.row_kind(r) == "dense"]
    moe = [r for r in rows if iv.row_kind(r) == "moe"]
    own: dict[str, list[bool]] = {}
    before: dict[str, list[bool]] = {}
    for r in moe:
        g, fw, sc = r["class"][:3]
        key = f"{r['group']} ({'/'.join(r['class'])})"
        x = iv.step_time_interval(g, fw, 2 if sc == "multi-node" else 1, rows=dense)
        before.setdefault(key, []).append(x.low <= np.exp(r["log_residual"]) <= x.high)
        x = iv.step_time_interval(g, fw, 2 if sc == "multi-node" else 1, True,
                                  rows=[m for m in rows if m is not r])
        own.setdefault(key, []).append(x.low <= np.exp(r["log_residual"]) <= x.high)
    print("MoE runs, each left out: inside the dense class's interval (before) / inside the "
          "interval printed now (MoE classes):")
    for k in sorted(own):
        print(f"  {k:64s} {len(own[k]):4d}  {np.mean(before[k]):6.1%}  {np.mean(own[k]):6.1%}")
    pooled = [dict(r, **{"class": r["class"][:3]}) for r in rows]  # every row read as dense
    added = iv.coverage(pooled, leave_one_out=True)
    print("(not taken) the MoE rows pooled into the dense classes, left-out coverage:")
    for g, c in added.items():
        if c["inside"] != loo[g]["inside"]:
            print(f"  {g:44s} {c['runs']:4d}  {c['inside']:6.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-runs", type=int, default=6)
    ap.add_argument("--groups", default="")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-select", action="store_true", help="fit every scale (the old fit)")
    ap.add_argument("--floor", action="store_true", help="also fit all runs of the group")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--coverage", action="store_true",
                    help="print the 80%% interval coverage per group instead")
    a = ap.parse_args()
    if a.coverage:
        coverage_report()
        return
    want = [g for g in a.groups.split(",") if g]
    out = {}
    print(f"{'group':52s} {'runs':>4s}  {'fixed pick':>15s}  {'random (median)':>15s}"
          f"{'  all-fit' if a.floor else ''}")
    for name, rs in sorted(groups(a.min_runs).items()):
        if want and not any(w in name for w in want):
            continue
        t = time.time()
        try:
            out[name] = group_check(observations(rs), draws=a.draws, seed=a.seed,
                                    select=not a.no_select, floor=a.floor)
        except Exception as e:  # report, go on
            out[name] = {"error": f"{type(e).__name__}: {e}"}
        out[name]["wall_s"] = round(time.time() - t, 1)
        d = out[name]
        if "error" in d:
            print(f"{name:52s} {d['error']}", flush=True)
            continue
        rnd = (f"{100 * d['draw_mape_before']:5.1f}% ->{100 * d['draw_mape_after']:5.1f}%"
               if a.draws else "")
        fl = f"  {100 * d['all_fit_mape']:5.1f}%" if a.floor else ""
        print(f"{name:52s} {d['runs']:4d}  {100 * d['mape_before']:5.1f}% ->"
              f"{100 * d['mape_after']:5.1f}%  {rnd:>15s}{fl}  {d['scales']}  ({d['wall_s']}s)",
              flush=True)
    if a.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
