"""Model catalog: published transformer shapes, each with its source.

Parameter counts follow :meth:`costmodel.specs.ModelSpec.total_params` (cost-model.md
section 1). ``list_models`` counts learned position embeddings at ``max_position_embeddings``
(GPT-3 175B: 174.6e9 with s = 2048, Narayanan et al. 2021 Table 2).

Notes on what the shapes leave out:

- LLaMA/Llama use RoPE (no position parameters), RMSNorm, SwiGLU (gated MLP, three
  matrices of width ``ffn_hidden_size``), untied input/output embeddings and no biases.
- Megatron GPT sizes (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", SC21, arXiv:2104.04473, Table 1) use f = 4h, the GPT-2
  vocabulary padded to V = 51200, learned positions (s = 2048), tied embeddings, LayerNorm
  and biases.
- BERT-large is encoder-only (bidirectional attention); the cost model treats its layers like
  decoder layers. V = 30522 is the uncased WordPiece vocabulary, unpadded (Megatron pads it to
  a multiple of 128 x TP). Token-type embeddings (2h), the pooler and the MLM head transform
  are not counted.
"""

from __future__ import annotations

from costmodel.errors import InputError, did_you_mean
from costmodel.specs import MLASpec, ModelSpec, MoESpec

_LLAMA1 = ("Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models, "
           "arXiv:2302.13971, Table 2; V = 32000")
_LLAMA2 = ("Touvron et al. 2023, Llama 2, arXiv:2307.09288; HF meta-llama/Llama-2-*-hf "
           "config.json")
_LLAMA3 = ("Llama Team 2024, The Llama 3 Herd of Models, arXiv:2407.21783, Table 3; HF "
           "meta-llama/Meta-Llama-3(.1)-* config.json")
_SC21 = "Narayanan et al. 2021 (SC21), arXiv:2104.04473, Table 1"
_V3_MLA = MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                  qk_rope_head_dim=64, v_head_dim=128)


def _moe(name: str, L: int, h: int, a: int, f: int, V: int, moe: MoESpec, *, kv: int | None = None,
         head_dim: int | None = None, mla: MLASpec | None = None, max_pos: int = 4096,
         bias: bool = False, qk_norm: bool = False, sinks: bool = False,
         source: str) -> ModelSpec:
    """A MoE decoder: SwiGLU experts, RMSNorm, untied embeddings, RoPE (all the families)."""
    return ModelSpec(name=name, num_layers=L, hidden_size=h, num_attention_heads=a,
                     ffn_hidden_size=f, vocab_size=V, num_kv_heads=kv, head_dim=head_dim,
                     gated_mlp=True, tied_embeddings=False, max_position_embeddings=max_pos,
                     normalization="rmsnorm", linear_bias=bias, moe=moe, mla=mla,
                     qk_norm=qk_norm, attention_sinks=sinks, source=source)


def _moe_models() -> list[tuple[ModelSpec, tuple[str, ...]]]:
    """MoE catalog entries (HF config.json values; modern-training.md 2.1/2.6/2.7 and the
    arch_source of shared/validation/published_runs_2026.yaml; '(check)': from the
    checkpoint's config.json as recalled, not in the reference files)."""
    v3 = MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, shared_experts=1,
                 shared_ffn_hidden_size=2048, dense_layers=3, router="sigmoid", mtp_layers=1)
    k2 = MoESpec(num_experts=384, top_k=8, expert_ffn_hidden_size=2048, shared_experts=1,
                 shared_ffn_hidden_size=2048, dense_layers=1, router="sigmoid")
    oss = dict(top_k=4, expert_ffn_hidden_size=2880, router_bias=True, expert_bias=True,
               activation_clamp=7.0)  # HF swiglu_limit (modern-training.md 2.1 table)
    return [
        (_moe("deepseek-v3", 61, 7168, 128, 18432, 129280, v3, mla=_V3_MLA,
              source="DeepSeek-AI 2024, arXiv:2412.19437 section 4.2; HF deepseek-ai/"
              "DeepSeek-V3 config.json (modern-training.md 2.6/2.7); 671B total / 37B "
              "active, MTP module not counted in total_params"),
         ("deepseek-v3-671b", "dsv3")),
        (_moe("kimi-k2", 61, 7168, 64, 18432, 163840, k2, mla=_V3_MLA,
              source="Moonshot AI Kimi-K2 (DeepSeek-V3 architecture, 384 experts, 64 heads, "
              "1 dense layer) HF moonshotai/Kimi-K2-Base config.json (check); 1.04T / 32B"),
         ("kimi-k2-base", "kimi-k2-instruct")),
        (_moe("qwen3-30b-a3b", 48, 2048, 32, 6144, 151936,
              MoESpec(num_experts=128, top_k=8, expert_ffn_hidden_size=768), kv=4,
              head_dim=128, qk_norm=True,
              source="HF Qwen/Qwen3-30B-A3B config.json; Megatron-Bridge Qwen3MoEModelProvider"
              "30B_A3B (modern-training.md 2.1: 30.5B / 3.35B)"), ("qwen3-30b",)),
        (_moe("qwen3-235b-a22b", 94, 4096, 64, 12288, 151936,
              MoESpec(num_experts=128, top_k=8, expert_ffn_hidden_size=1536), kv=4,
              head_dim=128, qk_norm=True,
              source="HF Qwen/Qwen3-235B-A22B config.json; Megatron-Bridge Qwen3MoEModelProvider"
              "235B_A22B (modern-training.md 2.1: 235.1B / 22.2B)"), ("qwen3-235b",)),
        (_moe("gpt-oss-120b", 36, 2880, 64, 2880, 201088, MoESpec(num_experts=128, **oss),
              kv=8, head_dim=64, bias=True, sinks=True,
              source="HF openai/gpt-oss-120b config.json; Megatron-Bridge GPTOSSProvider120B "
              "(modern-training.md 2.7); attention biases and sinks, expert and router biases"),
         ("gpt-oss",)),
        (_moe("gpt-oss-20b", 24, 2880, 64, 2880, 201088, MoESpec(num_experts=32, **oss),
              kv=8, head_dim=64, bias=True, sinks=True,
              source="HF openai/gpt-oss-20b config.json (24 layers, 32 experts; check)"), ()),
        (_moe("mixtral-8x7b", 32, 4096, 32, 14336, 32000,
              MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336), kv=8,
              source="Jiang et al. 2024, arXiv:2401.04088; HF mistralai/Mixtral-8x7B-v0.1 "
              "config.json (modern-training.md 2.1: 46.7B / 12.9B)"), ("mixtral",)),
        (_moe("mixtral-8x22b", 56, 6144, 48, 16384, 32768,
              MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=16384), kv=8,
              source="HF mistralai/Mixtral-8x22B-v0.1 config.json (check); 141B / 39B"), ()),
        (_moe("llama4-scout", 48, 5120, 40, 16384, 202048,
              MoESpec(num_experts=16, top_k=1, expert_ffn_hidden_size=8192, shared_experts=1,
                      shared_ffn_hidden_size=8192, router="sigmoid"), kv=8, head_dim=128,
              source="HF meta-llama/Llama-4-Scout-17B-16E text_config (llama4_text; "
              "interleave_moe_layer_step 1, one shared expert; check); text model 109B / 17B"),
         ("llama-4-scout", "llama4-scout-17b-16e")),
    ]


def _llama(name: str, L: int, h: int, a: int, f: int, *, kv: int | None = None,
           V: int = 32000, max_pos: int = 2048, source: str) -> ModelSpec:
    return ModelSpec(name=name, num_layers=L, hidden_size=h, num_attention_heads=a,
                     ffn_hidden_size=f, vocab_size=V, num_kv_heads=kv, gated_mlp=True,
                     tied_embeddings=False, max_position_embeddings=max_pos,
                     normalization="rmsnorm", linear_bias=False, source=source)


def _gpt(name: str, L: int, h: int, a: int, *, V: int = 51200, s: int = 2048,
         source: str = _SC21) -> ModelSpec:
    return ModelSpec(name=name, num_layers=L, hidden_size=h, num_attention_heads=a,
                     ffn_hidden_size=4 * h, vocab_size=V, gated_mlp=False, tied_embeddings=True,
                     learned_position_embeddings=True, max_position_embeddings=s,
                     linear_bias=True, normalization="layernorm", source=source)


# name -> (spec, aliases)
_MODELS: dict[str, tuple[ModelSpec, tuple[str, ...]]] = {
    m.name: (m, aliases)
    for m, aliases in (
        (_llama("llama-7b", 32, 4096, 32, 11008, source=_LLAMA1), ("7b", "llama1-7b")),
        (_llama("llama-13b", 40, 5120, 40, 13824, source=_LLAMA1), ("13b", "llama1-13b")),
        (_llama("llama-33b", 60, 6656, 52, 17920, source=_LLAMA1),
         ("33b", "llama-30b", "llama1-33b")),
        (_llama("llama-65b", 80, 8192, 64, 22016, source=_LLAMA1), ("65b", "llama1-65b")),
        (_llama("llama2-7b", 32, 4096, 32, 11008, max_pos=4096, source=_LLAMA2),
         ("llama-2-7b",)),
        (_llama("llama2-13b", 40, 5120, 40, 13824, max_pos=4096, source=_LLAMA2),
         ("llama-2-13b",)),
        (_llama("llama2-70b", 80, 8192, 64, 28672, kv=8, max_pos=4096, source=_LLAMA2),
         ("70b", "llama-2-70b")),
        (_llama("llama3-8b", 32, 4096, 32, 14336, kv=8, V=128256, max_pos=8192,
                source=_LLAMA3), ("8b", "llama-3-8b", "llama3.1-8b")),
        (_llama("llama3-70b", 80, 8192, 64, 28672, kv=8, V=128256, max_pos=8192,
                source=_LLAMA3), ("llama-3-70b", "llama3.1-70b")),
        (_llama("llama3-405b", 126, 16384, 128, 53248, kv=8, V=128256, max_pos=131072,
                source=_LLAMA3 + " (Llama 3.1 only)"), ("405b", "llama-3-405b", "llama3.1-405b")),
        (_gpt("gpt3-175b", 96, 12288, 96,
              source="Brown et al. 2020, arXiv:2005.14165, Table 2.1; V = 51200 as padded by "
              "Megatron (Narayanan et al. 2021 Table 2)"), ("175b", "gpt3", "gpt-3")),
        (ModelSpec(name="bert-large", num_layers=24, hidden_size=1024, num_attention_heads=16,
                   ffn_hidden_size=4096, vocab_size=30522, gated_mlp=False, tied_embeddings=True,
                   learned_position_embeddings=True, max_position_embeddings=512,
                   linear_bias=True, normalization="layernorm", causal=False,
                   source="Devlin et al. 2019, arXiv:1810.04805; HF bert-large-uncased "
                   "config.json; encoder-only, V unpadded"), ("bert-large-uncased",)),
        (_gpt("gpt-1.7b", 24, 2304, 24), ("1.7b",)),
        (_gpt("gpt-3.6b", 30, 3072, 32), ("3.6b",)),
        (_gpt("gpt-7.5b", 36, 4096, 32), ("7.5b",)),
        (_gpt("gpt-18b", 40, 6144, 48), ("18b", "gpt-18.4b")),
        (_gpt("gpt-39b", 48, 8192, 64), ("39b", "gpt-39.1b")),
        (_gpt("gpt-76b", 60, 10240, 80), ("76b", "gpt-76.1b")),
        (_gpt("gpt-145b", 80, 12288, 96), ("145b", "gpt-145.6b")),
        (_gpt("gpt-310b", 96, 16384, 128), ("310b", "gpt-310.1b")),
        (_gpt("gpt-530b", 105, 20480, 128), ("530b", "gpt-529.6b")),
        (_gpt("gpt-1t", 128, 25600, 160), ("1t", "gpt-1008b")),
        *_moe_models(),
    )
}

_ALIASES: dict[str, str] = {a: name for name, (_, aliases) in _MODELS.items() for a in aliases}


def resolve_model_name(name: str) -> str | None:
    """The catalog name for a name or alias (case-insensitive), or None."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    return key if key in _MODELS else None


def get_model(name: str) -> ModelSpec:
    """The catalog entry for a model name or alias."""
    key = resolve_model_name(name)
    if key is None:
        raise InputError("model", f"unknown model {name!r}",
                         did_you_mean(str(name).strip().lower(), [*_MODELS, *_ALIASES]))
    return _MODELS[key][0]


def catalog_params(spec: ModelSpec) -> int:
    """Total parameters, counting learned positions at ``max_position_embeddings``."""
    s = (spec.max_position_embeddings or 0) if spec.learned_position_embeddings else 0
    return spec.total_params(s)


def list_models() -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """Rows ``(name, aliases, total_params)`` in catalog order."""
    return tuple((name, aliases, catalog_params(m)) for name, (m, aliases) in _MODELS.items())
