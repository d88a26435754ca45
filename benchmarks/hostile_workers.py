"""Several workers sharing one study on PostgreSQL (issue 26, acceptance 4).

    PYTHONPATH=. python benchmarks/hostile_workers.py [--workers 8] [--pg URL] [--skip-gpt3]

A. ``--workers`` processes start together on one 60-trial TPE study (7B on 16 A100s):
   distinct configurations among the counted trials, FAIL trials, distinct sampler seeds.
B. The shipped GPT-3 175B study (200 TPE trials): ``--workers`` processes sharing it versus
   one process with the same budget: the recommended configuration's tokens/s, FAIL trials.
C. One of ``--workers`` workers killed with SIGKILL while it holds RUNNING trials: how long
   those trials stay RUNNING after the kill (the longest the others can wait on them; the
   criterion is the heartbeat interval, 5 s), and the wall time against an undisturbed run.
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
    """kill -9 one of ``n`` workers while it holds RUNNING trials; how long its trials stay
    RUNNING after the kill (the longest any other worker can wait on them: a worker waits only
    while the budget or the in-flight cap is held, and it fails dead trials every POLL_S while
    it waits), and the wall time against an undisturbed run."""
    import datetime as dt

    from optimizer.storage import HEARTBEAT_INTERVAL_S

    def run(kill: bool):
        name = f"bench-c-{uuid.uuid4().hex[:8]}"
        argv = ["--model", "7b", "--gpus", "16", "--sampler", "tpe", "--trials", "120",
                "--batch-size", "16", "--storage", pg, "--study-name", name, "-q"]
        t0 = time.time()
        procs = [_start(argv) for _ in range(n)]
        killed_at = held = None
        if kill:  # once the victim holds RUNNING trials, mid-search: kill it
            mark = f":{procs[0].pid}:"
            deadline = time.time() + 120
            while time.time() < deadline and killed_at is None:
                time.sleep(0.2)
                try:
                    ts = _trials(pg, name)
                except Exception:
                    continue
                told = sum(mark in str(t.user_attrs.get("worker", "")) for t in ts)
                mine = [t for t in ts if t.state.name == "RUNNING"
                        and mark in str(t.user_attrs.get("worker", ""))]
                if mine and told >= 8:
                    procs[0].send_signal(signal.SIGKILL)
                    killed_at, held = dt.datetime.now(), len(mine)
        for p in procs:
            p.communicate()
        out = {"wall_s": round(time.time() - t0, 1), **_summary(pg, name, 120)}
        if kill:
            fails = [t for t in _trials(pg, name) if t.state.name == "FAIL"
                     and f":{procs[0].pid}:" in str(t.user_attrs.get("worker", ""))]
            waits = [(t.datetime_complete - killed_at).total_seconds() for t in fails
                     if t.datetime_complete is not None and killed_at is not None]
            out.update(victim_running_at_kill=held, victim_trials_failed=len(fails),
                       kill_to_fail_s=[round(w, 2) for w in sorted(waits)],
                       max_kill_to_fail_s=round(max(waits), 2) if waits else None,
                       heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                       within_interval=bool(waits) and max(waits) <= HEARTBEAT_INTERVAL_S)
        return out

    calm = run(False)
    killed = run(True)
    return {"workers": n, "undisturbed": calm, "one_killed": killed,
            "extra_wall_s": round(killed["wall_s"] - calm["wall_s"], 1)}


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
        out["C_killed_worker"] = part_c(args.pg, args.workers)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
