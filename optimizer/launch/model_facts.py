"""Model-definition facts the launch flags need that :class:`costmodel.specs.ModelSpec` does not
carry (yet): position-embedding kind (RoPE, learned, ALiBi, none), the rotary base and the
Llama 3.1 rope scaling, the normalisation epsilon, q/k/v biases and q/k norms, the MLP's
activation function.

A read-only helper: nothing here changes what the cost model scores. The facts come, in this
order, from

1. attributes of the ``ModelSpec`` itself when it has them (``rope_theta``,
   ``rope_scaling_factor``, ``norm_eps``, ``position_embedding``, ``qkv_bias``, ``qk_norm``,
   ``activation``:
   read with ``getattr`` so that a later ModelSpec that carries them wins);
2. the catalog entries' published configurations (``config.json`` of the Hugging Face
   checkpoints the catalog cites; Megatron's own defaults for the SC21 GPT sizes);
3. the Hugging Face ``model_type`` named in ``ModelSpec.source`` (the class defaults of the
   transformers configuration), marked ``exact=False`` so that the launch bundle warns that
   the value was not read from the checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from costmodel.specs import ModelSpec

__all__ = ["ModelFacts", "model_facts"]

POSITIONS: tuple[str, ...] = ("rope", "learned", "alibi", "none")


@dataclass(frozen=True)
class ModelFacts:
    """What a framework needs to build the same model as the one scored."""

    position: str  # rope | learned | alibi | none
    rope_base: float | None = None  # HF rope_theta
    rope_scaling_factor: float | None = None  # Llama 3.1 "llama3" rope scaling (factor 8)
    norm_eps: float = 1e-5
    qkv_bias: bool = False  # q/k/v biases without the other linear biases (Qwen2)
    qk_norm: bool = False  # RMSNorm on q and k (Qwen3, OLMo 2)
    exact: bool = True  # False: family defaults, not read from the checkpoint's config
    source: str = ""
    # costmodel.specs.ACTIVATIONS; None: the usual one for the MLP (silu gated, gelu plain)
    activation: str | None = None


_LLAMA1 = ModelFacts("rope", 10000.0, None, 1e-6, source="HF huggyllama/llama-* config.json")
_LLAMA2 = ModelFacts("rope", 10000.0, None, 1e-5, source="HF meta-llama/Llama-2-*-hf config.json")
_LLAMA3 = ModelFacts("rope", 500000.0, None, 1e-5,
                     source="HF meta-llama/Meta-Llama-3-* config.json")
_LLAMA31 = ModelFacts("rope", 500000.0, 8.0, 1e-5,
                      source="HF meta-llama/Llama-3.1-* config.json (rope_scaling llama3, "
                             "factor 8, original context 8192)")
_GPT_SC21 = ModelFacts("learned", None, None, 1e-5,
                       source="Megatron-LM GPT defaults (Narayanan et al. 2021)")
_BERT = ModelFacts("learned", None, None, 1e-12, source="HF bert-large-uncased config.json")

_CATALOG: dict[str, ModelFacts] = {
    "llama-7b": _LLAMA1, "llama-13b": _LLAMA1, "llama-33b": _LLAMA1, "llama-65b": _LLAMA1,
    "llama2-7b": _LLAMA2, "llama2-13b": _LLAMA2, "llama2-70b": _LLAMA2,
    "llama3-8b": _LLAMA3, "llama3-70b": _LLAMA3, "llama3-405b": _LLAMA31,
    "gpt3-175b": _GPT_SC21, "bert-large": _BERT,
    **{n: _GPT_SC21 for n in ("gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18b", "gpt-39b",
                              "gpt-76b", "gpt-145b", "gpt-310b", "gpt-530b", "gpt-1t")},
}

# transformers configuration class defaults per model_type (rope_theta, eps, position kind).
_HF_FAMILIES: dict[str, ModelFacts] = {
    "llama": ModelFacts("rope", 10000.0, None, 1e-6),
    "mistral": ModelFacts("rope", 10000.0, None, 1e-6),
    "mixtral": ModelFacts("rope", 1e6, None, 1e-5),
    "qwen2": ModelFacts("rope", 10000.0, None, 1e-6, qkv_bias=True),
    "qwen3": ModelFacts("rope", 10000.0, None, 1e-6, qk_norm=True),
    "olmo2": ModelFacts("rope", 10000.0, None, 1e-5, qk_norm=True),
    "gemma": ModelFacts("rope", 10000.0, None, 1e-6, activation="gelu_tanh"),
    "gemma2": ModelFacts("rope", 10000.0, None, 1e-6, activation="gelu_tanh"),
    "gemma3_text": ModelFacts("rope", 1e6, None, 1e-6, qk_norm=True, activation="gelu_tanh"),
    "phi": ModelFacts("rope", 10000.0, None, 1e-5, activation="gelu_tanh"),
    "phi3": ModelFacts("rope", 10000.0, None, 1e-5),
    "starcoder2": ModelFacts("rope", 10000.0, None, 1e-5, activation="gelu_tanh"),
    "gptj": ModelFacts("rope", 10000.0, None, 1e-5, activation="gelu_tanh"),
    "gpt_neox": ModelFacts("rope", 10000.0, None, 1e-5),
    "falcon": ModelFacts("rope", 10000.0, None, 1e-5),
    "gpt2": ModelFacts("learned", None, None, 1e-5, activation="gelu_tanh"),
    "opt": ModelFacts("learned", None, None, 1e-5, activation="relu"),
    "bert": ModelFacts("learned", None, None, 1e-12),
    "roberta": ModelFacts("learned", None, None, 1e-5),
    "bloom": ModelFacts("alibi", None, None, 1e-5, activation="gelu_tanh"),
    "mpt": ModelFacts("alibi", None, None, 1e-5),
}
_HF_SOURCE = re.compile(r"model_type '([A-Za-z0-9_]+)'")


def _from_spec_fields(model: ModelSpec, facts: ModelFacts) -> ModelFacts:
    """Overlay whatever the ModelSpec itself carries (fields a later ModelSpec may add)."""
    kw = {}
    pos = getattr(model, "position_embedding", None)
    if isinstance(pos, str) and pos in POSITIONS:
        kw["position"] = pos
    for attr, key in (("rope_theta", "rope_base"), ("rope_base", "rope_base"),
                      ("rope_scaling_factor", "rope_scaling_factor"), ("norm_eps", "norm_eps"),
                      ("norm_epsilon", "norm_eps")):
        v = getattr(model, attr, None)
        if isinstance(v, int | float) and not isinstance(v, bool):
            kw[key] = float(v)
    for attr in ("qkv_bias", "qk_norm"):
        v = getattr(model, attr, None)
        if isinstance(v, bool):
            kw[attr] = v
    act = getattr(model, "activation", None)
    if isinstance(act, str):
        kw["activation"] = act
    if not kw:
        return facts
    out = replace(facts, **kw)
    # exact only when the spec itself names what the flags need: the position kind, the
    # epsilon, and the rotary base for RoPE (a partial spec keeps the defaults' warning)
    known = ("position" in kw and "norm_eps" in kw
             and (out.position != "rope" or "rope_base" in kw))
    return replace(out, exact=True, source="the model's own configuration") if known else out


def model_facts(model: ModelSpec) -> ModelFacts:
    """The definition facts for ``model`` (see the module docstring for the order)."""
    if model.learned_position_embeddings:
        base = ModelFacts("learned", None, None, 1e-5, exact=False,
                          source="learned positions (ModelSpec); epsilon: Megatron's default")
    else:
        base = ModelFacts("rope", 10000.0, None, 1e-5, exact=False,
                          source="no definition facts known: Megatron/HF defaults")
    facts = _CATALOG.get(model.name)
    if facts is not None and facts.position == base.position:
        base = facts
    else:
        m = _HF_SOURCE.search(model.source or "")
        fam = _HF_FAMILIES.get(m.group(1)) if m else None
        if fam is not None:
            base = replace(fam, exact=False,
                           source=f"transformers {m.group(1)} configuration defaults")
            if fam.position == "learned" and not model.learned_position_embeddings:
                base = replace(base, position="rope", rope_base=10000.0)
    facts = _from_spec_fields(model, base)
    if facts.activation is None:  # the usual MLP: SwiGLU gated, GELU plain
        facts = replace(facts, activation="silu" if model.gated_mlp else "gelu")
    return facts
