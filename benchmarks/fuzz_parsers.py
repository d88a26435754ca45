"""Fuzz paraplan's input parsers: the only acceptable outcomes are a parse or an InputError.

    python benchmarks/fuzz_parsers.py                # 10,000 inputs per parser
    python benchmarks/fuzz_parsers.py -n 500 --only model_file,study_file --seed 1

Parsers (targets): model files (YAML/JSON text), model mappings (contract keys and Hugging Face
config dicts), cluster files (YAML short form), cluster mappings (short form and networkx
node-link graphs, :func:`costmodel.topology.cluster_from_graph`), run files and run mappings
(:func:`costmodel.loaders.load_run`), study files (:func:`optimizer.studies.load_study_file`)
and, when the module exists, the nccl-tests output parser (``costmodel/nccl_tests.py``).

Inputs come from hypothesis strategies: random YAML/JSON structures (recursive dicts, lists,
scalars; keys drawn from the valid key set plus junk), random bytes and text, and mutations of
valid fixtures (structural: a key deleted, a value replaced, a junk key added, a section
swapped for random data; textual: bytes flipped, inserted, deleted, duplicated, YAML tokens
spliced in). Any exception other than :class:`costmodel.errors.InputError` is a bug: the run
prints each distinct one (target, exception, a minimal input) and exits 1.

``tests/test_fuzz.py`` imports this module and runs a few hundred inputs per parser in CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # pragma: no cover - run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from costmodel import loaders  # noqa: E402
from costmodel.errors import InputError  # noqa: E402
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec  # noqa: E402

DATA = ROOT / "tests" / "data"

# ==== vocabularies ==========================================================================
MODEL_KEYS = tuple(f for f in ModelSpec.__dataclass_fields__)
HF_KEYS = ("model_type", "architectures", "transformers_version", "num_hidden_layers",
           "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings",
           "hidden_act", "hidden_activation", "activation_function", "rms_norm_eps",
           "layer_norm_eps", "layer_norm_epsilon", "attention_bias", "mlp_bias", "n_layer",
           "n_embd", "n_head", "n_inner", "n_positions", "num_local_experts", "num_experts",
           "q_lora_rank", "kv_lora_rank", "text_config", "_name_or_path", "torch_dtype")
GPU_KEYS = loaders._GPU_KEYS
INTRA_KEYS = ("fabric", "bandwidth_GBps", "latency_us")
INTER_KEYS = ("fabric", "nics_per_node", "nic_bandwidth_Gbps", "oversubscription",
              "latency_us")
CLUSTER_KEYS = loaders._CLUSTER_KEYS + ("gpus",)
PARALLEL_KEYS = tuple(ParallelConfig.__dataclass_fields__)
TRAINING_KEYS = tuple(TrainingSpec.__dataclass_fields__)
RUN_KEYS = loaders._RUN_KEYS
STUDY_KEYS = ("schema_version", "name", "description", "model", "cluster", "training",
              "space", "objectives", "constraints", "search", "storage", "study_name")
SEARCH_KEYS = ("sampler", "trials", "seed", "batch_size", "allow_cross_node_tp")
CONSTRAINT_KEYS = ("memory_limit_gib", "memory_fraction")
SPACE_KEYS = ("tp", "pp", "dp", "micro_batch_size", "precision", "recompute",
              "sequence_parallel", "zero_stage", "schedule", "virtual_stages", "nccl_algo",
              "nccl_proto")
GRAPH_KEYS = ("directed", "multigraph", "graph", "nodes", "edges", "links")
GRAPH_NODE_KEYS = ("id", "kind", "gpu", "node", "local", "fabric", "bandwidth_bytes_per_s")
GRAPH_EDGE_KEYS = ("source", "target", "link", "bandwidth_bytes_per_s", "latency_s", "key")
ALL_KEYS = tuple(sorted(set(MODEL_KEYS + HF_KEYS + GPU_KEYS + INTRA_KEYS + INTER_KEYS
                            + CLUSTER_KEYS + PARALLEL_KEYS + TRAINING_KEYS + RUN_KEYS
                            + STUDY_KEYS + SEARCH_KEYS + CONSTRAINT_KEYS + SPACE_KEYS
                            + GRAPH_KEYS + GRAPH_NODE_KEYS + GRAPH_EDGE_KEYS)))
JUNK_KEYS = ("", " ", "x", "num_layer", "hiden_size", "Hidden_Size", "gpu ", "__class__",
             "<<", "null", "1", "tp ", "\u00e9", "\x00", "a" * 200)
WORDS = ("llama-7b", "65b", "llama-65b", "gpt3-175b", "bert-large", "a100-sxm-80gb", "a100",
         "h100-sxm-80gb", "v100-sxm-32gb", "dgx-a100-80gb", "dgx-h100", "pcie-roce-a100",
         "nvswitch", "nvlink", "pcie", "infiniband", "roce", "ethernet", "none", "fp32", "tf32",
         "fp16", "bf16", "fp8", "selective", "full", "gpipe", "1f1b", "interleaved", "auto",
         "ring", "tree", "nvls", "nvlstree", "collnet", "pat", "simple", "ll", "ll128",
         "allreduce:tree;allgather:ring", "^ll128", "tpe", "nsga2", "random", "exhaustive",
         "llama", "gpt2", "mixtral", "gemma", "silu", "gelu", "rmsnorm", "layernorm", "gpu",
         "nic", "fabric", "network", "model-llama65b.yaml", "cluster-2x-dgx-a100.yaml",
         "gpt2-config.json", "cluster_graph.json", "llama3-70b", "nope.yaml", "./", "..", "maximize tokens_per_s",
         "minimize peak_memory_bytes", "3e12", "1.5", "sqlite:///x.db", "study.journal", "",
         " ", "~", "\t", "true", "null")
YAML_TOKENS = (": ", "- ", "? ", "&a ", "*a", "<<: *a\n", "!!python/object/apply:os.system ",
               "!!binary ", "!!float ", "!!set ", "!!omap ", "!!timestamp ", "!!int ",
               "!!bool ", "!!null ", "!!str ", "!!map ", "!!seq ", "!!pairs ", "!foo ", "{", "}",
               "[", "]", ",", "|\n", ">\n", "---\n", "...\n", "%YAML 1.1\n", "%TAG ! x\n",
               "#", "\t", "\n", "  ", "'", '"', "\\", "\x00", "\ufeff", "\x85", "\u2028",
               "1e400", "-1e400", ".nan", ".inf", "0x10", "0o17", "1_000", "2001-12-14",
               "~", "null", "yes", "on", "NaN", "Infinity", "-0", "9" * 40)

# ==== scalar and structure strategies =======================================================
ints = st.one_of(st.integers(-3, 130), st.sampled_from([0, 1, 2, 8, 64, 80, 2048, 32000]),
                 st.integers(), st.integers(-(2**70), 2**70))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 1e-300, 1e300, 3e12,
                                    math.inf, -math.inf, math.nan]))
short_text = st.one_of(st.sampled_from(WORDS), st.text(max_size=12))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, short_text)
keys = st.one_of(st.sampled_from(ALL_KEYS), st.sampled_from(JUNK_KEYS), st.text(max_size=8))


def structures(max_leaves: int = 12) -> st.SearchStrategy:
    """Recursive dicts/lists/scalars with keys from the valid key set plus junk."""
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=4),
                                   st.dictionaries(keys, children, max_size=5)),
        max_leaves=max_leaves)


def _keyed(valid_keys: tuple[str, ...]) -> st.SearchStrategy:
    """A mapping over ``valid_keys`` (plus sometimes junk) with random values."""
    return st.dictionaries(st.one_of(st.sampled_from(valid_keys), keys),
                           st.one_of(scalars, structures(6)), max_size=len(valid_keys) + 2)


# ==== valid fixtures (structural) ===========================================================
VALID_MODEL = {"name": "llama-65b", "num_layers": 80, "hidden_size": 8192,
               "num_attention_heads": 64, "num_kv_heads": 64, "ffn_hidden_size": 22016,
               "vocab_size": 32000, "gated_mlp": True, "tied_embeddings": False}
VALID_HF = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
            "intermediate_size": 11008, "max_position_embeddings": 4096,
            "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
            "vocab_size": 32000}
VALID_GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
              "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5}
VALID_CLUSTER = {"name": "2x-dgx-a100-80gb", "num_nodes": 2, "gpus_per_node": 8,
                 "gpu": "a100-sxm-80gb",
                 "intra_node": {"fabric": "nvswitch", "bandwidth_GBps": 300},
                 "inter_node": {"fabric": "infiniband", "nics_per_node": 8,
                                "nic_bandwidth_Gbps": 200}}
VALID_CLUSTER_INLINE = {"name": "custom-4x4", "num_nodes": 4, "gpus_per_node": 4,
                        "gpu": {"name": "my-gpu", "memory_GB": 96,
                                "memory_bandwidth_GBps": 4000,
                                "peak_tflops": {"bf16": 800, "fp32": 50},
                                "nvlink_bandwidth_GBps": 400, "compute_capability": 90},
                        "inter_node": {"nics_per_node": 4, "nic_bandwidth_Gbps": 400,
                                       "oversubscription": 2}}
VALID_PARALLEL = {"tp": 4, "pp": 4, "dp": 1, "micro_batch_size": 1, "precision": "bf16",
                  "recompute": "none", "sequence_parallel": False, "zero_stage": 0,
                  "schedule": "1f1b", "virtual_stages": 1, "nccl_algo": "auto",
                  "nccl_proto": "auto"}
VALID_RUN = {"model": "llama-65b",
             "cluster": {"gpu": "a100-sxm-80gb", "num_nodes": 2, "gpus_per_node": 8},
             "training": {"seq_length": 2048, "global_batch_size": 1024},
             "parallel": VALID_PARALLEL}
VALID_RUN_FILES = {"model": "model-llama65b.yaml", "cluster": "cluster-2x-dgx-a100.yaml",
                   "training": {"seq_length": 2048, "global_batch_size": 1024},
                   "parallel": VALID_PARALLEL}
VALID_STUDY = {"schema_version": 1, "name": "fuzz", "model": "llama-7b",
               "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb", "gpus_per_node": 8},
               "training": {"seq_length": 2048, "global_batch_size": 64},
               "space": {"tp": [1, 2, 4, 8], "recompute": ["none", "full"],
                         "nccl_algo": ["auto", "ring"]},
               "objectives": ["maximize tokens_per_s", "minimize peak_memory_bytes"],
               "constraints": {"memory_limit_gib": 76},
               "search": {"sampler": "tpe", "trials": 50, "seed": 0, "batch_size": 8},
               "storage": "fuzz.journal"}

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "": ALL_KEYS, "gpu": GPU_KEYS, "intra_node": INTRA_KEYS, "inter_node": INTER_KEYS,
    "parallel": PARALLEL_KEYS, "training": TRAINING_KEYS, "cluster": CLUSTER_KEYS,
    "search": SEARCH_KEYS, "constraints": CONSTRAINT_KEYS, "space": SPACE_KEYS,
    "peak_tflops": ("fp32", "tf32", "fp16", "bf16", "fp8", "int8"), "graph": ("name", "source"),
}


@st.composite
def mutated(draw, doc: Any, top_keys: tuple[str, ...], max_ops: int = 3) -> Any:
    """``doc`` (a JSON-like valid document) with 1..max_ops structural mutations."""
    doc = json.loads(json.dumps(doc))  # deep copy
    for _ in range(draw(st.integers(1, max_ops))):
        # walk to a random container
        node, name = doc, ""
        while True:
            children = ([(k, v) for k, v in node.items() if isinstance(v, dict | list)]
                        if isinstance(node, dict) else
                        [(i, v) for i, v in enumerate(node) if isinstance(v, dict | list)])
            if not children or draw(st.booleans()):
                break
            name, node = draw(st.sampled_from(children))
            name = str(name)
        valid_keys = SECTION_KEYS.get(name, top_keys if node is doc else ALL_KEYS)
        op = draw(st.sampled_from(("delete", "replace", "add", "retype", "swap")))
        if isinstance(node, list):
            if not node or op == "add":
                node.append(draw(structures(6)))
            elif op == "delete":
                node.pop(draw(st.integers(0, len(node) - 1)))
            else:
                node[draw(st.integers(0, len(node) - 1))] = draw(structures(6))
            continue
        existing = list(node)
        if op == "delete" and existing:
            node.pop(draw(st.sampled_from(existing)))
        elif op == "replace" and existing:
            node[draw(st.sampled_from(existing))] = draw(scalars)
        elif op == "retype" and existing:
            node[draw(st.sampled_from(existing))] = draw(structures(6))
        elif op == "swap" and existing:  # a plausible value of another key
            k = draw(st.sampled_from(existing))
            node[k] = draw(st.sampled_from(WORDS + (0, -1, 1, 7, 2**31, 1e400, True)))
        else:
            node[draw(st.one_of(st.sampled_from(valid_keys), keys))] = draw(scalars)
    return doc


def _fixture_texts(*names: str) -> tuple[bytes, ...]:
    out = []
    for n in names:
        p = DATA / n if "/" not in n else ROOT / n
        if p.is_file():
            out.append(p.read_bytes())
    return tuple(out)


@st.composite
def mutated_text(draw, fixtures: tuple[bytes, ...], max_ops: int = 4) -> bytes:
    """A valid fixture file with byte-level mutations and spliced YAML tokens."""
    data = bytearray(draw(st.sampled_from(fixtures)))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(("flip", "insert", "delete", "dup", "token", "truncate",
                                   "swap_lines")))
        n = len(data)
        pos = draw(st.integers(0, n))
        if op == "flip" and n:
            i = min(pos, n - 1)
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and n:
            data[pos:pos + draw(st.integers(1, 16))] = b""
        elif op == "dup" and n:
            end = min(n, pos + draw(st.integers(1, 40)))
            data[pos:pos] = data[pos:end]
        elif op == "token":
            data[pos:pos] = draw(st.sampled_from(YAML_TOKENS)).encode("utf-8")
        elif op == "truncate":
            del data[pos:]
        elif op == "swap_lines":
            lines = bytes(data).split(b"\n")
            if len(lines) > 1:
                i = draw(st.integers(0, len(lines) - 1))
                j = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
                data = bytearray(b"\n".join(lines))
    return bytes(data)


def _dump(doc: Any, kind: str) -> bytes:
    if kind == "json":
        return json.dumps(doc).encode()
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8")
    except (yaml.YAMLError, UnicodeEncodeError):  # e.g. lone surrogates in text
        return json.dumps(doc).encode()


def deep_nesting() -> st.SearchStrategy:
    return st.builds(lambda n, c: (c * n).encode(), st.integers(100, 5000),
                     st.sampled_from(["[", "{a: ", "- ", "a:\n "]))


def documents(valid: tuple[Any, ...], top_keys: tuple[str, ...],
              fixtures: tuple[bytes, ...]) -> st.SearchStrategy:
    """File contents: a mutated valid document dumped as YAML/JSON, a random structure,
    random bytes/text, a mutated fixture file, or a deeply nested document."""
    structural = st.one_of(*(mutated(v, top_keys) for v in valid), _keyed(top_keys),
                           structures())
    parts = [
        st.builds(_dump, structural, st.sampled_from(("yaml", "json"))),
        st.binary(max_size=200),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
        deep_nesting(),
    ]
    if fixtures:
        parts.append(mutated_text(fixtures))
    return st.one_of(*parts)


SUFFIXES = st.sampled_from((".yaml", ".yml", ".json", ".txt", ""))


# ==== targets ===============================================================================
@dataclass
class Target:
    """A parser under test: ``call(example, workdir)``; success or InputError only."""

    name: str
    strategy: st.SearchStrategy
    call: Callable[[Any, Path], Any]
    counts: Counter = field(default_factory=Counter)
    bugs: dict = field(default_factory=dict)  # (exception type, last frame) -> (input, tb)


def _write(workdir: Path, stem: str, suffix: str, data: bytes) -> Path:
    p = workdir / f"{stem}{suffix}"
    p.write_bytes(data)
    return p


def _model_file(ex, wd: Path):
    suffix, data = ex
    return loaders.load_model(_write(wd, "fuzz-model", suffix, data))


def _model_mapping(ex, wd: Path):
    return loaders.load_model(ex, base_dir=wd)


def _cluster_file(ex, wd: Path):
    suffix, data, gpus = ex
    return loaders.load_cluster(_write(wd, "fuzz-cluster", suffix, data), default_gpus=gpus)


def _cluster_mapping(ex, wd: Path):
    doc, gpus = ex
    return loaders.load_cluster(doc, default_gpus=gpus, base_dir=wd)


def _run_file(ex, wd: Path):
    suffix, data = ex
    return loaders.load_run(_write(wd, "fuzz-run", suffix, data))


def _run_mapping(ex, wd: Path):
    return loaders.load_run(ex, base_dir=wd)


def _study_file(ex, wd: Path):
    from optimizer.studies import load_study_file

    suffix, data = ex
    return load_study_file(_write(wd, "fuzz-study", suffix, data))


def _graph_fixture() -> dict[str, Any]:
    from costmodel.hardware import get_cluster_preset
    from costmodel.topology import build_graph, graph_to_data

    data = graph_to_data(build_graph(get_cluster_preset("dgx-a100-80gb", 2, gpus_per_node=2)))
    return json.loads(json.dumps(data))  # tuples -> lists, as read from a JSON file


def _graph_fixture_links() -> dict[str, Any]:
    """The same graph with string ids, the older ``links`` key and inferred kinds/links."""
    g = _graph_fixture()
    ids = {json.dumps(n["id"]): f"n{i}" for i, n in enumerate(g["nodes"])}
    nodes = []
    for n in g["nodes"]:
        n = dict(n, id=ids[json.dumps(n["id"])])
        if n.get("kind") == "gpu":
            n.pop("kind")
        nodes.append(n)
    links = [{k: v for k, v in dict(e, source=ids[json.dumps(e["source"])],
                                    target=ids[json.dumps(e["target"])]).items() if k != "link"}
             for e in g["edges"]]
    return {"directed": False, "multigraph": False, "graph": {"name": "g"}, "nodes": nodes,
            "links": links}


@st.composite
def graph_docs(draw) -> dict[str, Any]:
    """A valid node-link cluster graph with structural mutations: nodes/edges dropped or
    duplicated, attributes replaced by random values, junk keys."""
    doc = draw(st.sampled_from((_graph_fixture, _graph_fixture_links)))()
    edges_key = "edges" if "edges" in doc else "links"
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("drop_node", "drop_edge", "dup_edge", "node_attr",
                                   "edge_attr", "top", "self_loop")))
        nodes, edges = doc.get("nodes"), doc.get(edges_key)
        if op == "drop_node" and isinstance(nodes, list) and nodes:
            nodes.pop(draw(st.integers(0, len(nodes) - 1)))
        elif op == "drop_edge" and isinstance(edges, list) and edges:
            edges.pop(draw(st.integers(0, len(edges) - 1)))
        elif op == "dup_edge" and isinstance(edges, list) and edges:
            e = draw(st.sampled_from(edges))
            edges.append(dict(e) if isinstance(e, dict) else e)
        elif op == "self_loop" and isinstance(edges, list) and edges:
            e = draw(st.sampled_from(edges))
            if isinstance(e, dict) and "source" in e:
                edges.append(dict(e, target=e["source"]))
        elif op == "node_attr" and isinstance(nodes, list) and nodes:
            n = draw(st.sampled_from(nodes))
            if isinstance(n, dict):
                k = draw(st.one_of(st.sampled_from(GRAPH_NODE_KEYS), keys))
                if draw(st.booleans()) and k in n:
                    n.pop(k)
                else:
                    n[k] = draw(st.one_of(scalars, structures(4)))
        elif op == "edge_attr" and isinstance(edges, list) and edges:
            e = draw(st.sampled_from(edges))
            if isinstance(e, dict):
                k = draw(st.one_of(st.sampled_from(GRAPH_EDGE_KEYS), keys))
                if draw(st.booleans()) and k in e:
                    e.pop(k)
                else:
                    e[k] = draw(st.one_of(scalars, structures(4)))
        else:
            doc[draw(st.sampled_from(GRAPH_KEYS))] = draw(st.one_of(scalars, structures(6)))
    return doc


def _nccl_sample(k_rows: int = 12, root: bool = True) -> bytes:
    """An nccl-tests all_reduce_perf text table (nccl-tests src/common.cu layout)."""
    head = ("# Collective test starting: all_reduce_perf\n"
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup "
            "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n"
            "# Using devices\n"
            "#  Rank  0 Group  0 Pid  4321 on     node-a device  0 [0x07] NVIDIA H100 80GB HBM3\n"
            "#  Rank  1 Group  0 Pid  4322 on     node-b device  0 [0x07] NVIDIA H100 80GB HBM3\n"
            "#                                                   out-of-place"
            "                       in-place\n"
            "#       size         count      type   redop    root     time   algbw   busbw"
            " #wrong     time   algbw   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)\n")
    rows = "".join(f"{8 << k:>12} {2 << k:>12}     float     sum{'      -1' if root else ''}"
                   f"    {10 + k:.2f}    {0.01 * k:.2f}    {0.02 * k:.2f}      0    "
                   f"{10 + k:.2f}    {0.01 * k:.2f}    {0.02 * k:.2f}    N/A\n"
                   for k in range(k_rows))
    tail = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.12\n"
    return (head + rows + tail).encode()


_NCCL_JSON = {"collective": "all_reduce", "nranks": 16, "nnodes": 2, "results": [
    {"size": 8 << k, "count": 2 << k, "type": "float", "redop": "sum",
     "out_of_place": {"time": 10.0 + k, "algbw": 0.01 * k, "busbw": 0.02 * k},
     "in_place": {"time": 10.0 + k, "algbw": 0.01 * k, "busbw": 0.02 * k}}
    for k in range(6)]}
_NCCL_JSON_KEYS = ("collective", "test", "name", "nranks", "world_size", "nnodes", "results",
                   "size", "bytes", "count", "type", "redop", "out_of_place", "in_place",
                   "oop", "ip", "time", "time_us", "algbw", "busbw", "outOfPlaceTime")


def _nccl_tests_target() -> Target | None:
    """costmodel/nccl_tests.py, if present: ``parse_nccl_tests(text, **kw)`` on text and
    ``-J`` JSON, and ``load_nccl_tests(path)`` on files (binary garbage included)."""
    import importlib.util

    if importlib.util.find_spec("costmodel.nccl_tests") is None:
        return None
    import costmodel.nccl_tests as nt

    fixtures = (_nccl_sample(), _nccl_sample(3, root=False),
                json.dumps(_NCCL_JSON, indent=1).encode())
    texts = st.one_of(
        mutated_text(fixtures, max_ops=6),
        st.builds(lambda d: json.dumps(d).encode(), mutated(_NCCL_JSON, _NCCL_JSON_KEYS, 4)),
        st.binary(max_size=300),
        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
        deep_nesting())
    kwargs = st.fixed_dictionaries({}, optional={
        "collective": st.one_of(st.sampled_from(("allreduce", "all_gather_perf", "AllReduce",
                                                 "alltoall", "bogus")), short_text, scalars),
        "n_ranks": st.one_of(st.integers(-2, 64), scalars),
        "n_nodes": st.one_of(st.integers(-2, 8), scalars),
        "in_place": st.booleans()})
    strategy = st.tuples(st.sampled_from(("text", "file")),
                         st.sampled_from(("all_reduce_perf.txt", "out.json", "x.log")),
                         texts, kwargs)

    def call(ex, wd: Path):
        how, name, data, kw = ex
        if how == "file":
            return nt.load_nccl_tests(_write(wd, "fuzz-" + name, "", data), **kw)
        return nt.parse_nccl_tests(data.decode("utf-8", "replace"), **kw)

    return Target("nccl_tests", strategy, call)


def targets() -> dict[str, Target]:
    model_fx = _fixture_texts("model-llama65b.yaml", "model-typo.yaml", "gpt2-config.json",
                              "llama2-7b-config.json", "mixtral-config.json",
                              "llama3-70b/config.json", "hf-missing-layers.json")
    cluster_fx = _fixture_texts("cluster-2x-dgx-a100.yaml", "cluster-inline-gpu.yaml",
                                "cluster_graph.json")
    run_fx = _fixture_texts("run-llama65b.yaml", "run-mismatch.yaml")
    study_fx = tuple(p.read_bytes() for p in sorted((ROOT / "studies").glob("*.yaml")))
    top_model = MODEL_KEYS + HF_KEYS
    gpus = st.one_of(st.none(), st.sampled_from([1, 4, 8, 16, 12]), st.integers(-2, 64))
    out = {
        "model_file": Target("model_file", st.tuples(
            SUFFIXES, documents((VALID_MODEL, VALID_HF, VALID_GPT2), top_model, model_fx)),
            _model_file),
        "model_mapping": Target("model_mapping", st.one_of(
            mutated(VALID_MODEL, top_model, 4), mutated(VALID_HF, top_model, 4),
            mutated(VALID_GPT2, top_model, 4), _keyed(top_model),
            st.sampled_from(WORDS)), _model_mapping),
        "cluster_file": Target("cluster_file", st.tuples(
            SUFFIXES, documents((VALID_CLUSTER, VALID_CLUSTER_INLINE), CLUSTER_KEYS,
                                cluster_fx), gpus), _cluster_file),
        "cluster_mapping": Target("cluster_mapping", st.tuples(st.one_of(
            mutated(VALID_CLUSTER, CLUSTER_KEYS, 4),
            mutated(VALID_CLUSTER_INLINE, CLUSTER_KEYS, 4), _keyed(CLUSTER_KEYS),
            graph_docs(), st.sampled_from(WORDS)), gpus), _cluster_mapping),
        "run_file": Target("run_file", st.tuples(
            SUFFIXES, documents((VALID_RUN, VALID_RUN_FILES), RUN_KEYS, run_fx)), _run_file),
        "run_mapping": Target("run_mapping", st.one_of(
            mutated(VALID_RUN, RUN_KEYS, 4), mutated(VALID_RUN_FILES, RUN_KEYS, 4),
            _keyed(RUN_KEYS)), _run_mapping),
        "study_file": Target("study_file", st.tuples(
            SUFFIXES, documents((VALID_STUDY,), tuple(STUDY_KEYS), study_fx)), _study_file),
    }
    nccl = _nccl_tests_target()
    if nccl is not None:
        out["nccl_tests"] = nccl
    return out


def prepare_workdir(workdir: Path) -> Path:
    """Files that run/study documents may name by relative path."""
    for name in ("model-llama65b.yaml", "cluster-2x-dgx-a100.yaml", "gpt2-config.json",
                 "cluster-inline-gpu.yaml", "cluster_graph.json"):
        (workdir / name).write_bytes((DATA / name).read_bytes())
    return workdir


def classify(target: Target, example: Any, workdir: Path) -> str:
    """Run one input; 'ok', 'input_error' or 'bug' (recorded in ``target.bugs``)."""
    try:
        target.call(example, workdir)
    except InputError:
        target.counts["input_error"] += 1
        return "input_error"
    except Exception as e:  # anything else is a bug
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(tb)
                      if "/site-packages/" not in f.filename and "/lib/python" not in
                      f.filename), f"{tb[-1].filename}:{tb[-1].lineno}")
        sig = (type(e).__name__, where)
        target.counts["bug"] += 1
        if sig not in target.bugs or len(repr(example)) < len(repr(target.bugs[sig][0])):
            target.bugs[sig] = (example, f"{type(e).__name__}: {e}"[:300])
        return "bug"
    target.counts["ok"] += 1
    return "ok"


def fuzz(target: Target, n: int, workdir: Path, seed: int | None = None) -> Target:
    """Feed ``n`` generated inputs to ``target`` (no shrinking; every outcome counted)."""
    cfg = settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
                   suppress_health_check=list(HealthCheck), derandomize=seed is None)

    @cfg
    @given(target.strategy)
    def inner(example):
        classify(target, example, workdir)

    if seed is not None:
        from hypothesis import seed as hseed

        inner = hseed(seed)(inner)
    inner()
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=10_000, help="inputs per parser (default 10000)")
    p.add_argument("--only", help="comma-separated target names")
    p.add_argument("--seed", type=int, help="hypothesis seed (default: derandomized)")
    args = p.parse_args(argv)
    all_targets = targets()
    names = args.only.split(",") if args.only else list(all_targets)
    unknown = [x for x in names if x not in all_targets]
    if unknown:
        p.error(f"unknown target(s) {unknown}; choose from {', '.join(all_targets)}")
    total_bugs = 0
    print(f"{'parser':<16} {'inputs':>7} {'parsed':>7} {'InputError':>10} {'uncaught':>8} "
          f"{'time_s':>7}")
    with tempfile.TemporaryDirectory(prefix="paraplan-fuzz-") as tmp:
        wd = prepare_workdir(Path(tmp))
        cwd = os.getcwd()
        os.chdir(wd)  # anything a parser might write lands in the scratch directory
        try:
            for name in names:
                t = all_targets[name]
                t0 = time.perf_counter()
                fuzz(t, args.n, wd, args.seed)
                c = t.counts
                total = c["ok"] + c["input_error"] + c["bug"]
                print(f"{name:<16} {total:>7} {c['ok']:>7} {c['input_error']:>10} "
                      f"{c['bug']:>8} {time.perf_counter() - t0:>7.1f}", flush=True)
                total_bugs += c["bug"]
        finally:
            os.chdir(cwd)
    for name in names:
        for (exc, where), (example, msg) in all_targets[name].bugs.items():
            print(f"\nBUG {name}: {exc} at {where}\n  {msg}\n  input: {example!r:.600}")
    if "nccl_tests" not in all_targets:
        print("\n(nccl_tests: costmodel/nccl_tests.py not present, not fuzzed)")
    return 1 if total_bugs else 0


if __name__ == "__main__":
    sys.exit(main())
