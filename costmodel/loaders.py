"""Input documents -> spec records (contract.md section 2).

- :func:`load_model`: a catalog name or alias, a model YAML/JSON (contract keys), or a Hugging
  Face ``config.json`` (ecosystem.md section 3), or a directory holding one.
- :func:`load_cluster`: a preset name, a cluster YAML/JSON (short form, with human units:
  ``bandwidth_GBps`` = gigabytes/s, ``nic_bandwidth_Gbps`` = gigabits/s, ``latency_us``), or a
  networkx node-link JSON graph (handed to :func:`costmodel.topology.cluster_from_graph`).
- :func:`load_run`: the ``model``/``cluster``/``training``/``parallel`` document of
  ``optimize evaluate``; relative paths resolve against the run file's directory.

Documents are parsed with ``yaml.safe_load`` semantics (the C loader when available; duplicate
keys are errors) or ``json``. Every problem is an :class:`~costmodel.errors.InputError` naming the
field; unknown keys are errors in paraplan's own formats and ignored in Hugging Face files,
which carry many keys the cost model does not need. Imports stay light (PyYAML is imported on
first use; no numpy/networkx) so the CLI starts fast.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from costmodel import safe_io
from costmodel.errors import (
    MAX_NESTING_DEPTH,
    InputError,
    check_keys,
    check_nesting,
    did_you_mean,
)
from costmodel.hardware import (
    IB_LATENCY_S,
    NVLINK_LATENCY_S,
    PCIE_LATENCY_S,
    ROCE_LATENCY_S,
    default_node_fabric,
    get_cluster_preset,
    get_gpu,
    is_cluster_preset,
    list_cluster_presets,
    split_gpus,
)
from costmodel.models_catalog import get_model, list_models, resolve_model_name
from costmodel.specs import (
    INTER_FABRICS,
    INTRA_FABRICS,
    PRECISIONS,
    ClusterSpec,
    GPUSpec,
    InterNodeSpec,
    IntraNodeSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
)

__all__ = [
    "Run",
    "cluster_from_mapping",
    "gpu_from_mapping",
    "load_cluster",
    "load_model",
    "load_run",
    "model_from_mapping",
    "parse_document",
    "read_document",
]

_DOC_SUFFIXES = (".json", ".yaml", ".yml")


# ==== documents =============================================================================
_YAML_LOADER: Any = None
_ROOT = object()  # the index of a document's root node (it has no name in its parent)


def _yaml_loader() -> Any:
    """A safe YAML loader (libyaml's parser when available) that rejects duplicate keys and
    bounds the nesting while it composes (:class:`_DepthComposer`), in the one pass that
    builds the document."""
    global _YAML_LOADER
    if _YAML_LOADER is None:
        import yaml
        from yaml.composer import Composer

        class _DepthComposer(Composer):
            """PyYAML's composer counting the open collections (and what an alias brings in)
            against :data:`MAX_NESTING_DEPTH`. Deeper documents would make every later
            ``repr`` or recursive walk hit Python's recursion limit, and libyaml's own
            composer recurses in C (about 100,000 levels crash the process), so the composing
            is done here, in Python, over libyaml's events. The error names the path of
            keys/indices down to the offending level (its first four steps)."""

            def compose_document(self) -> Any:
                self._names: list[str] = []  # one per open collection
                self._heights: dict[int, int] = {}  # id(anchored collection) -> its levels
                self._deepest = 0  # deepest level reached inside the open collection
                self._index: Any = None  # what the next collection is in its parent
                return super().compose_document()

            def compose_node(self, parent: Any, index: Any) -> Any:
                if self.check_event(yaml.AliasEvent):
                    mark = self.peek_event().start_mark
                    node = super().compose_node(parent, index)
                    if isinstance(node, yaml.CollectionNode):
                        # an alias to an open collection (a cycle) nests without end
                        reach = len(self._names) + self._heights.get(id(node),
                                                                      MAX_NESTING_DEPTH + 1)
                        if reach > MAX_NESTING_DEPTH:
                            self._too_deep(mark, self._name(index), " through an alias")
                        self._deepest = max(self._deepest, reach)
                    return node
                self._index = index if parent is not None else _ROOT
                return super().compose_node(parent, index)

            def compose_sequence_node(self, anchor: Any) -> Any:
                saved = self._open()
                return self._close(super().compose_sequence_node(anchor), anchor, saved)

            def compose_mapping_node(self, anchor: Any) -> Any:
                saved = self._open()
                return self._close(super().compose_mapping_node(anchor), anchor, saved)

            def _open(self) -> int:
                self._names.append(self._name(self._index))
                if len(self._names) > MAX_NESTING_DEPTH:
                    self._too_deep(self.peek_event().start_mark)
                saved, self._deepest = self._deepest, len(self._names)
                return saved

            def _close(self, node: Any, anchor: Any, saved: int) -> Any:
                if anchor is not None:  # only anchored collections can be aliased
                    self._heights[id(node)] = self._deepest - len(self._names) + 1
                self._deepest = max(saved, self._deepest)
                self._names.pop()
                return node

            @staticmethod
            def _name(index: Any) -> str:
                if index is _ROOT:
                    return ""
                if isinstance(index, int):
                    return f"[{index}]"
                if isinstance(index, yaml.ScalarNode):
                    return f".{index.value}"
                return ".?"  # a mapping key, or the value of a complex key

            def _too_deep(self, mark: Any, extra: str = "", how: str = "") -> None:
                path = self._field + "".join(self._names[1:5]) + \
                    (extra if len(self._names) < 5 else "")
                raise InputError(path, f"{self._source}: nested more than "
                                       f"{MAX_NESTING_DEPTH} levels deep{how} (line "
                                       f"{mark.line + 1} column {mark.column + 1})")

        def construct_mapping(self: Any, node: Any, deep: bool = False) -> Any:
            seen: set[str] = set()
            for key_node, _ in (node.value if isinstance(node, yaml.MappingNode) else ()):
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != \
                        "tag:yaml.org,2002:merge":
                    if key_node.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key_node.value!r}",
                            key_node.start_mark)
                    seen.add(key_node.value)
            return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

        if hasattr(yaml, "CSafeLoader"):  # libyaml's events; the composer above comes first
            class _Loader(_DepthComposer, yaml.CSafeLoader):  # in the MRO, before CParser's
                def __init__(self, stream: Any) -> None:
                    yaml.CSafeLoader.__init__(self, stream)
                    Composer.__init__(self)
        else:  # pragma: no cover - PyYAML without libyaml
            class _Loader(_DepthComposer, yaml.SafeLoader):  # type: ignore[no-redef]
                pass

        _Loader.construct_mapping = construct_mapping  # type: ignore[method-assign]
        _YAML_LOADER = safe_io.strict_yaml_loader(_Loader)
    return _YAML_LOADER


def _load_yaml(yaml: Any, text: str, field: str, source: str) -> Any:
    loader = _yaml_loader()(text)
    loader._field, loader._source = field, source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def parse_document(text: str, *, field: str, source: str = "<input>",
                   json_only: bool = False) -> Any:
    """Parse YAML (a superset of the JSON we accept) or, with ``json_only``, strict JSON.

    Lists and mappings may nest at most :data:`costmodel.errors.MAX_NESTING_DEPTH` levels
    (an :class:`InputError` on ``field`` otherwise): deeper documents parse (libyaml has no
    limit) but would make every later ``repr`` or recursive check hit Python's recursion
    limit."""
    doc = _parse(text, field=field, source=source, json_only=json_only)
    if json_only:  # YAML: bounded while composing (_yaml_loader), aliases included
        check_nesting(field, doc)
    return doc


def _parse(text: str, *, field: str, source: str, json_only: bool) -> Any:
    if json_only:
        try:
            return json.loads(text, object_pairs_hook=_no_duplicate_keys,
                              parse_constant=_reject_json_constant)
        except json.JSONDecodeError as e:
            raise InputError(field, f"{source}: invalid JSON at line {e.lineno} column "
                                    f"{e.colno}: {e.msg}") from None
        except _DuplicateKey as e:
            raise InputError(field, f"{source}: invalid JSON: duplicate key {e.args[0]!r}") \
                from None
        except _NotJsonNumber as e:
            raise InputError(field, f"{source}: invalid JSON: {e.args[0]} is not a JSON "
                                    "number") from None
        except RecursionError:
            raise InputError(field, f"{source}: invalid JSON: nested too deeply") from None
    import yaml

    try:
        return _load_yaml(yaml, text, field, source)  # safe: SafeConstructor, one pass
    except InputError:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = e.problem or e.context or "syntax error"
        raise InputError(field, f"{source}: invalid YAML{where}: {what}") from None
    except yaml.YAMLError as e:
        raise InputError(field, f"{source}: invalid YAML: {e}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            RecursionError) as e:
        # PyYAML's safe constructors raise plain exceptions for explicitly tagged scalars
        # they cannot convert (`!!timestamp x`, `!!float name`, `!!int ''`, `!!bool x`)
        raise InputError(field, f"{source}: invalid YAML: cannot read a tagged value "
                                f"({type(e).__name__}: {e})") from None


class _NotJsonNumber(Exception):
    pass


def _reject_json_constant(name: str) -> Any:
    raise _NotJsonNumber(name)  # NaN, Infinity, -Infinity: Python's json accepts them


def expand_user(path: str | Path, field: str) -> Path:
    """``Path(path).expanduser()``, with a '~user' that does not exist (pathlib raises
    RuntimeError) reported as an InputError on ``field``."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise InputError(field, f"cannot expand '~' in {str(path)!r}: no such user",
                         "give an absolute or relative path") from None


def read_document(path: str | Path, *, field: str) -> Any:
    """Read and parse one YAML/JSON file; ``field`` names the input in error messages."""
    p = expand_user(path, field)
    try:
        raw = safe_io.read_input_bytes(p, field)  # regular files only, size-bounded
    except FileNotFoundError:
        raise InputError(field, f"file not found: {p}") from None
    except IsADirectoryError:
        raise InputError(field, f"{p} is a directory", "expected a YAML or JSON file") from None
    except OSError as e:
        raise InputError(field, f"cannot read {p}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(field, f"{p} is not a UTF-8 text file (undecodable byte at offset "
                                f"{e.start})", "expected a YAML or JSON file") from None
    if "\x00" in text:
        raise InputError(field, f"{p} is a binary file", "expected a YAML or JSON file")
    if not text.strip():
        raise InputError(field, f"{p} is empty")
    with safe_io.parse_errors(field, str(p)):
        doc = parse_document(text, field=field, source=str(p),
                             json_only=p.suffix.lower() == ".json")
    return safe_io.check_document(doc, field, str(p))


def _mapping(field: str, value: Any, what: str = "a mapping") -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be {what}, got {type(value).__name__} {_short(value)}")
    return {str(k): v for k, v in value.items()}


_SHORT_REPR = reprlib.Repr()  # keyword arguments need Python 3.12
_SHORT_REPR.maxlevel = 4


def _short(value: Any) -> str:
    """At most 60 characters of ``repr(value)``. A value nested more than 20 levels is shown
    four levels deep (its plain ``repr`` would raise RecursionError past ~1,000 levels)."""
    try:
        check_nesting("", value, limit=20)
        text = repr(value)
    except InputError:
        text = _SHORT_REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_keys(section: str, data: Mapping[str, Any], allowed: Any) -> None:
    """check_keys plus a pointed hint for unit-case mistakes (GBps vs Gbps)."""
    allowed = tuple(allowed)
    lower = {a.lower(): a for a in allowed}
    for key in data:
        if key not in allowed and key.lower() in lower:
            raise InputError(f"{section}.{key}", "unknown key",
                             f"did you mean {lower[key.lower()]!r}? keys are case-sensitive: "
                             "GBps = gigabytes/s, Gbps = gigabits/s")
    check_keys(section, dict(data), allowed)


def _refield(err: InputError, old_prefix: str, new_prefix: str) -> InputError:
    if err.field.startswith(old_prefix):
        return InputError(new_prefix + err.field[len(old_prefix):], err.message, err.hint)
    return err


def _num(field: str, value: Any, *, allow_zero: bool = False, integer: bool = False,
         minimum: float | None = None) -> float:
    """A number from a document, with a hint for YAML 1.1 reading ``3e12`` as a string."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        hint = None
        if isinstance(value, str):
            try:
                float(value)
                hint = ("quoted or YAML 1.1 exponent form: write a plain number such as "
                        "3.0e+12 or 3000")
            except ValueError:
                pass
        raise InputError(field, f"must be a number, got {_short(value)}", hint)
    if not math.isfinite(value):
        raise InputError(field, f"must be a finite number, got {value!r}")
    if integer and int(value) != value:
        raise InputError(field, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InputError(field, f"must be >= {minimum:g}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(field, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return int(value) if integer else float(value)


def _looks_like_path(ref: str, base_dir: Path | None) -> bool:
    return ("/" in ref or "\\" in ref or ref.startswith((".", "~"))
            or ref.lower().endswith(_DOC_SUFFIXES) or _resolve(ref, base_dir).exists())


def _resolve(ref: str | Path, base_dir: Path | None, field: str = "path") -> Path:
    p = expand_user(ref, field)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p


# ==== models ================================================================================
_MODEL_KEYS = tuple(f.name for f in fields(ModelSpec))
_MODEL_REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                   "vocab_size")
_CONTRACT_ONLY = ("num_layers", "ffn_hidden_size", "num_kv_heads", "gated_mlp",
                  "tied_embeddings", "normalization", "linear_bias",
                  "learned_position_embeddings")
_HF_MARKERS = ("model_type", "architectures", "transformers_version", "num_hidden_layers",
               "intermediate_size", "num_key_value_heads", "n_layer", "n_embd", "n_head")


@dataclass(frozen=True)
class _HFFamily:
    """How one ``model_type`` names its fields and what its config class defaults are."""

    keys: Mapping[str, tuple[str, ...]]  # ModelSpec field -> HF names, first found wins
    tied: bool  # class default of tie_word_embeddings
    gated: bool | None  # None: from the activation
    norm: str | None  # None: from the *_eps key present
    learned_pos: bool
    bias: bool | None  # None: attention_bias or mlp_bias


_LLAMA_KEYS: Mapping[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers",),
    "hidden_size": ("hidden_size",),
    "num_attention_heads": ("num_attention_heads",),
    "ffn_hidden_size": ("intermediate_size",),
    "vocab_size": ("vocab_size",),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "max_position_embeddings": ("max_position_embeddings",),
}
_GPT2_KEYS: Mapping[str, tuple[str, ...]] = {  # GPT2Config.attribute_map names as fallback
    "num_layers": ("n_layer", "num_hidden_layers"),
    "hidden_size": ("n_embd", "hidden_size"),
    "num_attention_heads": ("n_head", "num_attention_heads"),
    "ffn_hidden_size": ("n_inner",),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("n_positions", "max_position_embeddings"),
}
_FALCON_KEYS: Mapping[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer"),
    "hidden_size": ("hidden_size",),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "ffn_hidden_size": ("ffn_hidden_size",),  # None -> 4 h
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings",),
}
_OPT_KEYS: Mapping[str, tuple[str, ...]] = {**_LLAMA_KEYS, "ffn_hidden_size": ("ffn_dim",)}
_BLOOM_KEYS: Mapping[str, tuple[str, ...]] = {  # BloomConfig.attribute_map names as fallback
    "num_layers": ("n_layer", "num_hidden_layers"),
    "hidden_size": ("hidden_size", "n_embed"),
    "num_attention_heads": ("n_head", "num_attention_heads"),
    "vocab_size": ("vocab_size",),
}
_MPT_KEYS: Mapping[str, tuple[str, ...]] = {
    "num_layers": ("n_layers", "num_hidden_layers"),
    "hidden_size": ("d_model", "hidden_size"),
    "num_attention_heads": ("n_heads", "num_attention_heads"),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_seq_len", "max_position_embeddings"),
}
#: Families whose FFN width is a multiple of h when the config gives none (n_inner None,
#: ffn_hidden_size None, BLOOM's fixed 4 h, MPT's expansion_ratio).
_FFN_MULTIPLE = {"gpt2": 4, "gptj": 4, "falcon": 4, "bloom": 4, "mpt": 4}
_ROPE_GATED = _HFFamily(_LLAMA_KEYS, tied=False, gated=True, norm="rmsnorm", learned_pos=False,
                        bias=None)
# Class defaults from transformers' configuration_<model_type>.py (tie_word_embeddings: False
# for Llama, Mistral, Qwen2/3, GPT-NeoX; True for Gemma, GPT-2, BERT). Qwen2's q/k/v biases
# ((a + 2g)·d_h per layer, < 0.01 % of the parameters) are not representable and not counted.
_HF_FAMILIES: dict[str, _HFFamily] = {
    "llama": _ROPE_GATED,
    "mistral": _ROPE_GATED,
    "qwen2": _ROPE_GATED,
    "qwen3": _ROPE_GATED,
    # MoE families (modern-training.md 2.7): the attention and dense fields are Llama's
    "mixtral": _ROPE_GATED,
    "qwen2_moe": _ROPE_GATED,
    "qwen3_moe": _ROPE_GATED,
    "deepseek_v2": _ROPE_GATED,
    "deepseek_v3": _ROPE_GATED,
    "kimi_k2": _ROPE_GATED,
    "llama4_text": _ROPE_GATED,
    "gpt_oss": _HFFamily(_LLAMA_KEYS, tied=False, gated=True, norm="rmsnorm", learned_pos=False,
                         bias=None),
    "gemma": _HFFamily(_LLAMA_KEYS, tied=True, gated=True, norm="rmsnorm", learned_pos=False,
                       bias=False),
    "gemma2": _HFFamily(_LLAMA_KEYS, tied=True, gated=True, norm="rmsnorm", learned_pos=False,
                        bias=False),
    "gpt2": _HFFamily(_GPT2_KEYS, tied=True, gated=False, norm="layernorm", learned_pos=True,
                      bias=True),
    "gpt_neox": _HFFamily(_LLAMA_KEYS, tied=False, gated=False, norm="layernorm",
                          learned_pos=False, bias=True),
    "bert": _HFFamily(_LLAMA_KEYS, tied=True, gated=False, norm="layernorm", learned_pos=True,
                      bias=True),
    # issue 24: families that name their fields otherwise (transformers' configuration_*.py
    # and modeling_*.py; counts checked on the meta device, tests/clients)
    "gemma3_text": _HFFamily(_LLAMA_KEYS, tied=True, gated=True, norm="rmsnorm",
                             learned_pos=False, bias=False),  # GeGLU (gelu_pytorch_tanh)
    "falcon": _HFFamily(_FALCON_KEYS, tied=True, gated=False, norm="layernorm",
                        learned_pos=False, bias=None),  # bias: the config's "bias"
    "opt": _HFFamily(_OPT_KEYS, tied=True, gated=False, norm="layernorm", learned_pos=True,
                     bias=None),  # bias: enable_bias
    "gptj": _HFFamily(_GPT2_KEYS, tied=False, gated=False, norm="layernorm", learned_pos=False,
                      bias=False),  # fc_in/fc_out and lm_head biases (< 0.01 %) not counted
    "bloom": _HFFamily(_BLOOM_KEYS, tied=True, gated=False, norm="layernorm",
                       learned_pos=False, bias=True),  # ALiBi
    "mpt": _HFFamily(_MPT_KEYS, tied=True, gated=False, norm="layernorm", learned_pos=False,
                     bias=None),  # bias: not no_bias; positions: ALiBi or learned
    "phi": _HFFamily(_LLAMA_KEYS, tied=False, gated=False, norm="layernorm",
                     learned_pos=False, bias=True),  # lm_head bias not counted
    "starcoder2": _HFFamily(_LLAMA_KEYS, tied=True, gated=False, norm="layernorm",
                            learned_pos=False, bias=None),  # bias: use_bias
}
#: Norms per layer where it is not 2 (pre-attention, pre-MLP): parallel blocks with one input
#: norm, Gemma 2/3's pre and post norms around attention and MLP.
_NORMS_PER_LAYER = {"gptj": 1, "phi": 1, "gemma2": 4, "gemma3_text": 4}
_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon",
             "norm_epsilon", "norm_eps")
# Unknown model_type: Llama-style names, gating from the activation, the norm from the *_eps
# key, biases from attention_bias/mlp_bias, and PretrainedConfig's tie_word_embeddings=True.
_HF_GENERIC = _HFFamily(_LLAMA_KEYS, tied=True, gated=None, norm=None, learned_pos=False,
                        bias=None)
_GATED_ACTS = ("silu", "swiglu", "swish", "geglu")
_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx",
              "olmoe", "jamba", "phimoe", "granitemoe", "minimax", "llama4", "llama4_text",
              "gpt_oss")
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def _is_hf_config(data: Mapping[str, Any]) -> bool:
    if any(k in data for k in ("model_type", "architectures", "transformers_version")):
        return True
    return not any(k in data for k in _CONTRACT_ONLY) and any(k in data for k in _HF_MARKERS)


def model_from_mapping(data: Mapping[str, Any], *, default_name: str = "custom-model",
                       field: str = "model") -> ModelSpec:
    """A ModelSpec from contract keys or from a Hugging Face config mapping."""
    data = _mapping(field, data)
    if _is_hf_config(data):
        return _model_from_hf(data, default_name=default_name, field=field)
    _check_keys(field, data, _MODEL_KEYS)
    for key in _MODEL_REQUIRED:
        if data.get(key) is None:
            raise InputError(f"{field}.{key}", "missing required key",
                             "a model needs " + ", ".join(_MODEL_REQUIRED))
    kwargs = {k: v for k, v in data.items() if v is not None}
    kwargs.setdefault("name", default_name)
    for key, cls in (("moe", MoESpec), ("mla", MLASpec)):
        if key in kwargs and not isinstance(kwargs[key], cls):
            sub = _mapping(f"{field}.{key}", kwargs[key])
            known = tuple(f.name for f in fields(cls))
            _check_keys(f"{field}.{key}", sub, known)
            try:
                kwargs[key] = cls(**sub)
            except TypeError as e:
                raise InputError(f"{field}.{key}", f"incomplete: {e}") from None
            except InputError as e:
                raise _refield(e, "model", field) from None
    try:
        return ModelSpec(**kwargs)
    except InputError as e:
        raise _refield(e, "model", field) from None


def _model_from_hf(data: dict[str, Any], *, default_name: str, field: str) -> ModelSpec:
    """Map a Hugging Face config.json by its own field names (ecosystem.md section 3)."""
    model_type = str(data.get("model_type") or "").lower()
    if model_type in ("llama4", "llama4_text") and isinstance(data.get("text_config"), Mapping):
        data = {**data["text_config"], "model_type": "llama4_text"}
        model_type = "llama4_text"
    moe, mla, extra = _hf_moe(data, model_type, field)
    if model_type in _MOE_TYPES and moe is None:
        raise InputError(f"{field}.model_type", f"Mixture-of-Experts model {model_type!r}: "
                         "no expert count found", "give num_local_experts / num_experts / "
                         "n_routed_experts")
    fam = _HF_FAMILIES.get(model_type, _HF_GENERIC)

    values: dict[str, Any] = {}
    hf_name: dict[str, str] = {}  # ModelSpec field -> the HF key it came from (for errors)
    for spec_key, names in fam.keys.items():
        hf_name[spec_key] = names[0]
        for n in names:
            if data.get(n) is not None:
                values[spec_key] = data[n]
                hf_name[spec_key] = n
                break
    if model_type in _FFN_MULTIPLE and "ffn_hidden_size" not in values \
            and "hidden_size" in values:
        h = values["hidden_size"]  # n_inner / ffn_hidden_size None -> 4 h
        mult = data.get("expansion_ratio", 4) if model_type == "mpt" else 4
        ok = isinstance(h, int) and not isinstance(h, bool) and isinstance(mult, int)
        # A bad width is reported by ModelSpec (hidden_size is validated before ffn).
        values["ffn_hidden_size"] = mult * h if ok else h
        hf_name["ffn_hidden_size"] = "expansion_ratio" if model_type == "mpt" else \
            hf_name.get("ffn_hidden_size", "hidden_size")
    for spec_key in _MODEL_REQUIRED:
        if spec_key not in values:
            hint = "a Hugging Face config.json of a decoder model"
            if isinstance(data.get("text_config"), Mapping):
                hint = "this looks like a multimodal config: pass its text_config section"
            what = (f"a {model_type} config" if model_type in _HF_FAMILIES
                    else "Hugging Face config")
            raise InputError(f"{field}.{hf_name[spec_key]}",
                             f"missing required field in {what} (paraplan reads "
                             f"{' or '.join(fam.keys.get(spec_key, (spec_key,)))})", hint)

    act = str(data.get("hidden_act") or data.get("hidden_activation")
              or data.get("activation_function") or "").lower()
    gated = fam.gated if fam.gated is not None else act in _GATED_ACTS
    activation = _hf_activation(data, model_type)
    tied = data.get("tie_word_embeddings")
    tied = fam.tied if tied is None else tied
    if fam.norm is not None:
        norm = fam.norm
    elif "rms_norm_eps" not in data and any(
            k in data for k in ("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon")):
        norm = "layernorm"
    else:
        norm = "rmsnorm"
    if fam.bias is not None:
        bias = fam.bias
    elif model_type == "falcon":
        bias = bool(data.get("bias", False))
    elif model_type == "opt":
        bias = bool(data.get("enable_bias", True))
    elif model_type == "mpt":
        bias = not data.get("no_bias", True)
    elif model_type == "starcoder2":
        bias = bool(data.get("use_bias", True))
    else:
        bias = bool(data.get("attention_bias") or data.get("mlp_bias"))
    definition = _hf_definition(data, model_type, fam, values, field)
    name = data.get("_name_or_path") or data.get("name_or_path") or default_name
    source = f"Hugging Face config.json (model_type {model_type or 'unknown'!r})"
    try:
        encoder = model_type in ("bert", "roberta", "xlm-roberta", "electra", "deberta",
                                 "deberta-v2")
        if model_type == "llama4_text" and moe is not None and moe.layer_freq > 1:
            # llama4's dense layers use intermediate_size_mlp, its experts intermediate_size
            values["ffn_hidden_size"] = data.get("intermediate_size_mlp",
                                                 values.get("ffn_hidden_size"))
        kw = dict(learned_position_embeddings=fam.learned_pos, linear_bias=bias,
                  activation=activation, **extra)
        kw.update(definition)
        return ModelSpec(name=str(name), gated_mlp=gated, tied_embeddings=tied,
                         normalization=norm, causal=not encoder, source=source, moe=moe,
                         mla=mla, **kw, **values)
    except InputError as e:
        spec_key = e.field.split(".", 1)[1] if "." in e.field else ""
        extra = {"tied_embeddings": "tie_word_embeddings"}
        hf = hf_name.get(spec_key) or extra.get(spec_key)
        if hf:
            raise InputError(f"{field}.{hf}", e.message, e.hint) from None
        raise _refield(e, "model", field) from None


# transformers' ACT2FN names -> ModelSpec.activation (activations.py: gelu is the erf GELU;
# gelu_new, gelu_pytorch_tanh, gelu_fast and gelu_accurate its tanh approximation; relu2 the
# squared ReLU)
_HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "swiglu": "silu", "gelu": "gelu",
                   "gelu_python": "gelu", "geglu": "gelu", "gelu_new": "gelu_tanh",
                   "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                   "gelu_accurate": "gelu_tanh", "quick_gelu": "quick_gelu", "relu": "relu",
                   "relu2": "squared_relu"}
# The activation a family's config class defaults to, or its modeling code fixes (BLOOM's
# bloom_gelu and MPT's default ffn_act_fn; transformers configuration_<model_type>.py)
_HF_DEFAULT_ACTIVATION = {"gemma": "gelu_tanh", "gemma2": "gelu_tanh",
                          "gemma3_text": "gelu_tanh", "bloom": "gelu_tanh", "mpt": "gelu",
                          "falcon": "gelu", "opt": "relu", "gptj": "gelu_tanh",
                          "gpt2": "gelu_tanh", "phi": "gelu_tanh", "starcoder2": "gelu_tanh",
                          "gpt_neox": "gelu", "bert": "gelu", "llama": "silu",
                          "mistral": "silu", "qwen2": "silu", "qwen3": "silu",
                          "mixtral": "silu"}
# The key each family's MLP reads (transformers modeling_<model_type>.py: Gemma 2/3 read
# hidden_activation; Gemma's legacy hidden_act "gelu" means the tanh approximation, as
# GemmaConfig rewrites it)
_HF_ACTIVATION_KEYS = {"gemma2": ("hidden_activation",), "gemma3_text": ("hidden_activation",),
                       "gemma": ("hidden_act",), "falcon": ("activation",),
                       "opt": ("activation_function",), "gptj": ("activation_function",),
                       "gpt2": ("activation_function",), "bloom": (), "mpt": ()}


def _hf_activation(data: Mapping[str, Any], model_type: str) -> str | None:
    """ModelSpec.activation from the key the family's MLP reads, else the family's default;
    None where neither is known (a name outside transformers' common ones, or gpt_oss's
    clamped GLU, which is none of ACTIVATIONS)."""
    if model_type == "gpt_oss":
        return None
    keys = _HF_ACTIVATION_KEYS.get(model_type, ("hidden_act", "hidden_activation",
                                                "activation_function", "activation"))
    name = next((data[k] for k in keys if isinstance(data.get(k), str)), None)
    if name is None:
        return _HF_DEFAULT_ACTIVATION.get(model_type)
    if model_type == "gemma" and name.lower() == "gelu":
        return "gelu_tanh"
    return _HF_ACTIVATIONS.get(name.lower())


def _hf_rope(data: Mapping[str, Any]) -> tuple[Any, Any]:
    """(rope_theta, llama3 scaling factor) from ``rope_theta``/``rope_scaling`` (config.json
    before transformers 5) or ``rope_parameters`` (transformers 5; Gemma 3 per attention
    type: the full-attention layers' base)."""
    params = data.get("rope_parameters")
    params = params if isinstance(params, Mapping) else {}
    if isinstance(params.get("full_attention"), Mapping):
        params = params["full_attention"]
    theta = data.get("rope_theta", params.get("rope_theta"))
    scaling = data.get("rope_scaling")
    scaling = scaling if isinstance(scaling, Mapping) else params
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling.get("factor") if kind == "llama3" else None
    return theta, factor


def _hf_definition(data: Mapping[str, Any], model_type: str, fam: _HFFamily,
                   values: dict[str, Any], field: str) -> dict[str, Any]:
    """The ModelSpec definition fields (position kind, rotary base and scaling, epsilon, q/k/v
    biases, q/k norms, norms per layer) and the families' own head and position rules."""
    out: dict[str, Any] = {}
    learned = fam.learned_pos
    if model_type == "falcon":
        a = values.get("num_attention_heads")
        if data.get("new_decoder_architecture"):
            values["num_kv_heads"] = data.get("num_kv_heads", a)
            n_ln = data.get("num_ln_in_parallel_attn")
            out["norms_per_layer"] = 2 if n_ln is None else n_ln
        else:
            values["num_kv_heads"] = 1 if data.get("multi_query", True) else a
            out["norms_per_layer"] = 1 if data.get("parallel_attn", True) else 2
        position = "alibi" if data.get("alibi") else "rope"
    elif model_type == "opt":
        wd = data.get("word_embed_proj_dim")
        if wd is not None and wd != values.get("hidden_size"):
            raise InputError(f"{field}.word_embed_proj_dim",
                             f"opt: word_embed_proj_dim={wd} != hidden_size="
                             f"{values.get('hidden_size')} (OPT-350m's project_in/out) is not "
                             "mapped", "an OPT config whose embeddings are hidden_size wide")
        position = "learned"
    elif model_type == "bloom":
        position = "alibi"
    elif model_type == "mpt":
        attn = data.get("attn_config")
        attn = attn if isinstance(attn, Mapping) else {}
        if attn.get("alibi", True):
            position = "alibi"
        else:
            learned = bool(data.get("learned_pos_emb", True))
            position = "learned" if learned else ("rope" if attn.get("rope") else "none")
        kv = attn.get("kv_n_heads")
        if attn.get("attn_type") in ("grouped_query_attention", "multiquery_attention"):
            values["num_kv_heads"] = 1 if attn["attn_type"] == "multiquery_attention" else kv
    elif learned:
        position = "learned"
    else:
        position = "rope"
    out["learned_position_embeddings"] = learned
    out["position_embedding"] = position
    if position == "rope":
        theta, factor = _hf_rope(data)
        if theta is None and model_type == "gptj":
            theta = 10000.0  # GPT-J's rotary base is fixed in its modeling code
        if theta is not None:
            out["rope_theta"] = theta
        if factor is not None:
            out["rope_scaling_factor"] = factor
    eps = next((data[k] for k in _EPS_KEYS if data.get(k) is not None), None)
    if eps is not None:
        out["norm_eps"] = eps
    if model_type in ("qwen2", "qwen2_moe"):
        out["qkv_bias"] = True  # q/k/v biases, no other linear bias (Qwen2Attention)
    if model_type == "gemma3_text":
        out["qk_norm"] = True
    if model_type in _NORMS_PER_LAYER:
        out["norms_per_layer"] = _NORMS_PER_LAYER[model_type]
    return out


def _hf_int(data: Mapping[str, Any], field: str, *names: str) -> tuple[str, Any]:
    for n in names:
        if data.get(n) is not None:
            return n, data[n]
    return names[0], None


def _hf_moe(data: Mapping[str, Any], model_type: str, field: str
            ) -> tuple[MoESpec | None, MLASpec | None, dict[str, Any]]:
    """The MoE block, MLA and per-family extras of a Hugging Face config, by the family's own
    field names (modern-training.md section 2.7; HF configuration_*.py)."""
    key, experts = _hf_int(data, field, *_MOE_KEYS)
    extra: dict[str, Any] = {}
    if model_type in ("qwen3", "qwen3_moe"):
        extra["qk_norm"] = True
    if model_type == "gpt_oss":
        extra["attention_sinks"] = True
    mla = None
    if data.get("kv_lora_rank") is not None:
        try:
            mla = MLASpec(q_lora_rank=data.get("q_lora_rank"),
                          kv_lora_rank=data.get("kv_lora_rank"),
                          qk_nope_head_dim=data.get("qk_nope_head_dim"),
                          qk_rope_head_dim=data.get("qk_rope_head_dim"),
                          v_head_dim=data.get("v_head_dim"))
        except InputError as e:
            sub = e.field.rsplit(".", 1)[-1]
            raise InputError(f"{field}.kv_lora_rank" if sub != "kv_lora_rank" else
                             f"{field}.{sub}", f"multi-head latent attention: {sub}: "
                             f"{e.message}", "MLA needs kv_lora_rank, qk_nope_head_dim, "
                             "qk_rope_head_dim and v_head_dim") from None
    if isinstance(experts, bool) or not isinstance(experts, int) or experts <= 1:
        return None, mla, extra
    L = data.get("num_hidden_layers")
    width_key, width = _hf_int(data, field, "moe_intermediate_size", "intermediate_size")
    if model_type == "llama4_text":
        width_key, width = "intermediate_size", data.get("intermediate_size")
    kw: dict[str, Any] = dict(num_experts=experts,
                              top_k=data.get("num_experts_per_tok", data.get("top_k", 2)),
                              expert_ffn_hidden_size=width)
    n_shared = data.get("n_shared_experts") or 0
    if model_type in ("deepseek_v2", "deepseek_v3") or "first_k_dense_replace" in data:
        kw["dense_layers"] = data.get("first_k_dense_replace") or 0
        kw["layer_freq"] = data.get("moe_layer_freq") or 1
        if n_shared:
            kw.update(shared_experts=n_shared, shared_ffn_hidden_size=n_shared * width)
        kw["mtp_layers"] = data.get("num_nextn_predict_layers") or 0
    elif model_type == "qwen2_moe":
        sw = data.get("shared_expert_intermediate_size") or 0
        if sw:
            kw.update(shared_experts=1, shared_ffn_hidden_size=sw, shared_expert_gate=True)
    elif model_type == "llama4_text":
        kw.update(shared_experts=1, shared_ffn_hidden_size=width,
                  layer_freq=data.get("interleave_moe_layer_step") or 1)
        if kw["layer_freq"] > 1:  # layer i is MoE when (i + 1) % step == 0 (HF moe_layers)
            kw["dense_layers"] = kw["layer_freq"] - 1
    elif model_type == "gpt_oss":
        kw.update(router_bias=True, expert_bias=True)
        if data.get("swiglu_limit"):  # the expert SwiGLU's clamp (HF GptOssConfig)
            kw["activation_clamp"] = float(data["swiglu_limit"])
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = data.get("decoder_sparse_step") or 1
        if step != 1 or data.get("mlp_only_layers"):
            raise InputError(f"{field}.decoder_sparse_step",
                             f"decoder_sparse_step={step}, mlp_only_layers="
                             f"{data.get('mlp_only_layers')}: only every layer MoE is mapped",
                             "use decoder_sparse_step: 1 and mlp_only_layers: []")
    score = str(data.get("scoring_func") or "softmax").lower()
    kw["router"] = "sigmoid" if score == "sigmoid" or model_type == "llama4_text" else "softmax"
    if isinstance(L, int) and kw.get("dense_layers", 0) >= L:
        raise InputError(f"{field}.first_k_dense_replace", "leaves no MoE layer")
    names = {"num_experts": key, "top_k": "num_experts_per_tok",
             "expert_ffn_hidden_size": width_key, "dense_layers": "first_k_dense_replace",
             "layer_freq": "moe_layer_freq"}
    try:
        return MoESpec(**kw), mla, extra
    except InputError as e:
        sub = e.field.rsplit(".", 1)[-1]
        raise InputError(f"{field}.{names.get(sub, sub)}", e.message, e.hint) from None


def _model_file_name(path: Path) -> str:
    if path.name.lower() == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem


def load_model(ref: str | Path | Mapping[str, Any] | ModelSpec, *,
               base_dir: str | Path | None = None) -> ModelSpec:
    """A catalog name or alias, a model YAML/JSON path, a Hugging Face config.json (or a
    directory holding one), or an inline mapping of either. A string that is a catalog name
    means the catalog entry even if a file of that name exists (write ``./7b`` for the file);
    a :class:`~pathlib.Path` is always a file."""
    base = Path(base_dir) if base_dir is not None else None
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, Mapping):
        check_nesting("model", ref)
        return model_from_mapping(ref)
    if isinstance(ref, str):
        if resolve_model_name(ref) is not None:
            return get_model(ref)
        if not _looks_like_path(ref, base):
            names = [n for row in list_models() for n in (row[0], *row[1])]
            raise InputError("model", f"unknown model {ref!r}",
                             did_you_mean(ref.strip().lower(), names) +
                             "; or give a path to a model YAML or a Hugging Face config.json")
    elif not isinstance(ref, Path):
        raise InputError("model", f"must be a catalog name, a path or a mapping, got "
                                  f"{type(ref).__name__}")
    path = _resolve(ref, base, "model")
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    data = _mapping("model", read_document(path, field="model"),
                    f"a mapping (model document) in {path}")
    return model_from_mapping(data, default_name=_model_file_name(path))


# ==== GPUs and clusters =====================================================================
_GPU_KEYS = ("name", "base", "memory_GB", "memory_GiB", "memory_bandwidth_GBps", "peak_tflops",
             "nvlink_bandwidth_GBps", "nvlink_links", "sm_count", "compute_capability",
             "pcie_bandwidth_GBps", "source")


def gpu_from_mapping(data: Mapping[str, Any], *, field: str = "cluster.gpu") -> GPUSpec:
    """An inline GPU: ``memory_GB`` (or ``memory_GiB``), ``memory_bandwidth_GBps``,
    ``peak_tflops: {bf16: ..., ...}`` (dense), optional ``nvlink_bandwidth_GBps`` (per GPU, one
    direction; default 0 = PCIe only), ``nvlink_links``, ``sm_count``, ``compute_capability``,
    ``pcie_bandwidth_GBps``. With ``base: <catalog key>`` every field defaults to that GPU's
    and ``peak_tflops`` entries override the base's one by one."""
    data = _mapping(field, data)
    _check_keys(field, data, _GPU_KEYS)
    kw: dict[str, Any] = {}
    peaks: dict[str, float] = {}
    if data.get("base") is not None:
        try:
            base = get_gpu(data["base"])
        except InputError as e:
            raise _refield(e, "gpu", f"{field}.base") from None
        kw = {f.name: getattr(base, f.name) for f in fields(GPUSpec)}
        peaks = dict(base.peak_flops_per_s)
        kw["name"] = f"{base.name}-custom"
        kw["source"] = f"custom, based on {base.name}"
    else:
        kw = {"name": "custom-gpu", "nvlink_bandwidth_bytes_per_s": 0.0, "source": "custom"}
    if "memory_GB" in data and "memory_GiB" in data:
        raise InputError(f"{field}.memory_GiB", "give memory_GB or memory_GiB, not both")
    if "memory_GB" in data:
        kw["memory_bytes"] = _num(f"{field}.memory_GB", data["memory_GB"]) * 1e9
    if "memory_GiB" in data:
        kw["memory_bytes"] = _num(f"{field}.memory_GiB", data["memory_GiB"]) * 2**30
    for key, spec_key, scale in (
            ("memory_bandwidth_GBps", "memory_bandwidth_bytes_per_s", 1e9),
            ("nvlink_bandwidth_GBps", "nvlink_bandwidth_bytes_per_s", 1e9),
            ("pcie_bandwidth_GBps", "pcie_bandwidth_bytes_per_s", 1e9)):
        if key in data:
            kw[spec_key] = _num(f"{field}.{key}", data[key],
                                allow_zero=key == "nvlink_bandwidth_GBps") * scale
    for key in ("nvlink_links", "sm_count", "compute_capability"):
        if key in data:
            kw[key] = _num(f"{field}.{key}", data[key], integer=True,
                           allow_zero=key == "nvlink_links")
    if "peak_tflops" in data:
        table = _mapping(f"{field}.peak_tflops", data["peak_tflops"],
                         "a mapping precision -> dense TFLOP/s")
        for prec, v in table.items():
            if prec.lower() not in PRECISIONS:
                raise InputError(f"{field}.peak_tflops.{prec}", "unknown precision",
                                 did_you_mean(prec, PRECISIONS))
            peaks[prec.lower()] = _num(f"{field}.peak_tflops.{prec}", v) * 1e12
    if not peaks:
        raise InputError(f"{field}.peak_tflops", "missing required key",
                         "e.g. peak_tflops: {bf16: 312, fp32: 19.5} (dense) or base: <gpu key>")
    kw["peak_flops_per_s"] = peaks
    for key, spec_key in (("memory_GB", "memory_bytes"),
                          ("memory_bandwidth_GBps", "memory_bandwidth_bytes_per_s")):
        if spec_key not in kw:
            raise InputError(f"{field}.{key}", "missing required key",
                             "an inline GPU needs memory_GB, memory_bandwidth_GBps and "
                             "peak_tflops, or base: <gpu key>")
    for key in ("name", "source"):
        if key in data:
            if not isinstance(data[key], str) or not data[key]:
                raise InputError(f"{field}.{key}", f"must be a non-empty string, got "
                                                   f"{_short(data[key])}")
            kw[key] = data[key]
    try:
        return GPUSpec(**kw)
    except InputError as e:
        raise _refield(e, f"gpu[{kw['name']}]", field) from None


def _fabric(field: str, value: Any, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in valid:
        raise InputError(field, f"unknown fabric {value!r}", did_you_mean(str(value), valid))
    return value.lower()


def _intra_from_mapping(data: Any, default: IntraNodeSpec, gpu: GPUSpec,
                        field: str) -> IntraNodeSpec:
    data = _mapping(field, data)
    _check_keys(field, data, ("fabric", "bandwidth_GBps", "latency_us"))
    fabric = _fabric(f"{field}.fabric", data.get("fabric", default.fabric), INTRA_FABRICS)
    same = fabric == default.fabric
    if "bandwidth_GBps" in data:
        bw = _num(f"{field}.bandwidth_GBps", data["bandwidth_GBps"]) * 1e9
    elif same:
        bw = default.bandwidth_bytes_per_s
    elif fabric == "pcie":
        bw = gpu.pcie_bandwidth_bytes_per_s
    else:
        bw = gpu.nvlink_bandwidth_bytes_per_s
        if bw <= 0:
            raise InputError(f"{field}.bandwidth_GBps", f"required: GPU {gpu.name} has no NVLink "
                                                        f"bandwidth to default to")
    if "latency_us" in data:
        lat = _num(f"{field}.latency_us", data["latency_us"], allow_zero=True) / 1e6
    elif same:
        lat = default.latency_s
    else:
        lat = PCIE_LATENCY_S if fabric == "pcie" else NVLINK_LATENCY_S
    return IntraNodeSpec(fabric=fabric, bandwidth_bytes_per_s=bw, latency_s=lat)


def _inter_from_mapping(data: Any, default: InterNodeSpec, field: str) -> InterNodeSpec:
    data = _mapping(field, data)
    _check_keys(field, data, ("fabric", "nics_per_node", "nic_bandwidth_Gbps",
                              "oversubscription", "latency_us"))
    fabric = _fabric(f"{field}.fabric", data.get("fabric", default.fabric), INTER_FABRICS)
    same = fabric == default.fabric
    if "nics_per_node" in data:
        nics = _num(f"{field}.nics_per_node", data["nics_per_node"], integer=True,
                    allow_zero=True)
    else:
        nics = 0 if fabric == "none" else default.nics_per_node
    nic_bw = default.nic_bandwidth_bytes_per_s
    if "nic_bandwidth_Gbps" in data:
        nic_bw = _num(f"{field}.nic_bandwidth_Gbps", data["nic_bandwidth_Gbps"]) * 1e9 / 8
    over = default.oversubscription
    if "oversubscription" in data:
        over = _num(f"{field}.oversubscription", data["oversubscription"], minimum=1)
    if "latency_us" in data:
        lat = _num(f"{field}.latency_us", data["latency_us"], allow_zero=True) / 1e6
    elif same:
        lat = default.latency_s
    else:
        lat = IB_LATENCY_S if fabric == "infiniband" else ROCE_LATENCY_S
    return InterNodeSpec(fabric=fabric, nics_per_node=nics, nic_bandwidth_bytes_per_s=nic_bw,
                         oversubscription=over, latency_s=lat)


_CLUSTER_KEYS = ("name", "preset", "num_nodes", "gpus_per_node", "gpus_per_domain", "gpu",
                 "intra_node", "inter_node", "calibration", "source")


def _is_graph(data: Mapping[str, Any]) -> bool:
    return "nodes" in data and ("links" in data or "edges" in data)


def _nodes_for(default_gpus: int | None, gpus_per_node: int,
               strict: bool) -> tuple[int, int]:
    """Nodes for ``default_gpus`` (fewer than a node: one partial node)."""
    if default_gpus is None:
        return 1, gpus_per_node
    try:
        return split_gpus(default_gpus, gpus_per_node)
    except InputError:
        if strict:
            raise
        return 1, gpus_per_node  # the caller reports the mismatch in its own terms


def cluster_from_mapping(data: Mapping[str, Any], *, default_gpus: int | None = None,
                         field: str = "cluster", strict: bool = True) -> ClusterSpec:
    """A ClusterSpec from the short form (contract.md section 2).

    ``preset: <name>`` starts from a preset; ``gpu`` (catalog key or inline mapping) is
    otherwise required. Omitted ``intra_node``/``inter_node`` keys default to the preset's or
    the GPU's DGX-like fabric (:func:`costmodel.hardware.default_node_fabric`). Without
    ``num_nodes``, the node count comes from ``default_gpus`` (else 1).

    ``gpus_per_domain`` (optional integer): GPUs per NVLink domain, a whole number of hosts
    on an NVSwitch fabric (a GB200 NVL72 rack: ``gpus_per_node: 4``, ``gpus_per_domain:
    72``); default one host, or the preset's. Group geometry reports hosts and domains; links
    between hosts are still priced on the NICs (:class:`costmodel.specs.ClusterSpec`)."""
    data = _mapping(field, data)
    _check_keys(field, data, _CLUSTER_KEYS)
    base: ClusterSpec | None = None
    if data.get("preset") is not None:
        if not is_cluster_preset(data["preset"]):
            raise InputError(f"{field}.preset", f"unknown cluster preset {data['preset']!r}",
                             did_you_mean(str(data["preset"]), list_cluster_presets()))
        base = get_cluster_preset(data["preset"], 1)

    if "gpu" in data:
        g = data["gpu"]
        if isinstance(g, Mapping):
            gpu = gpu_from_mapping(g, field=f"{field}.gpu")
        else:
            try:
                gpu = get_gpu(g)
            except InputError as e:
                raise _refield(e, "gpu", f"{field}.gpu") from None
    elif base is not None:
        gpu = base.gpu
    else:
        raise InputError(f"{field}.gpu", "missing required key",
                         "a GPU catalog key (e.g. a100-sxm-80gb), an inline mapping, or "
                         "preset: <cluster preset>")

    if "gpus_per_node" in data:
        per_node = _num(f"{field}.gpus_per_node", data["gpus_per_node"], integer=True)
    else:
        per_node = base.gpus_per_node if base is not None else 8
    if "num_nodes" in data:
        nodes = _num(f"{field}.num_nodes", data["num_nodes"], integer=True)
        if strict and default_gpus is not None and nodes * per_node != default_gpus:
            raise InputError("gpus", f"{default_gpus} GPUs requested but the cluster has "
                                     f"{nodes} x {per_node} = {nodes * per_node}",
                             "drop --gpus or make it match the cluster file")
    else:
        nodes, per_node = _nodes_for(default_gpus, per_node, strict)
    if data.get("gpus_per_domain") is not None:
        per_domain = _num(f"{field}.gpus_per_domain", data["gpus_per_domain"], integer=True)
    else:  # a preset's domain holds for its own host size only (not for a partial node)
        per_domain = base.gpus_per_domain if base is not None \
            and per_node == base.gpus_per_node else None

    if base is not None and base.gpu == gpu:
        intra0, inter0 = base.intra_node, base.inter_node
    else:
        intra0, inter0 = default_node_fabric(gpu)
    intra = intra0 if data.get("intra_node") is None else \
        _intra_from_mapping(data["intra_node"], intra0, gpu, f"{field}.intra_node")
    inter = inter0 if data.get("inter_node") is None else \
        _inter_from_mapping(data["inter_node"], inter0, f"{field}.inter_node")

    calibration = None
    if data.get("calibration") is not None:
        cal = _mapping(f"{field}.calibration", data["calibration"], "a mapping name -> number")
        calibration = {k: _num(f"{field}.calibration.{k}", v, allow_zero=True)
                       for k, v in cal.items()}
    default_name = (f"{nodes}x-{data['preset']}" if base is not None
                    else f"{nodes}x{per_node}-{gpu.name}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise InputError(f"{field}.name", f"must be a non-empty string, got {_short(name)}")
    source = data.get("source", base.source if base is not None else "")
    if not isinstance(source, str):
        raise InputError(f"{field}.source", f"must be a string, got {_short(source)}")
    try:
        return ClusterSpec(name=name, num_nodes=nodes, gpus_per_node=per_node, gpu=gpu,
                           intra_node=intra, inter_node=inter, calibration=calibration,
                           source=source, gpus_per_domain=per_domain)
    except InputError as e:
        raise _refield(e, "cluster", field) from None


def _cluster_from_graph(data: Mapping[str, Any]) -> ClusterSpec:
    from costmodel.topology import cluster_from_graph  # lazy: pulls in networkx

    return cluster_from_graph(data)


def _load_cluster(ref: Any, default_gpus: int | None, base_dir: Path | None,
                  strict: bool) -> ClusterSpec:
    if isinstance(ref, ClusterSpec):
        cluster = ref
    elif isinstance(ref, Mapping):
        check_nesting("cluster", ref)
        if _is_graph(ref):
            cluster = _cluster_from_graph(ref)
        else:
            return cluster_from_mapping(ref, default_gpus=default_gpus, strict=strict)
    elif isinstance(ref, str) and is_cluster_preset(ref):
        per_node = get_cluster_preset(ref, 1).gpus_per_node
        nodes, per = _nodes_for(default_gpus, per_node, strict)
        return get_cluster_preset(ref, nodes, gpus_per_node=per)
    elif isinstance(ref, str | Path):
        if isinstance(ref, str) and not _looks_like_path(ref, base_dir):
            raise InputError("cluster", f"unknown cluster preset {ref!r}",
                             did_you_mean(ref.strip().lower(),
                                          list_cluster_presets())
                             + "; or give a path to a cluster YAML or a graph JSON")
        path = _resolve(ref, base_dir, "cluster")
        data = _mapping("cluster", read_document(path, field="cluster"),
                        f"a mapping (cluster document) in {path}")
        if _is_graph(data):
            cluster = _cluster_from_graph(data)
        else:
            return cluster_from_mapping(data, default_gpus=default_gpus, strict=strict)
    else:
        raise InputError("cluster", f"must be a preset name, a path or a mapping, got "
                                    f"{type(ref).__name__}")
    if strict and default_gpus is not None and cluster.num_gpus != default_gpus:
        raise InputError("gpus", f"{default_gpus} GPUs requested but the cluster has "
                                 f"{cluster.num_gpus}", "drop --gpus or make it match")
    return cluster


def load_cluster(ref: str | Path | Mapping[str, Any] | ClusterSpec, *,
                 default_gpus: int | None = None,
                 base_dir: str | Path | None = None) -> ClusterSpec:
    """A preset name, a cluster YAML/JSON path, a networkx node-link graph JSON, or a mapping.

    ``default_gpus`` (e.g. ``--gpus``) sizes a preset or a file without ``num_nodes``; when the
    document fixes the size and it differs, the error names the field ``gpus``."""
    return _load_cluster(ref, default_gpus, Path(base_dir) if base_dir is not None else None,
                         strict=True)


# ==== runs ==================================================================================
@dataclass(frozen=True)
class Run:
    """One configuration to score (``optimize evaluate RUN.yaml``)."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelConfig


_RUN_KEYS = ("model", "cluster", "training", "parallel", "name", "schema_version")


def load_run(ref: str | Path | Mapping[str, Any], *,
             base_dir: str | Path | None = None) -> Run:
    """A run document (path or mapping). Model and cluster paths inside resolve against the run
    file's directory (or ``base_dir`` for a mapping). ``tp*pp*dp`` must equal the cluster's GPU
    count; a cluster without ``num_nodes`` is sized from it."""
    base = Path(base_dir) if base_dir is not None else None
    if isinstance(ref, Mapping):
        check_nesting("run", ref)
        data = _mapping("run", ref)
    elif isinstance(ref, str | Path):
        path = expand_user(ref, "run")
        data = _mapping("run", read_document(path, field="run"),
                        f"a mapping (run document) in {path}")
        base = path.parent
    else:
        raise InputError("run", f"must be a path or a mapping, got {type(ref).__name__}")
    _check_keys("run", data, _RUN_KEYS)
    for key in ("model", "cluster"):
        if data.get(key) is None:
            raise InputError(key, "missing required section",
                             f"{key}: a catalog name, an inline mapping or a path")

    par = _mapping("parallel", data.get("parallel") or {})
    _check_keys("parallel", par, tuple(f.name for f in fields(ParallelConfig)))
    parallel = ParallelConfig(**par)
    tr = _mapping("training", data.get("training") or {})
    _check_keys("training", tr, tuple(f.name for f in fields(TrainingSpec)))
    training = TrainingSpec(**tr)

    model = load_model(data["model"], base_dir=base)
    cluster = _load_cluster(data["cluster"], parallel.world_size, base, strict=False)
    if parallel.world_size != cluster.num_gpus:
        p = parallel
        shape = (f"tp*pp*dp = {p.tp}*{p.pp}*{p.dp}" if p.cp == 1 else
                 f"tp*cp*pp*dp = {p.tp}*{p.cp}*{p.pp}*{p.dp}")
        raise InputError("parallel", f"{shape} = {p.world_size} but "
                                     f"the cluster has {cluster.num_gpus} GPUs "
                                     f"({cluster.num_nodes} x {cluster.gpus_per_node})",
                         f"make {shape.split(' = ')[0]} = {cluster.num_gpus} or resize the "
                         "cluster")
    return Run(model=model, cluster=cluster, training=training, parallel=parallel)
