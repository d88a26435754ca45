"""Training-recipe defaults of catalog models: the sequence length each model was pre-trained
at, with its source, where the published recipe states it.

``costmodel.models_catalog`` carries shapes and ``max_position_embeddings`` but not the recipe
(Llama 3.1 405B's 131,072 positions come from a long-context stage; its pre-training ran at
8,192), so the table lives here until the catalog carries a ``training_seq_length`` field.
Models not listed (and model files) keep the TrainingSpec default, 2048.
"""

from __future__ import annotations

from typing import Any

_LLAMA1 = "LLaMA (Touvron et al. 2023, arXiv:2302.13971): context 2048"
_LLAMA2 = "Llama 2 (Touvron et al. 2023, arXiv:2307.09288, section 2.2): context 4096"
_LLAMA3 = ("Llama 3 (Llama Team 2024, arXiv:2407.21783, section 3.4): pre-training at "
           "8192 tokens")
_GPT3 = "GPT-3 (Brown et al. 2020, arXiv:2005.14165, section 2.3): context 2048"
_SC21 = "Megatron-LM (Narayanan et al. 2021, arXiv:2104.04473): sequence length 2048"
_BERT = ("BERT (Devlin et al. 2019, arXiv:1810.04805, appendix A.2): 512 (the last 10% of "
         "steps; 128 before)")

RECIPE_SEQ_LENGTH: dict[str, tuple[int, str]] = {
    "llama-7b": (2048, _LLAMA1), "llama-13b": (2048, _LLAMA1), "llama-33b": (2048, _LLAMA1),
    "llama-65b": (2048, _LLAMA1),
    "llama2-7b": (4096, _LLAMA2), "llama2-13b": (4096, _LLAMA2), "llama2-70b": (4096, _LLAMA2),
    "llama3-8b": (8192, _LLAMA3), "llama3-70b": (8192, _LLAMA3),
    "llama3-405b": (8192, _LLAMA3),
    "gpt3-175b": (2048, _GPT3),
    "bert-large": (512, _BERT),
}


def recipe_seq_length(model: Any) -> tuple[int, str] | None:
    """``(seq_length, source)`` for a catalog model name or alias, else None."""
    if not isinstance(model, str):
        return None
    from costmodel.models_catalog import resolve_model_name

    name = resolve_model_name(model)
    if name is None:
        return None
    if name in RECIPE_SEQ_LENGTH:
        return RECIPE_SEQ_LENGTH[name]
    if name.startswith("gpt-") or name.startswith("gpt3-"):  # the Megatron GPT sizes
        return 2048, _SC21
    return None


def api_training_defaults(model: Any, seq_length: int | None, global_batch_size: int | None,
                          training: Any, memory_limit_gib: float | None,
                          memory_fraction: float | None) -> tuple[int | None, dict[str, str]]:
    """For :func:`optimizer.api.optimize`: the sequence length to use (the model's recipe
    when neither ``seq_length`` nor ``training`` sets one) and where each default came from
    (``inputs.defaults_from`` of the document, as the CLI writes it)."""
    from collections.abc import Mapping

    def given(key: str) -> bool:
        if isinstance(training, Mapping):
            return training.get(key) is not None
        return training is not None  # a TrainingSpec: every field is the caller's

    origin: dict[str, str] = {}
    seq = seq_length
    if seq is not None:
        origin["seq_length"] = "seq_length argument"
    elif given("seq_length"):
        origin["seq_length"] = "training argument"
    else:
        rec = recipe_seq_length(model)
        if rec is not None:
            seq, origin["seq_length"] = rec[0], f"recipe: {rec[1]}"
        else:
            origin["seq_length"] = "paraplan default (2048)"
    origin["global_batch_size"] = (
        "global_batch_size argument" if global_batch_size is not None else
        "training argument" if given("global_batch_size") else "paraplan default (1024)")
    if memory_limit_gib is not None:
        origin["memory_limit"] = "memory_limit_gib argument"
    else:
        fraction = 0.9 if memory_fraction is None else memory_fraction
        origin["memory_limit"] = f"memory_fraction {fraction:g} x HBM"
    return seq, origin
