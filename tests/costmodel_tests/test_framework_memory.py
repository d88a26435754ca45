"""Framework memory mechanisms: torchtitan's op-level SAC, its fp32 loss and gathered FSDP2
root; Transformer Engine's fp8 weight copies per recipe and GPU, --fp8-param-gather."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.memory import layer_activation_bytes, op_sac_activation_bytes
from costmodel.model import run_phases
from costmodel.specs import ParallelConfig
from costmodel.stage_memory import fp8_weight_copy_bytes
from optimizer.api import resolve_problem

GIB = 2.0**30


@pytest.fixture(scope="module")
def llama8b():
    return resolve_problem(model="llama3-8b", gpus=8, gpu="h100-sxm-80gb", seq_length=8192,
                           global_batch_size=16, training={"framework": "torchtitan"})


def _phases(pr, training=None, **kw):
    return run_phases(pr.model, pr.cluster, training or pr.training,
                      ConfigBatch.from_configs([ParallelConfig(**kw)]))


# ---- torchtitan's op-level selective activation checkpointing -------------------------------
def test_op_sac_keeps_the_outputs_its_policy_saves(llama8b):
    m = llama8b.model
    h, gd, f, a = m.hidden_size, m.num_kv_heads * m.head_dim, m.ffn_hidden_size, \
        m.num_attention_heads
    s, b = 8192, 2
    # block input, wq, wv, SDPA output, w1, w2 in 16 bits and the fp32 logsumexp (t = 1):
    # for Llama 3 8B (4 * 4096 + 1024 + 14336) * 2 + 4 * 32 = 63616 bytes per token
    per_token = 2.0 * (h + h + gd + h + f + h) + 4.0 * a
    assert per_token == 63616.0
    assert float(op_sac_activation_bytes(m, s, b, 1, False)) == s * b * per_token
    kw = dict(flash_attention=True, dropout=False)
    sac = layer_activation_bytes(m, s, b, 1, False, 1, op_sac=True, **kw)
    assert float(sac) == s * b * per_token
    none = layer_activation_bytes(m, s, b, 1, False, 0, op_sac=True, **kw)
    full = layer_activation_bytes(m, s, b, 1, False, 2, op_sac=True, **kw)
    megatron = layer_activation_bytes(m, s, b, 1, False, 1, **kw)
    assert full < sac < none and sac < megatron
    # TP 8 with SP: the block input and the column-parallel outputs split by t; w2's saved
    # output is the row-parallel partial sum (whole) plus the reduce-scatter's share
    tp8 = float(op_sac_activation_bytes(m, s, b, 8, True))
    want = s * b * (2.0 * (h / 8 + (h + gd + h + f) / 8 + h + h / 8) + 4.0 * a / 8)
    assert tp8 == pytest.approx(want)


def test_torchtitan_selective_memory_is_op_sac_and_its_loss_upcasts(llama8b):
    ph = _phases(llama8b, tp=1, pp=1, dp=8, micro_batch_size=2, recompute="selective",
                 zero_stage=3)
    mem, m = ph.memory, llama8b.model
    tokens, V = 8192 * 2, m.vocab_size
    layer = float(op_sac_activation_bytes(m, 8192, 2, 1, False))
    bd = {k: float(x[0]) for k, x in mem.breakdown_bytes.items()}
    # 32 layers' SAC outputs plus one layer's recomputed rest during its backward
    full_layer = float(ph.layer.full_activation_bytes[0])
    assert bd["activations"] == pytest.approx(32 * layer + full_layer - layer)
    # log-softmax's fp32 output (4) kept, the backward's two fp32 gradients (4 + 4)
    assert bd["logits"] == pytest.approx(12.0 * tokens * V)
    # the freed 16-bit logits stay cached: reserved, not allocated
    cached = 2.0 * tokens * V
    assert float(mem.reserved_bytes[0] - mem.allocated_bytes[0]) >= cached
    # FSDP2's root unit (embedding, final norm, output layer) gathered in 16 bits; FSDP2
    # keeps no 16-bit shard of its own
    h = m.hidden_size
    assert bd["weights"] == pytest.approx(2.0 * (2 * V * h + h))


# ---- Transformer Engine's fp8 weight copies ---------------------------------------------------
@pytest.mark.parametrize("recipe,cc,nbytes", [
    ("delayed", 90, 2.0), ("tensorwise", 90, 2.0),  # Hopper: fp8 weight + fp8 transpose
    ("delayed", 100, 1.0), ("tensorwise", 103, 1.0),  # Blackwell reads either orientation
    ("mxfp8", 100, 2.0 * (1 + 1 / 32)),  # rowwise and columnwise, E8M0 per 32
    ("nvfp4", 100, 2.0 * (0.5 + 1 / 16)),  # E2M1 + E4M3 per 16, both orientations
    ("blockwise", 90, 2.0 * (1 + 4 / 128**2)),
])
def test_fp8_weight_copies_per_recipe_and_gpu(recipe, cc, nbytes):
    assert fp8_weight_copy_bytes(recipe, cc) == pytest.approx(nbytes)


def test_every_recipe_has_its_weight_copy_bytes():
    from costmodel.calibration import FP8_RECIPES
    from costmodel.stage_memory import FP8_COPY_BYTES

    assert set(FP8_COPY_BYTES) == set(FP8_RECIPES)


def _megatron(gpu, recipe, param_gather):
    pr = resolve_problem(model="llama3-8b", gpus=8, gpu=gpu, seq_length=8192,
                         global_batch_size=64, training={"fp8_recipe": recipe})
    tr = replace(pr.training, fp8_param_gather=param_gather)
    return pr, _phases(pr, tr, tp=1, pp=1, dp=8, micro_batch_size=1, recompute="none",
                       precision="fp8", zero_stage=1)


def test_fp8_copies_follow_the_recipe_and_param_gather_drops_the_16_bit_weights():
    pr, hopper = _megatron("h100-sxm-80gb", "tensorwise", False)
    _, blackwell = _megatron("b200", "tensorwise", False)
    _, mx = _megatron("b200", "mxfp8", False)
    _, gather = _megatron("h100-sxm-80gb", "tensorwise", True)
    layers_params = pr.model.num_layers * float(pr.model.params_per_layer)

    def weights(ph):
        return float(ph.memory.breakdown_bytes["weights"][0])

    assert weights(hopper) - weights(blackwell) == pytest.approx(1.0 * layers_params)
    assert weights(mx) - weights(blackwell) == pytest.approx((2.0625 - 1.0) * layers_params)
    # --fp8-param-gather: the layers' fp8 copy is the parameter, no 16-bit weights beside it
    assert weights(hopper) - weights(gather) == pytest.approx(2.0 * layers_params)
    assert np.all(gather.memory.peak_bytes < hopper.memory.peak_bytes)


def test_moe_expert_weights_have_their_fp8_copies():
    """Transformer Engine's grouped expert linears cache fp8 weights as its dense linears do:
    per-tensor fp8 on Hopper keeps one byte per parameter more than on Blackwell for the
    routed experts as well."""
    def weights(gpu):
        pr = resolve_problem(model="qwen3-30b-a3b", gpus=8, gpu=gpu, seq_length=4096,
                             global_batch_size=64, training={"fp8_recipe": "tensorwise"})
        ph = _phases(pr, tp=1, pp=1, dp=8, ep=8, micro_batch_size=1, recompute="full",
                     precision="fp8", zero_stage=1)
        return pr.model, float(ph.memory.breakdown_bytes["weights"][0])

    model, hopper = weights("h100-sxm-80gb")
    _, blackwell = weights("b200")
    from costmodel.moe import expert_param_split

    non_expert, expert = expert_param_split(model)
    per_gpu = model.num_layers * (non_expert + expert / 8)  # experts split over ep = 8
    assert hopper - blackwell == pytest.approx(per_gpu, rel=0.02)
