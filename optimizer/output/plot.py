"""The Pareto plot (``optimize --plot front.png``): throughput versus peak memory per GPU.

Drawn from the JSON front document alone (contract.md section 4), so ``optimize report`` can
plot a stored study as well as a fresh search. matplotlib is an optional extra
(``pip install 'paraplan[plot]'``), imported only here and only when a plot is asked for; the
figure is rendered with the Agg canvas directly, so the process-wide backend is never changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodel.errors import InputError

__all__ = ["plot_front", "front_points", "layout_label"]

GIB = 1024**3
FRONT_COLOUR = "#1f77b4"
RECOMMENDED_COLOUR = "#d62728"
LIMIT_COLOUR = "#d62728"
OTHER_COLOUR = "#b0b0b0"
# Optional key of a front document with more scored points (not emitted today): a list of
# candidates ({"metrics": {...}}) or of {"peak_memory_bytes", "tokens_per_s"} mappings.
SCORED_KEY = "scored_points"


def layout_label(config: Mapping[str, Any]) -> str:
    """``tp=4 pp=4 dp=1 mbs=1`` plus the non-default choices that matter for a launch."""
    parts = [f"tp={config['tp']}", f"pp={config['pp']}", f"dp={config['dp']}",
             f"mbs={config['micro_batch_size']}"]
    extra = []
    if config.get("schedule") == "interleaved":
        extra.append(f"interleaved/{config.get('virtual_stages', 1)}")
    if config.get("recompute", "none") != "none":
        extra.append(f"{config['recompute']} recompute")
    if config.get("sequence_parallel") and config.get("tp", 1) > 1:
        extra.append("SP")
    if config.get("zero_stage", 0):
        extra.append(f"ZeRO-{config['zero_stage']}")
    return " ".join(parts) + (("\n" + ", ".join(extra)) if extra else "")


def _xy(point: Mapping[str, Any]) -> tuple[float, float] | None:
    m = point.get("metrics", point)
    mem, tps = m.get("peak_memory_bytes"), m.get("tokens_per_s")
    if not isinstance(mem, int | float) or not isinstance(tps, int | float) or tps <= 0:
        return None
    return mem / GIB, float(tps)


def front_points(doc: Mapping[str, Any]) -> list[tuple[float, float, int]]:
    """(peak memory GiB, tokens/s, index in pareto_front), by increasing memory."""
    pts = []
    for i, p in enumerate(doc.get("pareto_front") or ()):
        xy = _xy(p)
        if xy is not None:
            pts.append((*xy, i))
    return sorted(pts)


def _staircase(pts: Sequence[tuple[float, float, int]]) -> tuple[list[float], list[float]]:
    """The attainable throughput at each memory budget: max tokens/s over points that fit,
    a step function rising at each front point (memory sorted ascending)."""
    xs, ys = [], []
    best = 0.0
    for x, y, _ in pts:
        if y > best:
            if xs:
                xs.append(x)
                ys.append(best)
            xs.append(x)
            ys.append(y)
            best = y
    return xs, ys


def _require_matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise InputError("--plot", "matplotlib is not installed",
                         "pip install 'paraplan[plot]'") from None
    return Figure, FigureCanvasAgg, FuncFormatter


def _title(doc: Mapping[str, Any]) -> str:
    inp = doc.get("inputs", {})
    model = inp.get("model", {}).get("name", "model")
    cl = inp.get("cluster", {})
    gpu = cl.get("gpu", {}).get("name", "GPU")
    tr = inp.get("training", {})
    line1 = f"{model} on {cl.get('num_gpus', '?')} x {gpu}"
    if cl.get("num_nodes"):
        nodes = cl["num_nodes"]
        line1 += f" ({nodes} node{'s' if nodes != 1 else ''} x {cl.get('gpus_per_node', '?')})"
    line2 = "Pareto front: throughput vs peak memory per GPU"
    if tr:
        line2 += f"  (seq {tr.get('seq_length')}, global batch {tr.get('global_batch_size')})"
    return f"{line1}\n{line2}"


def _render(doc: Mapping[str, Any]):
    Figure, FigureCanvasAgg, FuncFormatter = _require_matplotlib()
    pts = front_points(doc)
    if not pts:
        raise InputError("--plot", "the document has no Pareto front to plot",
                         "plot the document of a successful search")
    fig = Figure(figsize=(9.0, 5.8), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()

    others = [xy for p in doc.get(SCORED_KEY) or () if (xy := _xy(p)) is not None]
    if others:
        ax.scatter([x for x, _ in others], [y for _, y in others], s=14, color=OTHER_COLOUR,
                   alpha=0.6, linewidths=0, label=f"other scored configurations ({len(others)})",
                   zorder=1)

    sx, sy = _staircase(pts)
    ax.plot(sx, sy, drawstyle="default", color=FRONT_COLOUR, linewidth=1.6, alpha=0.8,
            zorder=2)
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=46, color=FRONT_COLOUR,
               edgecolor="white", linewidth=0.8, zorder=3,
               label=f"Pareto front ({len(pts)} configurations)")
    for x, y, i in pts:
        # Above-left of a front point is empty (anything there would dominate it).
        ax.annotate(f"#{i}", (x, y), textcoords="offset points", xytext=(-5, 5),
                    ha="right", va="bottom", fontsize=8, color="#444444")

    inp = doc.get("inputs", {})
    limit = inp.get("memory_limit_bytes")
    xs = [p[0] for p in pts] + [x for x, _ in others]
    x_hi = max(xs)
    if isinstance(limit, int | float) and limit > 0:
        lim_gib = limit / GIB
        ax.axvline(lim_gib, color=LIMIT_COLOUR, linestyle="--", linewidth=1.4, zorder=1,
                   label=f"memory limit {lim_gib:.1f} GiB")
        x_hi = max(x_hi, lim_gib)
        gpu_b = (inp.get("cluster") or {}).get("gpu", {})
        gpu_b = gpu_b.get("memory_bytes") if isinstance(gpu_b, dict) else None
        if isinstance(gpu_b, int | float) and gpu_b > limit * (1 + 1e-9):
            # the one safety margin lies between the limit and the GPU's memory
            gpu_gib = gpu_b / GIB
            ax.axvline(gpu_gib, color=LIMIT_COLOUR, linestyle=":", linewidth=1.0, alpha=0.7,
                       zorder=1, label=f"GPU memory {gpu_gib:.1f} GiB (safety margin "
                                       f"{1 - lim_gib / gpu_gib:.0%})")
            xs.append(gpu_gib)

    rec = doc.get("recommended")
    if isinstance(rec, int) and 0 <= rec < len(doc["pareto_front"]):
        rp = doc["pareto_front"][rec]
        xy = _xy(rp)
        if xy is not None:
            ax.scatter([xy[0]], [xy[1]], s=190, marker="*", color=RECOMMENDED_COLOUR,
                       edgecolor="black", linewidth=0.6, zorder=4,
                       label=f"recommended (#{rec})")
            m = rp["metrics"]
            text = (f"recommended #{rec}\n{layout_label(rp['config'])}\n"
                    f"{m['tokens_per_s']:,.0f} tokens/s, {xy[0]:.1f} GiB")
            if "mfu" in m:
                text += f", MFU {m['mfu']:.0%}"
            # Above-left of a maximise-y / minimise-x front nothing can lie (any point there
            # would dominate the front), so the box goes into the upper-left corner.
            ax.annotate(text, xy, xycoords="data", textcoords="axes fraction",
                        xytext=(0.02, 0.97), ha="left", va="top", fontsize=9,
                        bbox={"boxstyle": "round,pad=0.4", "fc": "white",
                              "ec": RECOMMENDED_COLOUR, "alpha": 0.95},
                        arrowprops={"arrowstyle": "->", "color": RECOMMENDED_COLOUR,
                                    "shrinkB": 8},
                        zorder=5)

    span = max(x_hi - min(xs), 1.0)
    ax.set_xlim(max(0.0, min(xs) - 0.08 * span), x_hi + 0.08 * span)
    ys = [p[1] for p in pts] + [y for _, y in others]
    yspan = max(max(ys) - min(ys), 0.05 * max(ys))
    # The top third stays free for the recommendation box (left) and the legend (right).
    ax.set_ylim(max(0.0, min(ys) - 0.12 * yspan), max(ys) + 0.55 * yspan)
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_title(_title(doc), fontsize=11)
    ax.grid(True, color="#e5e5e5", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize=9, framealpha=0.95)
    return fig


def plot_front(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the Pareto plot of front document ``doc`` to ``path`` (PNG unless the suffix says
    ``.svg`` or ``.pdf``), atomically: a temporary file in the same folder, then a rename.

    Raises :class:`~costmodel.errors.InputError` (field ``--plot``) when matplotlib is missing,
    the document has no front, or the file cannot be written.
    """
    target = Path(path)
    fmt = target.suffix.lower().lstrip(".") or "png"
    if fmt not in ("png", "svg", "pdf"):
        raise InputError("--plot", f"unsupported file type {target.suffix!r}",
                         "use a .png, .svg or .pdf file name")
    fig = _render(doc)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError("--plot", f"folder {str(folder)!r} does not exist",
                         "create it or choose another path")
    import io

    from optimizer.core.fileio import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    return atomic_write_bytes(target, buf.getvalue(), field="--plot")
