"""Does the search reach the experts' layouts? (issue 21, acceptance "the search reaches ...")

For each production-style run of the calibration data (``published_runs_2026.yaml``'s
Megatron-Bridge dense rows, MLPerf Llama 3.1 rows, torchtitan rows and NeMo long-context rows,
mapped by :func:`optimizer.validation.published.map_entry`), run the library's ``optimize`` on
the same model, cluster, sequence, global batch, framework settings and precision (the run's
precision is the space's only one; every other dimension keeps the default space), and print:
the run, its layout, paraplan's pick, both predicted throughputs (tokens/s, from the same cost
model) and pass/fail. Pass: the pick's predicted throughput >= the run's own layout's as
paraplan predicts it, and the run's layout is admitted by the validity rules.

Run ``python benchmarks/experts_layouts.py [--groups mlperf,torchtitan] [--only ID]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

from costmodel.batch import ConfigBatch  # noqa: E402
from costmodel.model import score  # noqa: E402
from optimizer.api import optimize  # noqa: E402
from optimizer.validation.published import (  # noqa: E402
    SkipEntry,
    load_data,
    map_entry,
    resolve_data_dir,
)
from search_spaces.rules import Context, explain  # noqa: E402

#: group-name prefixes of the production-style runs
GROUPS = ("mbridge_perf_dense", "mlperf_training", "torchtitan", "nemo_long_context")


def layout_text(cfg) -> str:
    c = cfg.as_dict() if hasattr(cfg, "as_dict") else dict(cfg)
    parts = [f"tp{c['tp']}", f"pp{c['pp']}"]
    if c["cp"] > 1:
        parts.append(f"cp{c['cp']}" + ("" if c["cp_comm_type"] == "p2p"
                                       else f"({c['cp_comm_type']})"))
    parts.append(f"dp{c['dp']}")
    parts.append(f"mbs{c['micro_batch_size']}")
    if c["schedule"] == "interleaved":
        parts.append(f"v{c['virtual_stages']}")
    elif c["schedule"] != "1f1b":
        parts.append(c["schedule"])
    if c["recompute"] != "none":
        n = c.get("recompute_num_layers", 0)
        parts.append(f"rc-{c['recompute']}" + (f"{n}" if n else ""))
    if c["sequence_parallel"]:
        parts.append("sp")
    if c["zero_stage"]:
        parts.append(f"z{c['zero_stage']}")
    if c.get("stage_plan", "default") != "default":
        parts.append(c["stage_plan"][:3])
    if c.get("precision_aware_optimizer", "off") != "off":
        parts.append("pao")
    if c.get("cpu_offloading_num_layers", 0):
        parts.append(f"off{c['cpu_offloading_num_layers']}")
    parts.append(c["precision"])
    return " ".join(parts)


def production_runs(groups=GROUPS, only: str | None = None):
    entries, _ = load_data(resolve_data_dir(None))
    runs, skipped = [], []
    for e in entries:
        g = str(e.get("group", ""))
        if not any(g.startswith(p) for p in groups):
            continue
        if only and only not in str(e.get("id")):
            continue
        try:
            runs.append(map_entry(e))
        except SkipEntry as s:
            skipped.append((e.get("id"), str(s)))
    return runs, skipped


def check_run(r, *, trials: int = 300):
    ctx = Context(r.model, r.cluster, r.training)
    broken = [name for name, _ in explain(ctx, r.parallel)]
    own = score(r.model, r.cluster, r.training, ConfigBatch.from_configs([r.parallel]))
    own_tps = float(own.tokens_per_s[0])
    own_mem = float(own.peak_memory_bytes[0])
    t0 = time.perf_counter()
    try:
        res = optimize(r.model, cluster=r.cluster, training=r.training, trials=trials,
                       space={"precision": (r.parallel.precision,)})
    except Exception as exc:  # infeasible or a bug: reported as a failure
        return dict(id=r.id, group=r.group, own=layout_text(r.parallel), own_tps=own_tps,
                    own_mem=own_mem, pick="(" + type(exc).__name__ + ")", pick_tps=0.0,
                    wall=time.perf_counter() - t0, broken=broken, ok=False, limit=0.0,
                    sampler="-", reach=_reach(r, own_mem, trials), space=0)
    wall = time.perf_counter() - t0
    reach = _reach(r, own_mem, trials)
    rec = res.recommended
    pick_tps = float(rec.metrics["tokens_per_s"])
    ok = not broken and pick_tps >= own_tps * (1 - 1e-9)
    return dict(id=r.id, group=r.group, own=layout_text(r.parallel), own_tps=own_tps,
                own_mem=own_mem, pick=layout_text(rec.config), pick_tps=pick_tps, wall=wall,
                broken=broken, ok=ok, limit=res.problem.memory_limit_bytes,
                sampler=res.stats["sampler"], reach=reach, space=res.stats["valid_space_size"])


def _reach(r, own_mem: float, trials: int) -> float:
    """The fastest front point's tokens/s with the memory limit at the run's own peak."""
    cluster = r.cluster
    limit = max(own_mem * 1.0001, 0.9 * cluster.gpu.memory_bytes)
    if limit > cluster.gpu.memory_bytes:
        cluster = replace(cluster, gpu=replace(cluster.gpu, memory_bytes=limit))
    try:
        res = optimize(r.model, cluster=cluster, training=r.training, trials=trials,
                       space={"precision": (r.parallel.precision,)},
                       memory_limit_gib=limit / 2**30)
    except Exception:
        return 0.0
    return max(float(c.metrics["tokens_per_s"]) for c in res.pareto_front)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default=",".join(GROUPS),
                    help="comma-separated group-name prefixes")
    ap.add_argument("--only", default=None, help="only run ids containing this text")
    ap.add_argument("--trials", type=int, default=300)
    a = ap.parse_args(argv)
    runs, skipped = production_runs(tuple(a.groups.split(",")), a.only)
    gib = 2**30
    rows = [check_run(r, trials=a.trials) for r in runs]
    w = max((len(x["id"]) for x in rows), default=4)
    print(f"{'run':<{w}}  {'its layout':<44} {'tok/s':>10} {'GiB':>5}  "
          f"{'paraplan pick':<50} {'tok/s':>10}  ratio  reach  {'s':>5}  verdict")
    for x in rows:
        over = "!" if x["limit"] and x["own_mem"] > x["limit"] else " "
        verdict = "pass" if x["ok"] else ("FAIL rules: " + ",".join(x["broken"])
                                          if x["broken"] else "FAIL")
        ratio = x["pick_tps"] / x["own_tps"] if x["own_tps"] else float("nan")
        reach = x["reach"] / x["own_tps"] if x["own_tps"] else float("nan")
        print(f"{x['id']:<{w}}  {x['own']:<44} {x['own_tps']:>10,.0f} "
              f"{x['own_mem'] / gib:>4.0f}{over}  {x['pick']:<50} {x['pick_tps']:>10,.0f}  "
              f"{ratio:5.2f}  {reach:5.2f}  {x['wall']:5.2f}  {verdict}")
    n_ok = sum(x["ok"] for x in rows)
    n_reach = sum(x["reach"] >= x["own_tps"] * (1 - 1e-9) for x in rows)
    fits = [x for x in rows if x["limit"] and x["own_mem"] <= x["limit"]]
    print(f"\n{n_ok}/{len(rows)} pass; reached with the limit at the run's own peak: "
          f"{n_reach}/{len(rows)}; of the {len(fits)} runs predicted to fit, "
          f"{sum(x['ok'] for x in fits)} pass; '!' = the run's own layout predicted over the "
          f"memory limit; s = optimize's wall seconds; total {sum(x['wall'] for x in rows):.1f} s")
    for x in rows:
        if x["reach"] < x["own_tps"] * (1 - 1e-9):
            print(f"not reached: {x['id']} ({x['reach'] / x['own_tps']:.4f} of its own layout)")
    for sid, why in skipped:
        print(f"skipped {sid}: {why}")
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
