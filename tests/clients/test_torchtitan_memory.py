"""torchtitan 0.3's own activation-checkpoint policies on a Llama block (CPU, bf16): the bytes
a block keeps after its forward are what costmodel.memory predicts for torchtitan's op-level
SAC (``SelectiveAC``: wq, wv, w1, w2 outputs, SDPA output + logsumexp, the block's input) and
for full recompute (``FullAC``: the input only). torchtitan's own loss: the allocated peak of
its fp32 cross entropy per logit is the framework profile's."""

from __future__ import annotations

import gc
import warnings

import pytest
import realclients as rc

from costmodel.memory import layer_activation_bytes, op_sac_activation_bytes
from costmodel.specs import ModelSpec

H, HEADS, KV, FFN, SEQ, BATCH = 512, 8, 2, 1408, 256, 2


@pytest.fixture(scope="module")
def titan():
    torch = rc.require("torch")
    ac = rc.require("torchtitan.distributed.activation_checkpoint")
    return torch, ac


def _block(torch):
    """torchtitan's llama3 TransformerBlock (attention_norm, wq/wk/wv, causal SDPA with GQA,
    wo, ffn_norm, w2(silu(w1(x)) * w3(x))), rotary left out (element-wise: recomputed)."""
    nn, F = torch.nn, torch.nn.functional
    dt, d = torch.bfloat16, H // HEADS

    class Block(nn.Module):
        def __init__(self):
            super().__init__()

            def lin(i, o):
                return nn.Linear(i, o, bias=False, dtype=dt)

            self.wq, self.wk, self.wv = lin(H, HEADS * d), lin(H, KV * d), lin(H, KV * d)
            self.wo, self.w1, self.w2, self.w3 = lin(HEADS * d, H), lin(H, FFN), lin(FFN, H), \
                lin(H, FFN)
            self.attention_norm = nn.RMSNorm(H, eps=1e-5, dtype=dt)
            self.ffn_norm = nn.RMSNorm(H, eps=1e-5, dtype=dt)

        def attention(self, x):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, HEADS, d).transpose(1, 2)
            k = self.wk(x).view(b, s, KV, d).transpose(1, 2)
            v = self.wv(x).view(b, s, KV, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, HEADS * d))

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            n = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(n)) * self.w3(n))

    return Block()


def _kept_bytes(torch, module, params):
    """Bytes of the distinct storages alive after one forward, beside the parameters and the
    output (the block's input counted: the checkpoint keeps it); backward run after."""
    x = torch.randn(BATCH, SEQ, H, dtype=torch.bfloat16, requires_grad=True)
    y = module(x)
    skip = {p.untyped_storage().data_ptr() for p in params} | \
        {y.untyped_storage().data_ptr(), x.untyped_storage().data_ptr()}
    gc.collect()
    seen, total = set(), x.untyped_storage().nbytes()
    with warnings.catch_warnings():  # isinstance on deprecated torch objects warns
        warnings.simplefilter("ignore", FutureWarning)
        objects = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for o in objects:
        try:
            if isinstance(o, torch.nn.Parameter):
                continue
            ptr = o.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - a tensor subclass without storage
            continue
        if ptr and ptr not in seen and ptr not in skip:
            seen.add(ptr)
            total += o.untyped_storage().nbytes()
    y.float().sum().backward()
    return total


def _spec():
    return ModelSpec(name="tt-block", num_layers=1, hidden_size=H, num_attention_heads=HEADS,
                     ffn_hidden_size=FFN, vocab_size=32000, num_kv_heads=KV, gated_mlp=True)


def test_op_sac_keeps_what_the_cost_model_counts(titan):
    torch, ac = titan

    class CpuSelectiveAC(ac.SelectiveAC):
        # on CPU SDPA runs the CPU flash kernel: the stand-in for the CUDA flash op in the
        # default save list (get_save_ops is torchtitan's documented override)
        def get_save_ops(self):
            ops = super().get_save_ops()
            ops.add(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
            return ops

    torch.manual_seed(0)
    blk = _block(torch)
    sac = CpuSelectiveAC(ac.SelectiveAC.Config())._wrap_block(blk)
    measured = _kept_bytes(torch, sac, list(blk.parameters()))
    predicted = float(op_sac_activation_bytes(_spec(), SEQ, BATCH, 1, False))
    assert measured == pytest.approx(predicted, rel=0.01)
    # and the layer's stored activations under selective recompute read the same
    assert float(layer_activation_bytes(_spec(), SEQ, BATCH, 1, False, 1, flash_attention=True,
                                        dropout=False, op_sac=True)) == predicted


def test_full_ac_keeps_the_block_input(titan):
    torch, ac = titan
    torch.manual_seed(0)
    blk = _block(torch)
    full = ac.FullAC(ac.FullAC.Config())._wrap_block(blk)
    measured = _kept_bytes(torch, full, list(blk.parameters()))
    predicted = float(layer_activation_bytes(_spec(), SEQ, BATCH, 1, False, 2,
                                             flash_attention=True, dropout=False))
    assert measured == pytest.approx(predicted, rel=0.02)


def test_loss_peak_bytes_per_logit(titan):
    """torchtitan's cross_entropy_loss on 16-bit logits, freed before the backward as its
    train step does ("del pred"): the CPU allocations' peak over the step is
    FrameworkCosts.memory's logits_saved_bytes + logits_transient_bytes per logit (the fp32
    log-softmax output kept, the backward's two fp32 gradients)."""
    torch, _ = titan
    loss_mod = rc.require("torchtitan.components.loss")
    from torch.profiler import ProfilerActivity, profile

    from costmodel.calibration import FRAMEWORKS

    n, vocab, h = 2048, 8192, 64
    torch.manual_seed(0)
    w = torch.randn(vocab, h, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(1, n, h, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (1, n))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pred = x @ w.t()
        loss = loss_mod.cross_entropy_loss(pred, labels)
        del pred
        loss.backward()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    mem = FRAMEWORKS["torchtitan"].memory
    assert peak / (n * vocab) == pytest.approx(
        mem.logits_saved_bytes + mem.logits_transient_bytes, rel=0.01)


def _partial_full_ac(tmp_path, n):
    """The ``PartialFullAC`` class of the config module paraplan writes for partial full
    recompute (optimizer.launch.flags.torchtitan_config_source), imported from its source."""
    import importlib.util

    from costmodel.specs import ParallelConfig, TrainingSpec
    from optimizer.launch.flags import torchtitan_config_source

    spec = ModelSpec(name="tt-stack", num_layers=4, hidden_size=H, num_attention_heads=HEADS,
                     ffn_hidden_size=FFN, vocab_size=32000, num_kv_heads=KV, gated_mlp=True)
    config = ParallelConfig(tp=1, pp=1, dp=1, recompute="full", recompute_num_layers=n)
    path = tmp_path / "paraplan_torchtitan_partial.py"
    path.write_text(torchtitan_config_source(spec, TrainingSpec(SEQ, BATCH), config))
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    assert module.RECOMPUTE_NUM_LAYERS == n
    return module.PartialFullAC


def _stack(torch, layers=4):
    """``layers`` blocks in a ``layers`` ModuleDict, as torchtitan's decoder holds them."""
    nn = torch.nn

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleDict({str(i): _block(torch) for i in range(layers)})

        def forward(self, x):
            for block in self.layers.values():
                x = block(x)
            return x

    return Stack()


def test_partial_full_ac_keeps_what_the_cost_model_counts(titan, tmp_path):
    """4 blocks under the config module's PartialFullAC with N = 1..4 (N = 4: FullAC on every
    block): the first N blocks are checkpointed with FullAC's wrapper and keep their input
    only, the others every activation, so the bytes kept are linear in the recomputed layers
    costmodel.stages.recomputed_layers counts (one plain block's activations per block not
    recomputed), and at N = 4 what the cost model counts for full recompute."""
    import numpy as np

    from costmodel.stages import recomputed_layers

    torch, ac = titan
    kept = {}
    for n in range(1, 5):
        torch.manual_seed(0)
        stack = _stack(torch)
        params = list(stack.parameters())
        policy = _partial_full_ac(tmp_path, n)
        policy(policy.Config(num_layers=n)).apply(stack)
        wrapped = [k for k, b in stack.layers.items()
                   if type(b).__name__ == "CheckpointWrapper"]
        assert wrapped == [str(i) for i in range(n)]
        kept[float(recomputed_layers(np.float64(4), n, 1))] = _kept_bytes(torch, stack, params)
    assert sorted(kept) == [1.0, 2.0, 3.0, 4.0]
    full = float(layer_activation_bytes(_spec(), SEQ, BATCH, 1, False, 2,
                                        flash_attention=True, dropout=False))
    assert kept[4.0] == pytest.approx(4 * full, rel=0.02)
    plain_block = kept[3.0] - kept[4.0]  # a block's activations beside its kept input
    assert plain_block > 10 * full
    for r in (1.0, 2.0):
        assert kept[r] == pytest.approx(kept[4.0] + (4 - r) * plain_block, rel=1e-3)
