"""``--html FILE``: one self-contained HTML page people look at.

The page holds the Pareto front of tokens/s vs peak memory (with the dominated cloud when the
document carries it), the recommended configuration's step-time and memory breakdowns, its
diagnosis and launch flags, and, for a plan document, the plan across GPU counts with its
time-to-train vs cost chart. Charts are inline SVG drawn here, so the page renders without
network access and without JavaScript; a few lines of inline JavaScript add hover details and
show the breakdown of whichever front point is clicked. Nothing is fetched from anywhere.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

GIB = 1024**3
W, H = 720, 420  # chart size in px
PAD_L, PAD_R, PAD_T, PAD_B = 78, 24, 20, 48
FRONT_COLOUR, CLOUD_COLOUR, REC_COLOUR, LIMIT_COLOUR = "#1f6fb4", "#b9c2cc", "#d9480f", "#868e96"
TERM_COLOURS = ("#1f6fb4", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c92a2a",
                "#5c940d", "#495057", "#d6336c", "#1098ad", "#7048e8")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1100px;color:#212529;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid
#dee2e6;padding-bottom:4px}.sub{color:#495057}table{border-collapse:collapse;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #e9ecef;text-align:right;white-space:nowrap}
th{background:#f1f3f5}td.l,th.l{text-align:left}tr.pick td{background:#fff4e6;font-weight:600}
pre{background:#f8f9fa;padding:8px;white-space:pre-wrap;word-break:break-all;font-size:12px}
ul.diag li{margin:3px 0}svg{background:#fff;border:1px solid #dee2e6}
.pt{cursor:pointer}#tip{position:fixed;pointer-events:none;background:#212529;color:#fff;
padding:4px 8px;border-radius:4px;font-size:12px;display:none;max-width:480px}
.wide{overflow-x:auto}.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:10px;
height:10px;margin-right:4px;border-radius:50%}
"""

JS = """
(function(){
  var tip=document.getElementById('tip');
  var data=JSON.parse(document.getElementById('front-data').textContent||'[]');
  function show(e){var t=e.target.getAttribute('data-tip');if(!t)return;tip.textContent=t;
    tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';}
  function hide(){tip.style.display='none';}
  var pts=document.querySelectorAll('[data-tip]');
  for(var i=0;i<pts.length;i++){pts[i].addEventListener('mousemove',show);
    pts[i].addEventListener('mouseleave',hide);}
  function select(i){var p=data[i];if(!p)return;
    document.getElementById('sel-title').textContent='#'+i+'  '+p.label;
    ['time','mem'].forEach(function(k){var el=document.getElementById('bd-'+k);
      if(el)el.innerHTML=p[k];});
    var d=document.getElementById('sel-diag');if(d){d.innerHTML='';p.diag.forEach(function(s){
      var li=document.createElement('li');li.textContent=s;d.appendChild(li);});}}
  var fps=document.querySelectorAll('.pt[data-i]');
  for(var j=0;j<fps.length;j++){fps[j].addEventListener('click',function(e){
    select(+e.target.getAttribute('data-i'));});}
  var cb=document.getElementById('cloud-toggle');
  if(cb){cb.addEventListener('change',function(){var g=document.getElementById('cloud');
    if(g)g.style.display=cb.checked?'':'none';});}
})();
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [start + k * step for k in range(int((hi - start) / step) + 1)]


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


class _Axes:
    def __init__(self, xs: Sequence[float], ys: Sequence[float], *, x0: float | None = None):
        lo, hi = (min(xs) if x0 is None else min(x0, *xs)), max(xs)
        span = (hi - lo) or abs(hi) or 1.0
        self.xlo, self.xhi = lo - 0.04 * span, hi + 0.04 * span
        ylo, yhi = min(ys), max(ys)
        yspan = (yhi - ylo) or abs(yhi) or 1.0
        self.ylo, self.yhi = max(0.0, ylo - 0.08 * yspan), yhi + 0.08 * yspan

    def x(self, v: float) -> float:
        return PAD_L + (v - self.xlo) / (self.xhi - self.xlo) * (W - PAD_L - PAD_R)

    def y(self, v: float) -> float:
        return H - PAD_B - (v - self.ylo) / (self.yhi - self.ylo) * (H - PAD_T - PAD_B)

    def frame(self, xlabel: str, ylabel: str) -> list[str]:
        out = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
               f'height="{H - PAD_T - PAD_B}" fill="none" stroke="#ced4da"/>']
        for t in _nice_ticks(self.xlo, self.xhi):
            px = self.x(t)
            out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" '
                       'stroke="#f1f3f5"/>')
            out.append(f'<text x="{px:.1f}" y="{H - PAD_B + 16}" font-size="11" '
                       f'text-anchor="middle">{_e(_fmt(t))}</text>')
        for t in _nice_ticks(self.ylo, self.yhi):
            py = self.y(t)
            out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{py:.1f}" y2="{py:.1f}" '
                       'stroke="#f1f3f5"/>')
            out.append(f'<text x="{PAD_L - 6}" y="{py + 4:.1f}" font-size="11" '
                       f'text-anchor="end">{_e(_fmt(t))}</text>')
        out.append(f'<text x="{(PAD_L + W - PAD_R) / 2}" y="{H - 10}" font-size="12" '
                   f'text-anchor="middle">{_e(xlabel)}</text>')
        out.append(f'<text x="16" y="{(PAD_T + H - PAD_B) / 2}" font-size="12" '
                   f'text-anchor="middle" transform="rotate(-90 16 '
                   f'{(PAD_T + H - PAD_B) / 2})">{_e(ylabel)}</text>')
        return out


def _svg(body: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
            f'height="{H}" role="img" aria-label="{_e(label)}">' + "".join(body) + "</svg>")


# ---------------------------------------------------------------------------------------------
def front_svg(doc: Mapping[str, Any]) -> str:
    """Tokens/s vs peak memory: the dominated cloud, the front's staircase, the recommendation
    and the memory limit."""
    from optimizer.output.report import short_label

    front = doc["pareto_front"]
    cloud = doc.get("dominated") or []
    limit = doc["inputs"]["memory_limit_bytes"] / GIB
    xs = [p["metrics"]["peak_memory_bytes"] / GIB for p in front] + \
        [c["peak_memory_bytes"] / GIB for c in cloud] + [limit]
    ys = [p["metrics"]["tokens_per_s"] for p in front] + [c["tokens_per_s"] for c in cloud]
    ys += [v for p in front for v in p["metrics"].get("tokens_per_s_interval") or ()]
    ax = _Axes(xs, ys)
    body = ax.frame("peak memory per GPU (GiB)", "tokens/s")
    lx = ax.x(limit)
    body.append(f'<line x1="{lx:.1f}" x2="{lx:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" '
                f'stroke="{LIMIT_COLOUR}" stroke-dasharray="5,4"/>')
    body.append(f'<text x="{lx - 4:.1f}" y="{PAD_T + 12}" font-size="11" text-anchor="end" '
                f'fill="{LIMIT_COLOUR}">limit {limit:.1f} GiB</text>')
    body.append('<g id="cloud">')
    for c in cloud:
        gib = c["peak_memory_bytes"] / GIB
        body.append(f'<circle cx="{ax.x(gib):.1f}" cy="{ax.y(c["tokens_per_s"]):.1f}" r="2.2" '
                    f'fill="{CLOUD_COLOUR}" data-tip="{_e(c["label"])}: '
                    f'{c["tokens_per_s"]:,.0f} tokens/s, {gib:.1f} GiB"/>')
    body.append("</g>")
    pts = sorted((p["metrics"]["peak_memory_bytes"] / GIB, p["metrics"]["tokens_per_s"])
                  for p in front)
    path = []
    for k, (gx, ty) in enumerate(pts):  # attainable throughput: a staircase up to the right
        if k:
            path.append(f"L{ax.x(gx):.1f},{ax.y(pts[k - 1][1]):.1f}")
        path.append(f"{'M' if not k else 'L'}{ax.x(gx):.1f},{ax.y(ty):.1f}")
    body.append(f'<path d="{" ".join(path)}" fill="none" stroke="{FRONT_COLOUR}" '
                'stroke-width="1.5"/>')
    rec = doc["recommended"]
    for p in front:  # error bars: the 80% interval of tokens/s
        m = p["metrics"]
        iv = m.get("tokens_per_s_interval")
        if iv:
            px = ax.x(m["peak_memory_bytes"] / GIB)
            body.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{ax.y(iv[0]):.1f}" '
                        f'y2="{ax.y(iv[1]):.1f}" stroke="{FRONT_COLOUR}" stroke-opacity="0.35" '
                        'stroke-width="3"/>')
    for i, p in enumerate(front):
        m = p["metrics"]
        gib, tps = m["peak_memory_bytes"] / GIB, m["tokens_per_s"]
        is_rec = i == rec
        ivt = m.get("tokens_per_s_interval")
        tip = (f"#{i}{' (recommended)' if is_rec else ''} {short_label(p['config'])}: "
               f"{tps:,.0f} tokens/s"
               + (f" (80%: {ivt[0]:,.0f}-{ivt[1]:,.0f})" if ivt else "")
               + f", MFU {m['mfu']:.1%}, {gib:.1f} GiB; click for the breakdown")
        body.append(f'<circle class="pt" data-i="{i}" cx="{ax.x(gib):.1f}" cy="{ax.y(tps):.1f}" '
                    f'r="{7 if is_rec else 4.5}" fill="{REC_COLOUR if is_rec else FRONT_COLOUR}"'
                    f' stroke="#fff" data-tip="{_e(tip)}"/>')
    return _svg(body, "Pareto front: tokens/s vs peak memory")


def _bars(items: Sequence[tuple[str, float]], unit: str, total: float,
          limit: float | None = None) -> str:
    """A stacked horizontal bar (SVG) with a legend table: one segment per term."""
    width, bar_h = 680, 26
    scale_to = max(total, limit or 0.0) or 1.0
    x, segs, rows = 0.0, [], []
    for k, (name, v) in enumerate(items):
        if v <= 0:
            continue
        w = v / scale_to * width
        col = TERM_COLOURS[k % len(TERM_COLOURS)]
        segs.append(f'<rect x="{x:.1f}" y="4" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                    f'fill="{col}" data-tip="{_e(name)}: {v:.4g} {unit} '
                    f'({v / total:.1%})"/>')
        rows.append(f'<tr><td class="l"><span class="sw" style="background:{col}"></span>'
                    f'{_e(name)}</td><td>{v:.4g}</td><td>{v / total:.1%}</td></tr>')
        x += w
    if limit:
        lx = limit / scale_to * width
        segs.append(f'<line x1="{lx:.1f}" x2="{lx:.1f}" y1="0" y2="{bar_h + 8}" stroke="#212529" '
                    'stroke-dasharray="3,3"/>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {bar_h + 8}" '
           f'width="{width}" height="{bar_h + 8}">' + "".join(segs) + "</svg>")
    return (svg + f'<table><tr><th class="l">term</th><th>{_e(unit)}</th><th>share</th></tr>'
            + "".join(rows) + "</table>")


def breakdown_html(metrics: Mapping[str, Any]) -> tuple[str, str]:
    """(time, memory) breakdown fragments of one candidate's metrics."""
    tb = sorted(metrics["time_breakdown_s"].items(), key=lambda kv: -kv[1])
    mb = sorted(((k, v / GIB) for k, v in metrics["memory_breakdown_bytes"].items()),
                key=lambda kv: -kv[1])
    limit = metrics.get("memory_limit_bytes")
    return (_bars(tb, "s", metrics["step_time_s"]),
            _bars(mb, "GiB", metrics["peak_memory_bytes"] / GIB,
                  limit / GIB if limit else None))


def plan_svg(doc: Mapping[str, Any]) -> str:
    """Time-to-train (days) vs cost (or GPU-hours), one point per feasible GPU count."""
    ok = [(i, e) for i, e in enumerate(doc["plan"]) if e["status"] == "ok"]
    use_time = all(e.get("time_to_train_s") is not None for _, e in ok)
    if use_time:
        xs = [e["time_to_train_s"] / 86400 for _, e in ok]
        has_cost = all(e.get("cost") is not None for _, e in ok)
        ys = [e["cost"] if has_cost else e["gpu_hours"] for _, e in ok]
        xl, yl = "time to train (days)", ("cost (USD)" if has_cost else "GPU-hours")
    else:  # no --tokens: time per token and GPU-seconds per token
        xs = [1e6 / e["tokens_per_s"] for _, e in ok]
        ys = [1e6 * e["gpus"] / e["tokens_per_s"] for _, e in ok]
        xl, yl = "seconds per million tokens", "GPU-seconds per million tokens"
    ax = _Axes(xs, ys)
    body = ax.frame(xl, yl)
    front = set(doc["plan_front"])
    fpts = sorted((xs[k], ys[k]) for k, (i, _) in enumerate(ok) if i in front)
    if len(fpts) > 1:
        body.append('<path d="' + " ".join(f"{'M' if j == 0 else 'L'}{ax.x(a):.1f},"
                                           f"{ax.y(b):.1f}" for j, (a, b) in enumerate(fpts))
                    + f'" fill="none" stroke="{FRONT_COLOUR}" stroke-width="1.5"/>')
    for k, (i, e) in enumerate(ok):
        on = i in front
        pick = i == doc.get("plan_pick")
        col = REC_COLOUR if pick else (FRONT_COLOUR if on else CLOUD_COLOUR)
        tip = (f"{e['gpus']} GPUs{' (pick)' if pick else ''}: {e['tokens_per_s']:,.0f} tokens/s"
               f", {e['tokens_per_s_per_gpu']:,.0f} per GPU")
        if e.get("time_to_train_s") is not None:
            tip += f", {e['time_to_train_s'] / 86400:,.1f} days, {e['gpu_hours']:,.0f} GPU-hours"
        px, py = ax.x(xs[k]), ax.y(ys[k])
        body.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{7 if pick else 5}" fill="{col}" '
                    f'stroke="#fff" data-tip="{_e(tip)}"/>')
        body.append(f'<text x="{px + 8:.1f}" y="{py - 8:.1f}" font-size="11">{e["gpus"]}</text>')
    return _svg(body, "plan: time to train vs cost")


def _plan_table(doc: Mapping[str, Any]) -> str:
    from optimizer.output.plan_report import PLAN_COLUMNS, plan_rows

    rows = plan_rows(doc)
    pick = doc.get("plan_pick")
    head = "".join(f'<th{" class=l" if h in ("schedule", "recompute", "prec") else ""}>'
                   f"{_e(h)}</th>" for h in PLAN_COLUMNS)
    body = "".join(f'<tr{" class=pick" if i == pick else ""}>'
                   + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>"
                   for i, r in enumerate(rows))
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def _front_table(doc: Mapping[str, Any]) -> str:
    from optimizer.output.report import front_columns, front_rows

    head = "".join(f"<th>{_e(h)}</th>" for h in front_columns(doc))
    rec = doc["recommended"]
    body = "".join(f'<tr{" class=pick" if i == rec else ""}>'
                   + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>"
                   for i, r in enumerate(front_rows(doc)))
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def _header(inp: Mapping[str, Any], title: str, sub: str) -> str:
    from optimizer.output.report import defaults_line

    dl = defaults_line(dict(inp)).strip()
    return (f"<h1>{_e(title)}</h1><div class=sub>{_e(sub)}</div>"
            + (f"<div class=sub>{_e(dl)}</div>" if dl else ""))


def _front_section(doc: Mapping[str, Any]) -> list[str]:
    from optimizer.output.report import short_label

    front = doc["pareto_front"]
    rec_i = doc["recommended"]
    rec = front[rec_i]
    data = []
    for p in front:
        t, m = breakdown_html(p["metrics"])
        data.append({"label": short_label(p["config"]), "time": t, "mem": m,
                     "diag": list(p.get("bottlenecks", []))})
    n_cloud = len(doc.get("dominated") or [])
    cloud_note = (f'<label><input type="checkbox" id="cloud-toggle" checked> show the '
                  f"{n_cloud} dominated configurations</label>" if n_cloud else
                  "<span class=sub>(the dominated cloud is in documents made with --html)"
                  "</span>")
    t_html, m_html = breakdown_html(rec["metrics"])
    launch = rec.get("launch") or {}
    flags = " ".join(launch.get("megatron_args", []))
    env = " ".join(f"{k}={v}" for k, v in (launch.get("env") or {}).items())
    m = rec["metrics"]
    parts = [
        "<h2>Pareto front: tokens/s vs peak memory</h2>",
        '<div class="legend"><span><i class="sw" style="background:' + FRONT_COLOUR
        + '"></i>front</span><span><i class="sw" style="background:' + REC_COLOUR
        + '"></i>recommended</span><span><i class="sw" style="background:' + CLOUD_COLOUR
        + '"></i>dominated</span>' + cloud_note + "</div>",
        front_svg(doc),
        _front_table(doc),
        f"<h2>Recommended: #{rec_i}</h2>",
        f"<p><b>{_e(short_label(rec['config']))}</b>: {m['tokens_per_s']:,.0f} tokens/s, "
        f"MFU {m['mfu']:.1%}, step {m['step_time_s']:.3f} s, peak "
        f"{m['peak_memory_bytes'] / GIB:.1f} GiB</p>",
        _interval_note(doc, m),
        "<h2>Diagnosis</h2><ul class=diag id=sel-diag>"
        + "".join(f"<li>{_e(b)}</li>" for b in rec.get("bottlenecks", [])) + "</ul>",
        f'<h2>Breakdown of <span id="sel-title">#{rec_i}  {_e(short_label(rec["config"]))}'
        "</span> (click a front point)</h2>",
        f'<h3>Step time</h3><div id="bd-time">{t_html}</div>',
        f'<h3>Memory (largest stage; dashed: the limit)</h3><div id="bd-mem">{m_html}</div>',
    ]
    if flags:
        parts.append(f"<h2>Launch (Megatron-LM)</h2><pre>{_e(flags)}</pre>"
                     + (f"<pre>{_e(env)}</pre>" if env else ""))
    parts.append('<script type="application/json" id="front-data">'
                 + json.dumps(data).replace("</", "<\\/") + "</script>")
    return parts


def _interval_note(doc: Mapping[str, Any], m: Mapping[str, Any]) -> str:
    iv = m.get("tokens_per_s_interval")
    if not iv:
        return ""
    basis = (m.get("interval") or {}).get("step_time_basis", "")
    out = (f"<p>80% interval: {iv[0]:,.0f}-{iv[1]:,.0f} tokens/s (validation residuals of "
           f"comparable runs: {_e(basis)}).")
    within = doc.get("within_error_of_recommended") or []
    if within:
        out += (" Indistinguishable within the model's error: "
                + ", ".join(f"#{j}" for j in within) + ".")
    tt = doc.get("try_these") or []
    if tt and len(tt) < len(doc["pareto_front"]):
        out += (f" Try these {len(tt)} (front collapsed by the model's error): "
                + ", ".join(f"#{j}" for j in tt) + ".")
    return out + "</p>"


def render_html(doc: Mapping[str, Any], front_doc: Mapping[str, Any] | None = None) -> str:
    """The page for a front document, or for a plan document (``front_doc``: the front of
    the plan's pick, when available)."""
    inp = doc["inputs"]
    parts: list[str] = []
    if "plan" in doc:
        tr = inp.get("training", {})
        title = (f"paraplan plan: {inp.get('model', {}).get('name', '?')} on {inp['gpu']}, "
                 f"{', '.join(map(str, inp['gpu_counts']))} GPUs")
        sub = (f"seq {tr.get('seq_length')}, global batch {tr.get('global_batch_size')} (fixed "
               "for the run: batch-size ramps come later)"
               + (f"; {inp['tokens']:.3g} training tokens" if inp.get("tokens") else "")
               + (f"; ${inp['gpu_hour_cost']:g} per GPU-hour"
                  if inp.get("gpu_hour_cost") is not None else ""))
        parts.append(_header(inp, title, sub))
        parts.append("<h2>Plan across GPU counts</h2>")
        parts.append(plan_svg(doc))
        parts.append(_plan_table(doc))
        pick = doc.get("plan_pick")
        if front_doc is None and pick is not None:  # the pick's recommendation alone
            e = doc["plan"][pick]
            front_doc = {"inputs": {"memory_limit_bytes": e["memory_limit_bytes"],
                                    "cluster": {"num_gpus": e["gpus"]}},
                         "pareto_front": [e["recommended"]], "recommended": 0}
        if pick is not None:
            parts.append(f"<h2>At the pick: {doc['plan'][pick]['gpus']} GPUs</h2>")
        if front_doc is not None:
            parts.extend(_front_section(front_doc))
    else:
        cl = inp["cluster"]
        title = (f"paraplan: {inp['model']['name']} on {cl['num_gpus']} x {cl['gpu']['name']} "
                 f"({cl['num_nodes']} x {cl['gpus_per_node']})")
        tr = inp["training"]
        st = doc.get("stats", {})
        sub = (f"seq {tr['seq_length']}, global batch {tr['global_batch_size']}, memory limit "
               f"{inp['memory_limit_bytes'] / GIB:.1f} GiB/GPU; sampler {st.get('sampler', '?')}"
               f": {st.get('configs_evaluated', 0):,} configurations scored, front of "
               f"{len(doc['pareto_front'])}")
        parts.append(_header(inp, title, sub))
        parts.extend(_front_section(doc))
    if not any('id="front-data"' in p for p in parts):
        parts.append('<script type="application/json" id="front-data">[]</script>')
    version = doc.get("tool", {}).get("version", "")
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>paraplan report</title><style>{CSS}</style></head><body>"
            + "\n".join(parts)
            + f'<p class=sub>paraplan {_e(version)}; self-contained page: no network needed.</p>'
            + f'<div id="tip"></div><script>{JS}</script></body></html>\n')


def write_html_report(doc: Mapping[str, Any], path: str, *, plan_result: Any = None) -> str:
    """Render ``doc`` (a front or plan document) to ``path`` atomically; return the path."""
    from optimizer.core.fileio import atomic_write_text

    front_doc = None
    if plan_result is not None and plan_result.pick is not None:
        entry = plan_result.entries[plan_result.pick]
        if entry.result is not None:
            front_doc = entry.result.to_dict()
    return str(atomic_write_text(path, render_html(doc, front_doc), field="--html"))
