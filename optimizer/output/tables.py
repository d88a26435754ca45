"""Aligned text tables for every human-readable output (rich on a terminal, plain otherwise).

Rich tables when stdout is a terminal (and NO_COLOR / TERM=dumb are not set), plain aligned
text otherwise, so pipes and CI logs stay clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from costmodel.specs import PARALLEL_DIMENSIONS

#: Headers of text columns (left-aligned): the report's own and those the dimension
#: declarations mark ``left`` (schedule, recompute, prec, NCCL).
LEFT_HEADERS: frozenset[str] = frozenset(
    {"bottleneck", "term", "component",
     *(d.column.header for d in PARALLEL_DIMENSIONS if d.column is not None and d.column.left)})


def use_rich(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


def fmt_table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    if use_rich():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title or None)
        for h in headers:
            table.add_column(h, justify="left" if h in LEFT_HEADERS else "right")
        for r in rows:
            table.add_row(*r)
        console = Console(record=True, width=200)
        with console.capture() as cap:
            console.print(table)
        return cap.get()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = [title] if title else []
    lines.append("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(lines) + "\n"
