"""Exact enumeration of the valid configurations of a (small) search space, vectorised.

The product is built dimension by dimension as index arrays (``np.repeat``/``np.tile``: an
index grid, no Python loop over the product); after each dimension is added, every rule whose
columns are all present is applied, so cheap structural rules (world size, heads, layers,
batch divisibility) prune before the categorical dimensions multiply the rows. The result is
sorted into the cartesian-product order of :data:`search_spaces.space.DIMENSIONS` (tp slowest,
each dimension in the order its values are listed), so it is deterministic and equals
``itertools.product`` filtered by :func:`search_spaces.rules.explain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.batch import ConfigBatch
from costmodel.specs import DIMENSIONS_BY_NAME
from search_spaces.rules import ALL_RULES, Context, Rule
from search_spaces.space import DIMENSIONS, SEARCH_DIMENSIONS, SearchSpace, count_product

#: Expansion order: dimensions that structural rules read first, the rule-free ones last
#: (each dimension's declared ``expand_rank``).
_STAGES: tuple[str, ...] = tuple(
    d.name for d in sorted(SEARCH_DIMENSIONS, key=lambda d: d.expand_rank))


def _value_table(space: SearchSpace, dim: str) -> np.ndarray:
    """What a ConfigBatch column holds for each of ``dim``'s values in ``space`` (a STRING
    dimension's batch table is the space's list itself)."""
    values = getattr(space, dim)
    return DIMENSIONS_BY_NAME[dim].encode(values, values)


def _batch(ctx: Context, space: SearchSpace, idx: dict[str, np.ndarray]) -> ConfigBatch:
    """A (possibly partial) ConfigBatch from per-dimension index arrays; columns of dimensions
    not expanded yet hold defaults and are read by no rule applied at this point."""
    cols = {d: _value_table(space, d)[ix] for d, ix in idx.items()}
    if "tp" in cols and "pp" in cols and "cp" in cols:
        cols["dp"] = ctx.world_size // (cols["tp"] * cols["pp"] * cols["cp"])
    tables = {d.table_name: getattr(space, d.name) for d in SEARCH_DIMENSIONS if d.table_name}
    return ConfigBatch.from_columns(**tables, **cols)


@dataclass(frozen=True)
class _Result:
    idx: dict[str, np.ndarray]
    rejected: dict[str, int]


def _prune(ctx: Context, space: SearchSpace, rules: Sequence[Rule]) -> _Result:
    n = 1
    idx: dict[str, np.ndarray] = {}
    pending = list(rules)
    rejected = {r.name: 0 for r in rules}
    remaining = count_product(space)  # product of the sizes of the dimensions not expanded yet
    for step, dim in enumerate(_STAGES):
        k = len(getattr(space, dim))
        remaining //= k
        idx = {d: np.repeat(a, k) for d, a in idx.items()}
        idx[dim] = np.tile(np.arange(k, dtype=np.int64), n)
        n *= k
        have = set(idx) | ({"dp"} if {"tp", "pp", "cp"} <= set(idx) else set())
        last = step == len(_STAGES) - 1
        ready = [r for r in pending if last or r.reads <= have]
        if not ready or n == 0:
            continue
        pending = [r for r in pending if r not in ready]
        batch = _batch(ctx, space, idx)
        fails = np.stack([~r(ctx, batch) for r in ready])  # (rules, rows)
        bad = fails.any(axis=0)
        if bad.any():
            first = np.argmax(fails[:, bad], axis=0)  # first broken rule, in rules order
            counts = np.bincount(first, minlength=len(ready))
            for r, c in zip(ready, counts, strict=True):
                rejected[r.name] += int(c) * remaining
            keep = ~bad
            idx = {d: a[keep] for d, a in idx.items()}
            n = int(keep.sum())
    return _Result(idx, rejected)


def enumerate_valid(ctx: Context, space: SearchSpace, rules: Sequence[Rule] = ALL_RULES
                    ) -> ConfigBatch:
    """Every configuration of ``space`` that satisfies ``rules``, as one ConfigBatch in
    cartesian-product order (deterministic). dp = world_size / (tp * cp * pp). The batch's NCCL
    tables are the space's ``nccl_algo`` / ``nccl_proto`` lists."""
    idx = _prune(ctx, space, rules).idx
    order = np.lexsort([idx[d] for d in reversed(DIMENSIONS)])
    return _batch(ctx, space, {d: idx[d][order] for d in DIMENSIONS})


def space_size(ctx: Context, space: SearchSpace, rules: Sequence[Rule] = ALL_RULES) -> int:
    """Number of valid configurations (without sorting or building the batch)."""
    return len(_prune(ctx, space, rules).idx["tp"])


def rejected_by_rule(ctx: Context, space: SearchSpace, rules: Sequence[Rule] = ALL_RULES
                     ) -> dict[str, int]:
    """Rule name -> number of product points it rejects, each point charged to the first rule
    (in expansion order, then ``rules`` order) that rejects it. The counts sum to
    ``count_product(space) - space_size(ctx, space)``."""
    return _prune(ctx, space, rules).rejected


__all__ = ["count_product", "enumerate_valid", "rejected_by_rule", "space_size"]
