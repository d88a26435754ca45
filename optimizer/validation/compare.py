"""Compare two ``optimize validate --json`` documents on what the first one covers.

``python -m optimizer.validation.compare BEFORE.json AFTER.json`` checks that every figure of
BEFORE is unchanged in AFTER: its groups (per-group rows), runs (by id), sweeps (by name),
the checked step-time block, memory, OOM, "ran but predicted over memory", Korthikanti
Tables 4 and 5, NCCL, the checks and the skipped entries (by id). Keys only AFTER has (new
groups, new fields, new runs) are ignored; timings are ignored. Prints each difference and
exits 1 when there is one (0 otherwise).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

IGNORED = frozenset({"timing_s", "data_dir"})
# sections whose lists hold rows keyed by a field
KEYED = {"groups": "group", "runs": "id", "sweeps": "sweep", "skipped": "id",
         "checks": "name"}


def _same(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if a == b or (a != a and b != b):  # equal, or both nan
            return True
        return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(abs(a), abs(b))
    return a == b


def diff(before: Any, after: Any, path: str = "", *, rel: float = 0.0) -> list[str]:
    """The differences of ``after`` from ``before`` on what ``before`` holds."""
    out: list[str] = []
    if isinstance(before, Mapping):
        if not isinstance(after, Mapping):
            return [f"{path}: a mapping before, {type(after).__name__} after"]
        for k, v in before.items():
            if k in IGNORED:
                continue
            if k not in after:
                out.append(f"{path}.{k}: missing after")
                continue
            if k in KEYED and isinstance(v, list):
                out += _diff_rows(v, after[k], KEYED[k], f"{path}.{k}", rel)
            else:
                out += diff(v, after[k], f"{path}.{k}", rel=rel)
        return out
    if isinstance(before, list):
        if not isinstance(after, list) or len(before) != len(after):
            n = len(after) if isinstance(after, list) else "-"
            return [f"{path}: {len(before)} items before, {n} after"]
        for i, (x, y) in enumerate(zip(before, after, strict=True)):
            out += diff(x, y, f"{path}[{i}]", rel=rel)
        return out
    if before is None and after is None:
        return out
    if not _same(before, after, rel):
        out.append(f"{path}: {before!r} -> {after!r}")
    return out


def _diff_rows(before: Sequence[Any], after: Any, key: str, path: str, rel: float) -> list[str]:
    if not isinstance(after, list):
        return [f"{path}: a list before, {type(after).__name__} after"]
    got = {r.get(key): r for r in after if isinstance(r, Mapping)}
    out: list[str] = []
    for r in before:
        k = r.get(key) if isinstance(r, Mapping) else None
        if k not in got:
            out.append(f"{path}[{key}={k}]: missing after")
            continue
        out += diff(r, got[k], f"{path}[{key}={k}]", rel=rel)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rel = 0.0
    if "--rel" in args:
        i = args.index("--rel")
        rel = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        before = json.load(f)
    with open(args[1], encoding="utf-8") as f:
        after = json.load(f)
    d = diff(before, after, rel=rel)
    for line in d:
        print(line)
    print(f"{len(d)} difference(s) from {args[0]} on what it covers")
    return 1 if d else 0


if __name__ == "__main__":
    sys.exit(main())
