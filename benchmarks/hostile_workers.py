"""Several workers sharing one study on PostgreSQL (issue 26, acceptance 4).

    PYTHONPATH=. python benchmarks/hostile_workers.py [--workers 8] [--pg URL] [--skip-gpt3]

A. ``--workers`` processes start together on one 60-trial TPE study (7B on 16 A100s):
   distinct configurations among the counted trials, FAIL trials, distinct sampler seeds.
B. The shipped GPT-3 175B study (200 TPE trials): ``--workers`` processes sharing it versus
   one process with the same budget: the recommended configuration's tokens/s, FAIL trials.
C. A worker killed with SIGKILL while the others run: how long the others take to finish
   compared with an undisturbed run (a stall would show as + the grace period).
Prints one JSON document with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from optimizer.cli import main; sys.exit(main(sys.argv[1:]))"


def _start(argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", MAIN, *argv], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trials(pg, name):
    import optuna

    return optuna.load_study(study_name=name,
                             storage=optuna.storages.RDBStorage(pg)).get_trials(deepcopy=False)


def _summary(pg, name, trials):
    from optimizer.storage import is_counted

    ts = _trials(pg, name)
    done = [t for t in ts if t.state.name in ("COMPLETE", "PRUNED")]
    counted = [t for t in done if is_counted(t)]
    distinct = {json.dumps(t.params, sort_keys=True) for t in counted}
    return {"trials": trials, "counted": len(counted), "told": len(done),
            "distinct_counted": len(distinct), "distinct_ratio": len(distinct) / trials,
            "fail": sum(t.state.name == "FAIL" for t in ts),
            "running_left": sum(t.state.name == "RUNNING" for t in ts)}


def _rec_tps(doc):
    return doc["pareto_front"][doc["recommended"]]["metrics"]["tokens_per_s"]


def part_a(pg, n):
    name = f"bench-a-{uuid.uuid4().hex[:8]}"
    argv = ["--model", "7b", "--gpus", "16", "--sampler", "tpe", "--trials", "60",
            "--batch-size", "8", "--storage", pg, "--study-name", name, "--json"]
    t0 = time.time()
    procs = [_start(argv) for _ in range(n)]
    outs = [p.communicate() for p in procs]
    wall = time.time() - t0
    rcs = [p.returncode for p in procs]
    seeds = [json.loads(o)["inputs"]["search"]["sampler_seed"] for o, _ in outs if o]
    errors = [e.strip()[-400:] for (_, e), p in zip(outs, procs, strict=True) if p.returncode]
    return {**_summary(pg, name, 60), "workers": n, "exit_codes": rcs, "errors": errors,
            "distinct_seeds": len(set(seeds)), "wall_s": round(wall, 1)}


def part_b(pg, n):
    study = (ROOT / "studies" / "gpt3-175b-1024xa100.yaml").read_text()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gpt3.yaml"
        path.write_text(study)
        one = f"bench-b1-{uuid.uuid4().hex[:8]}"
        t0 = time.time()
        p = _start(["--study", str(path), "--storage", pg, "--study-name", one, "--json"])
        out, err = p.communicate()
        single = {"exit": p.returncode, "tokens_per_s": _rec_tps(json.loads(out)),
                  "wall_s": round(time.time() - t0, 1), **_summary(pg, one, 200)}
        many = f"bench-b8-{uuid.uuid4().hex[:8]}"
        t0 = time.time()
        procs = [_start(["--study", str(path), "--storage", pg, "--study-name", many,
                         "--json"]) for _ in range(n)]
        outs = [q.communicate() for q in procs]
        docs = [json.loads(o) for o, _ in outs if o.strip()]
        shared = {"exits": [q.returncode for q in procs],
                  "errors": [e.strip()[-400:] for (_, e), q in zip(outs, procs, strict=True)
                             if q.returncode],
                  "tokens_per_s": max(_rec_tps(d) for d in docs) if docs else None,
                  "wall_s": round(time.time() - t0, 1), **_summary(pg, many, 200)}
    ratio = shared["tokens_per_s"] / single["tokens_per_s"] if shared["tokens_per_s"] else None
    return {"single": single, "workers": n, "shared": shared,
            "shared_over_single": ratio}


def part_c(pg, n):
    def run(kill: bool):
        name = f"bench-c-{uuid.uuid4().hex[:8]}"
        argv = ["--model", "7b", "--gpus", "16", "--sampler", "tpe", "--trials", "120",
                "--batch-size", "8", "--storage", pg, "--study-name", name, "-q"]
        t0 = time.time()
        procs = [_start(argv) for _ in range(n)]
        if kill:  # once the victim holds trials (RUNNING or told): kill it mid-search
            deadline = time.time() + 120
            while time.time() < deadline:
                time.sleep(0.5)
                try:
                    mine = [t for t in _trials(pg, name)
                            if f":{procs[0].pid}:" in str(t.user_attrs.get("worker", ""))]
                except Exception:
                    mine = []
                if len(mine) >= 8:
                    break
            procs[0].send_signal(signal.SIGKILL)
        for p in procs:
            p.communicate()
        return time.time() - t0, _summary(pg, name, 120)

    calm, calm_s = run(False)
    killed, killed_s = run(True)
    return {"workers": n, "undisturbed_wall_s": round(calm, 1),
            "one_killed_wall_s": round(killed, 1), "extra_s": round(killed - calm, 1),
            "killed_summary": killed_s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--pg", default=os.environ.get(
        "PARAPLAN_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--skip-gpt3", action="store_true")
    ap.add_argument("--only", default="ABC", help="parts to run, e.g. B")
    args = ap.parse_args()
    out = {}
    if "A" in args.only:
        out["A_same_start"] = part_a(args.pg, args.workers)
        print(json.dumps(out, indent=1), file=sys.stderr)
    if "B" in args.only and not args.skip_gpt3:
        out["B_gpt3_study"] = part_b(args.pg, args.workers)
        print(json.dumps(out["B_gpt3_study"], indent=1), file=sys.stderr)
    if "C" in args.only:
        out["C_killed_worker"] = part_c(args.pg, min(args.workers, 4))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
