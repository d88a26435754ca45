"""The problems of the golden characterisation test: dense GPT and Llama models, A100 and
H100 (and V100/H200 for fp16/fp8 coverage), fp32/tf32/fp16/bf16/fp8, every schedule, ZeRO
0-3, uneven pipeline splits, all three frameworks, flash and unfused attention, dropout,
tp-comm-overlap, NCCL algorithm/protocol overrides."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

WIDE = {"zero_stage": [0, 1, 2, 3], "precision": ["bf16", "fp16", "fp32", "tf32", "fp8"],
        "recompute": ["none", "selective", "full"], "sequence_parallel": [False, True],
        "schedule": ["gpipe", "1f1b", "interleaved"], "virtual_stages": [1, 2, 3, 4],
        "nccl_algo": ["auto", "ring", "tree"], "nccl_proto": ["auto", "simple", "ll128"],
        # dimensions the default space gained after the fixture was made (partial recompute,
        # CP from 8k tokens, balanced stage plans in 0.6.x; recompute module sets in 0.7.0)
        # are pinned, so its configurations stay those it was made with
        "recompute_modules": ["core_attn"], "recompute_num_layers": [0], "cp": [1],
        "cp_comm_type": ["p2p"], "stage_plan": ["default"]}

# name -> (resolve_problem kwargs, space overrides, configurations kept)
PROBLEMS: dict[str, tuple[dict, dict, int]] = {
    "llama65b_a100_megatron": (dict(model="65b", gpus=16), WIDE, 2500),
    "llama2_70b_h100_fp8": (dict(model="llama2-70b", gpus=64, gpu="h100-sxm-80gb",
                                 seq_length=4096, global_batch_size=512), WIDE, 2500),
    "gpt3_175b_a100_uneven": (dict(model="gpt3-175b", gpus=96, global_batch_size=1536,
                                   training={"dropout": True}), WIDE, 2500),
    "gpt_7_5b_v100_deepspeed_unfused": (
        dict(model="gpt-7.5b", gpus=32, gpu="v100-sxm-32gb", seq_length=2048,
             global_batch_size=256,
             training={"framework": "deepspeed", "flash_attention": False, "dropout": True}),
        WIDE, 2000),
    "llama_13b_a100_fsdp": (dict(model="llama-13b", gpus=24, global_batch_size=480,
                                 training={"framework": "fsdp", "overlap_grad_reduce": False}),
                            WIDE, 2000),
    "llama3_8b_h100_tpoverlap": (dict(model="llama3-8b", gpus=8, gpu="h100-sxm-80gb",
                                      seq_length=8192, global_batch_size=64,
                                      training={"tp_comm_overlap": True}), WIDE, 1500),
    "bloom_like_gpt_39b_deepspeed_bf16": (
        dict(model="gpt-39b", gpus=48, global_batch_size=768,
             training={"framework": "deepspeed"}), WIDE, 2000),
}


def build_batch() -> Iterator[tuple[str, object, object, tuple]]:
    """(name, problem, batch, (algo table, proto table)) per problem, deterministic."""
    from optimizer.api import resolve_problem
    from optimizer.search import problem_space
    from search_spaces.enumerate import enumerate_valid
    from search_spaces.rules import Context

    for name, (kwargs, space, keep) in PROBLEMS.items():
        problem = resolve_problem(**kwargs)
        ctx = Context(problem.model, problem.cluster, problem.training)
        full = problem_space(problem, None).as_dict()
        mapping = {**{k: list(v) for k, v in full.items()}, **space}
        valid = enumerate_valid(ctx, problem_space(problem, mapping))
        rng = np.random.default_rng(20261201)
        idx = np.sort(rng.choice(len(valid), size=min(keep, len(valid)), replace=False))
        batch = valid.take(idx)
        yield name, problem, batch, (batch.nccl_algo_table, batch.nccl_proto_table)


def flatten_scores(scores) -> dict[str, np.ndarray]:
    """Every array of a ``Scores`` record, breakdown terms as ``field/term``."""
    from dataclasses import fields

    out: dict[str, np.ndarray] = {}
    for f in fields(scores):
        value = getattr(scores, f.name)
        if isinstance(value, dict):
            for k, v in value.items():
                out[f"{f.name}/{k}"] = np.asarray(v, dtype=float)
        else:
            out[f.name] = np.asarray(value, dtype=float)
    return out
