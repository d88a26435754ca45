#!/usr/bin/env python
"""How high can the within-sweep Spearman of ``optimize validate`` go? (issue 3)

A perfect model still ranks noisy measurements imperfectly. This script takes the measured
step times of every sweep (the same sweeps as ``optimize validate``: same group, GPU, model,
GPU count and global batch, at least 3 runs), treats them as the truth, perturbs them with
log-normal noise and reports the mean Spearman between truth and perturbed copy, i.e. the
score of an exact model under that measurement noise. Two numbers also come from the data:

- BLOOM's repeated measurements of one layout (rows whose configs are identical but whose
  times differ; identical times are taken to be one measurement cited twice) give the
  run-to-run noise of that sweep;
- the model's own mean Spearman, for comparison.

    python benchmarks/spearman_ceiling.py [--data DIR] [--trials N] [--noise-vtrain S]

Not a test: it prints what it measured.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.validation import published as V  # noqa: E402


def _layout_key(r: V.Run) -> tuple:
    p, m = r.parallel, r.model
    return (r.group, m.num_layers, m.hidden_size, m.num_attention_heads, p.tp, p.pp, p.dp,
            p.micro_batch_size, p.zero_stage, p.precision, r.training.global_batch_size)


def repeat_noise(runs: list[V.Run], group_prefix: str) -> tuple[float, int]:
    """Pooled log-standard deviation of repeated measurements of one layout."""
    reps: dict[tuple, list[float]] = {}
    for r in runs:
        if r.group.startswith(group_prefix):
            reps.setdefault(_layout_key(r), []).append(r.step_time_s)
    dev, dof = [], 0
    for times in reps.values():
        distinct = sorted(set(times))
        if len(distinct) < 2:
            continue
        lt = np.log(distinct)
        dev.extend(lt - lt.mean())
        dof += len(distinct) - 1
    return (math.sqrt(float(np.sum(np.square(dev))) / dof) if dof else float("nan")), dof


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="validation data folder")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--noise-vtrain", type=float, default=0.02,
                    help="log-sd assumed for vTrain's runs (no repeats in the data)")
    args = ap.parse_args(argv)

    entries, rows = V.load_data(V.resolve_data_dir(args.data))
    col = V.collect_runs(entries, rows)
    runs = [r for r in col.runs if r.step_time_s is not None]
    bloom_sd, bloom_dof = repeat_noise(runs, "bloom")
    print(f"BLOOM repeated layouts: log-sd {bloom_sd:.3f} ({bloom_dof} degrees of freedom)")

    sweeps = V.group_sweeps(runs)

    pred, _ = V.predict(runs)
    model_rho: dict[str, list[float]] = {}
    for key, rs in sweeps.items():
        rho = V.spearman([pred[r.id].step_time_s for r in rs], [r.step_time_s for r in rs])
        if math.isfinite(rho):
            model_rho.setdefault(key[0], []).append(rho)

    rng = np.random.default_rng(0)
    noise = {"bloom": bloom_sd}
    ceiling: dict[str, list[float]] = {}
    means = []
    for _ in range(args.trials):
        trial = []
        for key, rs in sweeps.items():
            t = np.array([r.step_time_s for r in rs])
            sd = next((s for g, s in noise.items() if key[0].startswith(g)), args.noise_vtrain)
            rho = V.spearman(t, t * np.exp(rng.normal(0.0, sd, t.size)))
            if math.isfinite(rho):
                trial.append(rho)
                ceiling.setdefault(key[0], []).append(rho)
        means.append(float(np.mean(trial)))

    print(f"\n{'group':32s} {'sweeps':>6s} {'model':>7s} {'exact model + noise':>20s}")
    for g in sorted(model_rho):
        print(f"{g:32s} {len(model_rho[g]):6d} {np.mean(model_rho[g]):7.3f} "
              f"{np.mean(ceiling[g]):20.3f}")
    all_model = [x for v in model_rho.values() for x in v]
    print(f"{'mean over sweeps':32s} {len(all_model):6d} {np.mean(all_model):7.3f} "
          f"{np.mean(means):14.3f} +- {np.std(means):.3f}")
    print(f"(vTrain noise assumed log-sd {args.noise_vtrain}; BLOOM's measured {bloom_sd:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
