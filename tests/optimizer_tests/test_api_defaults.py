"""The API's training defaults (issue 25 item 5): a catalog model's recipe sequence length,
with where it came from in ``inputs.defaults_from``."""

from __future__ import annotations

from optimizer import optimize
from optimizer.planning.recipes import api_training_defaults


def test_recipe_and_origin():
    seq, origin = api_training_defaults("llama3-70b", None, None, None, None, None)
    assert seq == 8192 and origin["seq_length"].startswith("recipe: Llama 3")
    assert origin["global_batch_size"] == "paraplan default (1024)"
    seq, origin = api_training_defaults("llama3-70b", 4096, 64, None, 70, None)
    assert seq == 4096 and origin == {"seq_length": "seq_length argument",
                                      "global_batch_size": "global_batch_size argument",
                                      "memory_limit": "memory_limit_gib argument"}
    seq, origin = api_training_defaults("llama3-8b", None, None, {"seq_length": 1024}, None,
                                        None)
    assert seq is None and origin["seq_length"] == "training argument"
    seq, origin = api_training_defaults({"name": "x"}, None, None, None, None, 0.8)
    assert seq is None and origin["seq_length"] == "paraplan default (2048)"
    assert origin["memory_limit"] == "memory_fraction 0.8 x HBM"


def test_optimize_uses_llama3_context():
    res = optimize("llama3-8b", 8, gpu="h100-sxm-80gb", global_batch_size=64,
                   sampler="random", trials=16, seed=0)
    assert res.problem.training.seq_length == 8192
    doc = res.to_dict()
    assert doc["inputs"]["training"]["seq_length"] == 8192
    assert doc["inputs"]["defaults_from"]["seq_length"].startswith("recipe: Llama 3")
