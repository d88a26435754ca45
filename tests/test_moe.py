"""Mixture-of-Experts: spec validation, parameter counts, HF loading (issue 22)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.errors import InputError
from costmodel.models_catalog import get_model
from costmodel.specs import MLASpec, ModelSpec, MoESpec

# (catalog name, published total, published active) in billions: DeepSeek-V3 report abstract
# (671 / 37), modern-training.md 2.1's derived checks, the model cards (OpenAI gpt-oss:
# 116.8 / 20.9 total; Mistral: 46.7 / 12.9, 141 / 39)
PUBLISHED = [("deepseek-v3", 671.0, 37.5), ("qwen3-30b-a3b", 30.5, 3.35),
             ("qwen3-235b-a22b", 235.1, 22.2), ("mixtral-8x7b", 46.7, 12.9),
             ("mixtral-8x22b", 140.6, 39.2), ("gpt-oss-120b", 116.8, None),
             ("gpt-oss-20b", 20.9, None)]


@pytest.mark.parametrize("name,total,active", PUBLISHED)
def test_catalog_counts_match_published(name, total, active):
    m = get_model(name)
    assert m.total_params() / 1e9 == pytest.approx(total, rel=0.005)
    if active is not None:
        assert m.active_params() / 1e9 == pytest.approx(active, rel=0.01)


def test_deepseek_v3_layers_and_mla():
    m = get_model("deepseek-v3")
    assert (m.dense_layers, m.moe_layers) == (3, 58)
    assert m.attention_params == pytest.approx(187.1e6, rel=1e-3)  # modern-training.md 2.6
    assert m.mtp_params / 1e9 == pytest.approx(11.6, rel=0.02)
    assert m.moe.megatron_layer_freq(m.num_layers) == "([0]*3+[1]*58)"


def test_dense_counts_unchanged():
    m = get_model("llama2-70b")
    assert m.moe is None and m.active_params() == m.total_params()
    assert m.layers_params == m.num_layers * m.params_per_layer


def test_moe_validation_names_fields():
    base = dict(name="x", num_layers=4, hidden_size=64, num_attention_heads=4,
                ffn_hidden_size=128, vocab_size=100, gated_mlp=True)
    with pytest.raises(InputError) as e:
        MoESpec(num_experts=4, top_k=8, expert_ffn_hidden_size=32)
    assert e.value.field == "model.moe.top_k"
    with pytest.raises(InputError) as e:
        MoESpec(num_experts=4, top_k=1, expert_ffn_hidden_size=32, shared_experts=1)
    assert e.value.field == "model.moe.shared_ffn_hidden_size"
    with pytest.raises(InputError) as e:
        ModelSpec(**base, moe=MoESpec(num_experts=4, top_k=1, expert_ffn_hidden_size=32,
                                      dense_layers=4))
    assert e.value.field == "model.moe.dense_layers"
    with pytest.raises(InputError) as e:
        MLASpec(kv_lora_rank=0, qk_nope_head_dim=1, qk_rope_head_dim=1, v_head_dim=1)
    assert e.value.field == "model.mla.kv_lora_rank"


def test_contract_mapping_with_moe_block():
    from costmodel.loaders import model_from_mapping

    m = model_from_mapping(dict(name="m", num_layers=4, hidden_size=64, num_attention_heads=4,
                                ffn_hidden_size=128, vocab_size=100, gated_mlp=True,
                                moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=32)))
    assert m.moe.num_experts == 8
    with pytest.raises(InputError) as e:
        model_from_mapping(dict(name="m", num_layers=4, hidden_size=64, num_attention_heads=4,
                                ffn_hidden_size=128, vocab_size=100,
                                moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=32,
                                         topk=3)))
    assert e.value.field.startswith("model.moe")


# ---- against the Hugging Face model built on the meta device ---------------------------------
_HF = importlib.util.find_spec("transformers") is not None
_TORCH = importlib.util.find_spec("torch") is not None

# family -> (HF config class kwargs, our catalog name): the checkpoints' config.json values
HF_CONFIGS = {
    "mixtral": ("MixtralConfig", dict(num_hidden_layers=32, hidden_size=4096,
                                      num_attention_heads=32, num_key_value_heads=8,
                                      intermediate_size=14336, vocab_size=32000,
                                      num_local_experts=8, num_experts_per_tok=2,
                                      tie_word_embeddings=False), "mixtral-8x7b"),
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_hidden_layers=48, hidden_size=2048,
                                         num_attention_heads=32, num_key_value_heads=4,
                                         head_dim=128, intermediate_size=6144,
                                         moe_intermediate_size=768, vocab_size=151936,
                                         num_experts=128, num_experts_per_tok=8,
                                         decoder_sparse_step=1, mlp_only_layers=[],
                                         tie_word_embeddings=False), "qwen3-30b-a3b"),
    "deepseek_v3": ("DeepseekV3Config", dict(num_hidden_layers=61, hidden_size=7168,
                                             num_attention_heads=128, num_key_value_heads=128,
                                             intermediate_size=18432,
                                             moe_intermediate_size=2048, vocab_size=129280,
                                             n_routed_experts=256, n_shared_experts=1,
                                             num_experts_per_tok=8, first_k_dense_replace=3,
                                             q_lora_rank=1536, kv_lora_rank=512,
                                             qk_nope_head_dim=128, qk_rope_head_dim=64,
                                             v_head_dim=128, tie_word_embeddings=False),
                    "deepseek-v3"),
    "gpt_oss": ("GptOssConfig", dict(num_hidden_layers=24, hidden_size=2880,
                                     num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                                     intermediate_size=2880, vocab_size=201088,
                                     num_local_experts=32, num_experts_per_tok=4,
                                     tie_word_embeddings=False), "gpt-oss-20b"),
    "llama4_text": ("Llama4TextConfig", dict(num_hidden_layers=48, hidden_size=5120,
                                             num_attention_heads=40, num_key_value_heads=8,
                                             head_dim=128, intermediate_size=8192,
                                             intermediate_size_mlp=16384, vocab_size=202048,
                                             num_local_experts=16, num_experts_per_tok=1,
                                             interleave_moe_layer_step=1,
                                             tie_word_embeddings=False), "llama4-scout"),
}


@pytest.mark.skipif(not (_HF and _TORCH), reason="needs transformers and torch (pip install "
                    "transformers torch): the HF models are built on the meta device")
@pytest.mark.parametrize("family", sorted(HF_CONFIGS))
def test_total_params_match_hf_meta_model(family):
    import torch
    import transformers

    cls_name, kw, ours = HF_CONFIGS[family]
    config = getattr(transformers, cls_name)(**kw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    hf_total = sum(p.numel() for p in model.parameters())
    ref = get_model(ours)
    assert ref.total_params() == pytest.approx(hf_total, rel=0.005)
    # active: the routed experts' tensors (names with "experts", not the shared expert) count
    # k of E
    routed = sum(p.numel() for n, p in model.named_parameters()
                 if ".experts." in n or n.endswith(".experts") or ".experts_" in n)
    E, k = ref.moe.num_experts, ref.moe.top_k
    hf_active = hf_total - routed * (E - k) / E
    assert ref.active_params() == pytest.approx(hf_active, rel=0.005)


@pytest.mark.skipif(not _HF, reason="needs transformers (pip install transformers)")
@pytest.mark.parametrize("family", sorted(HF_CONFIGS))
def test_hf_config_class_dict_loads_to_catalog_counts(family):
    """The HF configuration class's own to_dict() (its field names and defaults) loads to
    the catalog entry's counts."""
    import transformers

    from costmodel.loaders import model_from_mapping

    cls_name, kw, ours = HF_CONFIGS[family]
    d = getattr(transformers, cls_name)(**kw).to_dict()
    m, ref = model_from_mapping(d), get_model(ours)
    assert m.total_params() == pytest.approx(ref.total_params(), rel=0.005)
    assert m.active_params() == pytest.approx(ref.active_params(), rel=0.005)


# ---- cost model, search and flags --------------------------------------------------------------
def _problem(model="deepseek-v3", gpus=1024, gpu="h100-sxm-80gb", seq=4096, gbs=8192):
    from optimizer.api import resolve_problem

    return resolve_problem(model=model, gpus=gpus, gpu=gpu, seq_length=seq,
                           global_batch_size=gbs)


def _score(p, **cols):
    from costmodel.batch import ConfigBatch
    from costmodel.model import run_phases

    return run_phases(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))


def test_ep_shards_expert_memory_and_adds_all_to_all():
    p = _problem()
    n = 3
    ph = _score(p, tp=[1] * n, pp=[16] * n, dp=[64] * n, ep=[1, 8, 64], etp=[1] * n,
                micro_batch_size=[1] * n, zero_stage=[1] * n, recompute=[2] * n)
    w = ph.memory.breakdown_bytes["weights"]
    assert w[0] > w[1] > w[2]  # routed experts / ep
    assert ph.layer.tp_comm_s[0] == 0.0 < ph.layer.tp_comm_s[1] < ph.layer.tp_comm_s[2]
    # EP 64 crosses hosts: its all-to-all runs on the NICs, far slower than NVLink EP 8
    assert ph.layer.tp_comm_s[2] > 3 * ph.layer.tp_comm_s[1]


def test_small_tokens_per_expert_lose_gemm_efficiency():
    from costmodel.moe import GROUPED_GEMM_TILE_M

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    ph = _score(p, tp=[1, 1], pp=[1, 1], dp=[8, 8], ep=[1, 8], etp=[1, 1],
                micro_batch_size=[1, 1], zero_stage=[1, 1])
    fc1 = ph.distinct_layers.tables[0].kernel("moe.fc1")
    assert GROUPED_GEMM_TILE_M == 128.0
    # the same useful rows per rank (T k iota etp); ep 1: 128 experts of ~282 rows each
    # padded to 384, ep 8: 16 experts of ~2253 rows padded to 2304: less padding, faster
    assert fc1.m[0] == 128 * 384 and fc1.m[1] == 16 * 2304
    f = ph.distinct_layers.times["moe.fc1"]
    assert f[1] < f[0]


def test_dense_model_has_no_expert_axes_in_documents():
    from costmodel.specs import ParallelConfig

    assert "ep" not in ParallelConfig(tp=2).as_dict()
    assert ParallelConfig(tp=2, ep=4).as_dict()["ep"] == 4


def test_rules_reject_bad_expert_grids():
    from search_spaces.rules import Context, explain

    p = _problem()
    ctx = Context(p.model, p.cluster, p.training)
    base = dict(tp=1, pp=16, dp=64, micro_batch_size=1)
    assert not explain(ctx, {**base, "ep": 8})
    assert "ep_divides_experts" in str(explain(ctx, {**base, "ep": 3}))
    assert "ep_within_domain" in str(explain(ctx, {**base, "ep": 16}))
    dense = _problem(model="llama2-7b", gpus=8, seq=4096, gbs=64)
    dctx = Context(dense.model, dense.cluster, dense.training)
    assert "experts_only_moe" in str(explain(dctx, dict(tp=1, pp=1, dp=8, ep=2)))


def test_megatron_flags_for_deepseek_v3():
    from costmodel.specs import ParallelConfig
    from optimizer.launch.flags import megatron_args

    p = _problem()
    a = megatron_args(p.model, p.cluster, p.training,
                      ParallelConfig(tp=1, pp=16, dp=64, ep=8, etp=1))
    s = " ".join(a)
    for flag in ("--num-experts 256", "--moe-router-topk 8", "--expert-model-parallel-size 8",
                 "--expert-tensor-parallel-size 1", "--moe-grouped-gemm",
                 "--moe-token-dispatcher-type alltoall", "--moe-ffn-hidden-size 2048",
                 "--moe-shared-expert-intermediate-size 2048",
                 "--moe-layer-freq ([0]*3+[1]*58)", "--multi-latent-attention",
                 "--q-lora-rank 1536", "--kv-lora-rank 512"):
        assert flag in s, flag


def test_optimize_deepseek_v3_1024_h100_uses_ep_under_10_s():
    import time

    from optimizer.api import optimize

    t = time.perf_counter()
    doc = optimize(model="deepseek-v3", gpus=1024, gpu="h100-sxm-80gb", seq_length=4096,
                   global_batch_size=8192)
    wall = time.perf_counter() - t
    cfgs = [c.config for c in doc.pareto_front]
    assert cfgs and all(c.ep > 1 for c in cfgs)
    assert wall < 10.0


# families loaded from their HF configuration class only (no catalog entry): Qwen1.5-MoE-A2.7B
# and DeepSeek-V2-Lite-like shapes
HF_LOADED = {
    "qwen2_moe": ("Qwen2MoeConfig", dict(num_hidden_layers=24, hidden_size=2048,
                                         num_attention_heads=16, num_key_value_heads=16,
                                         intermediate_size=5632, moe_intermediate_size=1408,
                                         shared_expert_intermediate_size=5632,
                                         vocab_size=151936, num_experts=60,
                                         num_experts_per_tok=4, decoder_sparse_step=1,
                                         mlp_only_layers=[], tie_word_embeddings=False)),
    "deepseek_v2": ("DeepseekV2Config", dict(num_hidden_layers=27, hidden_size=2048,
                                             num_attention_heads=16, num_key_value_heads=16,
                                             intermediate_size=10944,
                                             moe_intermediate_size=1408, vocab_size=102400,
                                             n_routed_experts=64, n_shared_experts=2,
                                             num_experts_per_tok=6, first_k_dense_replace=1,
                                             q_lora_rank=None, kv_lora_rank=512,
                                             qk_nope_head_dim=128, qk_rope_head_dim=64,
                                             v_head_dim=128, tie_word_embeddings=False)),
}


@pytest.mark.skipif(not (_HF and _TORCH), reason="needs transformers and torch (pip install "
                    "transformers torch): the HF models are built on the meta device")
@pytest.mark.parametrize("family", sorted(HF_LOADED))
def test_loaded_hf_config_counts_match_meta_model(family):
    import torch
    import transformers

    from costmodel.loaders import model_from_mapping

    cls_name, kw = HF_LOADED[family]
    config = getattr(transformers, cls_name)(**kw)
    ours = model_from_mapping(config.to_dict())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    hf_total = sum(p.numel() for p in model.parameters())
    assert ours.total_params() == pytest.approx(hf_total, rel=0.005)


_MEGATRON_TAR = (Path(__file__).resolve().parents[2] / "shared" / "clients"
                 / "megatron-lm-core_v0.16.1.tar.gz")


@pytest.mark.skipif(not (_TORCH and _MEGATRON_TAR.is_file()),
                    reason="needs torch and shared/clients/megatron-lm-core_v0.16.1.tar.gz")
def test_deepseek_v3_flags_pass_megatrons_parser(tmp_path):
    """The emitted argv through Megatron-LM core_v0.16.1's own parse_args, in a subprocess
    (megatron.rl, absent from the release archive, stubbed)."""
    import subprocess
    import sys
    import tarfile

    from costmodel.specs import ParallelConfig
    from optimizer.launch.flags import megatron_args

    with tarfile.open(_MEGATRON_TAR) as tar:
        members = [m for m in tar.getmembers() if "/megatron/" in m.name
                   and m.name.endswith(".py")]
        tar.extractall(tmp_path, members=members, filter="data")
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    p = _problem()
    argv = megatron_args(p.model, p.cluster, p.training,
                         ParallelConfig(tp=4, pp=16, dp=16, ep=8, etp=1,
                                        sequence_parallel=True, zero_stage=1))
    script = (
        "import sys, types, json\n"
        "class S(types.ModuleType):\n"
        "    def __getattr__(self, n):\n"
        "        if n.startswith('__'): raise AttributeError(n)\n"
        "        return lambda *a, **k: None\n"
        "for n in ('megatron.rl', 'megatron.rl.parallel_utils'):\n"
        "    m = S(n); m.__path__ = []; sys.modules[n] = m\n"
        f"sys.argv = ['pretrain_gpt.py'] + {argv!r} + ['--tokenizer-type', 'NullTokenizer']\n"
        "from megatron.training.arguments import parse_args\n"
        "a = parse_args()\n"
        "print(json.dumps([a.num_experts, a.moe_router_topk, a.expert_model_parallel_size,"
        " a.expert_tensor_parallel_size, sum(a.moe_layer_freq), a.q_lora_rank]))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[256, 8, 8, 1, 58, 1536]"


def test_nvl72_segments_keep_ep_groups_inside_a_rack():
    from optimizer.validation.published import moe_segment_domain

    # 256 GPUs on 4-GPU trays: 4 segments of 16 trays (64 GPUs a rack), not 72-GPU cuts
    assert moe_segment_domain(72, 256, 4) == 64
    assert moe_segment_domain(72, 64, 4) == 72  # one rack holds the job
    assert moe_segment_domain(72, 144, 4) == 72
    assert moe_segment_domain(None, 256, 8) is None


def test_moe_host_stall_unless_cuda_graphed():
    from dataclasses import replace

    from costmodel.moe import MOE_ALLTOALL_HOST_S, MOE_HOST_STALL_S, MOE_LAUNCH_HOST_S
    from optimizer.validation.published import moe_graphed

    assert moe_graphed({"recipe_hint": {"cuda_graph_impl": "full_iteration"}})
    assert not moe_graphed({"recipe_hint": {"cuda_graph_impl": "transformer_engine",
                                            "cuda_graph_scope": ["attn", "moe_router"]}})
    assert not moe_graphed({})
    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    cols = dict(tp=[1], pp=[1], dp=[8], ep=[8], etp=[1], micro_batch_size=[1], zero_stage=[1])
    eager = _score(p, **cols)
    graphed = _score(replace(p, training=replace(p.training, moe_cuda_graph=True)), **cols)
    frac = p.model.moe_layers / p.model.num_layers
    stall = eager.layer.host_s[0] - graphed.layer.host_s[0]
    # bf16, 16 local experts: the pair's 4.7 ms less its 16 x 4 fp8 quantize launches, plus
    # the alltoall dispatcher's host time over the pair's flex dispatcher
    assert p.training.moe_dispatcher == "alltoall"
    assert stall == pytest.approx(frac * (MOE_HOST_STALL_S - 64 * MOE_LAUNCH_HOST_S
                                          + MOE_ALLTOALL_HOST_S))
    flex = _score(replace(p, training=replace(p.training, moe_dispatcher="flex")), **cols)
    assert flex.layer.host_s[0] - graphed.layer.host_s[0] == pytest.approx(
        stall - frac * MOE_ALLTOALL_HOST_S)


def test_fp8_keeps_routed_gemm_inputs_in_one_byte():
    import numpy as np

    from costmodel.batch import ConfigBatch
    from costmodel.moe import moe_activation_delta, moe_shape
    from costmodel.shard import shard_of

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    b = ConfigBatch.from_columns(tp=[1], pp=[1], dp=[8], ep=[8], etp=[1], micro_batch_size=[1])
    sh = shard_of(p.model, p.training, b, 8)
    ms = moe_shape(p.model, p.training, b, sh.tokens, sh.tp)
    rc = np.zeros(1, np.int64)
    bf16 = moe_activation_delta(p.model, sh, ms, rc, 2.0, False)
    fp8 = moe_activation_delta(p.model, sh, ms, rc, 2.0, True)
    m = p.model.moe
    # per routed copy h + f_e bytes fewer (fc1 and fc2 inputs), per token f bytes fewer removed
    # with the dense MLP's FC2 input
    want = ms.frac * (ms.routed * (sh.hidden + m.expert_ffn_hidden_size) - sh.tokens * sh.ffn)
    assert float(bf16[0] - fp8[0]) == pytest.approx(float(want[0]))


def test_torchtitan_expert_parallel_degree_and_refusals():
    from costmodel.specs import ParallelConfig
    from optimizer.launch.flags import launch_targets, torchtitan_args

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    c = ParallelConfig(tp=1, pp=1, dp=8, ep=8, etp=1, micro_batch_size=1, zero_stage=3)
    a = torchtitan_args(p.model, p.cluster, p.training, c)
    i = a.index("--parallelism.expert_parallel_degree")
    assert a[i + 1] == "8"  # torchtitan 0.3 ParallelismConfig.expert_parallel_degree
    t = launch_targets(p.model, c)
    assert not t["torchtitan"]["supported"]
    assert any("dense Llama 3" in r for r in t["torchtitan"]["reasons"])
    assert t["megatron"]["supported"]  # the Megatron flags carry the experts and MLA
    dense = torchtitan_args(p.model, p.cluster, p.training,
                            ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=1, zero_stage=3))
    assert "--parallelism.expert_parallel_degree" not in dense


def test_moe_diagnosis_lines():
    from costmodel.specs import ParallelConfig
    from optimizer.output.diagnose import _moe

    p = _problem()  # DeepSeek-V3 on 1024 H100
    # ep 64 spans 8 hosts of 8: leaves the NVLink domain, its all-to-all on the NICs
    c = ParallelConfig(tp=1, pp=16, dp=64, ep=64, etp=1, micro_batch_size=1, zero_stage=1,
                       recompute="full")
    kinds = {f.kind for f in _moe(p, c, 30.0)}
    assert "moe_ep_cross_domain" in kinds and "moe_a2a" in kinds
    small = ParallelConfig(tp=1, pp=16, dp=64, ep=1, etp=1, micro_batch_size=1, zero_stage=1,
                           recompute="full")
    assert "moe_small_experts" in {f.kind for f in _moe(p, small, 30.0)}


def test_moe_rows_without_a_recipe_inherit_the_same_layouts_earlier_hint():
    from optimizer.validation.published import inherit_moe_recipe_hints

    par = dict(tp=1, pp=1, dp=8, ep=8, micro_batch=4, global_batch=512, precision_norm="mxfp8")
    hint = {"cuda_graph_impl": "full_iteration"}
    es = [{"id": "mbridge_26p08_gb200_q_8gpu", "group": "mbridge_perf_moe",
           "model": {"name": "Q"}, "parallel": dict(par)},
          {"id": "mbridge_26p06_gb200_q_8gpu", "group": "mbridge_perf_moe",
           "model": {"name": "Q"}, "parallel": dict(par, recipe_hint=hint)},
          {"id": "mbridge_26p04_gb200_q_8gpu", "group": "mbridge_perf_moe",
           "model": {"name": "Q"}, "parallel": dict(par, recipe_hint={"x": 1})}]
    out = inherit_moe_recipe_hints(es)
    assert out[0]["parallel"]["recipe_hint"] == hint  # the latest earlier release's
    assert out[1] is es[1] and out[2] is es[2]


def test_flex_dispatcher_sends_a_token_once_per_remote_host():
    from dataclasses import replace

    from costmodel.moe import _remote_host_share

    # Qwen3-30B (128 experts, top-8) on 2 hosts: ~1 remote host per token vs 4 copies off-host
    assert _remote_host_share(128, 8, 2) == pytest.approx(0.25, rel=0.01)
    assert _remote_host_share(128, 8, 1) == 1.0
    p = _problem(model="qwen3-30b-a3b", gpus=16, seq=4096, gbs=64)
    cols = dict(tp=[1], pp=[1], dp=[16], ep=[16], etp=[1], micro_batch_size=[1], zero_stage=[1])
    a2a = _score(p, **cols).layer.tp_comm_s[0]
    flex = _score(replace(p, training=replace(p.training, moe_dispatcher="flex")),
                  **cols).layer.tp_comm_s[0]
    assert 0 < flex < 0.5 * a2a
    with pytest.raises(InputError):
        replace(p.training, moe_dispatcher="deepep")


def test_bf16_gradient_reduction_halves_dense_and_expert_gradient_buffers():
    # Megatron's --grad-reduce-in-bf16 (Megatron-Bridge's recipes): the DDP buffer takes the
    # parameters' dtype, dense and expert parameters alike (distributed_data_parallel.py)
    from dataclasses import replace

    p = _problem(model="qwen3-30b-a3b", gpus=16, seq=4096, gbs=512)
    cols = dict(tp=[1], pp=[2], dp=[8], ep=[8], etp=[1], micro_batch_size=[1], zero_stage=[1])
    a = _score(p, **cols)
    b = _score(replace(p, training=replace(p.training, grad_reduce_in_bf16=True)), **cols)
    ga, gb = a.memory.breakdown_bytes["gradients"][0], b.memory.breakdown_bytes["gradients"][0]
    # 4 bytes -> 2 bytes per parameter, plus the step's fp32 cast of the ZeRO-1 shard (4 / 8)
    assert gb < 0.7 * ga
    assert b.memory.breakdown_bytes["weights"][0] == a.memory.breakdown_bytes["weights"][0]


def test_moe_row_whose_grad_accum_contradicts_its_layout_is_skipped():
    from optimizer.validation.published import SkipEntry, moe_layout_consistent

    moe_layout_consistent({"grad_accum_reported": 8}, 512, 4, 16)  # 512 / (4 x 16) = 8
    moe_layout_consistent({}, 512, 4, 16)  # not reported: nothing to contradict
    with pytest.raises(SkipEntry, match="grad_accum_reported 2"):
        moe_layout_consistent({"grad_accum_reported": 2}, 512, 4, 16)


def test_ep_across_nvl72_trays_runs_at_the_fused_domains_ring_bandwidth():
    # nccl.md 1.1 / 7: NCCL fuses an NVL72 domain's hosts into one node, so an EP group over
    # two 4-GPU trays is priced as a one-node all-to-all (ring busBw per GPU), not at the
    # NVLink datasheet bandwidth and not on the NICs
    from dataclasses import replace

    import numpy as np

    from costmodel import collectives as coll
    from costmodel.batch import ConfigBatch
    from costmodel.groups import nccl_system
    from costmodel.moe import ep_comm_s, moe_shape
    from costmodel.shard import shard_of
    from optimizer.validation.published import build_cluster

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    p = replace(p, cluster=build_cluster("gb200", 8, 4, None, nvlink_domain=72))
    system = nccl_system(p.cluster)
    assert system.mnnvl and p.cluster.gpus_per_node == 4
    b = ConfigBatch.from_columns(tp=[1], pp=[1], dp=[8], ep=[8], etp=[1],
                                 micro_batch_size=[1], zero_stage=[1])
    sh = shard_of(p.model, p.training, b, p.cluster.gpus_per_node)
    ms = moe_shape(p.model, p.training, b, sh.tokens, sh.tp)
    got = ep_comm_s(p.cluster, system, b, ms, sh.hidden, 2.0, b.recompute, p.model, p.training)
    nbytes = ms.routed * sh.hidden * 2.0
    one = coll.alltoall_time_s(system, nbytes, np.array([8]), np.array([1]))
    assert got[0] == pytest.approx(ms.frac * 2.0 * 2.0 * one[0])  # fwd + bwd, dispatch + combine
    spec = nbytes[0] * 7 / 8 / p.cluster.gpu.nvlink_bandwidth_bytes_per_s
    assert spec < one[0] < 1.5 * spec


def test_padded_token_drop_has_no_sync_and_capacity_sets_the_expert_rows():
    # Megatron drop_and_pad: static splits, no device-to-host sync, so the host launch time H
    # overlaps the GPU (the longer of the two) instead of adding to it; every expert gets
    # capacity = cf T k / E rows
    from dataclasses import replace

    from costmodel.moe import MOE_ALLTOALL_HOST_S, MOE_HOST_STALL_S, MOE_LAUNCH_HOST_S

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=512)
    drop = replace(p, model=replace(p.model, moe=replace(p.model.moe, capacity_factor=1.25)))
    cols = dict(tp=[1, 1], pp=[1, 1], dp=[8, 8], ep=[8, 8], etp=[1, 1],
                micro_batch_size=[1, 16], zero_stage=[1, 1])
    graphed = _score(replace(p, training=replace(p.training, moe_cuda_graph=True)), **cols)
    dropless = _score(p, **cols)
    padded = _score(drop, **cols)
    frac = p.model.moe_layers / p.model.num_layers
    stall = dropless.layer.host_s - graphed.layer.host_s
    # bf16, 16 local experts, the alltoall dispatcher
    h = MOE_HOST_STALL_S - 64 * MOE_LAUNCH_HOST_S + MOE_ALLTOALL_HOST_S
    assert stall == pytest.approx([frac * h] * 2)
    extra = padded.layer.host_s - _score(replace(drop, training=replace(
        drop.training, moe_cuda_graph=True)), **cols).layer.host_s
    assert 0 < extra[1] < 0.05 * extra[0] and extra[0] < stall[0]  # mbs 16 hides H
    fc1 = padded.distinct_layers.tables[0].kernel("moe.fc1")
    fc1_dropless = dropless.distinct_layers.tables[0].kernel("moe.fc1")
    assert fc1.m[0] > fc1_dropless.m[0]  # 1.25 x the balanced rows, padded to the tile


def test_gpt_oss_biased_clamped_experts_add_their_unfused_passes():
    # core_v0.16.1 TEGroupedMLP._apply_bias (fp32 t + b p per expert, cat, cast) and the
    # clamp + cat before the fused quick-GeGLU: HBM passes a plain SwiGLU expert has not
    from dataclasses import replace

    from costmodel.batch import ConfigBatch
    from costmodel.moe import gpt_oss_expert_kernels, moe_shape
    from costmodel.shard import shard_of

    p = _problem(model="gpt-oss-120b", gpus=64, gpu="b200", seq=4096, gbs=512)
    assert p.model.moe.expert_bias and p.model.moe.activation_clamp == 7.0
    cols = dict(tp=[1], pp=[1], dp=[64], ep=[64], etp=[1], micro_batch_size=[4],
                zero_stage=[1])
    b = ConfigBatch.from_columns(**cols)
    sh = shard_of(p.model, p.training, b, p.cluster.gpus_per_node)
    ms = moe_shape(p.model, p.training, b, sh.tokens, sh.tp)
    kb, kc = gpt_oss_expert_kernels(p.model, ms, ms.routed * ms.etp, sh.hidden, 2.0)
    copies = ms.routed[0]
    assert kb.nbytes[0] == pytest.approx(28.0 * copies * 2880)  # fp32 bias rows of h
    assert kc.nbytes[0] == pytest.approx(8.0 * copies * 2880 * 2.0)  # 8 passes of f_e
    plain = replace(p.model, moe=replace(p.model.moe, expert_bias=False,
                                         activation_clamp=None))
    assert gpt_oss_expert_kernels(plain, ms, copies, sh.hidden, 2.0) == []
    with_passes = _score(p, **cols).layer
    without = _score(replace(p, model=plain), **cols).layer
    assert with_passes.forward_s[0] > without.forward_s[0]
    assert with_passes.backward_s[0] > without.backward_s[0]


def test_host_launch_time_follows_local_experts_precision_and_biases():
    # H = the measured pair's 4.7 ms (Qwen3-30B mxfp8, 16 local experts) with its per-expert
    # launches (6 GEMMs + 4 fp8 quantizes per expert, TE GroupedLinear) replaced by the layer's
    from dataclasses import replace

    import numpy as np

    from costmodel.moe import (
        MOE_ALLTOALL_HOST_S,
        MOE_HOST_STALL_S,
        MOE_LAUNCH_HOST_S,
        MoEShape,
        expert_launches,
        moe_host_launch_s,
    )

    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=512)

    def shape(local):
        one = np.ones(len(local))
        return MoEShape(one, one, np.asarray(local, float), one, one, one, one, 1.0)

    h = moe_host_launch_s(p.model, shape([16, 32, 4, 16]), np.array([1, 1, 1, 0], bool))
    assert h[0] == pytest.approx(MOE_HOST_STALL_S)  # the pair itself
    assert h[1] - h[0] == pytest.approx(16 * 10 * MOE_LAUNCH_HOST_S)
    assert h[2] < h[0] < h[1] and h[3] == pytest.approx(h[0] - 64 * MOE_LAUNCH_HOST_S)
    oss = replace(p.model, moe=replace(p.model.moe, expert_bias=True))
    assert float(expert_launches(oss, False)) == 12.0  # _apply_bias's per-expert loop
    assert float(expert_launches(p.model, True)) == 10.0
    a2a = moe_host_launch_s(p.model, shape([16]), np.array([1], bool), "alltoall")
    assert a2a[0] == pytest.approx(MOE_HOST_STALL_S + MOE_ALLTOALL_HOST_S)


def test_attention_cuda_graph_takes_its_launches_off_the_host_time():
    from dataclasses import replace

    from costmodel.moe import MOE_ATTENTION_HOST_S
    from optimizer.validation.published import moe_attention_graphed

    te = {"cuda_graph_impl": "transformer_engine"}
    assert moe_attention_graphed({"recipe_hint": {**te, "cuda_graph_scope": ["attn",
                                                                            "moe_router"]}})
    assert not moe_attention_graphed({"recipe_hint": {**te, "cuda_graph_scope": [
        "moe_router", "moe_preprocess"]}})
    assert not moe_attention_graphed({"recipe_hint": {"cuda_graph_impl": "full_iteration"}})
    p = _problem(model="qwen3-30b-a3b", gpus=8, seq=4096, gbs=64)
    cols = dict(tp=[1], pp=[1], dp=[8], ep=[8], etp=[1], micro_batch_size=[1], zero_stage=[1])
    eager = _score(p, **cols).layer.host_s[0]
    attn = _score(replace(p, training=replace(p.training, moe_attention_graphed=True)),
                  **cols).layer.host_s[0]
    frac = p.model.moe_layers / p.model.num_layers
    assert eager - attn == pytest.approx(frac * MOE_ATTENTION_HOST_S)


def _qwen32():
    return _problem(model="qwen3-30b-a3b", gpus=32, seq=4096, gbs=256)


def test_megatron_flags_carry_the_ep_overlap_only_where_it_applies():
    from costmodel.specs import ParallelConfig
    from optimizer.launch.flags import launch_bundle, megatron_args

    p = _qwen32()
    on = replace(p.training, moe_ep_overlap=True)
    flag = "--overlap-moe-expert-parallel-comm"
    pp1 = ParallelConfig(tp=1, pp=1, dp=32, ep=8, micro_batch_size=1, zero_stage=1)
    inter = ParallelConfig(tp=1, pp=2, dp=16, ep=8, micro_batch_size=1, zero_stage=1,
                           schedule="interleaved", virtual_stages=2)
    plain = ParallelConfig(tp=1, pp=2, dp=16, ep=8, micro_batch_size=1, zero_stage=1)
    assert flag in megatron_args(p.model, p.cluster, on, pp1)
    assert flag in megatron_args(p.model, p.cluster, on, inter)
    assert flag not in megatron_args(p.model, p.cluster, p.training, pp1)  # not asked for
    b = launch_bundle(p.model, p.cluster, on, plain)  # pp 2 under 1F1B: Megatron refuses
    assert flag not in b["megatron_args"]
    assert [w for w in b["warnings"] if w.startswith("moe_ep_overlap")] == [
        "moe_ep_overlap: --overlap-moe-expert-parallel-comm is not emitted (and not scored) "
        "for this configuration: Megatron-Core core_v0.16.1 needs pp = 1 or the interleaved "
        "schedule with virtual_stages > 1"]
    assert not any(w.startswith("moe_ep_overlap") for w in
                   launch_bundle(p.model, p.cluster, on, pp1)["warnings"])
    # the overlap needs more than one CUDA connection; TP on Hopper then loses its ordering
    assert launch_bundle(p.model, p.cluster, on, pp1)["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] \
        == "32"
    tp2 = ParallelConfig(tp=2, pp=1, dp=16, ep=8, micro_batch_size=1, zero_stage=1,
                         sequence_parallel=True)
    b = launch_bundle(p.model, p.cluster, on, tp2)
    assert b["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert any("advises against TP or CP" in w for w in b["warnings"])
    b = launch_bundle(p.model, p.cluster, p.training, tp2)  # no overlap: TP's one connection
    assert b["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_moe_diagnosis_reads_the_exposed_all_to_all():
    from costmodel.moe_diagnosis import moe_diagnostics
    from costmodel.specs import ParallelConfig
    from optimizer.output.diagnose import _moe

    p = _qwen32()
    on = replace(p, training=replace(p.training, moe_ep_overlap=True))
    # ep 32 spans the 4 hosts: its all-to-all on the NICs, larger than the layer's compute
    c = ParallelConfig(tp=1, pp=1, dp=32, ep=32, etp=1, micro_batch_size=1, zero_stage=1)
    d_off = moe_diagnostics(p.model, p.cluster, p.training, c)
    d_on = moe_diagnostics(on.model, on.cluster, on.training, c)
    assert not d_off["ep_overlap_applies"] and d_on["ep_overlap_applies"]
    # the share is the exposed all-to-all the step charges: per layer as the model has it
    ph = _score(on, tp=[1], pp=[1], dp=[32], ep=[32], etp=[1], micro_batch_size=[1],
                zero_stage=[1])
    m = on.training.global_batch_size / 32
    assert d_on["ep_comm_s"] == pytest.approx(float(ph.moe_ep_comm_s[0]) * 48 * m, rel=1e-12)
    assert 0 < d_on["ep_comm_s"] < d_off["ep_comm_s"]
    step = 1.5 * d_off["ep_comm_s"]  # both shares above A2A_SHARE
    off_f = [f for f in _moe(p, c, step) if f.kind == "moe_a2a"]
    on_f = [f for f in _moe(on, c, step) if f.kind == "moe_a2a"]
    assert off_f[0].levers == ("lower_ep", "a2a_overlap")
    assert on_f[0].levers == ("lower_ep",) and "left exposed" in on_f[0].message
    assert f"{d_on['ep_comm_s'] / step:.0%}" in on_f[0].message
    # asked for but not run (full recompute): the lever stays, and says what is lacking
    full = replace(c, recompute="full")
    f = [f for f in _moe(on, full, step) if f.kind == "moe_a2a"][0]
    assert "a2a_overlap" in f.levers and "no full recompute" in f.message
