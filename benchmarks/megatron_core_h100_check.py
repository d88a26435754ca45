#!/usr/bin/env python
"""Sanity check of the Hopper calibration on Megatron-Core's H100 weak-scaling table.

The table (``megatron_core_h100_weak_scaling`` in ../shared/validation, Megatron-LM README,
Megatron-Core r0.8.0: 1.7B-462B on 48-6144 H100s, 41-49% MFU) gives no micro-batch size, so
``optimize validate`` leaves it out. This script reads it anyway with stated assumptions -
micro-batch 1 (or ``--micro-batch``), bf16, selective recompute, sequence parallelism, the
distributed optimizer (ZeRO-1) and the overlaps the entries name (``--overlap-grad-reduce``,
``--tp-comm-overlap``), 1F1B (the table's interleaving is unstated) - and prints the model's
MFU next to the reported one. It is a check, not calibration data.

    python benchmarks/megatron_core_h100_check.py [--data DIR] [--micro-batch N]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.validation import published as V  # noqa: E402

GROUP = "megatron_core_h100_weak_scaling"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="validation data folder")
    ap.add_argument("--micro-batch", type=int, default=1)
    args = ap.parse_args(argv)
    entries, _ = V.load_data(V.resolve_data_dir(args.data))
    rows = []
    for e in entries:
        if e.get("group") != GROUP:
            continue
        e2 = copy.deepcopy(e)
        e2["parallel"].update(micro_batch=args.micro_batch, recompute="selective",
                              precision="bf16", zero_stage=1, sequence_parallel=True)
        run = V.map_entry(e2)
        sc = V._score_group(run.model, run.cluster, run.training, [run.parallel])
        fits = sc.peak_memory_bytes[0] <= run.cluster.gpu.memory_bytes
        p = run.parallel
        rows.append((e["id"], p.tp, p.pp, p.dp, run.training.tp_comm_overlap,
                     float(e["measured"]["mfu_pct"]), 100.0 * float(sc.mfu[0]), fits,
                     float(sc.peak_memory_bytes[0]) / 2**30))
    if not rows:
        print(f"no {GROUP} entries in the data")
        return 1
    print(f"{'entry':34s} {'tp':>2s} {'pp':>2s} {'dp':>3s} {'TPov':>4s} {'reported':>8s} "
          f"{'model':>6s} {'ratio':>6s} {'GiB':>5s}")
    for eid, tp, pp, dp, ov, rep, mod, fits, gib in rows:
        print(f"{eid:34s} {tp:2d} {pp:2d} {dp:3d} {'y' if ov else 'n':>4s} {rep:7.0f}% "
              f"{mod:5.1f}% {mod / rep:6.2f} {gib:5.1f}{'' if fits else ' OOM'}")
    ratios = [mod / rep for *_, rep, mod, _, _ in rows]
    print(f"mean model/reported MFU {np.mean(ratios):.2f} "
          f"(micro-batch {args.micro_batch} assumed; 1F1B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
