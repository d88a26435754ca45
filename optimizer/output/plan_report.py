"""Human output of a plan across GPU counts (``optimize --gpus 64-1024 --tokens N``)."""

from __future__ import annotations

from typing import Any

from optimizer.output.report import GIB, _schedule, defaults_line, render_recommendation
from optimizer.output.tables import fmt_table

PLAN_COLUMNS = ("GPUs", "nodes", "tp", "pp", "dp", "mbs", "schedule", "recompute", "ZeRO",
                "prec", "tokens/s", "tok/s/GPU", "MFU", "step s", "peak GiB", "train days",
                "days 80%", "GPU-hours", "cost", "front")


def human_duration_days(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 86400:,.1f}"


def _days_interval(iv) -> str:
    return "-" if not iv else f"{iv[0] / 86400:,.0f}-{iv[1] / 86400:,.0f}"


def _money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"${x / 1e6:,.2f}M" if x >= 1e6 else f"${x:,.0f}"


def plan_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    front = set(doc["plan_front"])
    for i, e in enumerate(doc["plan"]):
        mark = ("pick" if i == doc.get("plan_pick") else "yes") if i in front else ""
        if e["status"] != "ok":
            need = e.get("least_memory_bytes")
            verdict = ("no valid layout" if str(e.get("message", "")).startswith(
                "no valid configuration") else "does not fit")
            rows.append([str(e["gpus"]), "-", *["-"] * 8, verdict, "-", "-", "-",
                         f">{need / GIB:.0f}" if need else "-", "-", "-", "-", "-", ""])
            continue
        c = e["recommended"]["config"]
        gh = e.get("gpu_hours")
        rows.append([str(e["gpus"]), str(e["num_nodes"]), str(c["tp"]), str(c["pp"]),
                     str(c["dp"]), str(c["micro_batch_size"]), _schedule(c), c["recompute"],
                     str(c["zero_stage"]), c["precision"], f"{e['tokens_per_s']:,.0f}",
                     f"{e['tokens_per_s_per_gpu']:,.0f}", f"{e['mfu']:.3f}",
                     f"{e['step_time_s']:.2f}", f"{e['peak_memory_bytes'] / GIB:.1f}",
                     human_duration_days(e.get("time_to_train_s")),
                     _days_interval(e.get("time_to_train_interval_s")),
                     "-" if gh is None else f"{gh:,.0f}", _money(e.get("cost")), mark])
    return rows


def render_plan(doc: dict[str, Any], top_k: int = 0) -> str:  # noqa: ARG001 - one layout per count
    inp = doc["inputs"]
    tr = inp.get("training", {})
    tokens = inp.get("tokens")
    price = inp.get("gpu_hour_cost")
    counts = inp["gpu_counts"]
    head = (f"paraplan {doc['tool']['version']}: plan for {inp.get('model', {}).get('name', '?')}"
            f" on {inp['gpu']} ({inp['gpus_per_node']} per node), GPU counts "
            f"{', '.join(map(str, counts))}; seq {tr.get('seq_length')}, global batch "
            f"{tr.get('global_batch_size')} (fixed for the run: batch-size ramps come later)"
            + (f", {tokens:.3g} training tokens" if tokens else "")
            + (f", ${price:g} per GPU-hour" if price is not None else "") + "\n"
            f"{doc['stats']['configs_evaluated']:,} configurations scored over "
            f"{len(counts)} searches in {doc['stats']['wall_s']:.2f} s\n"
            + defaults_line(inp) + "\n")
    table = fmt_table(PLAN_COLUMNS, plan_rows(doc),
                      "Plan: per GPU count the recommended layout (front = not beaten on both "
                      "time-to-train and cost)")
    out = [head + table]
    front = [doc["plan"][i] for i in doc["plan_front"]]
    if front:
        out.append("Front of time-to-train vs cost: "
                   + ", ".join(f"{e['gpus']} GPUs" for e in front))
    pick = doc.get("plan_pick")
    if pick is not None:
        e = doc["plan"][pick]
        cheapest = min(front, key=lambda f: 1 / f["tokens_per_s_per_gpu"])
        why = (f"the fastest count whose GPU-hours are within 10% of the cheapest "
               f"({cheapest['gpus']} GPUs, {cheapest['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU)")
        line = f"Pick: {e['gpus']} GPUs: {why}"
        if e.get("time_to_train_s") is not None:
            line += (f"; {e['time_to_train_s'] / 86400:,.1f} days, "
                     f"{e['gpu_hours']:,.0f} GPU-hours")
            if e.get("cost") is not None:
                line += f", {_money(e['cost'])}"
        out.append(line)
        sub = {"recommended": 0, "pareto_front": [e["recommended"]],
               "inputs": {"memory_limit_bytes": e["memory_limit_bytes"]}}
        out.append(render_recommendation(sub).rstrip("\n").replace("Recommended: #0",
                                                                   f"At {e['gpus']} GPUs:", 1))
    if not tokens:
        out.append("(give --tokens N for time-to-train and GPU-hours, --gpu-hour-cost USD for "
                   "cost)")
    return "\n".join(out) + "\n"
