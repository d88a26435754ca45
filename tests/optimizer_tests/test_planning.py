"""Planning across cluster sizes (issue 25): GPU-count lists and ranges, time-to-train,
GPU-hours, cost and their front; recipe defaults; the renamed trials-per-batch option."""

from __future__ import annotations

import time

import pytest
from conftest import run_cli, run_cli_json

from costmodel.errors import InputError
from optimizer.api import plan
from optimizer.planning import parse_gpu_counts


@pytest.mark.parametrize(("text", "gpn", "want"), [
    ("64", 8, (64,)),
    ("64,128,256", 8, (64, 128, 256)),
    ("256,64,64", 8, (64, 256)),
    ("64-1024", 8, (64, 128, 256, 512, 1024)),
    ("1-16", 8, (1, 2, 4, 8, 16)),
    ("100-1000", 8, (128, 256, 512)),
    ("48-200", 6, (48, 96, 192)),            # whole nodes x 2^k when a node is not 2^k
    ("64-256:64", 8, (64, 128, 192, 256)),
    ("60-130:20", 8, (80, 120)),             # multiples of 20 that are whole nodes
    ("8-16,64", 8, (8, 16, 64)),
])
def test_gpu_counts(text, gpn, want):
    assert parse_gpu_counts(text, gpn) == want


@pytest.mark.parametrize("text", ["", "abc", "0", "1024-64", "9-15", "1.5", "1-100000:1"])
def test_bad_gpu_counts_are_input_errors(text):
    with pytest.raises(InputError):
        parse_gpu_counts(text, 8)


def test_plan_api_figures_are_consistent():
    res = plan("llama-7b", [8, 16, 32], tokens=1e12, gpu_hour_cost=2.0, gpu="h100-sxm-80gb")
    doc = res.to_dict()
    assert [e["gpus"] for e in doc["plan"]] == [8, 16, 32]
    for e in doc["plan"]:
        assert e["status"] == "ok"
        assert e["tokens_per_s_per_gpu"] == pytest.approx(e["tokens_per_s"] / e["gpus"])
        assert e["time_to_train_s"] == pytest.approx(1e12 / e["tokens_per_s"])
        assert e["gpu_hours"] == pytest.approx(e["gpus"] * e["time_to_train_s"] / 3600)
        assert e["cost"] == pytest.approx(2.0 * e["gpu_hours"])
        assert e["recommended"]["metrics"]["tokens_per_s"] == e["tokens_per_s"]
    # the fastest count is always on the front, and so is the cheapest
    ok = doc["plan"]
    fastest = max(range(3), key=lambda i: ok[i]["tokens_per_s"])
    cheapest = min(range(3), key=lambda i: ok[i]["gpu_hours"])
    assert {fastest, cheapest} <= set(doc["plan_front"])
    assert doc["plan_pick"] in doc["plan_front"]


def test_plan_without_tokens_has_no_time_to_train():
    doc = plan("llama-7b", [8, 16]).to_dict()
    assert all(e["time_to_train_s"] is None and e["cost"] is None for e in doc["plan"])


def test_plan_keeps_infeasible_counts_in_the_table():
    doc = run_cli_json(["--model", "65b", "--gpus", "8,32", "--global-batch-size", "64"],
                       "plan")
    first, second = doc["plan"]
    assert first["status"] == "infeasible" and first["cost"] is None
    assert second["status"] == "ok"
    assert doc["plan_front"] == [1]


def test_plan_refuses_a_cluster_file():
    rc, _, err = run_cli(["--model", "7b", "--gpus", "8,16", "--cluster", "dgx-a100-80gb"])
    assert rc == 2 and "cluster" in err


def test_acceptance_plan_70b_64_to_1024_under_10_s():
    t0 = time.perf_counter()
    doc = run_cli_json(["--model", "llama3-70b", "--gpu", "h100-sxm-80gb", "--gpus", "64-1024",
                        "--tokens", "15e12", "--gpu-hour-cost", "2.5"], "plan")
    wall = time.perf_counter() - t0
    assert wall < 10, f"plan took {wall:.1f} s"
    assert [e["gpus"] for e in doc["plan"]] == [64, 128, 256, 512, 1024]
    for e in doc["plan"]:
        assert e["time_to_train_s"] > 0 and e["gpu_hours"] > 0 and e["cost"] > 0
    assert doc["inputs"]["training"]["seq_length"] == 8192  # the Llama 3 recipe
    rc, out, _ = run_cli(["--model", "llama3-70b", "--gpu", "h100-sxm-80gb", "--gpus",
                          "64-1024", "--tokens", "15e12", "--gpu-hour-cost", "2.5"])
    assert rc == 0
    assert "train days" in out and "GPU-hours" in out and "Pick:" in out
    assert "batch-size ramps come later" in out


def test_recipe_seq_length_and_where_defaults_came_from():
    rc, out, _ = run_cli(["--model", "llama3-8b", "--gpus", "8", "--top-k", "2"])
    assert rc == 0
    assert "seq 8192" in out and "recipe: Llama 3" in out
    rc, out, _ = run_cli(["--model", "llama3-8b", "--gpus", "8", "--seq-length", "4096"])
    assert "seq 4096" in out and "seq length from --seq-length" in out


def test_top_k_limits_the_table_not_the_json():
    rc, out, _ = run_cli(["--model", "65b", "--gpus", "16", "--global-batch-size", "512",
                          "--memory-limit-gib", "76", "--top-k", "3"])
    assert rc == 0
    assert "the 3 fastest of" in out
    table = out.split("Recommended:")[0]
    rows = [ln for ln in table.splitlines() if ln[:3].strip().rstrip("*").isdigit()]
    assert len(rows) <= 4  # the recommended row stays even when it is not in the top 3
    assert "tok/s/GPU" in out


def test_batch_size_is_a_deprecated_alias_of_trials_per_batch():
    rc, _, err = run_cli(["--model", "7b", "--gpus", "8", "--batch-size", "16"])
    assert rc == 0 and "--batch-size is deprecated" in err and "--trials-per-batch" in err
    rc, _, err = run_cli(["--model", "7b", "--gpus", "8", "--trials-per-batch", "16"])
    assert rc == 0 and "deprecated" not in err


def test_every_option_help_shows_its_default():
    from optimizer.cli.options import main_parser

    p = main_parser()
    text = p.format_help()
    assert "--trials-per-batch" in text
    for action in p._actions:
        if not action.option_strings or action.default is None or action.default is False \
                or action.dest == "help":
            continue
        assert "default" in (p._get_formatter()._get_help_string(action) or ""), action.dest
