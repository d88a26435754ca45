#!/usr/bin/env python
"""How are vTrain's single-node step-time errors structured? (issue 3, ranking target)

Groups vTrain's 714 single-node runs by the shape of their layers' GEMMs, i.e. by (hidden size,
TP degree, micro-batch size), and prints per cell the number of runs and the mean and standard
deviation of the signed error (predicted / measured - 1). Small spreads inside cells against
large differences between cells mean the errors are a function of the GEMM shapes (cuBLAS's
kernel choice at those shapes), not noise or layout effects (pipeline, data parallelism).

It then prints the mean within-sweep Spearman of the group as the model predicts it, and what it
would be if each cell's mean error were removed (an oracle that knows the per-shape efficiency a
measured A100 GEMM table would give), in total and one TP degree at a time.

    python benchmarks/vtrain_cells.py [--data DIR]

Not a test, and the oracle is not a calibration: it prints what it measured.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.validation import published as V  # noqa: E402


def cell(r) -> tuple[int, int, int]:
    return r.model.hidden_size, r.parallel.tp, r.parallel.micro_batch_size


def mean_spearman(runs, time_of) -> float:
    rhos = [V.spearman([time_of(r) for r in rs], [r.step_time_s for r in rs])
            for rs in V.group_sweeps(runs).values()]
    return float(np.nanmean(rhos))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="validation data folder")
    args = ap.parse_args(argv)
    entries, rows = V.load_data(V.resolve_data_dir(args.data))
    col = V.collect_runs(entries, rows)
    pred, _ = V.predict(col.runs)
    runs = [r for r in col.runs if r.group == V.VTRAIN_SINGLE_GROUP
            and r.step_time_s is not None and r.id in pred]

    def predicted(r) -> float:
        return pred[r.id].step_time_s

    log_err = defaultdict(list)
    for r in runs:
        log_err[cell(r)].append(np.log(predicted(r) / r.step_time_s))
    print(f"vTrain single node: {len(runs)} runs in {len(log_err)} (hidden, tp, micro-batch) "
          "cells; signed error per cell (predicted / measured - 1)")
    print(f"{'hidden':>6} {'tp':>3} {'mbs':>4} {'runs':>5} {'mean':>8} {'sd':>6}")
    for key in sorted(log_err):
        e = np.expm1(np.array(log_err[key]))
        print(f"{key[0]:>6} {key[1]:>3} {key[2]:>4} {e.size:>5} {100 * e.mean():>+7.1f}% "
              f"{100 * e.std():>5.1f}%")
    shift = {k: float(np.mean(v)) for k, v in log_err.items()}
    print(f"\nmean Spearman within sweeps, as predicted: {mean_spearman(runs, predicted):.3f}")
    print(f"each cell's mean error removed (oracle):   "
          f"{mean_spearman(runs, lambda r: predicted(r) * np.exp(-shift[cell(r)])):.3f}")
    for tp in sorted({k[1] for k in shift}):
        fixed = mean_spearman(runs, lambda r, tp=tp: predicted(r) * np.exp(
            -shift[cell(r)] if r.parallel.tp == tp else 0.0))
        print(f"  only the tp={tp} cells corrected:          {fixed:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
