"""The source article's case through `optimize evaluate` (issue 2 acceptance).

LLaMA-65B on 2 nodes of 8 A100-80GB, TP=4 PP=4 DP=1, GPipe, micro-batch 1: global batch 4
(4 micro-batches) -> bubble (p-1)/(m+p-1) = 3/7 of the step; global batch 8 -> 3/11.
"""

import json
from pathlib import Path

import pytest

from optimizer import evaluate
from optimizer.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.mark.parametrize("name,expected", [("llama65b-gpipe-m4.yaml", 3 / 7),
                                           ("llama65b-gpipe-m8.yaml", 3 / 11)])
def test_bubble_share_matches_the_article(name, expected):
    res = evaluate(EXAMPLES / name)
    m = res.metrics
    bubble = m["time_breakdown_s"]["pipeline_bubble"] / m["step_time_s"]
    assert bubble == pytest.approx(m["bubble_share"])
    assert abs(bubble - expected) <= 0.03
    assert sum(m["time_breakdown_s"].values()) == pytest.approx(m["step_time_s"], rel=1e-9)


def test_more_microbatches_give_more_tokens_per_second():
    m4 = evaluate(EXAMPLES / "llama65b-gpipe-m4.yaml").metrics
    m8 = evaluate(EXAMPLES / "llama65b-gpipe-m8.yaml").metrics
    assert m8["tokens_per_s"] > m4["tokens_per_s"]
    # GPipe keeps all m micro-batches: more micro-batches need more activation memory
    assert m8["memory_breakdown_bytes"]["activations"] > m4["memory_breakdown_bytes"]["activations"]


def test_evaluate_cli_json(capsys):
    rc = main(["evaluate", str(EXAMPLES / "llama65b-gpipe-m4.yaml"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["config"]["tp"] == 4 and doc["config"]["schedule"] == "gpipe"
    assert doc["metrics"]["microbatches_per_step"] == 4


def test_main_job_front_is_consistent(capsys):
    rc = main(["--model", "65b", "--gpus", "16", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    limit = doc["inputs"]["memory_limit_bytes"]
    front = doc["pareto_front"]
    assert front
    for p in front:
        c, m = p["config"], p["metrics"]
        assert c["tp"] * c["pp"] * c["dp"] == 16
        assert m["peak_memory_bytes"] <= limit
    best = max(p["metrics"]["mfu"] for p in front)
    assert 0.3 <= best <= 0.6  # plausible for LLaMA-65B on A100
    pts = [(p["metrics"]["tokens_per_s"], p["metrics"]["peak_memory_bytes"]) for p in front]
    for i, (t1, m1) in enumerate(pts):
        for j, (t2, m2) in enumerate(pts):
            if i != j:
                assert not (t2 >= t1 and m2 <= m1 and (t2 > t1 or m2 < m1))
