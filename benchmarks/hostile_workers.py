"""Several workers sharing one study on PostgreSQL (issue 26, acceptance 4).

    PYTHONPATH=. python benchmarks/hostile_workers.py [--workers 8] [--pg URL] [--skip-gpt3]

A. ``--workers`` processes start together on one 60-trial TPE study (7B on 16 A100s):
   distinct configurations among the counted trials, FAIL trials, distinct sampler seeds.
B. The shipped GPT-3 175B study (200 TPE trials): ``--workers`` processes sharing it versus
   one process with the same budget: the recommended configuration's tokens/s, FAIL trials.
C. One of ``--workers`` workers killed with SIGKILL while it holds RUNNING trials: how long
   those trials stay RUNNING after the kill (the longest the others can wait on them; the
   criterion is the heartbeat interval, 5 s), the longest time after the kill in which no
   other worker started a trial (how long the others waited), and the wall time against an
   undisturbed run. ``--other-host`` starts the victim with ``PARAPLAN_TEST_HOSTNAME`` set (the
   test hook of optimizer.storage.workers): its tags name another host, so the others' pid
   checks cannot see it and only the storage server (or Optuna's heartbeat) tells them it
   died. ``--reps`` repeats the killed run; ``--skip-calm`` skips the undisturbed one.
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


def _start(argv, host=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if host:
        env["PARAPLAN_TEST_HOSTNAME"] = host
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


def part_c(pg, n, *, other_host=False, reps=1, calm_run=True):
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
        procs = [_start(argv, "elsewhere.test" if kill and other_host and i == 0 else None)
                 for i in range(n)]
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
            victim = f":{procs[0].pid}:"
            starts = sorted(t.datetime_start for t in _trials(pg, name)
                            if t.datetime_start is not None and killed_at is not None
                            and t.datetime_start > killed_at
                            and victim not in str(t.user_attrs.get("worker", "")))
            gaps = [(b - a).total_seconds()
                    for a, b in zip([killed_at, *starts], starts, strict=False)]
            out.update(victim_running_at_kill=held, other_host=other_host,
                       max_others_idle_after_kill_s=round(max(gaps), 2) if gaps else None,
                       victim_trials_failed=len(fails),
                       kill_to_fail_s=[round(w, 2) for w in sorted(waits)],
                       max_kill_to_fail_s=round(max(waits), 2) if waits else None,
                       heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
                       within_interval=bool(waits) and max(waits) <= HEARTBEAT_INTERVAL_S)
        return out

    calm = run(False) if calm_run else None
    killed = [run(True) for _ in range(reps)]
    out = {"workers": n, "undisturbed": calm, "one_killed": killed,
           "max_kill_to_fail_s": [k.get("max_kill_to_fail_s") for k in killed],
           "max_others_idle_after_kill_s": [k.get("max_others_idle_after_kill_s")
                                            for k in killed]}
    if calm:
        out["extra_wall_s"] = [round(k["wall_s"] - calm["wall_s"], 1) for k in killed]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--pg", default=os.environ.get(
        "PARAPLAN_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--skip-gpt3", action="store_true")
    ap.add_argument("--only", default="ABC", help="parts to run, e.g. B")
    ap.add_argument("--other-host", action="store_true",
                    help="part C: the killed worker's tags name another host (test hook)")
    ap.add_argument("--reps", type=int, default=1, help="part C: killed runs")
    ap.add_argument("--skip-calm", action="store_true", help="part C: no undisturbed run")
    args = ap.parse_args()
    out = {}
    if "A" in args.only:
        out["A_same_start"] = part_a(args.pg, args.workers)
        print(json.dumps(out, indent=1), file=sys.stderr)
    if "B" in args.only and not args.skip_gpt3:
        out["B_gpt3_study"] = part_b(args.pg, args.workers)
        print(json.dumps(out["B_gpt3_study"], indent=1), file=sys.stderr)
    if "C" in args.only:
        out["C_killed_worker"] = part_c(args.pg, args.workers, other_host=args.other_host,
                                      reps=args.reps, calm_run=not args.skip_calm)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
