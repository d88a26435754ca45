"""Cost-model formulas against hand calculations from their papers."""

import numpy as np
import pytest

from costmodel.compute import model_flops_per_step, recompute_flops_per_step
from costmodel.memory import layer_activation_bytes, microbatches_in_flight, model_state_bytes
from costmodel.schedule import bubble_share, pipeline_span_s, stage_layers
from costmodel.specs import ModelSpec


def _layer_costs(model, training, eff, fw, cluster, batch):
    """The layer phase's costs (costmodel.layers.layer_costs) of every configuration."""
    from costmodel.groups import Collectives, nccl_system, resolve_groups
    from costmodel.layers import layer_costs

    groups = resolve_groups(cluster, batch.tp, batch.pp, batch.dp, model.tied_embeddings)
    comm = Collectives(nccl_system(cluster), batch, groups.layout)
    return layer_costs(model, training, eff, fw, cluster.gpu, comm, batch, groups.tp_nodes)


GPT3 = ModelSpec(name="gpt3", num_layers=96, hidden_size=12288, num_attention_heads=96,
                 ffn_hidden_size=4 * 12288, vocab_size=51200, tied_embeddings=True,
                 learned_position_embeddings=True, linear_bias=True, normalization="layernorm")


def test_model_flops_gpt3_korthikanti_eq7():
    # 72*B*s*L*h^2*(1 + s/(6h) + V/(12hL)), B=1536, s=2048 -> 3.386e18 (cost-model.md 2.2)
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    expected = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    got = model_flops_per_step(GPT3, s, B)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(3.386e18, rel=1e-3)


def test_full_recompute_flops_narayanan_eq3():
    # 96*B*s*L*h^2*(1 + s/(6h) + V/(16hL)) -> 4.511e18
    B, s = 1536, 2048
    hw = model_flops_per_step(GPT3, s, B) + recompute_flops_per_step(
        GPT3, s, B, np.array([2]), flash_attention=False)[0]
    assert hw == pytest.approx(4.511e18, rel=1e-3)
    sel = recompute_flops_per_step(GPT3, s, B, np.array([1]), flash_attention=False)[0]
    assert sel == pytest.approx(4 * B * s**2 * 12288 * 96, rel=1e-12)  # 4Bs^2h per layer


def test_mixed_precision_adam_is_16_bytes_and_zero_stages():
    # ZeRO paper Fig. 1: psi = 7.5e9, d = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    psi, d = 7.5e9, 64
    totals = [sum(model_state_bytes(psi, 2, 2, 12, z, d)) for z in range(4)]
    assert totals[0] == pytest.approx(16 * psi)
    assert [round(x / 1e9, 1) for x in totals] == [120.0, 31.4, 16.6, 1.9]
    # Megatron's accounting (fp32 main grads): 18 bytes, 6 + 12/d with distributed optimizer
    assert sum(model_state_bytes(1.0, 2, 4, 12, 0, 8)) == pytest.approx(18)
    assert sum(model_state_bytes(1.0, 2, 4, 12, 1, 8)) == pytest.approx(6 + 12 / 8)


@pytest.mark.parametrize("tp,sp,rc,expected_mb", [
    (1, False, 0, 2869.0),   # sbh(34 + 5as/h) = 2.869 GB
    (8, True, 0, 358.6),     # sbh(34/t + 5as/(ht))
    (8, True, 1, 107.0),     # selective: sbh*34/t
    (1, False, 2, 50.3),     # full recompute: 2sbh
])
def test_korthikanti_activation_table(tp, sp, rc, expected_mb):
    got = layer_activation_bytes(GPT3, 2048, 1, tp, sp, rc, flash_attention=False,
                                 dropout=True)
    assert float(got) / 1e6 == pytest.approx(expected_mb, rel=2e-3)


def test_plain_tp_activation_keeps_10sbh_unsplit():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    got = layer_activation_bytes(GPT3, s, b, t, False, 0, flash_attention=False, dropout=True)
    assert float(got) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))


def test_bubble_share_article_case():
    # LLaMA-65B, PP=4: m=4 -> 3/7 = 42.9%; m=8 -> 3/11 = 27.3%; interleaved v=2, m=4 -> 3/11
    assert bubble_share(4, 4) == pytest.approx(3 / 7)
    assert bubble_share(4, 8) == pytest.approx(3 / 11)
    assert bubble_share(4, 4, 2) == pytest.approx(3 / 11)
    assert bubble_share(1, 8) == 0


def test_pipeline_span_equal_stages_matches_closed_form():
    T, p, m = 0.25, 4, 8
    span, steady, bubble = pipeline_span_s(T, T, T, p, m, 1, 1)
    assert span == pytest.approx((m + p - 1) * T)
    assert bubble / span == pytest.approx(bubble_share(p, m))
    span_i, _, bub_i = pipeline_span_s(T, T, T, p, m, 2, 2)
    assert bub_i == pytest.approx((p - 1) * T / 2)
    # a heavier last stage sets the steady state (flow-shop approximation)
    span_u, steady_u, _ = pipeline_span_s(T, T, 1.2 * T, p, m, 1, 1)
    assert steady_u == pytest.approx(m * 1.2 * T)
    assert span_u == pytest.approx(3 * T + 1.2 * T + (m - 1) * 1.2 * T)


def test_microbatches_in_flight():
    assert microbatches_in_flight(0, 4, 16, 1) == 16      # GPipe keeps all m
    assert microbatches_in_flight(1, 4, 16, 1) == 4       # 1F1B first stage keeps p
    assert microbatches_in_flight(1, 4, 16, 1, 3) == 1    # last stage keeps 1
    assert microbatches_in_flight(1, 4, 2, 1) == 2        # fewer micro-batches than stages
    assert microbatches_in_flight(2, 4, 16, 2) == pytest.approx(4 * (1 + 3 / 8))
    # interleaved, per stage: Megatron's 2(p - i - 1) + (v - 1)p warm-up chunks + 1, over v
    assert microbatches_in_flight(2, 4, 16, 2, 1) == pytest.approx((2 * 2 + 4 + 1) / 2)
    assert microbatches_in_flight(2, 4, 16, 2, 3) == pytest.approx((4 + 1) / 2)
    assert microbatches_in_flight(2, 8, 16, 4, 7) == pytest.approx((3 * 8 + 1) / 4)
    assert microbatches_in_flight(2, 4, 4, 2) == pytest.approx(4)  # capped at m v chunks


def test_parameter_counts():
    # Narayanan eq. 2 for GPT-3: 174.6B with s = 2048 learned positions
    assert GPT3.total_params(2048) / 1e9 == pytest.approx(174.6, abs=0.1)


# ---- GEMM alignment and uneven pipeline partitions ----------------------------------------
def _score_one(model: ModelSpec, par, gpus: int, seq: int = 2048, gbs: int = 256, *,
               framework: str = "megatron", flash: bool = False, gpu: str | None = None,
               **training_kw):
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import TrainingSpec

    training = TrainingSpec(seq_length=seq, global_batch_size=gbs, flash_attention=flash,
                            framework=framework, **training_kw)
    cluster = default_cluster(gpus) if gpu is None else default_cluster(gpus, gpu=gpu)
    return score(model, cluster, training, ConfigBatch.from_configs([par]))


def _bloom_like(layers: int, heads: int, hidden: int = 13824) -> ModelSpec:
    return ModelSpec(name=f"h{hidden}a{heads}L{layers}", num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, ffn_hidden_size=4 * hidden, vocab_size=250880)


def test_tensor_core_alignment_is_16_bytes():
    from costmodel.compute import aligned_16_bytes

    assert aligned_16_bytes(np.array([112, 128, 144, 108, 150, 100]), 2.0).tolist() == [
        True, True, True, False, False, False]
    assert aligned_16_bytes(np.array([112, 104, 108]), 1.0).tolist() == [True, False, False]


def test_misaligned_head_dim_runs_attention_gemms_off_tensor_cores():
    # BLOOM's sweep: hidden 13824 with 128 heads (head dim 108 = 216 bytes) measured 156.8 s
    # against 118.1 s with 96 heads (head dim 144) at the same layout (published_runs.yaml
    # bloom_prequel_072 / _071). Only the attention GEMMs change; the linears are aligned.
    from costmodel.specs import ParallelConfig

    par = ParallelConfig(tp=8, pp=1, dp=1, micro_batch_size=4, precision="fp16",
                         recompute="full")
    slow = _score_one(_bloom_like(4, 128), par, 8)
    fast = _score_one(_bloom_like(4, 96), par, 8)
    ratio = slow.step_time_s[0] / fast.step_time_s[0]
    assert 1.15 < ratio < 1.6
    assert slow.peak_memory_bytes[0] == pytest.approx(fast.peak_memory_bytes[0], rel=0.02)


def test_uneven_split_puts_the_remainder_on_the_first_and_last_stage():
    # 78 layers over 12 stages: the ten middle stages hold ceil(78/12) = 7 layers, the first
    # and the last (which also carry the embedding and the LM head) share the other 8
    # (Megatron-Core --decoder-first/last-pipeline-num-layers 4/4; BLOOM's
    # type:transformer|embedding partition). The pipeline paces at a 7-layer middle stage,
    # not at 7 layers plus the LM head as an even ceil(L/p) split on every stage would.
    from costmodel.specs import ParallelConfig

    first, mid, last, ok = stage_layers(78, 12)
    assert (first, mid, last, bool(ok)) == (4, 7, 4, True)
    par = ParallelConfig(tp=8, pp=12, dp=1, micro_batch_size=1, precision="bf16",
                         recompute="full")
    s78, s84 = (_score_one(_bloom_like(n, 96), par, 96, gbs=96) for n in (78, 84))
    assert s78.peak_memory_bytes[0] < s84.peak_memory_bytes[0]
    assert s78.step_time_s[0] < s84.step_time_s[0]


@pytest.mark.parametrize("layers, pp, expected", [
    (126, 16, (7, 8, 7, True)),   # Llama 3 405B (Dubey et al. 2024, 3.3.2)
    (80, 4, (20, 20, 20, True)),  # even: Megatron's default split
    (80, 3, (27, 27, 26, True)),  # pp = 3: the last stage takes the smaller share
    (7, 2, (4, 4, 3, True)),      # pp = 2: the first stage takes ceil(L/2)
    (9, 4, (2, 3, 1, True)),
    (5, 4, (2, 2, 2, False)),     # the first and last stages cannot both get a layer
    (3, 4, (1, 1, 1, False)),     # more stages than layers
])
def test_stage_layers(layers, pp, expected) -> None:
    first, mid, last, ok = stage_layers(layers, pp)
    assert (float(first), float(mid), float(last), bool(ok)) == expected
    if ok and pp > 1:
        assert first + (pp - 2) * mid + last == layers
        assert max(first, last) <= mid


def test_tp_comm_overlap_hides_sequence_parallel_collectives_only():
    # Megatron-Core --tp-comm-overlap pipelines the SP all-gather / reduce-scatter with the
    # GEMMs next to them; without SP there is nothing to overlap and nothing changes.
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = _bloom_like(8, 64, hidden=8192)
    cluster = default_cluster(8, gpu="h100-sxm-80gb")
    pars = [ParallelConfig(tp=8, micro_batch_size=1, sequence_parallel=sp, recompute="selective")
            for sp in (True, False)]
    plain, over = (score(model, cluster, TrainingSpec(seq_length=4096, global_batch_size=8,
                                                      tp_comm_overlap=o),
                         ConfigBatch.from_configs(pars)) for o in (False, True))
    tp_plain, tp_over = plain.time_breakdown_s["tp_comm"], over.time_breakdown_s["tp_comm"]
    assert tp_over[0] < 0.6 * tp_plain[0]  # SP: at most the un-hidden share remains
    assert tp_over[0] > 0.0
    assert tp_over[1] == tp_plain[1]  # no SP: unchanged
    assert over.step_time_s[0] < plain.step_time_s[0]
    assert over.peak_memory_bytes[0] == plain.peak_memory_bytes[0]


def test_tp_comm_overlap_is_megatron_or_torchtitan_only():
    from costmodel.errors import InputError
    from costmodel.specs import TrainingSpec

    for framework in ("deepspeed", "fsdp"):
        with pytest.raises(InputError) as e:
            TrainingSpec(framework=framework, tp_comm_overlap=True)
        assert e.value.field == "training.tp_comm_overlap"
    # torchtitan's async TP (compile.enable_async_tensor_parallel), which needs compile
    assert TrainingSpec(framework="torchtitan", tp_comm_overlap=True).tp_comm_overlap
    with pytest.raises(InputError):
        TrainingSpec(framework="torchtitan", tp_comm_overlap=True, torch_compile=False)


@pytest.mark.parametrize("tp, gpus", [(2, 8), (8, 8), (16, 32), (32, 64)])
def test_tp_comm_overlap_never_costs_more(tp, gpus):
    # small hidden sizes make communication dominate; overlap must not make a step slower
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="small", num_layers=4, hidden_size=1024, num_attention_heads=32,
                      ffn_hidden_size=4096, vocab_size=32000)
    cluster = default_cluster(gpus, gpu="h100-sxm-80gb")
    par = ParallelConfig(tp=tp, dp=gpus // tp, micro_batch_size=1, sequence_parallel=True,
                         recompute="full")
    steps = [score(model, cluster, TrainingSpec(seq_length=2048, global_batch_size=gpus // tp,
                                                 tp_comm_overlap=o),
                   ConfigBatch.from_configs([par])).step_time_s[0] for o in (False, True)]
    assert steps[1] <= steps[0]


def test_fp8_keeps_the_attention_core_in_16_bit():
    # Unfused attention with head dimension 72: in 16-bit it is 144 bytes (aligned); counting
    # it as 1-byte fp8 operands would flag it misaligned and make fp8 slower than bf16.
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="hd72", num_layers=4, hidden_size=4608, num_attention_heads=64,
                      ffn_hidden_size=4 * 4608, vocab_size=32000)
    training = TrainingSpec(seq_length=4096, global_batch_size=8, flash_attention=False)
    cluster = default_cluster(8, gpu="h100-sxm-80gb")
    pars = [ParallelConfig(tp=1, dp=8, micro_batch_size=1, precision=p) for p in ("bf16", "fp8")]
    bf16, fp8 = score(model, cluster, training, ConfigBatch.from_configs(pars)).step_time_s
    assert fp8 < bf16


def test_tile_efficiency_takes_the_best_tile_with_tile_and_wave_quantisation():
    from costmodel.compute import tile_efficiency

    def te(m, n):
        return float(tile_efficiency(m, n, sm_count=108, small_tile=0.85))

    # 108 tiles of 256 x 128: one full wave on an A100
    assert te(256 * 108, 128) == pytest.approx(1.0)
    # one 256 x 128 tile keeps 1 of 108 SMs busy; two 128 x 128 tiles keep 2, at 0.85 each
    assert te(256, 128) == pytest.approx(0.85 * 2 / 108)
    # a 64-wide output fills half of every tile (tile quantisation): the large tile's 0.5
    # beats 128 x 128's 0.85 x 0.5
    assert te(256 * 108, 64) == pytest.approx(0.5)
    # one large tile more than a wave costs a second wave (109 / 216 = 0.50); 218 small tiles
    # take three waves of 108 but waste less: 0.85 x 218 / 324 = 0.57, which is taken
    assert te(256 * 109, 128) == pytest.approx(0.85 * 218 / 324)
    assert te(256 * 109, 128) > 109 / 216
    # vectorised: broadcasts like the rest of the cost model
    assert np.asarray(tile_efficiency(np.array([256 * 108, 256]), 128, sm_count=108,
                                      small_tile=0.85)).shape == (2,)


def test_soft_max_joins_overlapped_times():
    from costmodel.compute import soft_max

    assert float(soft_max(3.0, 0.0, 7.0)) == 3.0  # nothing to overlap
    assert float(soft_max(2.0, 2.0, 7.0)) == pytest.approx(2.0 * 2 ** (1 / 7))  # crossover
    assert float(soft_max(10.0, 1.0, 7.0)) == pytest.approx(10.0, rel=1e-7)  # far from it
    assert float(soft_max(2.0, 1.0, np.inf)) == 2.0  # p = inf: the plain maximum
    out = soft_max(np.array([np.inf, 1e-3, 0.0]), np.array([1e-3, 1e-3, 0.0]), 7.0)
    assert out[0] == np.inf and np.isfinite(out[1]) and out[2] == 0.0  # no NaN, no overflow
    assert float(soft_max(1e-300, 1e-300, 7.0)) == pytest.approx(1e-300 * 2 ** (1 / 7))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid-value warning from inf / inf either
        assert float(soft_max(np.inf, np.inf, 7.0)) == np.inf


def test_alignment_factor_only_on_tensor_cores():
    from costmodel.calibration import efficiency_for
    from costmodel.compute import gemm_time_s

    eff = efficiency_for(80)
    kw = dict(peak_flops_per_s=19.5e12, mem_bandwidth_bytes_per_s=2.0e12, elem_bytes=4.0,
              eff=eff, sm_count=108)
    odd = gemm_time_s(8192, 8192, 1002, tensor_cores=False, **kw)  # 4008 B: not 16-aligned
    even = gemm_time_s(8192, 8192, 1000, tensor_cores=False, **kw)
    # time ~ flops / (k / (k + k_half)) ~ k + k_half: no alignment factor on CUDA cores
    assert odd / even == pytest.approx((1002 + 128) / (1000 + 128), rel=1e-6)
    slow = gemm_time_s(8192, 8192, 1002, tensor_cores=True, **kw)
    assert slow / odd == pytest.approx(1 / eff.gemm_misaligned, rel=1e-3)  # + launch cost


def test_flash_attention_pads_head_dim_to_steps_of_32():
    # Attention-dominated layer (s = 32k, tiny FFN): head dim 80 runs in the 96-wide kernel,
    # so it costs nearly what 96 costs instead of 80/96 of it.
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    par = ParallelConfig(tp=1, dp=8, micro_batch_size=1)
    cluster = default_cluster(8, gpu="h100-sxm-80gb")
    training = TrainingSpec(seq_length=32768, global_batch_size=8)

    def step(hd):
        model = ModelSpec(name=f"hd{hd}", num_layers=1, hidden_size=32 * hd,
                          num_attention_heads=32, ffn_hidden_size=64, vocab_size=1024)
        return score(model, cluster, training, ConfigBatch.from_configs([par])).step_time_s[0]

    assert step(80) / step(96) > 0.92  # unpadded it would be ~0.84
    assert step(96) / step(128) < 0.80  # 96 and 128 are kernel sizes: no padding


def test_unfused_softmax_reads_half_the_scores_when_causal():
    # Megatron's fused causal softmax reads only the unmasked lower triangle of the scores and
    # writes all of them; its backward reads output and gradient the same way: a causal mask
    # saves half a pass forward and one pass backward over b x heads/t x s x s 16-bit scores
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.hardware import default_cluster
    from costmodel.specs import ParallelConfig, TrainingSpec

    cluster = default_cluster(8)
    eff = efficiency_for(cluster.gpu.compute_capability)
    s, a, b = 2048, 16, 2
    par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=b, precision="bf16",
                         recompute="none")
    batch = ConfigBatch.from_configs([par])

    def terms(causal, dropout):
        model = ModelSpec(name="m", num_layers=2, hidden_size=1024, num_attention_heads=a,
                          ffn_hidden_size=4096, vocab_size=51200, causal=causal)
        training = TrainingSpec(seq_length=s, global_batch_size=16, flash_attention=False,
                                dropout=dropout)
        t = _layer_costs(model, training, eff, FRAMEWORKS["megatron"], cluster, batch)
        return float(t.forward_s[0]), float(t.backward_s[0])

    bw = eff.memory * cluster.gpu.memory_bandwidth_bytes_per_s
    scores_pass_s = b * a * s * s * 2.0 / bw
    for dropout in (False, True):
        (cf, cb), (nf, nb) = terms(True, dropout), terms(False, dropout)
        assert nf - cf == pytest.approx(0.5 * scores_pass_s, rel=1e-6)
        assert nb - cb == pytest.approx(1.0 * scores_pass_s, rel=1e-6)
    # attention dropout: 2.5 passes and one kernel each way; hidden dropout adds its mask
    # write (b s h 16-bit elements' worth) to the element-wise traffic, twice in the backward
    (df, db), (of, ob) = terms(True, True), terms(True, False)
    mask_s = b * s * 1024 * 2.0 / bw
    assert df - of == pytest.approx(2.5 * scores_pass_s + eff.kernel_overhead_s + mask_s,
                                    rel=1e-6)
    assert db - ob == pytest.approx(2.5 * scores_pass_s + eff.kernel_overhead_s + 2 * mask_s,
                                    rel=1e-6)


@pytest.mark.parametrize("attn_batches, s, causal, expected", [
    (4, 2048, True, True), (8, 2048, True, True), (2, 2048, True, False),  # b x a/t % 4
    (6, 2048, True, False), (6, 2048, False, False),
    (4, 2050, True, False),   # s not a multiple of 4
    (4, 16, True, False), (4, 32768, True, False),  # outside 16 < s <= 16384
    (4, 128, True, False), (8, 128, True, True),  # s <= 128: 2 rows per warp, 8 per block
    (4, 128, False, True), (4, 100, False, False),  # a padding mask needs s % 8 here
])
def test_fused_softmax_kernel_conditions(attn_batches, s, causal, expected):
    # Megatron's FusedScaleMaskSoftmax.is_kernel_available for a causal mask
    from costmodel.compute import fused_softmax_available

    assert bool(fused_softmax_available(np.array([attn_batches]), s, causal=causal)[0]) \
        is expected


@pytest.mark.parametrize(("framework", "dropout", "fwd", "bwd", "kernels", "saved"), [
    # Megatron-LM today: no query-key layer scaling, so a 16-bit mask fill + softmax
    ("megatron", False, 8.0, 10.0, 2, 0.0),
    # Megatron-DeepSpeed: fp32 (casts, scale, mask fill, softmax, cast back) and the fp32
    # probabilities kept, beside the 16-bit copy the context GEMM keeps (4 bytes) or, with
    # dropout, in place of it (2 bytes: dropout keeps only its mask and output)
    ("deepspeed", False, 36.0, 40.0, 5, 4.0),
    ("deepspeed", True, 36.0, 40.0, 5, 2.0),
])
def test_softmax_fallback_costs(framework, dropout, fwd, bwd, kernels, saved):
    # tp 8 with 16 heads and micro-batch 1 leaves 2 attention batches per rank: Megatron falls
    # back to the PyTorch softmax (fwd + bwd bytes per score instead of the fused causal
    # kernel's 3 + 4, in more kernels); micro-batch 2 (4 batches) takes the kernel
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.hardware import default_cluster
    from costmodel.memory import layer_activation_bytes
    from costmodel.specs import ParallelConfig, TrainingSpec

    cluster = default_cluster(8)
    eff = efficiency_for(cluster.gpu.compute_capability)
    s, a, h = 2048, 16, 2048
    model = ModelSpec(name="m", num_layers=2, hidden_size=h, num_attention_heads=a,
                      ffn_hidden_size=4 * h, vocab_size=51200)
    training = TrainingSpec(seq_length=s, global_batch_size=8, flash_attention=False,
                            dropout=dropout)
    pars = [ParallelConfig(tp=8, pp=1, dp=1, micro_batch_size=b, precision="fp16",
                           recompute="none") for b in (1, 2)]
    batch = ConfigBatch.from_configs(pars)

    def terms(fw):
        return _layer_costs(model, training, eff, fw, cluster, batch)

    mine, fsdp = terms(FRAMEWORKS[framework]), terms(FRAMEWORKS["fsdp"])
    bw = eff.memory * cluster.gpu.memory_bandwidth_bytes_per_s
    scores = 1 * a / 8 * s * s  # micro-batch 1
    extra_f = (fwd - 3.0) * scores / bw + (kernels - 1) * eff.kernel_overhead_s
    extra_b = (bwd - 4.0) * scores / bw + (kernels - 1) * eff.kernel_overhead_s
    # FSDP does not run Megatron's kernel; the frameworks' element-wise traffic differs in
    # proportion to the micro-batch, so the micro-batch-2 difference (no fallback) removes it
    for key, extra in (("forward_s", extra_f), ("backward_s", extra_b)):
        d1 = float(getattr(mine, key)[0] - getattr(fsdp, key)[0])
        d2 = float(getattr(mine, key)[1] - getattr(fsdp, key)[1])
        assert d1 - d2 / 2.0 == pytest.approx(extra, rel=1e-6), key
    act = mine.activation_bytes
    plain = layer_activation_bytes(model, s, np.array([1.0, 2.0]), np.array([8.0, 8.0]),
                                   False, np.array([0, 0]), flash_attention=False,
                                   dropout=dropout)
    assert float(act[0] - plain[0]) == pytest.approx(saved * scores, abs=1.0)
    assert float(act[1]) == pytest.approx(float(plain[1]), rel=1e-12)


def test_softmax_fallback_needs_the_unfused_16_bit_softmax():
    # flash attention, fp32 training and FSDP never take Megatron's PyTorch fallback
    from costmodel.calibration import FRAMEWORKS
    from costmodel.model import softmax_falls_back
    from costmodel.specs import PRECISIONS, TrainingSpec

    model = ModelSpec(name="m", num_layers=2, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=51200)
    batches = np.array([2.0, 4.0])
    fp16, fp32 = PRECISIONS.index("fp16"), PRECISIONS.index("fp32")

    def falls(fw, flash, prec):
        training = TrainingSpec(seq_length=2048, global_batch_size=8, flash_attention=flash)
        return softmax_falls_back(FRAMEWORKS[fw], model, training, np.array([prec, prec]),
                                  batches).tolist()

    assert falls("megatron", False, fp16) == [True, False]
    assert falls("deepspeed", False, fp16) == [True, False]
    assert falls("megatron", True, fp16) == [False, False]
    assert falls("megatron", False, fp32) == [False, False]
    assert falls("fsdp", False, fp16) == [False, False]


def test_rules_reject_uneven_ffn_and_unaligned_fp8():
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.specs import ParallelConfig, TrainingSpec
    from search_spaces.rules import FP8_ALIGNMENT, TP_DIVIDES_FFN, Context

    model = ModelSpec(name="ffn11008", num_layers=32, hidden_size=4096,
                      num_attention_heads=32, ffn_hidden_size=11008, vocab_size=32000,
                      gated_mlp=True)
    ctx = Context(model, default_cluster(32, gpu="h100-sxm-80gb"),
                  TrainingSpec(seq_length=2048, global_batch_size=64))
    rows = [ParallelConfig(tp=t, dp=32 // t, precision=p)
            for t, p in ((8, "bf16"), (32, "bf16"), (8, "fp8"), (32, "fp8"))]
    b = ConfigBatch.from_configs(rows)
    # 11008 / 8 = 1376 = 16 x 86; 11008 / 32 = 344 = 8 x 43
    assert TP_DIVIDES_FFN(ctx, b).tolist() == [True, True, True, True]
    assert FP8_ALIGNMENT(ctx, b).tolist() == [True, True, True, False]


def _deepspeed_change_s(par, *, tied: bool = False, **changes):
    """Step time of a two-layer, vocabulary-50000 model on one A100 (8 sequences of 1024,
    micro-batch 2: m = 4) under DeepSpeed's costs, minus the same with ``changes`` made to
    them; and (m, V, parameters of the two layers, the memory-op bandwidth, kernel overhead).
    """

    from costmodel import calibration as C
    from costmodel.batch import ConfigBatch
    from costmodel.compute import padded_vocab
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import TrainingSpec

    model = ModelSpec(name="m", num_layers=2, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=50000, tied_embeddings=tied)
    cluster = default_cluster(1)
    training = TrainingSpec(seq_length=1024, global_batch_size=8, framework="deepspeed",
                            flash_attention=False)
    batch = ConfigBatch.from_configs([par])
    before = score(model, cluster, training, batch).step_time_s[0]
    after = score(model, cluster, training, batch,
                  framework=C.FRAMEWORKS["deepspeed"].with_(**changes)).step_time_s[0]
    eff = C.efficiency_for(80)
    bw = eff.memory * cluster.gpu.memory_bandwidth_bytes_per_s
    consts = (8 / par.micro_batch_size, float(padded_vocab(50000, 1)),
              2 * model.params_per_layer, bw, eff.kernel_overhead_s)
    return before - after, consts


def test_deepspeed_gradient_accumulation_traffic():
    # Megatron-DeepSpeed accumulates each micro-batch's gradient outside the GEMMs: 6 bytes per
    # local parameter per micro-batch (fp16), plus the word embedding's zero-filled gradient.
    from costmodel.specs import ParallelConfig

    delta, (m, V, layers, bw, k) = _deepspeed_change_s(
        ParallelConfig(micro_batch_size=2, precision="fp16"), grad_accum_bytes=0.0)
    # accumulation on every micro-batch but the first (the first hands its gradient over),
    # one kernel per layer, embedding and output layer; the embedding's zero-fill every time
    accum = (6.0 * layers + 6.0 * V * 2048 + 6.0 * V * 2048) / bw
    zero = 2.0 * V * 2048 / bw
    expected = (m - 1) * (accum + 4 * k) + m * (zero + k)
    assert delta == pytest.approx(expected, rel=1e-6)


def test_bf16_optimizer_updates_fp32_gradients_every_micro_batch():
    # DeepSpeed BF16_Optimizer (0.6.3 update_hp_grads): after every micro-batch's backward
    # each bf16 gradient is cast to fp32 and added into the fp32 buffer, 18 bytes per local
    # parameter and two kernels per layer, on every micro-batch (the bf16 gradients are
    # cleared before each backward, so autograd accumulates nothing). Without it (the ZeRO
    # optimizer's path) AccumulateGrad's 6 bytes on every micro-batch but the first.
    from costmodel.specs import ParallelConfig

    par = ParallelConfig(micro_batch_size=2, precision="bf16", zero_stage=1)
    delta, (m, V, layers, bw, k) = _deepspeed_change_s(par, bf16_fp32_grads=False)
    params = layers + 2 * V * 2048  # two layers, embedding, output layer
    hp = m * (18.0 * params / bw + 4 * 2 * k)
    accum = (m - 1) * (6.0 * params / bw + 4 * k)
    assert delta == pytest.approx(hp - accum, rel=1e-6)


@pytest.mark.parametrize("zero", [1, 2])
def test_bf16_optimizer_update_with_tied_embeddings_and_zero(zero):
    # pp = 1 with tied embeddings: one parameter for the embedding and the output layer, one
    # fp32 update; autograd adds the output layer's gradient into the embedding's within
    # every backward (6 bytes), with or without BF16_Optimizer. At ZeRO 2 DeepSpeed runs its
    # ZeRO optimizer for bf16 too: no BF16_Optimizer update, whatever the framework flag.
    from costmodel.specs import ParallelConfig

    par = ParallelConfig(micro_batch_size=2, precision="bf16", zero_stage=zero)
    delta, (m, V, layers, bw, k) = _deepspeed_change_s(par, tied=True,
                                                       bf16_fp32_grads=False)
    if zero == 2:
        assert delta == 0.0
        return
    params = layers + V * 2048  # the tied matrix once
    hp = m * (18.0 * params / bw + 3 * 2 * k)
    accum = (m - 1) * (6.0 * params / bw + 3 * k)
    assert delta == pytest.approx(hp - accum, rel=1e-6)


def test_deepspeed_reduces_gradients_in_the_training_dtype():
    # DeepSpeed all-reduces 16-bit gradients (communication_data_type defaults to the model
    # dtype); Megatron-LM reduces its fp32 main_grad: twice the bytes on the wire.
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=50000)
    cluster = default_cluster(32)
    # fp16 for DeepSpeed (FP16_Optimizer: one all-reduce; its bf16 optimizer also gathers),
    # bf16 for Megatron (fp32 main_grad on the wire): the same elements, half the bytes
    total = {fw: score(model, cluster, TrainingSpec(seq_length=2048, global_batch_size=64,
                                                    framework=fw),
                       ConfigBatch.from_configs([ParallelConfig(tp=2, dp=16, precision=prec)])
                       ).dp_comm_total_s[0]
             for fw, prec in (("megatron", "bf16"), ("deepspeed", "fp16"))}
    assert total["deepspeed"] < 0.6 * total["megatron"]


def test_deepspeed_middle_stages_pay_serial_transfers():
    # DeepSpeed's pipeline engine sends and receives one transfer after another: a middle
    # stage pays four per micro-batch where Megatron's batched send/recv pairs pay two. The
    # fill and drain pass through the p - 2 middle stages, so the step grows by at least
    # (p - 2) extra transfer pairs.

    from costmodel import calibration as C
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=50000)
    cluster = default_cluster(32)
    training = TrainingSpec(seq_length=2048, global_batch_size=32, framework="deepspeed")
    # tp 1: no TP re-gather after a receive, so pp_comm is the transfers alone
    batch = ConfigBatch.from_configs([ParallelConfig(tp=1, pp=4, dp=8, precision="bf16")])
    serial = score(model, cluster, training, batch)
    paired = score(model, cluster, training, batch,
                   framework=C.FRAMEWORKS["deepspeed"].with_(serial_p2p=False))
    pair = paired.time_breakdown_s["pp_comm"][0] / paired.microbatches[0]  # 2 transfers
    extra = serial.step_time_s[0] - paired.step_time_s[0]
    assert extra >= (4 - 2) * pair * (1 - 1e-9)


def test_megatron_hides_the_backward_tp_collectives_behind_weight_gradients():
    # Megatron-LM all-reduces the QKV / FC1 input gradient while their weight-gradient GEMM
    # runs: of the 4 all-reduces per layer (no recompute), 2 stay whole and 2 cost only the
    # share overlap does not hide, as long as each is shorter than its GEMM (large hidden,
    # tp 2). Without the overlap (Megatron-DeepSpeed's fork) all 4 are whole.

    from costmodel import calibration as C
    from costmodel import collectives as coll
    from costmodel.batch import ConfigBatch
    from costmodel.groups import nccl_system as _system
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="m", num_layers=4, hidden_size=12288, num_attention_heads=96,
                      ffn_hidden_size=49152, vocab_size=51200)
    cluster = default_cluster(8)
    training = TrainingSpec(seq_length=2048, global_batch_size=8)
    par = ParallelConfig(tp=2, pp=1, dp=4, micro_batch_size=1, precision="bf16",
                         recompute="none", sequence_parallel=False)
    batch = ConfigBatch.from_configs([par])
    ar = float(np.asarray(coll.collective_time_s(_system(cluster), "allreduce",
                                                 2048 * 12288 * 2.0, 2, 1).time_s))
    per_layer = lambda sc: sc.time_breakdown_s["tp_comm"][0] / sc.microbatches[0] / 4  # noqa: E731
    hidden = C.efficiency_for(cluster.gpu.compute_capability).overlap_hidden
    overlapped = score(model, cluster, training, batch)
    assert per_layer(overlapped) == pytest.approx(ar * (2 + 2 * (1 - hidden)), rel=1e-6)
    blocking = score(model, cluster, training, batch,
                     framework=C.FRAMEWORKS["megatron"].with_(async_tp_grad=False))
    assert per_layer(blocking) == pytest.approx(4 * ar, rel=1e-6)


def _pp_comm_per_microbatch(model, framework, sp, v=1, tp=8):
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    sched = {"schedule": "interleaved", "virtual_stages": v} if v > 1 else {}
    # 32 GPUs: with pp 4 each stage is one node, so the transfers cross InfiniBand
    par = ParallelConfig(tp=tp, pp=4, dp=8 // tp, precision="bf16", sequence_parallel=sp,
                         **sched)
    training = TrainingSpec(seq_length=2048, global_batch_size=32, framework=framework)
    sc = score(model, default_cluster(32), training, ConfigBatch.from_configs([par]))
    return sc.time_breakdown_s["pp_comm"][0] / sc.microbatches[0]


def _gather_and_transfer_s(hidden, tp=8):
    from costmodel import collectives as coll
    from costmodel.groups import nccl_system as _system
    from costmodel.hardware import default_cluster

    system = _system(default_cluster(32))
    act = 2048 * hidden * 2.0
    ag = float(np.asarray(coll.collective_time_s(system, "allgather", act, tp, 1).time_s))
    p2p = float(np.asarray(coll.p2p_time_s(system, np.asarray([act / tp]),
                                           np.asarray([True])))[0])
    assert ag > 0 and p2p > 0
    return ag, p2p


def test_pipeline_receivers_regather_tp_partitions_unless_sequence_parallel():
    # scatter/gather (Narayanan et al. 2021 4.1): each stage sends b*s*h/t per TP rank and
    # the receiver all-gathers the full tensor over its TP group; with sequence parallelism
    # the tensor is already split along the sequence, so nothing is gathered. The last
    # stage (the heaviest here: LM head) receives 2v - 1 tensors per micro-batch.
    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=51200)
    ag, _ = _gather_and_transfer_s(4096)
    for v in (1, 2):
        diff = (_pp_comm_per_microbatch(model, "megatron", False, v)
                - _pp_comm_per_microbatch(model, "megatron", True, v))
        assert diff == pytest.approx((2 * v - 1) * ag, rel=1e-6)


def test_deepspeed_middle_stage_regathers_three_tensors():
    # DeepSpeed's PipelineEngine, per micro-batch on a middle stage: the received activation,
    # its own sent output (freed after sending, re-gathered for the backward) and the
    # received gradient: three all-gathers, after four blocking transfers. At tp 2 and with
    # a tiny vocabulary the middle stage is the slowest, so pp_comm shows its count; the
    # last stage (tp 8, large vocabulary) re-gathers only the activation it receives.
    ag2, p2p2 = _gather_and_transfer_s(4096, tp=2)
    tiny = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                     ffn_hidden_size=16384, vocab_size=256)
    assert _pp_comm_per_microbatch(tiny, "deepspeed", False, tp=2) == pytest.approx(
        4 * p2p2 + 3 * ag2, rel=1e-6)
    ag, _ = _gather_and_transfer_s(4096)
    big = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                    ffn_hidden_size=16384, vocab_size=51200)
    assert (_pp_comm_per_microbatch(big, "deepspeed", False)
            - _pp_comm_per_microbatch(big, "deepspeed", True)) == pytest.approx(ag, rel=1e-6)


def test_sequence_parallel_backward_overlap_windows():
    # Megatron-LM with SP, no recompute, per layer: 2 all-gather + reduce-scatter pairs in
    # the forward and 2 in the backward; the QKV / FC1 input-gradient reduce-scatters hide
    # behind their weight-gradient GEMMs, the re-gathers of their inputs behind the
    # data-gradient GEMMs (one GEMM each, not two). Small layers at tp 8 make the
    # collectives longer than the GEMMs, so the windows bind.
    from costmodel import collectives as coll
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import efficiency_for
    from costmodel.compute import gemm_time_s
    from costmodel.groups import nccl_system as _system
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    h, f, s = 1024, 4096, 2048
    model = ModelSpec(name="m", num_layers=4, hidden_size=h, num_attention_heads=16,
                      ffn_hidden_size=f, vocab_size=51200)
    cluster = default_cluster(8)
    eff = efficiency_for(cluster.gpu.compute_capability)
    gpu = cluster.gpu
    par = ParallelConfig(tp=8, pp=1, dp=1, precision="bf16", recompute="none",
                         sequence_parallel=True)
    sc = score(model, cluster, TrainingSpec(seq_length=s, global_batch_size=1),
               ConfigBatch.from_configs([par]))
    per_layer = sc.time_breakdown_s["tp_comm"][0] / 4

    def gemm(n, k):
        return float(gemm_time_s(s, n, k, peak_flops_per_s=gpu.peak_flops_per_s["bf16"],
                                 mem_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                                 elem_bytes=2.0, eff=eff, sm_count=gpu.sm_count))

    t_qkv, t_fc1 = gemm(3 * h / 8, h), gemm(f / 8, h)
    system = _system(cluster)
    ag, rs = (float(np.asarray(coll.collective_time_s(system, c, s * h * 2.0, 8, 1).time_s))
              for c in ("allgather", "reducescatter"))
    assert ag > t_qkv  # the window binds

    def exposed(c, w):
        return max(0.0, c - w) + (1 - eff.overlap_hidden) * min(c, w)

    expected = (4 * (ag + rs) - eff.overlap_hidden * (min(rs, t_qkv) + min(rs, t_fc1))
                + exposed(ag, t_qkv) + exposed(ag, t_fc1))
    assert per_layer == pytest.approx(expected, rel=1e-6)


def test_deepspeed_host_floor_adds_each_tp_collective_call():
    # a host-bound layer takes the framework's host time: 4 passes with full recompute, plus
    # one host-side call per blocking TP collective (6 with full recompute) when tp > 1;
    # Megatron's mappings skip the call entirely at tp = 1
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.hardware import default_cluster
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="tiny", num_layers=4, hidden_size=512, num_attention_heads=8,
                      ffn_hidden_size=2048, vocab_size=51200)
    cluster = default_cluster(8)
    training = TrainingSpec(seq_length=512, global_batch_size=8, framework="deepspeed",
                            flash_attention=False)
    fw = FRAMEWORKS["deepspeed"]
    assert fw.host.collective_host_s > 0

    def layer_s(tp):
        par = ParallelConfig(tp=tp, pp=1, dp=8 // tp, precision="fp16", recompute="full")
        batch = ConfigBatch.from_configs([par])
        terms = _layer_costs(model, training, efficiency_for(cluster.gpu.compute_capability),
                             fw, cluster, batch)
        gpu = sum(float(getattr(terms, k)[0])
                  for k in ("forward_s", "backward_s", "recompute_s", "tp_comm_s"))
        assert float(terms.host_s[0]) > 0  # host-bound
        return gpu, gpu + float(terms.host_s[0])

    from costmodel.compute import soft_max

    for tp, host in ((1, 4 * fw.host.layer_pass_s),
                     (2, 4 * fw.host.layer_pass_s + 6 * fw.host.collective_host_s)):
        gpu, total = layer_s(tp)
        assert gpu < 0.45 * host  # well below the crossover: the p-norm adds < 0.1%
        assert total == pytest.approx(float(soft_max(gpu, host, fw.host.host_overlap_p)), rel=1e-9)
        assert total == pytest.approx(host, rel=1e-3)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_unrunnable_collective_scores_inf_without_warnings(framework, sp, pp):
    # NCCL_ALGO=NVLS has no A100 implementation: the collectives are infinite, so is the
    # step; the inf - inf and 0 x inf on the way must neither warn nor turn it into NaN
    import warnings

    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.models_catalog import get_model
    from costmodel.specs import ParallelConfig, TrainingSpec

    par = ParallelConfig(tp=2, pp=pp, dp=4 // pp if pp < 4 else 1, precision="bf16",
                         nccl_algo="nvls", sequence_parallel=sp)
    training = TrainingSpec(seq_length=2048, global_batch_size=8, framework=framework)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sc = score(get_model("llama-7b"), default_cluster(8), training,
                   ConfigBatch.from_configs([par]))
    assert sc.step_time_s[0] == np.inf
    assert sc.time_breakdown_s["tp_comm"][0] == np.inf


# ---- framework optimizer states, NCCL buffers, allocator reserve ---------------------------
def _states_per_param(framework: str, precision: str, zero: int, dp: int = 8):
    """(gradient, optimizer) bytes per local parameter on the peak stage of a pp=1 run whose
    activations are negligible (64 tokens), so that the optimizer step is the peak and the
    step's fp32 gradient copy is counted with the gradients."""
    from costmodel.batch import ConfigBatch
    from costmodel.hardware import default_cluster
    from costmodel.model import score
    from costmodel.specs import ParallelConfig, TrainingSpec

    model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=512)
    training = TrainingSpec(seq_length=64, global_batch_size=dp, framework=framework)
    par = ParallelConfig(tp=1, pp=1, dp=dp, micro_batch_size=1, precision=precision,
                         recompute="full", zero_stage=zero)
    sc = score(model, default_cluster(dp), training, ConfigBatch.from_configs([par]))
    mem = sc.memory_breakdown_bytes
    pb = 4.0 if precision in ("fp32", "tf32") else 2.0
    psi = mem["weights"][0] / (pb / (dp if zero >= 3 else 1))
    return mem["gradients"][0] / psi, mem["optimizer_states"][0] / psi


@pytest.mark.parametrize(("framework", "precision", "zero", "grads", "optim"), [
    # Megatron-LM (cost-model.md 4.2 table): bf16 with fp32 main gradients, 2 + 4 + 12/d;
    # fp16 with fp16 main gradients and the step's fp32 copy, 20 and 4 + 16/d
    ("megatron", "bf16", 1, 4.0, 12 / 8),
    ("megatron", "fp16", 0, 2.0 + 4.0, 12.0),
    ("megatron", "fp16", 1, 2.0 + 4 / 8, 12 / 8),
    # DeepSpeed ZeRO optimizer: 16-bit grads + the fp32 copy of the local partition
    # (estimate_zero2_model_states_mem_needs 18 = 2 + 4 + 4 + 8; cost-model.md 4.3)
    ("deepspeed", "fp16", 1, 2 + 4 / 8, 12 / 8),
    ("deepspeed", "fp16", 0, 2 + 4.0, 12.0),
    ("deepspeed", "fp16", 2, (2 + 4) / 8, 12 / 8),
    ("deepspeed", "bf16", 2, (2 + 4) / 8, 12 / 8),
    # DeepSpeed BF16_Optimizer (bf16, ZeRO 0/1): bf16 grads + unsharded fp32 accumulation,
    # and after the backward the all-reduce's bf16 cast of that buffer (the model's 0.8e9
    # local parameters exceed one 5e8-element bucket: no concatenated copy)
    ("deepspeed", "bf16", 1, 2 + 4.0 + 2.0, 12 / 8),
    ("deepspeed", "fp8", 1, 2 + 4.0 + 2.0, 12 / 8),  # bf16 weights: the DeepSpeed bf16 config
    ("deepspeed", "fp32", 1, 4.0, 8 / 8),
])
def test_optimizer_states_follow_the_framework(framework, precision, zero, grads, optim):
    g, o = _states_per_param(framework, precision, zero)
    assert g == pytest.approx(grads, rel=1e-9)
    assert o == pytest.approx(optim, rel=1e-9)


def test_step_gradient_copy_is_not_held_with_the_activations():
    # DeepSpeed fp16 at ZeRO 0 (FP16_Optimizer) copies the fp16 gradients to fp32 (4 bytes per
    # parameter) only in the optimizer step, after the backward has freed the activations:
    # what must fit is the larger of the two phases; nvidia-smi's maximum, with the caching
    # allocator still holding the backward's blocks, shows both
    from costmodel.specs import ParallelConfig

    model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=512)
    psi = 4 * model.params_per_layer + 2 * 512 * 4096 + 2 * 4096
    par = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=8, precision="fp16",
                         recompute="none", zero_stage=0)
    big = _score_one(model, par, 1, seq=4096, gbs=8, framework="deepspeed",
                     expandable_segments=False)  # fixed segments, as BLOOM ran
    mem = {k: float(v[0]) for k, v in big.memory_breakdown_bytes.items()}
    assert mem["activations"] > 4.0 * psi  # the backward is the peak
    assert mem["gradients"] == pytest.approx(2.0 * psi, rel=1e-3)  # no fp32 copy in it
    assert big.observed_memory_bytes[0] == pytest.approx(
        big.peak_memory_bytes[0] + 4.0 * psi, rel=1e-3)
    gib = 2.0**30
    assert big.observed_memory_bytes[0] < 80 * gib
    # where the sum would pass the GPU's 80 GiB while each phase fits, the allocator frees
    # its cache and retries: nvidia-smi shows the whole GPU at most
    capped = _score_one(model, par, 1, seq=4352, gbs=8, framework="deepspeed",
                        expandable_segments=False)
    assert capped.peak_memory_bytes[0] < 80 * gib < capped.peak_memory_bytes[0] + 4.0 * psi
    assert capped.observed_memory_bytes[0] == pytest.approx(80 * gib, rel=1e-9)
    # an OOM configuration keeps its (larger) peak as the reading
    par16 = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=16, precision="fp16",
                           recompute="none", zero_stage=0)
    oom = _score_one(model, par16, 1, seq=4096, gbs=16, framework="deepspeed",
                     expandable_segments=False)
    assert oom.observed_memory_bytes[0] == oom.peak_memory_bytes[0] > 80 * gib
    small = _score_one(model, par, 1, seq=64, gbs=8, framework="deepspeed")
    mem = {k: float(v[0]) for k, v in small.memory_breakdown_bytes.items()}
    assert mem["activations"] == 0.0 and mem["logits"] == 0.0  # the step is the peak
    assert mem["gradients"] == pytest.approx(6.0 * psi, rel=1e-3)
    assert small.peak_memory_bytes[0] <= small.observed_memory_bytes[0]


@pytest.mark.parametrize(("layers", "hidden", "copies"), [
    (4, 4096, 2.0),  # 0.8e9 local parameters: each group reduced alone, a bf16 cast
    (2, 2048, 2.0 + 4.0),  # 0.1e9: both groups concatenated in fp32 first, then cast
])
def test_bf16_optimizer_reduce_copies_its_fp32_gradients(layers, hidden, copies):
    # DeepSpeed 0.6.3 engine.allreduce_bucket: tensor.to(communication_data_type) of the
    # BF16_Optimizer's flat fp32 gradients, after the backward; the step phase holds it
    from costmodel.specs import ParallelConfig

    model = ModelSpec(name="m", num_layers=layers, hidden_size=hidden,
                      num_attention_heads=hidden // 128, ffn_hidden_size=4 * hidden,
                      vocab_size=512)
    psi = layers * model.params_per_layer + 2 * 512 * hidden + 2 * hidden
    par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision="bf16",
                         recompute="full", zero_stage=1)
    sc = _score_one(model, par, 8, seq=64, gbs=8, framework="deepspeed")
    mem = {k: float(v[0]) for k, v in sc.memory_breakdown_bytes.items()}
    assert mem["activations"] == 0.0  # the step phase is the peak
    assert mem["gradients"] == pytest.approx((2.0 + 4.0 + copies) * psi, rel=1e-3)
    # Megatron-LM reduces its fp32 main gradients as they are: no copy
    mega = _score_one(model, par, 8, seq=64, gbs=8, framework="megatron")
    mem = {k: float(v[0]) for k, v in mega.memory_breakdown_bytes.items()}
    assert mem["gradients"] == pytest.approx(4.0 * psi, rel=1e-3)


def test_deepspeed_fp16_zero1_is_four_plus_sixteen_over_d():
    # DeepSpeed's older estimator for stage 1: 4 P + 16 P / n (cost-model.md 4.3)
    for dp in (1, 4, 16):
        g, o = _states_per_param("deepspeed", "fp16", 1, dp)
        assert 2.0 + g + o == pytest.approx(4.0 + 16.0 / dp, rel=1e-9)


def test_nccl_buffers_are_ring_channels_times_protocol_buffers():
    from costmodel.collectives import CONNECTION_BUFFER_BYTES, nccl_system
    from costmodel.hardware import default_cluster

    # Simple 4 MiB + LL128 120*640*8*8 B + LL 512 KiB (nccl.md section 2)
    assert CONNECTION_BUFFER_BYTES == 4 * 2**20 + 4_915_200 + 2**19
    system = nccl_system(default_cluster(16))
    assert system.communicator_buffer_bytes(1, 1) == 0.0
    # 8 x A100 NVSwitch: 24 launched channels (nccl.md 1.3)
    assert system.coll_channels(8, 1) == 24
    assert system.communicator_buffer_bytes(8, 1) == 24 * CONNECTION_BUFFER_BYTES


def test_nccl_buffers_grow_with_the_communicators_a_rank_joins():
    from costmodel.collectives import nccl_system
    from costmodel.groups import nccl_buffer_bytes as _nccl_buffer_bytes
    from costmodel.hardware import default_cluster
    from costmodel.topology import layout_topology

    cluster = default_cluster(16)
    system = nccl_system(cluster)
    world = system.communicator_buffer_bytes(8, 2)
    dp_only = _nccl_buffer_bytes(system, layout_topology(cluster, 1, 1, 16), tied=True)
    assert dp_only == pytest.approx(2 * world)  # the world and the DP group coincide in shape
    full = _nccl_buffer_bytes(system, layout_topology(cluster, 4, 2, 2), tied=True)
    untied = _nccl_buffer_bytes(system, layout_topology(cluster, 4, 2, 2), tied=False)
    assert full > untied > world


def test_allocator_reserve_covers_step_allocations_only():
    # reserve = f / (1 - f) x what is allocated within a step; DeepSpeed's autograd-allocated
    # 16-bit gradients count, Megatron's contiguous gradient buffer does not
    from costmodel.calibration import efficiency_for
    from costmodel.hardware import default_cluster

    eff = efficiency_for(default_cluster(8).gpu.compute_capability)
    # fixed segments: allocator_fraction; expandable_segments:True (paraplan's launch
    # environment, the default): expandable_fraction, which is smaller
    assert eff.expandable_fraction < eff.allocator_fraction
    for framework, expandable in (("megatron", True), ("megatron", False),
                                  ("deepspeed", True), ("deepspeed", False)):
        from costmodel.batch import ConfigBatch
        from costmodel.model import score
        from costmodel.specs import ParallelConfig, TrainingSpec

        f = eff.expandable_fraction if expandable else eff.allocator_fraction
        model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                          ffn_hidden_size=16384, vocab_size=50000)
        training = TrainingSpec(seq_length=2048, global_batch_size=8, framework=framework,
                                expandable_segments=expandable)
        par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision="bf16",
                             recompute="full", zero_stage=1)
        sc = score(model, default_cluster(8), training, ConfigBatch.from_configs([par]))
        m = {k: v[0] for k, v in sc.memory_breakdown_bytes.items()}
        # DeepSpeed bf16 at ZeRO 1 runs BF16_Optimizer: its all-gather bucket, no reduce bucket
        engine = 5e8 * 2 if framework == "deepspeed" else 0.0
        dynamic = m["activations"] + m["logits"] + engine
        if framework == "deepspeed":
            dynamic += 2.0 * m["weights"] / 2.0  # bf16 grads: 2 bytes per parameter
        assert m["allocator_reserve"] == pytest.approx(dynamic * f / (1 - f), rel=1e-9)
        assert sum(m.values()) == pytest.approx(sc.peak_memory_bytes[0], rel=1e-12)
        # PyTorch's view: reserved = allocated + the fragmentation reserve; the device's peak
        # adds the CUDA context and NCCL's own buffers, which the allocator does not hold
        reserved, allocated = sc.reserved_memory_bytes[0], sc.allocated_memory_bytes[0]
        assert reserved - allocated == pytest.approx(m["allocator_reserve"], rel=1e-12)
        assert allocated < reserved < sc.peak_memory_bytes[0]
        assert sc.peak_memory_bytes[0] - reserved == pytest.approx(
            m["cuda_context"] + m["communication_buffers"] - engine, rel=1e-9)


def test_fp8_linears_pay_the_cast_transpose_traffic(monkeypatch):
    # Transformer Engine casts each linear's input (forward) and output gradient (backward)
    # to fp8 with a transposed copy: 4 bytes of HBM traffic per element, one kernel each
    import costmodel.model as M
    from costmodel import layers
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import efficiency_for
    from costmodel.hardware import default_cluster, get_gpu
    from costmodel.specs import ParallelConfig, TrainingSpec

    gpu = get_gpu("h100-sxm-80gb")
    cluster = default_cluster(8, gpu="h100-sxm-80gb")
    eff = efficiency_for(gpu.compute_capability)
    model = ModelSpec(name="m", num_layers=4, hidden_size=4096, num_attention_heads=32,
                      num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000,
                      gated_mlp=True)
    training = TrainingSpec(seq_length=4096, global_batch_size=8)
    par = ParallelConfig(tp=2, pp=1, dp=4, micro_batch_size=1, precision="fp8",
                         recompute="none", sequence_parallel=True)
    batch = ConfigBatch.from_configs([par])
    with_casts = M.score(model, cluster, training, batch).time_breakdown_s["compute"][0]
    monkeypatch.setattr(layers, "FP8_CAST_BYTES", 0.0)
    without = M.score(model, cluster, training, batch).time_breakdown_s["compute"][0]
    tokens, h, t, hd, f = 4096.0, 4096.0, 2.0, 128.0, 14336.0
    cast_in = tokens * (2 * h / t + 32 * hd / t + f / t)  # SP: LN outputs cast per shard
    cast_out = tokens * ((32 + 2 * 8) * hd / t + 2 * h + 2 * f / t)
    bw = eff.memory * gpu.memory_bandwidth_bytes_per_s
    per_layer = 4.0 * (cast_in + cast_out) / bw  # kernel launches cancel in the difference
    m = 8 // 4  # micro-batches per step: global batch 8 over dp 4 at micro-batch 1
    assert with_casts - without == pytest.approx(m * 4 * per_layer, rel=1e-6)


# ---- loss buffers, gradient dtypes on the wire, optimizer-specific reductions ---------------
def _fw_score(framework: str, par, *, flash: bool = True, gbs: int = 32,
              gpu: str | None = None):
    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=128000)
    return _score_one(model, par, par.world_size, seq=4096, gbs=gbs, framework=framework,
                      flash=flash, gpu=gpu)


@pytest.mark.parametrize(("framework", "pp", "per_logit"), [
    ("megatron", 1, 4.0 + 2.0),   # fp32 softmax saved + the 16-bit logits / their gradient
    ("megatron", 2, 4.0 + 2.0),
    ("deepspeed", 1, 4.0 + 2.0),  # no pipeline engine without a pipeline
    ("deepspeed", 2, 6.0 + 2.0),  # the pipe engine also keeps the 16-bit logits (output buffer)
    ("fsdp", 1, 2.0 + 2.0),       # llm-foundry's fused cross entropy: no fp32 copy
])
def test_loss_buffers_follow_the_framework(framework, pp, per_logit):
    from costmodel.compute import padded_vocab
    from costmodel.specs import ParallelConfig

    # two small layers and a large untied vocabulary: the last stage (head + loss) is the peak
    model = ModelSpec(name="m", num_layers=2, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=256000, tied_embeddings=False)
    par = ParallelConfig(tp=2, pp=pp, dp=2, micro_batch_size=1, recompute="full")
    sc = _score_one(model, par, par.world_size, seq=4096, gbs=8, framework=framework,
                    flash=True)
    V = float(padded_vocab(256000, np.asarray(2)))
    assert sc.memory_breakdown_bytes["logits"][0] == pytest.approx(
        per_logit * 4096 * V / 2, rel=1e-9)


def test_gpipe_keeps_every_micro_batch_loss_buffer():
    from costmodel.specs import ParallelConfig

    model = ModelSpec(name="m", num_layers=2, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=256000, tied_embeddings=False)
    m = 8

    def logits(schedule):
        par = ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1, recompute="full",
                             schedule=schedule)
        sc = _score_one(model, par, 2, seq=4096, gbs=m, flash=True)
        return sc.memory_breakdown_bytes["logits"][0]

    # saved 4 bytes per logit per micro-batch in flight on the last stage, 2 transient once
    assert logits("gpipe") / logits("1f1b") == pytest.approx((4.0 * m + 2.0) / 6.0)


def test_gpipe_without_a_pipeline_is_gradient_accumulation():
    from costmodel.specs import ParallelConfig

    a, b = (_fw_score("megatron", ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=1,
                                                 recompute="full", schedule=s), gbs=8)
            for s in ("1f1b", "gpipe"))
    assert b.peak_memory_bytes[0] == pytest.approx(a.peak_memory_bytes[0], rel=1e-12)


@pytest.mark.parametrize("zero", [0, 2, 3])
def test_fp16_and_bf16_states_agree_outside_megatron(zero):
    # only Megatron-LM keeps fp16 main gradients; FSDP's sharded gradients live in the fp32
    # flat parameter whatever the 16-bit type, so fp16 and bf16 cost the same there
    from costmodel.specs import ParallelConfig

    def run(prec):
        par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision=prec,
                             recompute="full", zero_stage=zero)
        return _fw_score("fsdp", par, gbs=8)

    a, b = run("fp16"), run("bf16")
    assert a.memory_breakdown_bytes["gradients"][0] == pytest.approx(
        b.memory_breakdown_bytes["gradients"][0], rel=1e-12)
    assert a.dp_comm_total_s[0] == pytest.approx(b.dp_comm_total_s[0], rel=1e-12)


def test_fp8_linears_keep_fp8_inputs():
    # Transformer Engine keeps each linear's input for the weight gradient as its fp8 cast:
    # QKV and MLP inputs and the FC2 input drop to 1 byte; the fused attention core keeps its
    # 16-bit output for its own backward, so the out-projection's fp8 copy comes on top
    s, b, h, f = 2048, 1, GPT3.hidden_size, GPT3.ffn_hidden_size
    ad = GPT3.num_attention_heads * GPT3.head_dim

    def act(fp8, rc=0, flash=True):
        return float(layer_activation_bytes(GPT3, s, b, 1, False, rc, flash_attention=flash,
                                            dropout=False, fp8=fp8))

    assert act(True) - act(False) == pytest.approx(-2 * s * b * h + s * b * ad - s * b * f)
    # selective recompute (or an unfused core) keeps no 16-bit attention output
    assert act(True, rc=1) - act(False, rc=1) == pytest.approx(
        -2 * s * b * h - s * b * ad - s * b * f)
    assert act(True, rc=2) == act(False, rc=2)  # full recompute: the layer input only


@pytest.mark.parametrize("prec", ["bf16", "fp8"])
def test_selective_recompute_memory_follows_what_is_recomputed(prec):
    # legacy Megatron (Megatron-DeepSpeed) does not checkpoint a fused core: its selective
    # recompute keeps what no recompute keeps; Megatron-Core drops the core's buffers
    from costmodel.specs import ParallelConfig

    def act(framework, rc):
        par = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=1, precision=prec,
                             recompute=rc)
        sc = _fw_score(framework, par, gbs=1, gpu="h100-sxm-80gb")
        return sc.memory_breakdown_bytes["activations"][0]

    assert act("deepspeed", "selective") == pytest.approx(act("deepspeed", "none"), rel=1e-12)
    assert act("megatron", "selective") < act("megatron", "none")


def test_megatron_fp8_caches_fp8_weights():
    # TE's fp8 weight copy and its transpose, kept across the micro-batches of a step
    from costmodel.specs import ParallelConfig

    def weights(prec, framework="megatron"):
        par = ParallelConfig(tp=2, pp=1, dp=4, micro_batch_size=1, precision=prec,
                             recompute="full", zero_stage=1)
        sc = _fw_score(framework, par, gbs=4, gpu="h100-sxm-80gb")
        return sc.memory_breakdown_bytes["weights"][0]

    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=128000)
    assert weights("fp8") - weights("bf16") == pytest.approx(
        2.0 * 8 * model.params_per_layer / 2, rel=1e-9)
    assert weights("fp8", "fsdp") == weights("bf16", "fsdp")  # no is_first_microbatch cache


def test_fsdp_full_shard_keeps_only_the_fp32_shard():
    # PyTorch FSDP FULL_SHARD: fp32 flat shard 4 + fp32 gradient 4 + Adam 8 = 16 bytes per
    # parameter over d (mixed precision); DeepSpeed ZeRO-3 also keeps a 16-bit partition
    from costmodel.compute import padded_vocab
    from costmodel.specs import ParallelConfig

    d = 8
    par = ParallelConfig(tp=1, pp=1, dp=d, micro_batch_size=1, precision="bf16",
                         recompute="full", zero_stage=3)
    states, weights = {}, {}
    for fw in ("fsdp", "deepspeed"):
        mem = _fw_score(fw, par, gbs=d).memory_breakdown_bytes
        states[fw] = sum(mem[k][0] for k in ("weights", "gradients", "optimizer_states"))
        weights[fw] = mem["weights"][0]
    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=128000)
    psi = (8 * model.params_per_layer + 2 * float(padded_vocab(128000, np.asarray(1))) * 4096
           + 2 * 4096)  # layers, untied embedding + head, final norm
    assert states["fsdp"] == pytest.approx(16.0 * psi / d, rel=1e-3)
    assert weights["fsdp"] == 0.0
    assert weights["deepspeed"] == pytest.approx(2.0 * psi / d, rel=1e-3)


def test_deepspeed_bf16_optimizer_shards_at_zero0_as_at_zero1():
    # DeepSpeed runs BF16_Optimizer for bf16 at ZeRO 0 too: it partitions its fp32 states
    from costmodel.specs import ParallelConfig

    z0, z1 = (_fw_score("deepspeed", ParallelConfig(tp=1, pp=2, dp=4, micro_batch_size=1,
                                                    precision="bf16", recompute="full",
                                                    zero_stage=z), gbs=8) for z in (0, 1))
    assert z0.peak_memory_bytes[0] == pytest.approx(z1.peak_memory_bytes[0], rel=1e-12)
    assert z0.step_time_s[0] == pytest.approx(z1.step_time_s[0], rel=1e-12)


def test_megatron_fp16_reduces_fp16_gradients():
    # only bf16 forces --accumulate-allreduce-grads-in-fp32: fp16 main_grad is on the wire
    from costmodel.specs import ParallelConfig

    def dp_time(prec):
        par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision=prec,
                             recompute="full")
        sc = _fw_score("megatron", par, flash=True, gbs=8)
        return sc.time_breakdown_s["dp_comm_exposed"][0]

    # same parameters, half the bytes: clearly faster (latency terms keep it above half)
    assert dp_time("fp16") < 0.7 * dp_time("bf16")


def test_deepspeed_bf16_optimizer_all_reduces_at_zero1():
    from costmodel.specs import ParallelConfig

    def dp_total(prec):
        par = ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, precision=prec,
                             recompute="full", zero_stage=1)
        return _fw_score("deepspeed", par, gbs=8).dp_comm_total_s[0]

    # the ZeRO optimizer (fp16) reduce-scatters the 16-bit gradients; BF16_Optimizer
    # all-reduces them (same bytes on the wire, twice the volume) before its gather
    assert dp_total("bf16") > 1.3 * dp_total("fp16")


@pytest.mark.parametrize(("framework", "reruns"), [("megatron", True),
                                                   ("deepspeed", False)])
def test_selective_recompute_of_fused_attention(framework, reruns):
    # Megatron-Core checkpoints core_attn whatever its kernel; legacy Megatron (Megatron-
    # DeepSpeed) checkpoints only the unfused attention core
    from costmodel.specs import ParallelConfig

    sel = ParallelConfig(tp=1, pp=1, dp=1, micro_batch_size=1, recompute="selective")
    sc = _fw_score(framework, sel, flash=True, gbs=1)
    assert (sc.time_breakdown_s["recompute"][0] > 0.0) == reruns


def test_fp8_output_layer_runs_in_16_bits():
    # the output layer is not a Transformer Engine module: its forward + backward time in fp8
    # training equals bf16's, while the layers get faster
    from costmodel.batch import ConfigBatch
    from costmodel.calibration import FRAMEWORKS, efficiency_for
    from costmodel.hardware import default_cluster
    from costmodel.specs import ParallelConfig, TrainingSpec

    cluster = default_cluster(2, gpu="h100-sxm-80gb")
    model = ModelSpec(name="m", num_layers=8, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=128000)
    training = TrainingSpec(seq_length=4096, global_batch_size=2)
    batch = ConfigBatch.from_configs([
        ParallelConfig(tp=1, pp=2, dp=1, micro_batch_size=1, precision=prec, recompute="none")
        for prec in ("bf16", "fp8")])
    terms = _layer_costs(model, training, efficiency_for(90), FRAMEWORKS["megatron"], cluster,
                         batch)
    assert terms.head_s[1] == pytest.approx(terms.head_s[0], rel=1e-12)
    assert terms.forward_s[1] < 0.8 * terms.forward_s[0]
