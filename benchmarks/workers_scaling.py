"""More workers, same answer (issue 26, defect 3): the shipped GPT-3 175B study (200 TPE
trials) run by 1, 2, 4 and 8 workers sharing one study, on PostgreSQL and on a journal file.

    PYTHONPATH=. python benchmarks/workers_scaling.py [--workers 1,2,4,8] [--kinds pg,journal]
        [--repeats 1] [--pg URL]

For every (storage kind, worker count, repeat): the best recommended tokens/s over the
workers' documents (the recommendation of the last worker to finish sees the whole study),
its ratio to the exhaustive optimum of the same space and to one process, counted trials,
distinct configurations scored, FAIL trials left, wall time. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_workers import ROOT, _rec_tps, _start  # noqa: E402

STUDY = ROOT / "studies" / "gpt3-175b-1024xa100.yaml"


def _summary(storage: str, name: str) -> dict:
    import optuna

    from optimizer.storage import is_counted, open_storage

    ts = optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials(
        deepcopy=False)
    done = [t for t in ts if t.state.name in ("COMPLETE", "PRUNED")]
    return {"counted": sum(is_counted(t) for t in done), "told": len(done),
            "distinct": len({json.dumps(t.params, sort_keys=True) for t in done}),
            "fail": sum(t.state.name == "FAIL" for t in ts)}


def _exhaustive(d: Path) -> float:
    path = d / "gpt3-exhaustive.yaml"
    path.write_text(STUDY.read_text().replace("sampler: tpe", "sampler: exhaustive"))
    p = _start(["--study", str(path), "--json"])
    out, err = p.communicate()
    return _rec_tps(json.loads(out))


def one(d: Path, kind: str, n: int, pg: str) -> dict:
    path = d / "gpt3.yaml"
    path.write_text(STUDY.read_text())
    name = f"scale-{kind}-{n}-{uuid.uuid4().hex[:8]}"
    storage = pg if kind == "pg" else str(d / f"{name}.journal")
    t0 = time.time()
    procs = [_start(["--study", str(path), "--storage", storage, "--study-name", name,
                     "--json"]) for _ in range(n)]
    outs = [p.communicate() for p in procs]
    docs = [json.loads(o) for o, _ in outs if o.strip()]
    return {"kind": kind, "workers": n, "exits": [p.returncode for p in procs],
            "errors": [e.strip()[-300:] for (_, e), p in zip(outs, procs, strict=True)
                       if p.returncode],
            "tokens_per_s": max(_rec_tps(x) for x in docs) if docs else None,
            "wall_s": round(time.time() - t0, 1), **_summary(storage, name)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--kinds", default="pg,journal")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--pg", default=os.environ.get(
        "PARAPLAN_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        best = _exhaustive(d)
        for _ in range(args.repeats):
            for kind in args.kinds.split(","):
                for n in (int(x) for x in args.workers.split(",")):
                    r = one(d, kind, n, args.pg)
                    r["over_optimum"] = r["tokens_per_s"] / best if r["tokens_per_s"] else None
                    runs.append(r)
                    print(json.dumps(r), file=sys.stderr)
    table = {}
    for kind in args.kinds.split(","):
        single = [r["tokens_per_s"] for r in runs if r["kind"] == kind and r["workers"] == 1]
        for n in (int(x) for x in args.workers.split(",")):
            rs = [r for r in runs if r["kind"] == kind and r["workers"] == n]
            table[f"{kind}/{n}"] = {
                "over_optimum": [round(r["over_optimum"] or 0, 4) for r in rs],
                "over_single": [round((r["tokens_per_s"] or 0) / single[0], 4)
                                for r in rs] if single else None,
                "fail": [r["fail"] for r in rs], "counted": [r["counted"] for r in rs],
                "distinct": [r["distinct"] for r in rs],
                "median_wall_s": statistics.median(r["wall_s"] for r in rs)}
    print(json.dumps({"exhaustive_tokens_per_s": best, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
