"""Does the search reach the experts' layouts? (issue 21, acceptance "the search reaches ...")

For each production-style run of the calibration data (``published_runs_2026.yaml``'s
Megatron-Bridge dense rows, MLPerf Llama 3.1 rows, torchtitan rows and NeMo long-context rows,
mapped by :func:`optimizer.validation.published.map_entry`), run the library's ``optimize`` on
the same model, cluster, sequence, global batch, framework settings and precision (the run's
precision is the space's only one; every other dimension keeps the default space), and print:
the run, its layout, paraplan's pick, both predicted throughputs (tokens/s, from the same cost
model) and pass/fail. Pass: the pick's predicted throughput >= the run's own layout's as
paraplan predicts it, and the run's layout is admitted by the validity rules.

A run whose layout leaves the micro-batch unstated (NeMo's long-context table, torchtitan's
405B rows; and torchtitan's "Interleaved 1F1B" its virtual stages) is completed: every
candidate is scored and the run is held to the fastest one predicted to fit (marked ``*``).
Columns: GiB is the run's own layout's predicted peak, ``!`` where it is over the memory limit
(the search may then not pick it); reach is the fastest front point with the limit raised to
that peak, over the run's own throughput.

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
from optimizer.core.problem import resolve_problem  # noqa: E402
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


#: candidate micro-batch sizes for a run that leaves its micro-batch unstated (those dividing
#: its per-replica batch): the micro-batch sizes the default space offers
UNSTATED_MICRO_BATCHES = (1, 2, 4, 8, 16)


def _unstated(value) -> bool:
    return value is None or (isinstance(value, str) and "not stated" in value.lower())


def completions(entry) -> tuple[list[dict], str]:
    """Copies of ``entry`` with what its layout leaves unstated filled in, one per candidate,
    and what was filled (``[]`` where the entry states its layout or is not completable).

    Completable: the micro-batch unstated (``micro_batch`` absent or "not stated", the only
    entry of ``layout_missing``), and torchtitan's "Interleaved 1F1B" with no virtual-stage
    count (vpp 2-8; the rules keep those its pipeline split admits).
    :func:`resolve_completion` picks the candidate the run is held to.
    """
    par = dict(entry.get("parallel") or {})
    missing = [str(m) for m in entry.get("layout_missing") or []]
    if entry.get("layout_complete") is False and missing != ["micro_batch"]:
        return [], ""
    if not _unstated(par.get("micro_batch")):
        return [], ""
    if par.get("local_batch") is not None and int(par.get("pp") or 1) == 1:
        return [], ""  # map_entry reads torchtitan's local_batch as the micro-batch
    try:
        per_replica = int(par["global_batch"]) // int(par["dp"])
    except (KeyError, TypeError, ValueError):
        return [], ""
    mbs = [b for b in UNSTATED_MICRO_BATCHES if per_replica % b == 0]
    interleaved = "interleaved" in str(par.get("pp_schedule", "")).lower() \
        and _unstated(par.get("vpp"))
    vpps = range(2, 9) if interleaved else (par.get("vpp"),)
    out = []
    for v in vpps:
        for b in mbs:
            p2 = {**par, "micro_batch": b}
            if interleaved:
                p2["vpp"] = v
            out.append({**entry, "parallel": p2, "layout_complete": True,
                        "layout_missing": []})
    what = "micro-batch" + (" and virtual stages" if interleaved else "")
    return out, what


def resolve_completion(runs):
    """The candidate a run with an unstated micro-batch (or vpp) is held to: the fastest
    predicted to fit under the default memory limit, breaking no rule; where none fits, the
    one needing the least memory (a run's unstated choice read as the best it could have
    been: the hardest bar for the search)."""
    scored = []
    for r in runs:
        ctx = Context(r.model, r.cluster, r.training)
        ok = not explain(ctx, r.parallel)
        s = score(r.model, r.cluster, r.training, ConfigBatch.from_configs([r.parallel]))
        limit = resolve_problem(model=r.model, cluster=r.cluster,
                                training=r.training).memory_limit_bytes
        scored.append((r, ok, float(s.tokens_per_s[0]), float(s.peak_memory_bytes[0]), limit))
    valid = [x for x in scored if x[1]] or scored
    fits = [x for x in valid if x[3] <= x[4]]
    if fits:
        return max(fits, key=lambda x: x[2])[0]
    return min(valid, key=lambda x: x[3])[0]


def production_runs(groups=GROUPS, only: str | None = None):
    """(runs, skipped, completed): the mapped runs, (id, reason) of those not mapped, and
    {id: what was filled in} for runs whose unstated layout parts were completed."""
    entries, _ = load_data(resolve_data_dir(None))
    runs, skipped, completed = [], [], {}
    for e in entries:
        g = str(e.get("group", ""))
        if not any(g.startswith(p) for p in groups):
            continue
        if only and only not in str(e.get("id")):
            continue
        try:
            runs.append(map_entry(e))
            continue
        except SkipEntry as s:
            reason = str(s)
        candidates, what = completions(e)
        mapped = []
        for c in candidates:
            try:
                mapped.append(map_entry(c))
            except SkipEntry as s:
                reason = f"{reason}; completed: {s}"
        if not mapped:
            skipped.append((e.get("id"), reason))
            continue
        r = resolve_completion(mapped)
        runs.append(r)
        completed[r.id] = what
    return runs, skipped, completed


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
    runs, skipped, completed = production_runs(tuple(a.groups.split(",")), a.only)
    gib = 2**30
    rows = [check_run(r, trials=a.trials) for r in runs]
    for x in rows:
        if x["id"] in completed:
            x["own"] += " *"
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
    for rid, what in completed.items():
        print(f"* {rid}: its {what} not stated; held to the candidate predicted fastest among "
              f"those that fit (else the smallest), see resolve_completion")
    for sid, why in skipped:
        print(f"skipped {sid}: {why}")
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
