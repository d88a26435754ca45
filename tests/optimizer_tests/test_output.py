"""Human-readable output and the Pareto plot (optimizer.output): the front table, colour
rules, the PNG plot and its helpers. The CLI runs in-process (``optimizer.cli.main``)."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import ARGS_65B, run_cli

from costmodel.errors import InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANSI = re.compile(r"\x1b\[")


# ---------------------------------------------------------------------------------------------
# Plot
def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs the plot extra")
    png = tmp_path / "front.png"
    rc, out, err = run_cli([*ARGS_65B, "--plot", str(png)])
    assert rc == 0, err
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert "Recommended" in out  # the plot does not replace the report
    assert [p.name for p in tmp_path.iterdir()] == ["front.png"]  # no temp file left


def test_plot_into_a_missing_folder_is_an_input_error(tmp_path, front_doc):
    pytest.importorskip("matplotlib", reason="the plot needs the plot extra")
    from optimizer.output.plot import plot_front

    with pytest.raises(InputError, match="does not exist"):
        plot_front(front_doc, tmp_path / "nowhere" / "front.png")
    with pytest.raises(InputError, match="unsupported file type"):
        plot_front(front_doc, tmp_path / "front.jpg")


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                 "matplotlib.backends.backend_agg", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    rc, _, err = run_cli([*ARGS_65B, "--plot", str(tmp_path / "f.png")])
    assert rc == 2
    assert "--plot: matplotlib is not installed" in err
    assert "pip install 'paraplan[plot]'" in err


def _crowded_front(front_doc):
    """The 65b front plus near-duplicates of its points (0.02 GiB, 0.1% apart) and a point of
    another layout family: labels must move or merge."""
    import copy

    doc = copy.deepcopy(front_doc)
    extra = []
    for p in doc["pareto_front"][:4]:
        q = copy.deepcopy(p)
        q["metrics"]["peak_memory_bytes"] += 0.02 * 1024**3
        q["metrics"]["tokens_per_s"] *= 0.999
        extra.append(q)
    fam = copy.deepcopy(doc["pareto_front"][-1])
    fam["config"].update(tp=1, pp=1, cp=1, ep=1, dp=16)
    fam["metrics"]["peak_memory_bytes"] -= 1024**3
    doc["pareto_front"] += extra + [fam]
    return doc


def test_plot_labels_do_not_overlap_and_families_have_colours(front_doc):
    """Every front index is labelled exactly once, no two labels overlap and none covers a
    marker (measured on the laid-out figure); the points are coloured by layout family, one
    legend entry each (issue 25: the PNG's labels overlapped, one colour for all)."""
    pytest.importorskip("matplotlib", reason="the plot needs the plot extra")
    from optimizer.output.plot import _render, layout_family

    doc = _crowded_front(front_doc)
    fig = _render(doc)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text().startswith("#")]
    seen = [int(x[1:]) for t in labels for x in t.get_text().split(",")]
    assert sorted(seen) == list(range(len(doc["pareto_front"])))
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not any(a.overlaps(b) for k, a in enumerate(boxes) for b in boxes[k + 1:])
    # no label covers a front marker (46 pt^2 markers: a 7 pt square around each point)
    r = 3.5 * fig.dpi / 72.0
    from matplotlib.transforms import Bbox

    markers = [Bbox.from_extents(cx - r, cy - r, cx + r, cy + r)
               for cx, cy in (ax.transData.transform(xy) for xy in
                              ((p["metrics"]["peak_memory_bytes"] / 1024**3,
                                p["metrics"]["tokens_per_s"]) for p in doc["pareto_front"]))]
    assert not any(b.overlaps(m) for b in boxes for m in markers)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    fams = {layout_family(p["config"]) for p in doc["pareto_front"]}
    assert fams == {"TP+PP", "DP only"}
    for f in fams:
        assert any(f"Pareto front, {f} (" in t for t in legend)
    colours = {tuple(c.get_facecolor()[0]) for c in ax.collections if len(c.get_offsets())
               and c.get_label().startswith("Pareto front")}
    assert len(colours) == 2


def test_layout_family_and_label_name_the_layout():
    from optimizer.output.plot import layout_family, layout_label

    assert layout_family({"tp": 1, "pp": 1, "dp": 8}) == "DP only"
    assert layout_family({"tp": 8, "pp": 2, "cp": 2, "ep": 1}) == "TP+PP+CP"
    assert layout_family({"tp": 1, "pp": 4, "ep": 8}) == "PP+EP"
    cfg = {"tp": 4, "pp": 4, "dp": 1, "micro_batch_size": 1, "recompute": "full",
           "recompute_num_layers": 8, "sequence_parallel": True}
    assert "full recompute (8 layers per chunk)" in layout_label(cfg)
    cfg.update(recompute="selective", recompute_modules="mlp", recompute_num_layers=0)
    assert "selective recompute (mlp)" in layout_label(cfg)


def test_staircase_is_the_attainable_throughput():
    from optimizer.output.plot import _staircase

    # points (GiB, tokens/s, index) by increasing memory; the staircase rises at each one
    pts = [(10.0, 100.0, 2), (20.0, 150.0, 1), (30.0, 180.0, 0)]
    xs, ys = _staircase(pts)
    assert xs == [10.0, 20.0, 20.0, 30.0, 30.0]
    assert ys == [100.0, 100.0, 150.0, 150.0, 180.0]


def test_layout_label_names_the_layout():
    from optimizer.output.plot import layout_label

    cfg = {"tp": 8, "pp": 2, "dp": 1, "micro_batch_size": 2, "schedule": "interleaved",
           "virtual_stages": 2, "recompute": "full", "sequence_parallel": True, "zero_stage": 1}
    assert layout_label(cfg) == "tp=8 pp=2 dp=1 mbs=2\ninterleaved/2, full recompute, SP, ZeRO-1"


# ---------------------------------------------------------------------------------------------
# Human output
def test_human_output_has_table_and_recommendation(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    rc, out, err = run_cli(ARGS_65B)
    assert rc == 0, err
    assert re.search(r"^\s*#\s+tp\s+pp\s+dp\s+mbs\s+m\s+schedule\s+recompute", out, re.M)
    assert "tokens/s" in out and "peak GiB" in out
    assert "Recommended: #" in out
    assert "Megatron-LM: --tensor-model-parallel-size" in out
    assert not ANSI.search(out)  # stdout is not a terminal: plain text


def test_no_color_wins_over_force_color(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    _, coloured, _ = run_cli(ARGS_65B)
    assert ANSI.search(coloured), "FORCE_COLOR should colour (else this test proves nothing)"
    monkeypatch.setenv("NO_COLOR", "1")
    rc, out, err = run_cli(ARGS_65B)
    assert rc == 0, err
    assert not ANSI.search(out)
    assert "Recommended" in out


def test_recommendation_line_names_expert_parallelism_and_partial_recompute():
    from optimizer.output.report import _ep_text, _recompute_text

    assert _ep_text({"ep": 8, "etp": 1}) == " ep=8"
    assert _ep_text({"ep": 8, "etp": 2}) == " ep=8 etp=2"
    assert _ep_text({"tp": 4}) == ""
    assert _recompute_text({"recompute": "full", "recompute_num_layers": 8}) == \
        "full (block, 8 layers per chunk)"
    assert _recompute_text({"recompute": "full", "recompute_num_layers": 0}) == "full"
    assert _recompute_text({"recompute": "selective", "recompute_modules": "mlp"}) == \
        "selective (mlp)"
    assert _recompute_text({"recompute": "selective", "recompute_modules": "core_attn"}) == \
        "selective"
