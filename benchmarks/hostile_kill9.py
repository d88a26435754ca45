"""kill -9 soak: searches killed at random moments on journal, SQLite and PostgreSQL studies
(issue 26, acceptance 3).

    PYTHONPATH=. python benchmarks/hostile_kill9.py [--kills 11] [--seed 0] [--pg URL]

For each storage kind a study file (TPE, 150 trials, batch 8) is started and killed with
SIGKILL after a random 0.3-3 s, ``--kills`` times, then run to the end. After every kill:
``optimize report`` must leave the storage file byte-identical (it never writes), and no
complete journal record may disappear (the repair only drops a torn last line). At the end the
study must hold exactly its trial count of counted finished trials, and a further run must
print the stored front without changing it. Prints one JSON document with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from optimizer.cli import main; sys.exit(main(sys.argv[1:]))"
TRIALS = 150


def _cli(argv, timeout=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", MAIN, *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _start(argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", MAIN, *argv], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _sha(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None


def _records(p: Path) -> list[bytes]:
    if not p.exists():
        return []
    lines = p.read_bytes().split(b"\n")
    return [x for x in lines[:-1] if x.strip()]  # complete lines only


def _counted(storage: str, name: str) -> tuple[int, int, int]:
    import optuna

    from optimizer.storage import is_counted, open_storage

    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    ts = study.get_trials(deepcopy=False)
    fin = [t for t in ts if t.state.name in ("COMPLETE", "PRUNED")]
    return (sum(is_counted(t) for t in fin), sum(t.state.name == "FAIL" for t in ts),
            sum(t.state.name == "RUNNING" for t in ts))


def soak(kind: str, kills: int, rng: random.Random, pg: str, d: Path) -> dict:
    name = f"kill-{kind}-{uuid.uuid4().hex[:6]}"
    storage = {"journal": f"{name}.journal", "sqlite": f"sqlite:///{name}.db", "postgres": pg}
    study = {"schema_version": 1, "name": name, "model": "7b",
             "cluster": {"gpus": 16, "gpu": "a100-sxm-80gb"},
             "training": {"seq_length": 2048, "global_batch_size": 512},
             "search": {"sampler": "tpe", "trials": TRIALS, "seed": 0, "batch_size": 8},
             "storage": storage[kind]}
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study))
    file = {"journal": d / f"{name}.journal", "sqlite": d / f"{name}.db"}.get(kind)
    report_writes = lost_records = killed = 0
    delays = []
    for _ in range(kills):
        before = _records(file) if kind == "journal" else []
        p = _start(["--study", str(path), "-q"])
        delay = rng.uniform(0.3, 3.0)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            killed += 1
            delays.append(round(delay, 2))
        p.wait()
        if kind == "journal":
            after = _records(file)
            lost_records += sum(1 for r in before if r not in set(after))
        if file is not None:
            digest = _sha(file)
            _cli(["report", "--study", str(path)], timeout=120)
            report_writes += _sha(file) != digest
        if kind == "journal" and file.exists():  # tear the last line now and then
            if rng.random() < 0.3:
                data = file.read_bytes()
                file.write_bytes(data[:-rng.randint(1, 30)])
    final = _cli(["--study", str(path), "--json"], timeout=600)
    where = {"journal": str(file), "sqlite": f"sqlite:///{file}", "postgres": pg}[kind]
    counted, fail, running = _counted(where, name)
    digest = _sha(file) if file is not None else None
    again = _cli(["--study", str(path), "--json"], timeout=600)
    stable = again.returncode == 0 and json.loads(again.stdout)["pareto_front"] == \
        json.loads(final.stdout)["pareto_front"]
    return {"kind": kind, "kills_attempted": kills, "killed_mid_run": killed,
            "kill_delays_s": delays, "final_exit": final.returncode,
            "final_error": final.stderr.strip()[-300:] if final.returncode else "",
            "counted_finished": counted, "expected": TRIALS, "exact": counted == TRIALS,
            "fail_trials": fail, "running_left": running,
            "report_wrote": report_writes, "lost_complete_records": lost_records,
            "rerun_same_front": stable,
            "rerun_left_file_unchanged": digest == (_sha(file) if file is not None else None)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=11, help="kills per storage kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pg", default=os.environ.get(
        "PARAPLAN_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--kinds", default="journal,sqlite,postgres")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory() as t:
        d = Path(t)
        os.chdir(d)
        for kind in args.kinds.split(","):
            r = soak(kind, args.kills, rng, args.pg, d)
            print(json.dumps(r), file=sys.stderr)
            results.append(r)
    total = sum(r["killed_mid_run"] for r in results)
    print(json.dumps({"kills_mid_run": total, "all_exact": all(r["exact"] for r in results),
                      "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
