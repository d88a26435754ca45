"""Exact Pareto front of (maximise throughput, minimise memory) in numpy."""

from __future__ import annotations

import numpy as np


def pareto_mask(throughput: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """True for the non-dominated points (maximise ``throughput``, minimise ``memory``).

    Sort by memory ascending (ties: throughput descending); a point is on the front when its
    throughput beats every point that needs no more memory: a running maximum, O(n log n).
    Exact duplicates keep only their first occurrence.
    """
    thr = np.asarray(throughput, dtype=float)
    mem = np.asarray(memory, dtype=float)
    n = thr.shape[0]
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    order = np.lexsort((-thr, mem))
    t_sorted = thr[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(t_sorted)[:-1]))
    mask[order[t_sorted > best_before]] = True
    return mask & np.isfinite(thr) & np.isfinite(mem)


def hypervolume_2d(throughput: np.ndarray, memory: np.ndarray, ref_memory: float,
                   ref_throughput: float = 0.0) -> float:
    """Area dominated by the points, bounded by (ref_throughput, ref_memory)."""
    thr = np.asarray(throughput, dtype=float)
    mem = np.asarray(memory, dtype=float)
    keep = (mem <= ref_memory) & (thr >= ref_throughput)
    thr, mem = thr[keep], mem[keep]
    if thr.size == 0:
        return 0.0
    front = pareto_mask(thr, mem)
    thr, mem = thr[front], mem[front]
    order = np.argsort(mem)
    thr, mem = thr[order], mem[order]
    # staircase: from each point's memory to the next one's, the best throughput so far
    widths = np.diff(np.concatenate((mem, [ref_memory])))
    return float(np.sum(widths * (np.maximum.accumulate(thr) - ref_throughput)))
