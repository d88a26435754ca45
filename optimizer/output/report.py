"""Human-readable output: the front table, the recommendation, an evaluation breakdown.

Tables come from :mod:`optimizer.output.tables` (rich on a terminal, plain text otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costmodel.dimensions import Column, nccl_label, schedule_label
from costmodel.specs import PARALLEL_DIMENSIONS
from optimizer.output.tables import fmt_table

GIB = 1024**3


def _dimension_cell(name: str, col: Column, default=None) -> Callable[[dict, dict], str]:
    if col.format is None:
        return lambda c, m: str(c.get(name, default))
    return lambda c, m: col.format(c.get(name, default), c)


def _config_columns(shown: Callable[[Any], bool] = lambda d: not d.column.hide_default
                    ) -> tuple[tuple[str, Callable[[dict, dict], str]], ...]:
    return tuple(
        (col.header, cell) for col, cell in sorted(
            [(d.column, _dimension_cell(d.name, d.column, d.default)) for d in PARALLEL_DIMENSIONS
             if d.column is not None and shown(d)]
            + [(Column("m", 45), lambda c, m: str(m["microbatches_per_step"]))],
            key=lambda cc: cc[0].order))


#: The front table's configuration columns, as (header, cell(config, metrics)): the dimension
#: declarations' columns (costmodel.dimensions.Column) and, next to the micro-batch size, the
#: microbatches per step, in column order. A ``hide_default`` column (cp) joins only where a
#: front point leaves its dimension's default, and the ``omit_default`` ones (ep, etp) also for
#: every MoE model (:func:`_doc_columns`).
_CONFIG_COLUMNS = _config_columns()
_METRIC_COLUMNS = ("tok/s/GPU", "tok/s 80%", "tokens/s", "MFU", "step s", "peak GiB",
                   "bottleneck")
FRONT_COLUMNS = ("#", *(h for h, _ in _CONFIG_COLUMNS), *_METRIC_COLUMNS)


def _si(x: float) -> str:
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suf}"
    return f"{x:.3g}"


def interval_text(m: dict[str, Any], key: str = "tokens_per_s_interval") -> str:
    iv = m.get(key)
    return f"{_si(iv[0])}-{_si(iv[1])}" if iv else "-"


def _doc_columns(doc: dict[str, Any]) -> tuple[tuple[str, Callable[[dict, dict], str]], ...]:
    configs = [p["config"] for p in doc["pareto_front"]]
    moe = "moe" in doc.get("inputs", {}).get("model", {})
    return _config_columns(lambda d: not d.column.hide_default or (moe and d.omit_default)
                           or any(c.get(d.name, d.default) != d.default for c in configs))


def front_headers(doc: dict[str, Any]) -> tuple[str, ...]:
    """The front table's headers for ``doc`` (FRONT_COLUMNS plus any hide_default column a
    front point uses, e.g. cp)."""
    return ("#", *(h for h, _ in _doc_columns(doc)), *_METRIC_COLUMNS)


def _cp_text(cfg: dict[str, Any]) -> str:
    """`` cp=16 (p2p)`` where context parallelism is on, else nothing."""
    cp = cfg.get("cp", 1)
    return f" cp={cp} ({cfg.get('cp_comm_type', 'p2p')})" if cp > 1 else ""


def _schedule(cfg: dict[str, Any]) -> str:
    return schedule_label(cfg["schedule"], cfg)


def _nccl(cfg: dict[str, Any]) -> str:
    return nccl_label(cfg["nccl_algo"], cfg)


def short_label(cfg: dict[str, Any]) -> str:
    """One line naming a configuration: tp4 pp4 dp64 mbs2 interleaved/4 full SP Z1 bf16."""
    parts = [f"tp{cfg['tp']}", f"pp{cfg['pp']}", f"dp{cfg['dp']}",
             f"mbs{cfg['micro_batch_size']}", _schedule(cfg), f"rc:{cfg['recompute']}",
             "SP" if cfg["sequence_parallel"] else "noSP", f"Z{cfg['zero_stage']}",
             cfg["precision"]]
    if _nccl(cfg) != "auto":
        parts.append(_nccl(cfg))
    return " ".join(parts)


def front_rows(doc: dict[str, Any], top_k: int = 0) -> list[list[str]]:
    from optimizer.output.diagnose import main_bottleneck

    rows = []
    columns = _doc_columns(doc)
    gpus = doc["inputs"]["cluster"]["num_gpus"]
    for i, p in enumerate(doc["pareto_front"]):
        if top_k and i >= top_k and i != doc["recommended"]:
            continue
        c, m = p["config"], p["metrics"]
        mark = "*" if i == doc["recommended"] else ""
        rows.append([f"{i}{mark}", *(cell(c, m) for _, cell in columns),
                     f"{m['tokens_per_s'] / gpus:,.0f}", interval_text(m),
                     f"{m['tokens_per_s']:,.0f}",
                     f"{m['mfu']:.3f}",
                     f"{m['step_time_s']:.3f}", f"{m['peak_memory_bytes'] / GIB:.1f}",
                     main_bottleneck(m)])
    return rows


def defaults_line(inp: dict[str, Any]) -> str:
    """Where the training defaults came from (the CLI records it in inputs.defaults_from)."""
    origin = inp.get("defaults_from")
    if not origin:
        return ""
    return "defaults: " + "; ".join(f"{k.replace('_', ' ')} from {v}"
                                    for k, v in origin.items()) + "\n"


def render_front(doc: dict[str, Any], top_k: int = 0) -> str:
    """The whole human report of ``optimize``: front table, recommendation, launch flags."""
    inp = doc["inputs"]
    st = doc["stats"]
    cl = inp["cluster"]
    mdl = inp["model"]
    params = (f" ({mdl['total_params'] / 1e9:,.1f}B total / {mdl['active_params'] / 1e9:,.1f}B "
              f"active, {mdl['moe']['num_experts']} experts top-{mdl['moe']['top_k']})"
              if "active_params" in mdl else "")
    head = (f"paraplan {doc['tool']['version']}: {inp['model']['name']}{params} on "
            f"{cl['num_gpus']} x {cl['gpu']['name']} ({cl['num_nodes']} "
            f"node{'s' if cl['num_nodes'] != 1 else ''} x "
            f"{cl['gpus_per_node']}), seq {inp['training']['seq_length']}, global batch "
            f"{inp['training']['global_batch_size']}, memory limit "
            f"{inp['memory_limit_bytes'] / GIB:.1f} GiB/GPU\n"
            f"sampler {st['sampler']}: {st['configs_evaluated']:,} configurations scored "
            f"({st['valid_space_size']:,} valid, {st['configs_feasible']:,} fit in memory), "
            f"Pareto front of {len(doc['pareto_front'])} in {st.get('wall_s', 0):.2f} s\n"
            + defaults_line(inp) + "\n")
    n = len(doc["pareto_front"])
    shown = (f", the {top_k} fastest of {n} shown (--top-k)" if top_k and top_k < n else "")
    table = fmt_table(front_headers(doc), front_rows(doc, top_k),
                       f"Pareto front: tokens/s vs peak memory (* = recommended{shown})")
    return head + table + "\n" + render_recommendation(doc)


def _mfu(doc: dict[str, Any], c: dict[str, Any], m: dict[str, Any]) -> str:
    """MFU against the bf16 peak, with the run precision's utilisation beside it when it
    differs (fp8: "MFU 52.0% (bf16 peak; 26.0% of the fp8 peak)")."""
    from optimizer.output.diagnose import mfu_pair

    peaks = (((doc.get("inputs") or {}).get("cluster") or {}).get("gpu") or {}).get(
        "peak_flops_per_s")
    ref, mfu = mfu_pair(m, peaks, c.get("precision", "bf16"))
    if ref == mfu:
        return f"MFU {mfu:.1%}"
    return f"MFU {ref:.1%} (bf16 peak; {mfu:.1%} of the {c['precision']} peak)"


def _why_memory(doc: dict[str, Any], m: dict[str, Any], limit: float) -> str:
    """The recommendation's memory verdict, with the one safety margin it applies."""
    margin = m.get("memory_margin")
    if margin is None:
        gpu = ((doc.get("inputs") or {}).get("cluster") or {}).get("gpu") or {}
        hbm = gpu.get("memory_bytes")
        margin = max(0.0, 1.0 - limit / hbm) if isinstance(hbm, int | float) and hbm else 0.0
    verdict = m.get("memory_verdict", "fits" if m["peak_memory_bytes"] <= limit else
                    "over the limit")
    if verdict == "fits":
        return (f"  why: the fastest front point that fits the limit (the GPU's memory less a "
                f"{margin:.0%} safety margin)")
    return f"  why: memory verdict '{verdict}' (safety margin {margin:.0%})"


def _ep_text(c: dict[str, Any]) -> str:
    """Expert parallelism where the layout has it (`` ep=8``, `` ep=8 etp=2``)."""
    ep, etp = int(c.get("ep", 1) or 1), int(c.get("etp", 1) or 1)
    if ep == 1 and etp == 1:
        return ""
    return f" ep={ep}" + (f" etp={etp}" if etp > 1 else "")


def _recompute_text(c: dict[str, Any]) -> str:
    """The recompute setting as it is launched: partial full recompute names its layers per
    chunk, selective recompute its modules when they are not the default core attention."""
    r = c["recompute"]
    n = int(c.get("recompute_num_layers", 0) or 0)
    if r == "full" and n > 0:
        return f"full (block, {n} layers per chunk)"
    mods = c.get("recompute_modules", "core_attn")
    if r == "selective" and mods not in (None, "core_attn"):
        return f"selective ({mods})"
    return str(r)


def render_recommendation(doc: dict[str, Any]) -> str:
    i = doc["recommended"]
    rec = doc["pareto_front"][i]
    c, m = rec["config"], rec["metrics"]
    limit = doc["inputs"]["memory_limit_bytes"]
    lines = [f"Recommended: #{i}  tp={c['tp']} pp={c['pp']}{_cp_text(c)}{_ep_text(c)} "
             f"dp={c['dp']} micro-batch={c['micro_batch_size']} {_schedule(c)} "
             f"recompute={_recompute_text(c)} "
             f"SP={'on' if c['sequence_parallel'] else 'off'} ZeRO={c['zero_stage']} "
             f"{c['precision']} NCCL={_nccl(c)}",
             _why_memory(doc, m, limit)
             + f" ({m['peak_memory_bytes'] / GIB:.1f} of {limit / GIB:.1f} GiB): "
             f"{m['tokens_per_s']:,.0f} tokens/s, {_mfu(doc, c, m)}, step "
             f"{m['step_time_s']:.2f} s"]
    iv = m.get("tokens_per_s_interval")
    if iv:
        basis = (m.get("interval") or {}).get("step_time_basis", "")
        lines.append(f"  80% interval: {iv[0]:,.0f}-{iv[1]:,.0f} tokens/s, step "
                     f"{m['step_time_interval_s'][0]:.3g}-{m['step_time_interval_s'][1]:.3g} s"
                     f" (validation residuals of comparable runs: {basis})")
    within = doc.get("within_error_of_recommended") or []
    if within:
        lines.append("  indistinguishable within the model's error (tokens/s and memory): "
                     + ", ".join(f"#{j}" for j in within) + "; the prediction cannot rank "
                     "them: measure them")
    try_these = doc.get("try_these")
    if try_these and len(try_these) < len(doc["pareto_front"]):
        lines.append(f"  try these {len(try_these)} (the front of {len(doc['pareto_front'])} "
                     "collapsed by the model's error): "
                     + ", ".join(f"#{j}" for j in try_these))
    for b in rec.get("bottlenecks", []):
        lines.append(f"  note: {b}")
    if doc.get("stats", {}).get("configs_feasible_without_cp") == 0:
        lines.append(f"  note: no layout without context parallelism (cp = 1) fits in "
                     f"{limit / GIB:.1f} GiB at seq {doc['inputs']['training']['seq_length']:,}:"
                     f" this sequence needs CP")
    launch = rec.get("launch") or {}
    if launch.get("megatron_args"):
        lines.append("  Megatron-LM: " + " ".join(launch["megatron_args"]))
    if launch.get("env"):
        lines.append("  env: " + " ".join(f"{k}={v}" for k, v in launch["env"].items()))
    for w in launch.get("warnings", []) or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines) + "\n"


def render_evaluation(doc: dict[str, Any]) -> str:
    c, m = doc["config"], doc["metrics"]
    inp = doc["inputs"]
    step = m["step_time_s"]
    out = [f"{inp['model']['name']} on {inp['cluster']['num_gpus']} x "
           f"{inp['cluster']['gpu']['name']}: tp={c['tp']} pp={c['pp']}{_cp_text(c)} "
           f"dp={c['dp']} "
           f"micro-batch={c['micro_batch_size']} ({m['microbatches_per_step']} per step) "
           f"{_schedule(c)} recompute={c['recompute']} SP={c['sequence_parallel']} "
           f"ZeRO={c['zero_stage']} {c['precision']} NCCL={_nccl(c)}",
           f"step {step:.4f} s, {m['tokens_per_s']:,.0f} tokens/s, {m['samples_per_s']:.2f} "
           f"samples/s, {_mfu(doc, c, m)}, peak memory {m['peak_memory_bytes'] / GIB:.2f} GiB "
           f"(limit {m['memory_limit_bytes'] / GIB:.1f} GiB), bubble "
           f"{m['bubble_share']:.1%} of the step", ""]
    if m.get("step_time_interval_s"):
        lo, hi = m["step_time_interval_s"]
        basis = (m.get("interval") or {}).get("step_time_basis", "")
        out.insert(2, f"80% interval: step {lo:.4g}-{hi:.4g} s, "
                      f"{m['tokens_per_s_interval'][0]:,.0f}-{m['tokens_per_s_interval'][1]:,.0f}"
                      f" tokens/s (validation residuals of comparable runs: {basis})")
    trows = [[k, f"{v:.4f}", f"{v / step:.1%}"] for k, v in m["time_breakdown_s"].items()]
    out.append(fmt_table(("term", "seconds", "share"), trows, "Step time"))
    mrows = [[k, f"{v / GIB:.2f}"] for k, v in m["memory_breakdown_bytes"].items()]
    out.append(fmt_table(("component", "GiB"), mrows, "Memory (largest stage)"))
    for b in doc.get("bottlenecks", []):
        out.append(f"note: {b}")
    launch = doc.get("launch") or {}
    if launch.get("megatron_args"):
        out.append("Megatron-LM: " + " ".join(launch["megatron_args"]))
    return "\n".join(out) + "\n"
