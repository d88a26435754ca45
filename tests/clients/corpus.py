"""The fixed corpus of launch scenarios the real-client tests run through each client.

Every scenario is scored through the public API (:func:`optimizer.api.evaluate`), so the
launch bundle under test is exactly what a user gets for that configuration. The corpus
covers models (LLaMA 1/2/3/3.1, GQA, GPT with learned positions, tied embeddings and biases,
an encoder), GPUs (V100, A100, H100, B200), the three frameworks, every precision,
recompute mode, ZeRO stage and schedule, uneven pipeline splits and TP communication
overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

GPUS = {"a100": ("a100-sxm-80gb", 80), "h100": ("h100-sxm-80gb", 90),
        "b200": ("b200", 100), "v100": ("v100-sxm-32gb", 70)}


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    gpu: str
    nodes: int
    parallel: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)
    gpus_per_node: int = 8

    def run(self) -> dict[str, Any]:
        return {"model": self.model,
                "cluster": {"gpu": GPUS[self.gpu][0], "num_nodes": self.nodes,
                            "gpus_per_node": self.gpus_per_node},
                "training": {"seq_length": 2048, "global_batch_size": 512, **self.training},
                "parallel": self.parallel}


def S(name: str, model: str, gpu: str, nodes: int, training: dict | None = None,
      gpus_per_node: int = 8, **parallel: Any) -> Scenario:
    return Scenario(name, model, gpu, nodes, parallel, training or {}, gpus_per_node)


_T4K = {"seq_length": 4096, "global_batch_size": 256}
_DS = {"framework": "deepspeed"}
_FSDP = {"framework": "fsdp"}

SCENARIOS: tuple[Scenario, ...] = (
    # LLaMA 1 / 2 (MHA, rope 10000)
    S("llama7b-dp8", "llama-7b", "a100", 1, dp=8, zero_stage=1),
    S("llama7b-tp2-dp4-sp", "llama-7b", "a100", 1, tp=2, dp=4, sequence_parallel=True),
    S("llama13b-tp4-pp2", "llama-13b", "a100", 1, tp=4, pp=2, recompute="selective"),
    S("llama65b-tp4-pp4", "llama-65b", "a100", 2, tp=4, pp=4),
    S("llama65b-tp8-pp4-int", "llama-65b", "a100", 4, tp=8, pp=4, schedule="interleaved",
      virtual_stages=2, sequence_parallel=True),
    S("llama65b-gpipe-full", "llama-65b", "a100", 2, tp=8, pp=2, schedule="gpipe",
      recompute="full"),
    S("llama65b-fp16", "llama-65b", "v100", 4, tp=8, pp=4, precision="fp16", recompute="full"),
    S("llama33b-pp12-uneven", "llama-33b", "a100", 3, {"global_batch_size": 480},
      tp=2, pp=12, recompute="full"),
    S("llama2-7b-zero3", "llama2-7b", "a100", 2, _T4K, dp=16, zero_stage=3,
      recompute="selective"),
    S("llama2-13b-zero2", "llama2-13b", "a100", 2, _T4K, tp=2, dp=8, zero_stage=2,
      sequence_parallel=True),
    S("llama2-70b-gqa", "llama2-70b", "a100", 8, _T4K, tp=8, pp=4, dp=2, zero_stage=1,
      sequence_parallel=True),
    S("llama2-70b-tf32", "llama2-70b", "a100", 8, _T4K, tp=8, pp=8, precision="tf32",
      recompute="full"),
    S("llama2-7b-fp32", "llama2-7b", "a100", 1, tp=4, dp=2, precision="fp32",
      recompute="full"),
    # Llama 3 (GQA, rope 500000) and 3.1 405B (rope scaling)
    S("llama3-8b-h100-fp8", "llama3-8b", "h100", 1, _T4K, tp=2, dp=4, precision="fp8",
      sequence_parallel=True, zero_stage=1),
    S("llama3-8b-b200-fp8", "llama3-8b", "b200", 1, _T4K, tp=1, dp=8, precision="fp8",
      zero_stage=3),
    S("llama3-8b-fsdp-h100", "llama3-8b", "h100", 2, {**_T4K, **_FSDP}, dp=16, zero_stage=3,
      recompute="full"),
    S("llama3-8b-fsdp-tp2", "llama3-8b", "h100", 2, {**_T4K, **_FSDP}, tp=2, dp=8,
      zero_stage=3, sequence_parallel=True),
    S("llama3-8b-titan-compiled", "llama3-8b", "h100", 2,
      {**_T4K, "framework": "torchtitan", "torch_compile": True}, dp=16, zero_stage=3,
      recompute="full"),
    S("llama3-8b-mfsdp-pp2", "llama3-8b", "h100", 2, _T4K, pp=2, dp=8, zero_stage=2),
    S("llama3-8b-ds-pp2-zero2", "llama3-8b", "a100", 2, {**_T4K, **_DS}, pp=2, dp=8,
      zero_stage=2),
    S("llama3-8b-ds-zero1", "llama3-8b", "a100", 2, {**_T4K, **_DS}, dp=16, zero_stage=1),
    S("llama3-8b-ds-zero2", "llama3-8b", "a100", 2, {**_T4K, **_DS}, dp=16, zero_stage=2),
    S("llama3-8b-ds-zero3", "llama3-8b", "h100", 2, {**_T4K, **_DS}, dp=16, zero_stage=3,
      recompute="full"),
    S("llama3-8b-ds-pp2-zero1", "llama3-8b", "a100", 2, {**_T4K, **_DS}, tp=2, pp=2, dp=4,
      zero_stage=1),
    S("llama3-8b-ds-pp4-zero0-full", "llama3-8b", "a100", 2, {**_T4K, **_DS}, tp=2, pp=4,
      dp=2, recompute="full"),
    S("llama3-8b-ds-fp16", "llama3-8b", "v100", 2, {**_T4K, **_DS}, tp=2, dp=8,
      precision="fp16", zero_stage=2, recompute="full"),
    S("llama3-70b-h100", "llama3-70b", "h100", 8, _T4K, tp=8, pp=4, dp=2, zero_stage=1,
      sequence_parallel=True),
    S("llama3-70b-tpoverlap", "llama3-70b", "h100", 8, {**_T4K, "tp_comm_overlap": True},
      tp=8, pp=8, sequence_parallel=True, recompute="selective"),
    S("llama3-70b-int-fp8", "llama3-70b", "h100", 8, _T4K, tp=8, pp=4, dp=2,
      schedule="interleaved", virtual_stages=5, precision="fp8", sequence_parallel=True,
      zero_stage=1),
    S("llama3-70b-b200-fsdp", "llama3-70b", "b200", 4, _T4K, tp=4, dp=8, zero_stage=3,
      sequence_parallel=True, recompute="full"),
    S("llama3-70b-pp3-uneven", "llama3-70b", "h100", 6, {**_T4K, "global_batch_size": 252},
      tp=8, pp=6, recompute="full"),
    S("llama3-405b-16x", "llama3-405b", "h100", 128, {**_T4K, "global_batch_size": 512},
      tp=8, pp=16, dp=8, zero_stage=1, sequence_parallel=True, recompute="full"),
    S("llama3-405b-fp8", "llama3-405b", "h100", 128, {**_T4K, "global_batch_size": 512},
      tp=8, pp=16, dp=8, precision="fp8", zero_stage=1, sequence_parallel=True,
      recompute="full"),
    # partial full recompute (recompute_num_layers) in torchtitan: the config module's
    # PartialFullAC; torchtitan's 2024 "selective (layer)" runs (every second block), without
    # PP, and interleaved PP (the first N blocks of each model chunk)
    S("llama3-8b-titan-partial", "llama3-8b", "h100", 2, {**_T4K, "framework": "torchtitan"},
      dp=16, zero_stage=3, recompute="full", recompute_num_layers=16),
    S("llama2-70b-titan-partial-int", "llama2-70b", "a100", 8,
      {**_T4K, "framework": "torchtitan"}, tp=8, pp=4, dp=2, zero_stage=3,
      schedule="interleaved", virtual_stages=2, sequence_parallel=True, recompute="full",
      recompute_num_layers=4),
    S("llama3-70b-titan-partial-pp6-uneven", "llama3-70b", "h100", 6,
      {**_T4K, "framework": "torchtitan", "global_batch_size": 252}, tp=8, pp=6,
      recompute="full", recompute_num_layers=8),
    # selective recompute by modules (Megatron-Core --recompute-modules)
    S("llama3-70b-sel-mlp", "llama3-70b", "h100", 8, _T4K, tp=8, pp=4, dp=2,
      sequence_parallel=True, recompute="selective", recompute_modules="mlp"),
    S("llama3-8b-sel-attn-mlp-fp8", "llama3-8b", "h100", 1, _T4K, tp=2, dp=4,
      precision="fp8", sequence_parallel=True, recompute="selective",
      recompute_modules="core_attn+mlp"),
    S("qwen3-30b-sel-moe-act", "qwen3-30b-a3b", "h100", 2, _T4K, dp=16, ep=8, zero_stage=1,
      recompute="selective", recompute_modules="layernorm+moe_act"),
    S("llama3-8b-mbs2-zero2-megatron", "llama3-8b", "h100", 2, _T4K, tp=1, dp=16,
      micro_batch_size=2, zero_stage=2),
    S("llama3-8b-noflash", "llama3-8b", "a100", 1, {**_T4K, "flash_attention": False},
      tp=4, dp=2),
    S("llama3-8b-dropout", "llama3-8b", "a100", 1, {**_T4K, "dropout": True}, tp=2, dp=4),
    # GPT (learned positions, LayerNorm, biases, tied embeddings)
    S("gpt-1.7b-dp", "gpt-1.7b", "a100", 1, dp=8),
    S("gpt-3.6b-tp2", "gpt-3.6b", "a100", 1, tp=2, dp=4, zero_stage=1),
    S("gpt-7.5b-pp2-tied", "gpt-7.5b", "a100", 2, tp=4, pp=2, dp=2, sequence_parallel=True),
    S("gpt-18b-int", "gpt-18b", "a100", 4, tp=8, pp=4, schedule="interleaved",
      virtual_stages=2, recompute="full"),
    S("gpt-39b-zero3", "gpt-39b", "a100", 4, tp=8, dp=4, zero_stage=3, recompute="full"),
    S("gpt3-175b", "gpt3-175b", "a100", 16, tp=8, pp=16, recompute="full"),
    S("gpt-76b-ds", "gpt-76b", "a100", 8, {"framework": "deepspeed"}, tp=8, pp=8,
      recompute="full"),
    # encoder
    S("bert-large-dp", "bert-large", "a100", 4, {"seq_length": 512}, dp=32),
    S("bert-large-tp2", "bert-large", "a100", 1, {"seq_length": 512}, tp=2, dp=4,
      zero_stage=1),
)


@cache
def bundles() -> tuple[tuple[Scenario, Any], ...]:
    """(scenario, EvaluateResult) for every scenario, through the public API."""
    from optimizer.api import evaluate

    return tuple((s, evaluate(s.run(), memory_fraction=1.0)) for s in SCENARIOS)


# Searches as a user runs them: every distinct front point's bundle is checked too.
FRONT_RUNS: dict[str, dict[str, Any]] = {
    "llama3-8b-16xh100": dict(model="llama3-8b", gpus=16, gpu="h100-sxm-80gb", seq_length=4096,
                              global_batch_size=256),
    "llama2-70b-64xa100-deepspeed": dict(model="llama2-70b", gpus=64, training={
        "framework": "deepspeed", "seq_length": 4096, "global_batch_size": 512}),
    "gpt-7.5b-32xa100-fsdp": dict(model="gpt-7.5b", gpus=32, training={"framework": "fsdp"}),
    "llama3-405b-1024xh100": dict(model="llama3-405b", gpus=1024, gpu="h100-sxm-80gb",
                                  seq_length=8192, global_batch_size=2048),
    "llama-13b-16xb200": dict(model="llama-13b", gpus=16, gpu="b200", seq_length=4096,
                              global_batch_size=512),
}


@dataclass(frozen=True)
class Case:
    """What a client test needs of a scored point: the problem and the candidate."""

    problem: Any
    candidate: Any


@cache
def fronts() -> dict[str, tuple[Case, ...]]:
    """Distinct Pareto-front points of each FRONT_RUNS search (optimizer.api.optimize)."""
    from optimizer.api import optimize

    out = {}
    for name, kw in FRONT_RUNS.items():
        r = optimize(trials=120, seed=0, **kw)
        seen, cases = set(), []
        for c in r.pareto_front:
            key = tuple(sorted(c.config.as_dict().items()))
            if key not in seen:
                seen.add(key)
                cases.append(Case(r.problem, c))
        out[name] = tuple(cases)
    return out


def run_all(cases, check) -> None:
    """Run ``check(case)`` on every case; fail once, listing every failing point."""
    failures = []
    for case in cases:
        try:
            check(case)
        except Exception as e:  # noqa: BLE001 - collect every failure, then report
            failures.append(f"{case.candidate.config.as_dict()}: {type(e).__name__}: {e}")
    assert not failures, f"{len(failures)} of {len(cases)} points fail:\n" + "\n".join(
        failures[:10])
