"""More workers, same answer (issue 26, defect 3): the shipped GPT-3 175B study run by one
process and by N workers sharing one study, for several seeds, with the same total budget.

    PYTHONPATH=. python benchmarks/workers_scaling.py [--workers 1,8] [--seeds 0,1,2]
        [--trials 60] [--kinds pg] [--pg URL]

For every (storage kind, seed, worker count): a fresh study of ``--trials`` TPE trials (the
study file's space, seed replaced) run by that many ``optimize`` processes started together.
Quality is measured from what the study holds, against the exhaustive optimum of the same
space (3396 valid configurations, scored in ~1 s):

- ``tps``: the recommended (fastest feasible) point's tokens/s over the optimum's;
- ``hv``: the hypervolume of the front (tokens/s x memory below the limit) over the
  exhaustive front's;
- ``search_tps`` / ``search_hv``: the same for the search's own trials alone (the trials
  without ``origin: final-polish``): what the recommendation was before the final polish
  (optimizer.search.optuna_engine.final_polish);
- ``counted``, ``distinct`` (distinct configurations among the counted trials), ``fail``
  (FAIL trials left), ``final`` (configurations the final polish scored), ``wall_s``.

Prints one JSON line per run on stderr, then the tables (seeds x workers) and one JSON
document. The default (3 seeds x {1, 8} workers x 60 trials on PostgreSQL) took 1 min 53 s
on two cores at load ~6 (8.5 min at load ~12); ``--kinds journal`` ~40 s.

Measured (commit 0413e9d, the default): tps 1.0 and hv 1.0 in all 6 cells; the search's own
trials (before the final polish) 1 process 0.9885 / 0.9698 / 0.9162 tps, 8 workers 0.9919 /
0.9301 / 0.9532; distinct 60 of 60 counted, 0 FAIL everywhere; 296-470 configurations scored
by the final polish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_workers import ROOT, _start  # noqa: E402

STUDY = ROOT / "studies" / "gpt3-175b-1024xa100.yaml"
FINAL = "final-polish"


def _study_text(seed: int, trials: int, sampler: str = "tpe") -> str:
    text = STUDY.read_text()
    for old, new in (("seed: 0", f"seed: {seed}"), ("trials: 200", f"trials: {trials}"),
                     ("sampler: tpe", f"sampler: {sampler}")):
        assert old in text, old
        text = text.replace(old, new)
    return text


def _quality(points: list[tuple[float, float]], limit: float, best: dict) -> tuple[float, float]:
    """(fastest feasible tokens/s, hypervolume below the limit), over the exhaustive ones."""
    import numpy as np

    from optimizer.search.pareto import hypervolume_2d

    if not points:
        return 0.0, 0.0
    tps, mem = (np.array(x, dtype=float) for x in zip(*points, strict=True))
    ok = mem <= limit
    top = float(tps[ok].max()) if ok.any() else 0.0
    return top / best["tps"], hypervolume_2d(tps, mem, limit) / best["hv"]


def _summary(storage: str, name: str, limit: float, best: dict) -> dict:
    import optuna

    from optimizer.storage import is_counted, open_storage

    ts = optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials(
        deepcopy=False)
    done = [t for t in ts if t.state.name in ("COMPLETE", "PRUNED")]
    counted = [t for t in done if is_counted(t)]
    complete = [t for t in ts if t.state.name == "COMPLETE"]
    search = [tuple(t.values) for t in complete if t.user_attrs.get("origin") != FINAL]
    tps, hv = _quality([tuple(t.values) for t in complete], limit, best)
    search_tps, search_hv = _quality(search, limit, best)
    return {"counted": len(counted),
            "distinct": len({json.dumps(t.params, sort_keys=True) for t in counted}),
            "fail": sum(t.state.name == "FAIL" for t in ts),
            "running": sum(t.state.name == "RUNNING" for t in ts),
            "tps": round(tps, 5), "hv": round(hv, 5),
            "search_tps": round(search_tps, 5), "search_hv": round(search_hv, 5)}


def _exhaustive(d: Path) -> tuple[dict, float]:
    """The exhaustive front's fastest feasible tokens/s and hypervolume, and the limit."""
    from optimizer.search.pareto import hypervolume_2d

    path = d / "gpt3-exhaustive.yaml"
    path.write_text(_study_text(0, 200, "exhaustive"))
    p = _start(["--study", str(path), "--json"])
    out, err = p.communicate()
    doc = json.loads(out)
    limit = float(doc["inputs"]["memory_limit_bytes"])
    pts = [(c["metrics"]["tokens_per_s"], c["metrics"]["peak_memory_bytes"])
           for c in doc["pareto_front"]]
    return {"tps": max(t for t, m in pts if m <= limit),
            "hv": hypervolume_2d(*zip(*pts, strict=True), limit)}, limit


def one(d: Path, kind: str, seed: int, n: int, trials: int, pg: str, limit: float,
        best: dict) -> dict:
    path = d / f"gpt3-{seed}.yaml"
    path.write_text(_study_text(seed, trials))
    name = f"scale-{kind}-{seed}-{n}-{uuid.uuid4().hex[:8]}"
    storage = pg if kind == "pg" else str(d / f"{name}.journal")
    t0 = time.time()
    procs = [_start(["--study", str(path), "--storage", storage, "--study-name", name,
                     "--json"]) for _ in range(n)]
    outs = [p.communicate() for p in procs]
    docs = [json.loads(o) for o, _ in outs if o.strip()]
    fronts = {json.dumps([c["config"] for c in x["pareto_front"]]) for x in docs}
    return {"kind": kind, "seed": seed, "workers": n, "exits": [p.returncode for p in procs],
            "errors": [e.strip()[-300:] for (_, e), p in zip(outs, procs, strict=True)
                       if p.returncode],
            "documents_agree": len(fronts) == 1,
            "final": max((x["inputs"]["search"].get("final_polish_configs", 0) for x in docs),
                         default=0),
            "wall_s": round(time.time() - t0, 1), **_summary(storage, name, limit, best)}


def _table(runs: list[dict], kind: str, key: str, seeds: list[int], workers: list[int]) -> str:
    head = f"{kind} {key:<10}" + "".join(f"{f'{n} workers':>12}" for n in workers)
    rows = [head]
    for s in seeds:
        cells = [next((r[key] for r in runs if (r["kind"], r["seed"], r["workers"])
                       == (kind, s, n)), None) for n in workers]
        rows.append(f"{'seed ' + str(s):<{len(kind) + 11}}" + "".join(
            f"{c:>12.4f}" if isinstance(c, float) else f"{c!s:>12}" for c in cells))
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--kinds", default="pg")
    ap.add_argument("--pg", default=os.environ.get(
        "PARAPLAN_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
    args = ap.parse_args()
    workers = [int(x) for x in args.workers.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    kinds = args.kinds.split(",")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        best, limit = _exhaustive(d)
        for kind in kinds:
            for seed in seeds:
                for n in workers:
                    r = one(d, kind, seed, n, args.trials, args.pg, limit, best)
                    runs.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
    for kind in kinds:
        for key in ("tps", "search_tps", "hv", "search_hv", "distinct", "fail", "final",
                    "wall_s"):
            print(_table(runs, kind, key, seeds, workers))
    one_proc = {(r["kind"], r["seed"]): r for r in runs if r["workers"] == 1}
    worst = min((r["tps"] / one_proc[(r["kind"], r["seed"])]["tps"] for r in runs
                 if (r["kind"], r["seed"]) in one_proc), default=None)
    print(json.dumps({"trials": args.trials, "exhaustive": best,
                      "worst_tps_over_one_process": worst, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
