"""``optimize nccl`` output: the JSON document and the text of a prediction or a sweep."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optimizer.nccl.predict import DISPLAY, Prediction, format_size, label
from optimizer.output.tables import fmt_table


def nccl_document(pred: Prediction, cluster: Any, *, extra_inputs: dict | None = None,
                  extra: dict | None = None) -> dict[str, Any]:
    """The ``optimize nccl --json`` document (contract.md section 4)."""
    from costmodel import collectives as coll
    from optimizer.core.problem import SCHEMA_VERSION, tool_version
    from optimizer.core.serialize import cluster_to_dict

    inputs = {"collective": pred.collective, "size_bytes": pred.nbytes, "gpus": pred.n_ranks,
              "nodes": pred.n_nodes, "ranks_per_node": pred.n_ranks // pred.n_nodes,
              "algo": pred.algo, "proto": pred.proto, "nccl_version": coll.NCCL_VERSION,
              "cluster": cluster_to_dict(cluster)}
    inputs.update(extra_inputs or {})
    doc = {"schema_version": SCHEMA_VERSION,
           "tool": {"name": "paraplan", "version": tool_version()},
           "inputs": inputs,
           "chosen": pred.chosen.to_dict(),
           "alternatives": [a.to_dict() for a in pred.alternatives]}
    doc.update(extra or {})
    return doc


def _fmt_us(t_s: float) -> str:
    return f"{t_s * 1e6:.1f}"


def _header(pred: Prediction, cluster: Any) -> str:
    ppn = pred.n_ranks // pred.n_nodes
    where = (f"{pred.n_ranks} GPUs = {pred.n_nodes} node{'s' if pred.n_nodes > 1 else ''} x "
             f"{ppn} of {cluster.name}")
    force = "" if (pred.algo, pred.proto) == ("auto", "auto") else \
        f", NCCL_ALGO={pred.algo} NCCL_PROTO={pred.proto}"
    return f"{DISPLAY[pred.collective]} of {format_size(pred.nbytes)} ({pred.nbytes} B), " \
           f"{where}{force}"


def render_prediction(pred: Prediction, cluster: Any) -> str:
    from costmodel import collectives as coll
    c = pred.chosen
    lines = [_header(pred, cluster) + f" (NCCL {coll.NCCL_VERSION} model)",
             f"NCCL's choice: {c.label}: {_fmt_us(c.time_s)} us, algbw "
             f"{c.algbw_bytes_per_s / 1e9:.2f} GB/s, busbw {c.busbw_bytes_per_s / 1e9:.2f} GB/s",
             ""]
    rows = [[str(i + 1), a.label, _fmt_us(a.time_s), f"{a.algbw_bytes_per_s / 1e9:.2f}",
             f"{a.busbw_bytes_per_s / 1e9:.2f}",
             "chosen" if i == 0 else f"+{100 * (a.time_s / c.time_s - 1):.1f}%"]
            for i, a in enumerate(pred.alternatives)]
    table = fmt_table(["#", "algo/proto", "time us", "algbw GB/s", "busbw GB/s", "vs chosen"],
                       rows, title="Runnable alternatives, NCCL's preference order")
    return "\n".join(lines) + "\n" + table


def render_sweep(preds: Sequence[Prediction], cross: Sequence[tuple[int, str, str]],
                 cluster: Any) -> str:
    rows = []
    prev = None
    for p in preds:
        c = p.chosen
        key = f"{c.algo}/{c.proto}"
        rows.append([format_size(p.nbytes), c.label, _fmt_us(c.time_s),
                     f"{c.algbw_bytes_per_s / 1e9:.2f}", f"{c.busbw_bytes_per_s / 1e9:.2f}",
                     "" if prev is None or key == prev else "<- changes"])
        prev = key
    first = preds[0]
    title = (f"NCCL's choice by message size: {DISPLAY[first.collective]}, "
             f"{first.n_ranks} GPUs = {first.n_nodes} x {first.n_ranks // first.n_nodes} of "
             f"{cluster.name}")
    out = fmt_table(["size", "NCCL's choice", "time us", "algbw GB/s", "busbw GB/s", ""],
                     rows, title=title)
    if cross:
        out += "Crossovers (first size with the new choice):\n"
        out += "".join(f"  {label(a)} -> {label(b)} at {format_size(s)} ({s} B)\n"
                       for s, a, b in cross)
    else:
        out += "No crossover: one choice at every size.\n"
    return out
