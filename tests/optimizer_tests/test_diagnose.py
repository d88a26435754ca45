"""Advice that fits the configuration (issue 25): ten varied configurations, none of whose
findings suggests a lever that cannot change anything for it.

``python tests/optimizer_tests/test_diagnose.py`` prints the table (configuration -> findings).
"""

from __future__ import annotations

import pytest

from optimizer import evaluate


def _run(model, gpu, nodes, gpn, seq, gbs, **par):
    par.setdefault("precision", "bf16")
    return {"model": model, "cluster": {"gpu": gpu, "num_nodes": nodes, "gpus_per_node": gpn},
            "training": {"seq_length": seq, "global_batch_size": gbs}, "parallel": par}


CASES = {  # name -> run mapping
    "65b 16xA100 tp4 pp4 dp1, no recompute (91 GiB)":
        _run("llama-65b", "a100-sxm-80gb", 2, 8, 2048, 1024, tp=4, pp=4, dp=1,
             micro_batch_size=1),
    "65b 16xA100 GPipe m=4 (article)":
        _run("llama-65b", "a100-sxm-80gb", 2, 8, 2048, 4, tp=4, pp=4, dp=1, micro_batch_size=1,
             recompute="full", sequence_parallel=True, schedule="gpipe"),
    "llama3-70b 128k on 64xH100, full recompute, mbs 1":
        _run("llama3-70b", "h100-sxm-80gb", 8, 8, 131072, 16, tp=8, pp=4, dp=2,
             micro_batch_size=1, recompute="full", sequence_parallel=True, zero_stage=1),
    "llama3-70b fp8 on 64xH100":
        _run("llama3-70b", "h100-sxm-80gb", 8, 8, 8192, 512, tp=4, pp=4, dp=4,
             micro_batch_size=1, precision="fp8", sequence_parallel=True, zero_stage=1,
             schedule="interleaved", virtual_stages=5),
    "llama-7b dp256 on 256xH100, batch 256":
        _run("llama-7b", "h100-sxm-80gb", 32, 8, 2048, 256, tp=1, pp=1, dp=256,
             micro_batch_size=1, zero_stage=1),
    "gpt3-175b tp16 across nodes, 128xA100":
        _run("gpt3-175b", "a100-sxm-80gb", 16, 8, 2048, 1536, tp=16, pp=8, dp=1,
             micro_batch_size=1, recompute="full", sequence_parallel=True),
    "gpt-1.7b on 512xA100 (tiny model, huge cluster)":
        _run("gpt-1.7b", "a100-sxm-80gb", 64, 8, 1024, 512, tp=1, pp=1, dp=512,
             micro_batch_size=1),
    "llama-13b FSDP ZeRO-3 on 8xA100, mbs 4":
        _run("llama-13b", "a100-sxm-80gb", 1, 8, 2048, 256, tp=1, pp=1, dp=8,
             micro_batch_size=4, zero_stage=3, recompute="selective"),
    "bert-large fp32 on 8xV100":
        _run("bert-large", "v100-sxm-32gb", 1, 8, 512, 256, tp=1, pp=1, dp=8,
             micro_batch_size=8, precision="fp32"),
    "llama2-70b pp8 1f1b, few micro-batches, 64xA100":
        _run("llama2-70b", "a100-sxm-80gb", 8, 8, 4096, 64, tp=8, pp=8, dp=1,
             micro_batch_size=2, recompute="selective", sequence_parallel=True),
}


def noop_levers(finding, cfg, metrics) -> list[str]:
    """The levers of ``finding`` that cannot change anything for this configuration."""
    bad = []
    m = metrics["microbatches_per_step"]
    rules = {
        "zero": cfg["dp"] == 1 or cfg["zero_stage"] == 3,
        "recompute_full": cfg["recompute"] == "full",
        "recompute_selective": cfg["recompute"] != "none",
        "smaller_micro_batch": cfg["micro_batch_size"] == 1,
        "larger_micro_batch": m == 1,
        "interleaved": cfg["schedule"] == "interleaved" or cfg["pp"] == 1,
        "more_virtual_stages": cfg["schedule"] != "interleaved",
        "fewer_pp": cfg["pp"] == 1,
        "lower_tp": cfg["tp"] == 1,
        "sequence_parallel": cfg["tp"] == 1 or cfg["sequence_parallel"],
        "tp_in_node": not metrics["tp_crosses_nodes"],
        "mixed_precision": cfg["precision"] not in ("fp32", "tf32"),
    }
    for lever in finding.levers:
        if rules.get(lever, False):
            bad.append(lever)
    text = finding.message.lower()
    if cfg["micro_batch_size"] == 1 and "more micro-batches" in text:
        bad.append("more micro-batches at micro-batch 1")
    if "risk of oom" in text:
        bad.append("'risk of OOM' instead of a verdict")
    return bad


def _diagnose(run):
    from optimizer.api import resolve_problem
    from optimizer.output.diagnose import diagnose

    res = evaluate(run)
    problem = resolve_problem(model=res.problem.model, cluster=res.problem.cluster,
                              training=res.problem.training)
    cfg = res.candidate.config
    return cfg.as_dict(), dict(res.metrics), diagnose(problem, cfg, res.metrics), problem


@pytest.mark.parametrize("name", list(CASES))
def test_no_finding_suggests_a_noop_lever(name):
    cfg, metrics, findings, problem = _diagnose(CASES[name])
    assert findings
    for f in findings:
        assert not noop_levers(f, cfg, metrics), f"{name}: {f.message}"
    # the second-largest cost term is named beside the bottleneck
    assert any(f.kind == "breakdown" and ", then " in f.message for f in findings)
    hbm = problem.cluster.gpu.memory_bytes
    if metrics["peak_memory_bytes"] > hbm:
        assert findings[0].kind == "does_not_fit"
        assert "does not fit" in findings[0].message


def test_verdicts_of_the_table():
    kinds = {name: {f.kind for f in _diagnose(run)[2]} for name, run in CASES.items()}
    assert "does_not_fit" in kinds["65b 16xA100 tp4 pp4 dp1, no recompute (91 GiB)"]
    assert "bubble" in kinds["65b 16xA100 GPipe m=4 (article)"]
    assert "communication" in kinds["gpt-1.7b on 512xA100 (tiny model, huge cluster)"]
    _, _, f128k, _ = _diagnose(CASES["llama3-70b 128k on 64xH100, full recompute, mbs 1"])
    assert any("cp" in f.levers for f in f128k) or not any(
        f.kind in ("does_not_fit", "over_limit", "memory") for f in f128k)


def test_fp8_mfu_is_on_the_bf16_peak_with_fp8_utilisation_apart():
    from optimizer.output.diagnose import mfu_bf16

    cfg, metrics, findings, problem = _diagnose(CASES["llama3-70b fp8 on 64xH100"])
    from costmodel.specs import ParallelConfig

    m16 = mfu_bf16(problem, ParallelConfig(**cfg), metrics)
    assert m16 == pytest.approx(2 * metrics["mfu"], rel=0.01)  # H100: fp8 peak = 2 x bf16
    for f in findings:
        if f.kind == "low_mfu":
            assert "bf16 peak" in f.message and "fp8 peak" in f.message


def test_far_below_reach_says_why():
    _, _, findings, _ = _diagnose(CASES["gpt-1.7b on 512xA100 (tiny model, huge cluster)"])
    low = [f for f in findings if f.kind == "low_mfu"]
    assert low and "far below" in low[0].message and "takes" in low[0].message


def table() -> str:
    lines = ["| configuration | findings (levers) |", "|---|---|"]
    for name, run in CASES.items():
        _, _, findings, _ = _diagnose(run)
        cell = "<br>".join(f"**{f.kind}**: {f.message}" + (f" [{', '.join(f.levers)}]"
                                                           if f.levers else "")
                           for f in findings)
        lines.append(f"| {name} | {cell} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(table())
