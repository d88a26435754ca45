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

__all__ = ["plot_front", "front_points", "layout_family", "layout_label"]

GIB = 1024**3
FRONT_COLOUR = "#1f77b4"
RECOMMENDED_COLOUR = "#d62728"
LIMIT_COLOUR = "#d62728"
OTHER_COLOUR = "#b0b0b0"
# one colour per layout family (red stays the recommendation's and the limit's)
# (16: every combination of TP, PP, CP and EP has its own)
FAMILY_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#aec7e8", "#98df8a", "#c5b0d5",
                  "#ffbb78", "#9edae5", "#c49c94", "#393b79")
LABEL_OFFSETS_PT = ((-5, 5, "right", "bottom"), (5, 5, "left", "bottom"),
                    (-5, -5, "right", "top"), (5, -5, "left", "top"))
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
    rc = config.get("recompute", "none")
    if rc != "none":
        n = int(config.get("recompute_num_layers", 0) or 0)
        mods = config.get("recompute_modules") or "core_attn"
        extra.append(f"full recompute ({n} layers per chunk)" if rc == "full" and n > 0
                     else f"selective recompute ({mods})" if rc == "selective"
                     and mods != "core_attn" else f"{rc} recompute")
    if config.get("sequence_parallel") and config.get("tp", 1) > 1:
        extra.append("SP")
    if config.get("zero_stage", 0):
        extra.append(f"ZeRO-{config['zero_stage']}")
    return " ".join(parts) + (("\n" + ", ".join(extra)) if extra else "")


def layout_family(config: Mapping[str, Any]) -> str:
    """The parallelism a layout combines beyond data parallelism: ``TP+PP``, ``TP+CP+EP``,
    ... (``DP only`` when it has none): the front's points are coloured by it."""
    axes = [name for name, key in (("TP", "tp"), ("PP", "pp"), ("CP", "cp"), ("EP", "ep"))
            if int(config.get(key, 1) or 1) > 1]
    return "+".join(axes) if axes else "DP only"


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
    front = doc["pareto_front"]
    families: dict[str, list[tuple[float, float, int]]] = {}
    for x, y, i in pts:
        families.setdefault(layout_family(front[i].get("config") or {}), []).append((x, y, i))
    for k, (fam, members) in enumerate(sorted(families.items(), key=lambda kv: -len(kv[1]))):
        ax.scatter([p[0] for p in members], [p[1] for p in members], s=46,
                   color=FAMILY_COLOURS[k % len(FAMILY_COLOURS)], edgecolor="white",
                   linewidth=0.8, zorder=3, label=f"Pareto front, {fam} ({len(members)})")

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
    _label_points(fig, ax, pts)
    return fig


def _overlaps(box, boxes) -> bool:
    return any(box.overlaps(b) for b in boxes)


def _label_points(fig, ax, pts: Sequence[tuple[float, float, int]]) -> list:
    """Label every front point with its index, no two labels overlapping: each label tries
    the corners around its point (above-left first: nothing can lie there on a maximise-y /
    minimise-x front, since it would dominate the point), and a point whose every corner is
    taken joins the label it collides with (``#9,#10``). Positions are measured on the laid-out
    figure (the renderer's text extents), so the rule holds at the size it is saved at."""
    from matplotlib.transforms import Bbox

    fig.draw_without_rendering()  # fixes the constrained layout, hence the transforms
    renderer = fig.canvas.get_renderer()
    r = 3.5 * fig.dpi / 72.0  # the markers themselves: labels keep off them (46 pt^2 ~ 7 pt)
    point_boxes = [Bbox.from_extents(cx - r, cy - r, cx + r, cy + r)
                   for cx, cy in (ax.transData.transform((x, y)) for x, y, _ in pts)]
    own = {i: k for k, (_, _, i) in enumerate(pts)}  # a label must sit nearest its point
    placed: list = []  # [annotation, its window extent, [indices]]
    for x, y, i in sorted(pts, key=lambda p: (-p[1], p[0])):  # the faster first
        first_box = None
        for dx, dy, ha, va in LABEL_OFFSETS_PT:
            ann = ax.annotate(f"#{i}", (x, y), textcoords="offset points", xytext=(dx, dy),
                              ha=ha, va=va, fontsize=8, color="#444444", zorder=4)
            box = ann.get_window_extent(renderer)
            first_box = first_box or box
            if not _overlaps(box, [b for _, b, _ in placed]) \
                    and not _overlaps(box, point_boxes) \
                    and _nearest(box, point_boxes) == own[i]:
                placed.append([ann, box, [i]])
                break
            ann.remove()
        else:
            # every corner collides: join the label its first choice hits (else the nearest)
            hits = [k for k, (_, b, _) in enumerate(placed) if first_box.overlaps(b)] or [
                min(range(len(placed)), key=lambda k: _distance(placed[k][1], first_box))]
            entry = placed[hits[0]]
            entry[2].append(i)
            entry[0].set_text(",".join(f"#{j}" for j in sorted(entry[2])))
            entry[1] = entry[0].get_window_extent(renderer)
    return [a for a, _, _ in placed]


def _nearest(box, point_boxes) -> int:
    """The point (index into ``point_boxes``) nearest to a label box's centre, measured to
    the label's closest edge, so the reader ties the label to it."""
    cx = (box.x0 + box.x1) / 2

    def gap(b):
        px, py = (b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2
        dx = max(box.x0 - px, 0.0, px - box.x1)
        dy = max(box.y0 - py, 0.0, py - box.y1)
        return (dx * dx + dy * dy, abs(px - cx))

    return min(range(len(point_boxes)), key=lambda k: gap(point_boxes[k]))


def _distance(a, b) -> float:
    return abs(a.x0 - b.x0) + abs(a.y0 - b.y0)


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
