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
