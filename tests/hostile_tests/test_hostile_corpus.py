"""A table-driven corpus of bad inputs over every entry point (issue 26, acceptance 1).

Every case goes through a public entry point: ``optimize ...`` in-process
(:func:`conftest.run_cli`) or the :mod:`optimizer.api` functions. Each must end with exit 2
(bad input) or 3 (nothing fits), one line on stderr that names the field, no internal error,
no traceback, within a bounded time, and without changing any file it was given. A few cases
are valid inputs near a bound (``ok`` cases): those must succeed.

Entry points: CLI flags of ``optimize``, ``optimize evaluate``, ``optimize nccl`` and
``optimize report``; model YAML/JSON and Hugging Face config.json files; cluster YAML and
node-link graph JSON files; run files; study files; nccl-tests logs; storage URLs and paths;
the Python API (``optimize``, ``evaluate``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

CASE_TIME_LIMIT_S = 10

MODEL = {"name": "corpus-model", "num_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "ffn_hidden_size": 11008, "vocab_size": 32000,
         "gated_mlp": True}
HF = {"_name_or_path": "corpus/hf", "model_type": "llama", "num_hidden_layers": 32,
      "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 11008,
      "vocab_size": 32000, "hidden_act": "silu"}
CLUSTER = {"name": "corpus-cluster", "num_nodes": 1, "gpus_per_node": 8, "gpu": "a100-sxm-80gb",
           "intra_node": {"fabric": "nvswitch", "bandwidth_GBps": 300},
           "inter_node": {"fabric": "infiniband", "nics_per_node": 8,
                          "nic_bandwidth_Gbps": 200}}
RUN = {"model": "7b", "cluster": {"gpu": "a100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8},
       "training": {"seq_length": 2048, "global_batch_size": 1024},
       "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "precision": "bf16",
                    "recompute": "none", "sequence_parallel": False, "zero_stage": 0,
                    "schedule": "1f1b", "virtual_stages": 1, "nccl_algo": "auto",
                    "nccl_proto": "auto"}}
STUDY = {"schema_version": 1, "name": "corpus-study", "model": "7b",
         "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb", "gpus_per_node": 8},
         "training": {"seq_length": 2048, "global_batch_size": 256},
         "constraints": {"memory_limit_gib": 70},
         "search": {"sampler": "random", "trials": 8, "seed": 0, "batch_size": 8}}
NCCL_LOG = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20
""" + "".join(f"#  Rank {r:2d} Group  0 Pid {1000 + r} on node-0 device {r} [0x07] NVIDIA GPU\n"
              for r in range(8)) + """\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    80.00   13.11   22.94      0    79.00   13.27   23.22      0
   134217728      33554432     float     sum      -1   2000.0   67.11  117.44      0   1990.0   67.45  118.04      0
"""
BASE = ["--gpus", "8", "-q"]
NCCL_BASE = ["nccl", "--collective", "allreduce", "--size", "1GiB"]


class _Timeout(BaseException):
    """Raised by SIGALRM: a BaseException, so the CLI's catch-all cannot swallow it."""


@dataclass(frozen=True)
class Case:
    id: str
    field: str                   # a substring the error line must contain ("" with ok=True)
    argv: tuple[str, ...] = ()   # CLI arguments ({d} = the case's folder)
    files: tuple[tuple[str, Any], ...] = ()  # (name, str | bytes | dict | "fifo")
    api: Callable[[Path], Any] | None = None  # call the Python API instead of the CLI
    ok: bool = False             # a valid input: must succeed (exit 0)
    codes: tuple[int, ...] = (2, 3)
    creates: bool = False        # may create new files in the folder (storages)


CASES: list[Case] = []


def add(case_id: str, field: str, argv=(), files=(), **kw) -> None:
    CASES.append(Case(case_id, field, tuple(argv), tuple(files), **kw))


def mutated(base: dict, path: str, value: Any) -> dict:
    """A deep copy of ``base`` with ``path`` (dots) set to ``value`` (the DELETE sentinel
    removes the key)."""
    doc = copy.deepcopy(base)
    keys = path.split(".")
    cur = doc
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    if value is DELETE:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value
    return doc


DELETE = object()

# ---- 1. CLI flags ---------------------------------------------------------------------------
INT_JUNK = ["-1", "0", "abc", "1.5", "", " ", "1e3", "0x10", "9" * 40, "nan"]
INT_FLAGS = {"--gpus": "gpus", "--gpus-per-node": "gpus_per_node", "--seq-length": "seq_length",
             "--global-batch-size": "global_batch_size", "--trials": "trials",
             "--jobs": "jobs", "--trials-per-batch": "trials_per_batch", "--seed": "seed"}
for flag, field in INT_FLAGS.items():
    for i, v in enumerate(INT_JUNK):
        if flag == "--seed" and v == "0":
            continue  # seed 0 is valid
        argv = ["--model", "7b", "--gpus", "8", "-q", "--sampler", "random", "--trials", "4"]
        if flag in argv:
            j = argv.index(flag)
            argv[j + 1] = v
        else:
            argv += [flag, v]
        add(f"flag{flag}-{i}", field, argv)
for i, v in enumerate(["-1", str(2**32), str(2**40), str(2**63), "-0x1"]):
    add(f"flag--seed-range-{i}", "seed",
        ["--model", "7b", *BASE, "--sampler", "tpe", "--trials", "4", "--seed", v])
    add(f"flag--seed-range-exhaustive-{i}", "seed", ["--model", "7b", *BASE, "--seed", v])
for i, v in enumerate([str(2**20 + 1), str(10**12), str(2**63), str(10**30)]):
    add(f"flag--gpus-huge-{i}", "gpus", ["--model", "7b", "--gpus", v, "-q"])
for i, v in enumerate([str(2**63), str(2**40), str(10**30)]):
    add(f"flag--global-batch-size-huge-{i}", "global_batch_size",
        ["--model", "7b", *BASE, "--global-batch-size", v])
    add(f"flag--seq-length-huge-{i}", "seq_length", ["--model", "7b", *BASE, "--seq-length", v])
    add(f"flag--trials-huge-{i}", "trials",
        ["--model", "7b", *BASE, "--sampler", "random", "--trials", v])
    add(f"flag--trials-per-batch-huge-{i}", "trials_per_batch",
        ["--model", "7b", *BASE, "--sampler", "random", "--trials", "4", "--trials-per-batch", v])
    add(f"flag--jobs-huge-{i}", "jobs", ["--model", "7b", *BASE, "--jobs", v])
    add(f"flag--gpus-per-node-huge-{i}", "gpus_per_node",
        ["--model", "7b", "--gpus", "8", "-q", "--gpus-per-node", v])
for i, v in enumerate(["0", "-1", "abc", "nan", "inf", "-inf", "1e300", "200", "81", ""]):
    add(f"flag--memory-limit-gib-{i}", "memory_limit", ["--model", "7b", *BASE,
                                                       "--memory-limit-gib", v])
for i, v in enumerate(["0", "-0.5", "1.5", "nan", "inf", "abc", "2", ""]):
    add(f"flag--memory-fraction-{i}", "memory_fraction", ["--model", "7b", *BASE,
                                                         "--memory-fraction", v])
add("flag-limit-and-fraction", "memory", ["--model", "7b", *BASE, "--memory-limit-gib", "70",
                                          "--memory-fraction", "0.5"])
for i, v in enumerate(["bogus", "", "../x", "a100\x1b[2J"]):
    add(f"flag--gpu-{i}", "gpu", ["--model", "7b", *BASE, "--gpu", v])
for i, v in enumerate(["A100", "a100", "h100-sxm-80gb\n"]):  # aliases, case, whitespace
    add(f"ok-flag--gpu-{i}", "", ["--model", "7b", *BASE, "--gpu", v], ok=True)
for i, v in enumerate(["bogus", "", "TPE ", "grid", "cmaes"]):
    add(f"flag--sampler-{i}", "sampler", ["--model", "7b", *BASE, "--sampler", v])
for i, v in enumerate(["bogus", "", "65", "gpt-5", "no/such/file.yaml",
                       "./missing.json", "~nosuchuser/x.yaml", "llama\n65b", "llama-65"]):
    add(f"flag--model-{i}", "model", ["--model", v, *BASE])
add("flag--model-alias-infeasible", "memory_limit", ["--model", "gpt-3", *BASE],
    codes=(3,))  # an alias of gpt3-175b, which does not fit on 8 GPUs
add("flag-no-model", "model", [*BASE])
add("flag-no-gpus", "gpus", ["--model", "7b", "-q"])
for i, v in enumerate(["bogus", "", "./missing.yaml", "no/such.json"]):
    add(f"flag--cluster-{i}", "cluster", ["--model", "7b", "-q", "--cluster", v])
add("flag-gpus-vs-cluster", "gpus", ["--model", "7b", "--gpus", "16", "-q", "--cluster", "{d}/c.yaml"],
    files=[("c.yaml", CLUSTER)])
SPACE_JUNK = {
    "--tp": ["0", "-1", "abc", "3", "1.5", "", "1,,x", "99999999999"],
    "--pp": ["0", "-2", "x", "7", "1e3"],
    "--micro-batch-size": ["0", "-1", "x", "2.5"],
    "--precision": ["fp7", "", "BF16x", "int8"],
    "--recompute": ["some", "", "partial"],
    "--sequence-parallel": ["maybe", "2", ""],
    "--zero-stage": ["4", "-1", "x", "9"],
    "--schedule": ["zigzag", "", "1f2b"],
    "--virtual-stages": ["0", "-1", "x"],
    "--nccl-algo": ["bogus", "ring,warp", "allreduce:", "^", ""],
    "--nccl-proto": ["bogus", "ll256", ""],
}
for flag, values in SPACE_JUNK.items():
    for i, v in enumerate(values):
        add(f"space{flag}-{i}", flag.lstrip("-").replace("-", "_").split("_")[0],
            ["--model", "7b", *BASE, flag, v])
add("flag-emit-bogus", "emit", ["--model", "7b", *BASE, "--emit", "pbs"])
add("flag-framework-bogus", "framework", ["--model", "7b", *BASE, "--framework", "jax"])
add("flag-unknown", "--frobnicate", ["--model", "7b", *BASE, "--frobnicate"])
add("flag-study-name-without-storage", "study_name",
    ["--model", "7b", *BASE, "--sampler", "random", "--trials", "4", "--study-name", "x"])
add("flag-plot-dir-missing", "plot", ["--model", "7b", *BASE, "--plot", "{d}/no/such/dir/x.png"])
add("flag-plot-is-dir", "plot", ["--model", "7b", *BASE, "--plot", "{d}"])
add("flag-plot-fifo", "plot", ["--model", "7b", *BASE, "--plot", "{d}/f.png"],
    files=[("f.png", "fifo")])
add("flag-plot-chardev", "plot", ["--model", "7b", *BASE, "--plot", "{d}/null"],
    files=[("null", "chardev-null")])  # never a real /dev node: a failing case would replace it
for i, v in enumerate(["1", "1.0", "1e-3"]):
    add(f"flag-infeasible-{i}", "memory_limit", ["--model", "7b", *BASE, "--memory-limit-gib", v],
        codes=(3,))
# valid inputs at the bounds: accepted
add("ok-seed-max", "", ["--model", "7b", *BASE, "--sampler", "random", "--trials", "4",
                        "--seed", str(2**32 - 1)], ok=True)
add("ok-memory-limit-at-hbm", "", ["--model", "7b", *BASE, "--memory-limit-gib", "80"], ok=True)

# ---- 2. storage URLs and paths ---------------------------------------------------------------
STORAGE_JUNK = {
    "empty": "", "blank": "   ", "ftp": "ftp://host/x", "unknown-scheme": "mongodb://x/y",
    "http": "http://127.0.0.1:1/x", "chardev": "{d}/null", "devzero": "/dev/zero",
    "dir": "{d}", "not-journal": "{d}/notes.txt", "sqlite-as-journal": "{d}/db.sqlite",
    "fifo-journal": "{d}/fifo.journal", "pg-refused": "postgresql+psycopg2://u@127.0.0.1:1/x",
    "pg-bad-port": "postgresql+psycopg2://u@127.0.0.1:notaport/x",
    "redis-refused": "redis://127.0.0.1:1/0",
    "mysql-nodriver": "mysql+nosuchdriver://u@h/x", "sqlite-dir": "sqlite:///{d}",
    "sqlite-notdb": "sqlite:///{d}/notes.txt", "sqlite-corrupt-header": "sqlite:///{d}/bad.db",
    "sqlite-truncated": "sqlite:///{d}/trunc.db", "sqlite-foreign": "sqlite:///{d}/foreign.db",
    "sqlite-chardev": "sqlite:///{d}/null", "journal-binary": "{d}/garbage.journal",
    "journal-newline": "{d}/x\n.journal", "journal-nul": "{d}/x\x00.journal",
    "tilde-nouser": "~nosuchuser/x.journal",
}


def _sqlite_bytes(kind: str) -> bytes:
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        db = Path(t) / "x.db"
        con = sqlite3.connect(db)
        con.execute("create table invoices (id integer primary key, amount real)")
        con.executemany("insert into invoices(amount) values (?)", [(i,) for i in range(500)])
        con.commit()
        con.close()
        data = db.read_bytes()
    if kind == "foreign":
        return data
    if kind == "corrupt":
        return data[:16] + b"\xff" * 84 + data[100:]
    return data[:len(data) // 3]


STORAGE_FILES = [("notes.txt", "first line\nsecond line\n"), ("db.sqlite", "sqlite-foreign"),
                 ("fifo.journal", "fifo"), ("bad.db", "sqlite-corrupt"),
                 ("trunc.db", "sqlite-truncated"), ("foreign.db", "sqlite-foreign"),
                 ("garbage.journal", b"\x00\x01\x02garbage\xff" * 10), ("null", "chardev-null")]
for name, url in STORAGE_JUNK.items():
    for sampler in ("random",):
        add(f"storage-{name}", "storage",
            ["--model", "7b", *BASE, "--sampler", sampler, "--trials", "4", "--storage", url],
            files=STORAGE_FILES, creates=True)
add("storage-report-missing", "study", ["report", "--study", "{d}/s.yaml"],
    files=[("s.yaml", STUDY)], creates=True)

# ---- 3. model files --------------------------------------------------------------------------
NUM_JUNK = [-1, 0, "x", 1.5, True, [1], {"a": 1}, None, 10**10, 2**63, float("nan")]
for key in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
            "vocab_size"):
    for i, v in enumerate(NUM_JUNK):
        if v is None:
            continue
        doc = mutated(MODEL, key, v)
        suffix = ".json" if isinstance(v, float) else ".yaml"
        add(f"model-{key}-{i}", "NaN" if v != v else key,
            ["--model", f"{{d}}/m{suffix}", *BASE], files=[(f"m{suffix}", doc)])
    add(f"model-{key}-missing", f"model.{key}", ["--model", "{d}/m.yaml", *BASE],
        files=[("m.yaml", mutated(MODEL, key, DELETE))])
for i, v in enumerate([-1, 0, "x", 7, 33, 10**9]):
    add(f"model-num_kv_heads-{i}", "num_kv_heads", ["--model", "{d}/m.yaml", *BASE],
        files=[("m.yaml", mutated(MODEL, "num_kv_heads", v))])
for key in ("gated_mlp", "tied_embeddings"):
    for i, v in enumerate(["yes please", 2, [True]]):
        add(f"model-{key}-{i}", key, ["--model", "{d}/m.yaml", *BASE],
            files=[("m.yaml", mutated(MODEL, key, v))])
NAME_JUNK = ["evil\ntouch /tmp/paraplan-pwned", "x\r\ny", "\x1b[2J\x1b[31mred", "a\x00b",
             "tab\there", "\u2028sep", "x\x7fy", "", 17, ["a"], "x" * 5000]
for i, v in enumerate(NAME_JUNK):
    add(f"model-name-{i}", "model.name", ["--model", "{d}/m.yaml", *BASE],
        files=[("m.yaml", mutated(MODEL, "name", v))])
    if isinstance(v, str) and v:
        add(f"hf-name-{i}", "_name_or_path", ["--model", "{d}/config.json", *BASE],
            files=[("config.json", mutated(HF, "_name_or_path", v))])
add("model-unknown-key", "model.num_layer", ["--model", "{d}/m.yaml", *BASE],
    files=[("m.yaml", mutated(MODEL, "num_layer", 32))])
add("model-sexagesimal", "base-60", ["--model", "{d}/m.yaml", *BASE],
    files=[("m.yaml", yaml.safe_dump(MODEL).replace("num_layers: 32", "num_layers: 1:30"))])
add("model-octal", "model.num_layers", ["--model", "{d}/m.yaml", *BASE],
    files=[("m.yaml", yaml.safe_dump(MODEL).replace("num_layers: 32", "num_layers: 0o40"))])
add("model-layers-1e10", "model.num_layers", ["--model", "{d}/m.yaml", *BASE],
    files=[("m.yaml", mutated(MODEL, "num_layers", 10**10))])
RAW_JUNK = {"empty": "", "blank": "   \n\n", "binary": b"\x00\x01\x02\xff\xfe" * 20,
            "latin1": "name: caf\xe9\n".encode("latin-1"), "list": "- 1\n- 2\n",
            "scalar": "42\n", "bad-yaml": "name: [unclosed\n", "tabs": "name:\tx\n\tbad: 1\n",
            "dup-key": yaml.safe_dump(MODEL) + "num_layers: 40\n",
            "bomb": "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
                    "name: [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n",
            "deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
            "python-tag": "name: !!python/object/apply:os.system ['true']\n",
            "timestamp-tag": "name: !!timestamp x\n",
            "huge": "# " + "x" * (17 * 2**20) + "\n"}
for name, text in RAW_JUNK.items():
    add(f"model-raw-{name}", "model", ["--model", "{d}/m.yaml", *BASE], files=[("m.yaml", text)])
JSON_JUNK = {"nan": '{"num_layers": NaN}', "trailing": '{"a": 1} x', "dup": '{"a":1,"a":2}',
             "deep": "[" * 100000 + "]" * 100000, "bigint": '{"num_layers": ' + "9" * 5000 + "}"}
for name, text in JSON_JUNK.items():
    add(f"model-json-{name}", "model", ["--model", "{d}/m.json", *BASE], files=[("m.json", text)])
add("model-devzero", "model", ["--model", "/dev/zero", *BASE])
add("model-devnull", "model", ["--model", "/dev/null", *BASE])
add("model-fifo", "model", ["--model", "{d}/m.yaml", *BASE], files=[("m.yaml", "fifo")])
add("model-dir-without-config", "model", ["--model", "{d}/", *BASE])
add("model-env-file", "model", ["--model", "{d}/.env", *BASE],
    files=[(".env", "SECRET_TOKEN=sk-live-1234567890abcdefghijklmnopqrstuvwxyz\n")])
for key, v in [("num_hidden_layers", -4), ("num_hidden_layers", "32"), ("hidden_size", 0),
               ("num_attention_heads", 5), ("intermediate_size", None),
               ("vocab_size", 10**12), ("num_hidden_layers", 10**10),
               ("num_key_value_heads", 3), ("num_local_experts", 8), ("kv_lora_rank", 512)]:
    doc = mutated(HF, key, v) if v is not None else mutated(HF, key, DELETE)
    add(f"hf-{key}-{v!r}"[:60], "num_layers" if v == 10**10 else key,
        ["--model", "{d}/config.json", *BASE],
        files=[("config.json", doc)])
add("hf-conflicting-layers", "num_layers", ["--model", "{d}/config.json", *BASE],
    files=[("config.json", {**HF, "num_layers": 40})])
add("hf-model-type-moe", "model_type", ["--model", "{d}/config.json", *BASE],
    files=[("config.json", {**HF, "model_type": "mixtral"})])

# ---- 4. cluster files --------------------------------------------------------------------------
CLUSTER_JUNK = {
    "num_nodes": [0, -1, "x", 1.5, 10**7], "gpus_per_node": [0, -8, "x", 3.5, 10**6],
    "gpu": ["bogus", 7, "", ["a100-sxm-80gb"]],
    "intra_node.fabric": ["warp", "", 3], "intra_node.bandwidth_GBps": [0, -1, "x", 1e12, 1e300],
    "inter_node.fabric": ["carrier-pigeon", ""], "inter_node.nics_per_node": [-1, "x", 10**6],
    "inter_node.nic_bandwidth_Gbps": [0, -5, "x", 1e12],
    "name": ["x\ny", "\x1b]0;pwned\x07", "", 5, "a\rb"],
}
for key, values in CLUSTER_JUNK.items():
    for i, v in enumerate(values):
        add(f"cluster-{key}-{i}", f"cluster.{key}".rsplit(".", 1)[-1].split("_GBps")[0],
            ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
            files=[("c.yaml", mutated(CLUSTER, key, v))])
GPU_INLINE = {"name": "my-gpu", "memory_GB": 80, "memory_bandwidth_GBps": 2039,
              "peak_tflops": {"bf16": 312}}
for key, values in {"memory_GB": [0, -1, "x", 1e9], "memory_bandwidth_GBps": [0, -1, 1e12],
                    "peak_tflops.bf16": [0, -3, "x", 1e12], "bogus_key": [1],
                    "name": ["g\npu", "\x1b[1m"]}.items():
    for i, v in enumerate(values):
        add(f"cluster-gpu-inline-{key}-{i}", key.split(".")[0].split("_")[0],
            ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
            files=[("c.yaml", {**CLUSTER, "gpu": mutated(GPU_INLINE, key, v)})])
for i, (k, v) in enumerate([("nccl_intra_bw_scal", 0.8), ("intra_bw_scale", 0.8),
                            ("nccl_latency_scale", 0), ("nccl_inter_bw_scale", 1e9),
                            ("nccl_inter_bw_scale", "x")]):
    add(f"cluster-calibration-{i}", "calibration", ["--model", "7b", "-q", "--cluster",
                                                    "{d}/c.yaml"],
        files=[("c.yaml", {**CLUSTER, "calibration": {k: v}})])
    add(f"nccl-cluster-calibration-{i}", "calibration", [*NCCL_BASE, "--cluster", "{d}/c.yaml"],
        files=[("c.yaml", {**CLUSTER, "calibration": {k: v}})])
add("cluster-unknown-key", "cluster.nodes", ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
    files=[("c.yaml", {**CLUSTER, "nodes": 2})])
add("cluster-case-typo", "cluster.intra_node.bandwidth_Gbps",
    ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
    files=[("c.yaml", mutated(mutated(CLUSTER, "intra_node.bandwidth_GBps", DELETE),
                              "intra_node.bandwidth_Gbps", 300))])
add("cluster-devzero", "cluster", ["--model", "7b", "-q", "--cluster", "/dev/zero"])
add("cluster-fifo", "cluster", ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
    files=[("c.yaml", "fifo")])
for name, text in RAW_JUNK.items():
    if name in ("huge", "bomb", "deep"):
        continue
    add(f"cluster-raw-{name}", "cluster", ["--model", "7b", "-q", "--cluster", "{d}/c.yaml"],
        files=[("c.yaml", text)])
GRAPH = json.loads((Path(__file__).parents[1] / "data" / "cluster_graph.json").read_text())
GRAPH_JUNK = {"no-nodes": ("nodes", DELETE), "nodes-not-list": ("nodes", 5),
              "edges-not-list": ("edges", "x"), "empty-nodes": ("nodes", []),
              "no-edges": ("edges", [])}
for name, (key, v) in GRAPH_JUNK.items():
    add(f"graph-{name}", "cluster", ["--model", "7b", "-q", "--cluster", "{d}/g.json"],
        files=[("g.json", mutated(GRAPH, key, v))])
for i, patch in enumerate([{"kind": "warp"}, {"gpu": "bogus"}, {"node": -1}, {"node": "x"},
                           {"id": None}]):
    g = copy.deepcopy(GRAPH)
    g["nodes"][0].update(patch)
    add(f"graph-node-{i}", "cluster", ["--model", "7b", "-q", "--cluster", "{d}/g.json"],
        files=[("g.json", g)])
for i, patch in enumerate([{"bandwidth_bytes_per_s": -1}, {"bandwidth_bytes_per_s": "x"},
                           {"bandwidth_bytes_per_s": 1e25}, {"latency_s": -3},
                           {"source": "nowhere"}, {"link": "warp"}]):
    g = copy.deepcopy(GRAPH)
    g["edges"][0].update(patch)
    add(f"graph-link-{i}", "cluster", ["--model", "7b", "-q", "--cluster", "{d}/g.json"],
        files=[("g.json", g)])
g = copy.deepcopy(GRAPH)
g["graph"]["name"] = "graph\nname"
add("graph-name-newline", "name", ["--model", "7b", "-q", "--cluster", "{d}/g.json"],
    files=[("g.json", g)])

# ---- 5. run files (optimize evaluate) --------------------------------------------------------
PARALLEL_JUNK = {"tp": [0, -1, 3, "x", 1.5, 10**9], "pp": [0, 3, "x", 10**6], "dp": [0, 3, "x"],
                 "micro_batch_size": [0, -1, "x", 10**12], "precision": ["fp7", 16, ""],
                 "recompute": ["some", 1], "sequence_parallel": ["maybe", 3],
                 "zero_stage": [4, -1, "x"], "schedule": ["zigzag", 0],
                 "virtual_stages": [0, -1, 3, "x"], "nccl_algo": ["warp", 5],
                 "nccl_proto": ["ll256", 0], "bogus": [1]}
for key, values in PARALLEL_JUNK.items():
    for i, v in enumerate(values):
        add(f"run-parallel-{key}-{i}", "parallel", ["evaluate", "{d}/r.yaml"],
            files=[("r.yaml", mutated(RUN, f"parallel.{key}", v))])
for key, values in {"training.seq_length": [0, -1, "x", 2**40],
                    "training.global_batch_size": [0, -1, 1023, 2**63],
                    "training.framework": ["jax"], "training.bogus": [1],
                    "model": ["bogus", 5, "{d}/nofile.yaml"], "cluster": ["bogus", 5],
                    "cluster.num_nodes": [0, "x"], "name": ["r\nx"]}.items():
    for i, v in enumerate(values):
        add(f"run-{key}-{i}", key.split(".")[-1], ["evaluate", "{d}/r.yaml"],
            files=[("r.yaml", mutated(RUN, key, v))])
# an explicit pipeline layout (Megatron's --pipeline-model-parallel-layout) on 32 layers, pp 2
for i, v in enumerate(["", "   ", 5, ["Et*16", "t*16L"], "Et*16|t*15L", "Xt*32", "t*32",
                       "Et*16|t*16", "LEt*16|t*16", "Et*8|t*8|t*8|t*8L", "Et*16|t*16L|",
                       "E(t*16|)*x", "Et*16|t*16mL", "E" + "t" * 10**5 + "L",
                       "Et*999999999L", "(t*99999|)*99999", "Et*" + "9" * 5000 + "L"]):
    add(f"run-pipeline_layout-{i}", "pipeline_layout", ["evaluate", "{d}/r.yaml"],
        files=[("r.yaml", mutated(RUN, "training.pipeline_layout", v))])
add("ok-run-pipeline_layout", "", ["evaluate", "{d}/r.yaml"],
    files=[("r.yaml", mutated(RUN, "training.pipeline_layout", "Et*15|t*17L"))], ok=True)
for key in ("model", "cluster", "parallel"):
    add(f"run-missing-{key}", key, ["evaluate", "{d}/r.yaml"],
        files=[("r.yaml", mutated(RUN, key, DELETE))])
add("ok-run-missing-training", "", ["evaluate", "{d}/r.yaml"],  # the training defaults
    files=[("r.yaml", mutated(RUN, "training", DELETE))], ok=True)
add("run-unknown-section", "bogus", ["evaluate", "{d}/r.yaml"],
    files=[("r.yaml", {**RUN, "bogus": 1})])
add("run-missing-file", "run", ["evaluate", "{d}/none.yaml"])
add("run-devzero", "run", ["evaluate", "/dev/zero"])
add("run-fifo", "run", ["evaluate", "{d}/r.yaml"], files=[("r.yaml", "fifo")])
for name, text in RAW_JUNK.items():
    if name in ("huge", "deep"):
        continue
    add(f"run-raw-{name}", "run", ["evaluate", "{d}/r.yaml"], files=[("r.yaml", text)])
for i, v in enumerate(["0", "-1", "x", "nan", "1e300", "200"]):
    add(f"evaluate-memory-limit-{i}", "memory_limit",
        ["evaluate", "{d}/r.yaml", "--memory-limit-gib", v], files=[("r.yaml", RUN)])
add("evaluate-limit-and-fraction", "memory", ["evaluate", "{d}/r.yaml", "--memory-limit-gib",
                                              "70", "--memory-fraction", "0.5"],
    files=[("r.yaml", RUN)])

# ---- 6. study files -----------------------------------------------------------------------------
STUDY_JUNK = {
    "schema_version": [2, 0, "1", None], "name": ["", 5, "s\ny", "\x1b[2J"],
    "model": ["bogus", 5, {"num_layers": 2}], "cluster": ["bogus", 5, {"gpus": 0}],
    "cluster.gpus": [-8, "x", 10**12], "training.seq_length": [0, "x", 2**40],
    "training.global_batch_size": [0, 2**63], "training.bogus": [1],
    "space.tp": ["x", [0], [3], [], "1,2"], "space.bogus": [[1]], "space.precision": [["fp7"]],
    "objectives": ["x", ["maximize nothing"], ["minimize tokens_per_s"], []],
    "constraints.memory_limit_gib": [0, -1, "x", 1e300, 200],
    "constraints.memory_fraction": [0, 2, "x"], "constraints.bogus": [1],
    "search.sampler": ["bogus", 5], "search.trials": [0, -1, "x", 10**12],
    "search.seed": [-1, 2**32, 2**40, "x", 1.5], "search.batch_size": [0, -1, "x", 10**9],
    "search.bogus": [1], "storage": ["", 5, "ftp://x/y", "../../escape.journal",
                                     "/tmp/paraplan-abs-escape.journal",
                                     "sub/dir/created.journal",
                                     "sqlite:///../../escape.db", "{d}/notes.txt"],
    "study_name": ["", 5, "a\nb"], "bogus": [1],
}
for key, values in STUDY_JUNK.items():
    for i, v in enumerate(values):
        doc = mutated(STUDY, key, v.replace("{d}", "{d}") if isinstance(v, str) else v)
        add(f"study-{key}-{i}", key.split(".")[-1] if key != "cluster.gpus" else "gpus",
            ["--study", "{d}/s.yaml"], files=[("s.yaml", doc), ("notes.txt", "hello\n")],
            creates=True)
add("study-limit-and-fraction", "constraints", ["--study", "{d}/s.yaml"],
    files=[("s.yaml", mutated(STUDY, "constraints.memory_fraction", 0.5))])
add("study-flag-conflict", "--trials", ["--study", "{d}/s.yaml", "--trials", "5"],
    files=[("s.yaml", STUDY)], creates=True)
add("study-devzero", "study", ["--study", "/dev/zero"])
add("study-fifo", "study", ["--study", "{d}/s.yaml"], files=[("s.yaml", "fifo")])
add("study-missing", "study", ["--study", "{d}/none.yaml"])
for name, text in RAW_JUNK.items():
    if name in ("huge", "deep"):
        continue
    add(f"study-raw-{name}", "study", ["--study", "{d}/s.yaml"], files=[("s.yaml", text)])
add("report-devzero", "study", ["report", "--study", "/dev/zero"])
add("report-missing-file", "study", ["report", "--study", "{d}/none.yaml"])
add("report-bad-storage", "storage", ["report", "--study", "{d}/s.yaml", "--storage",
                                      "ftp://x"], files=[("s.yaml", STUDY)])
add("report-plot-fifo", "study", ["report", "--study", "{d}/s.yaml", "--plot", "{d}/p.png"],
    files=[("s.yaml", STUDY), ("p.png", "fifo")], creates=True)

# ---- 7. optimize nccl and nccl-tests logs --------------------------------------------------------
NCCL = ["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "8"]
for i, v in enumerate(["abc", "1GX", "-5", "0", "1e30", "", "99999999999999999999GiB"]):
    add(f"nccl-size-{i}", "size", ["nccl", "--collective", "allreduce", "--size", v, "--gpus",
                                   "8"])
for i, v in enumerate(["allsum", "", "all gather scatter", "\x1b[2J"]):
    add(f"nccl-collective-{i}", "collective", ["nccl", "--collective", v, "--size", "1GiB",
                                               "--gpus", "8"])
for i, v in enumerate(["0", "-1", "x", str(10**12), "1.5"]):
    add(f"nccl-gpus-{i}", "gpus", ["nccl", "--collective", "allreduce", "--size", "1GiB",
                                   "--gpus", v])
for i, v in enumerate(["warp", "ring,warp", "allreduce:bogus"]):
    add(f"nccl-algo-{i}", "algo", [*NCCL, "--algo", v])
for i, v in enumerate(["ll256", "", "simple;x"]):
    add(f"nccl-proto-{i}", "proto", [*NCCL, "--proto", v])
add("nccl-gpu-bogus", "gpu", [*NCCL, "--gpu", "bogus"])
add("nccl-cluster-fifo", "cluster", [*NCCL, "--cluster", "{d}/c.yaml"], files=[("c.yaml", "fifo")])
add("nccl-tuner-csv-missing", "tuner", [*NCCL, "--tuner-csv", "{d}/none.yaml"])
add("nccl-tuner-csv-fifo", "tuner", [*NCCL, "--tuner-csv", "{d}/r.yaml"],
    files=[("r.yaml", "fifo")])
LOG_ROW = "     1048576        262144     float     sum      -1    80.00   13.11   22.94      0    79.00   13.27   23.22      0\n"
LOG_JUNK = {
    "empty": "", "binary": b"\x00\xff" * 50, "no-rows": "# only a comment\n",
    "one-ps": NCCL_LOG.replace("    80.00   13.11", " 0.000001 13.11"),
    "zero-time": NCCL_LOG.replace("    80.00   13.11", "     0.00   13.11"),
    "negative-time": NCCL_LOG.replace("    80.00   13.11", "   -80.00   13.11"),
    "nan-time": NCCL_LOG.replace("    80.00   13.11", "      nan   13.11"),
    "inf-busbw": NCCL_LOG.replace("   22.94", "     inf"),
    "huge-size": NCCL_LOG.replace("     1048576", " 99999999999999999999999999"),
    "wrong-values": NCCL_LOG.replace("0    79.00", "9999    79.00"),
    "json-bad": "{not json",
    "json-deep": "[" * 100000,
    "huge": NCCL_LOG + LOG_ROW * 400000,
    "many-rows": NCCL_LOG + "".join(
        f"{2**k:>12} {2**k // 4:>13}     float     sum      -1    80.00   13.11   22.94      0"
        f"    79.00   13.27   23.22      0\n" for k in range(3, 40)) * 3,
}
for name, text in LOG_JUNK.items():
    add(f"nccl-tests-{name}", "nccl", [*NCCL, "--nccl-tests", "{d}/log.txt"],
        files=[("log.txt", text)])
add("nccl-tests-devzero", "nccl", [*NCCL, "--nccl-tests", "/dev/zero"])
add("nccl-tests-fifo", "nccl", [*NCCL, "--nccl-tests", "{d}/log.txt"],
    files=[("log.txt", "fifo")])
add("nccl-tests-missing", "nccl", [*NCCL, "--nccl-tests", "{d}/none.txt"])
add("nccl-save-cluster-fifo", "save", [*NCCL, "--nccl-tests", "{d}/log.txt", "--save-cluster",
                                       "{d}/out.yaml"],
    files=[("log.txt", NCCL_LOG), ("out.yaml", "fifo")])
add("nccl-save-cluster-chardev", "save", [*NCCL, "--nccl-tests", "{d}/log.txt",
                                          "--save-cluster", "{d}/full"],
    files=[("log.txt", NCCL_LOG), ("full", "chardev-full")])
add("nccl-save-cluster-without-log", "save", [*NCCL, "--save-cluster", "{d}/out.yaml"])


# ---- 8. the Python API ----------------------------------------------------------------------------
def _api_optimize(**kw):
    def call(d: Path):
        from optimizer.api import optimize

        args = {"model": "7b", "gpus": 8, "sampler": "random", "trials": 4}
        args.update(kw)
        return optimize(**args)
    return call


def _api_evaluate(run):
    def call(d: Path):
        from optimizer.api import evaluate

        return evaluate(run)
    return call


API_JUNK = {"model": [123, None, b"7b", ["7b"], 1.5, object()],
            "gpus": ["8", 8.5, True, -8, 0, 10**12, [8]],
            "seq_length": ["2048", 0, -1, 2.5, 2**40], "global_batch_size": ["x", 0, 2**63],
            "memory_limit_gib": ["76", True, -1, float("nan"), 1e300, 200],
            "memory_fraction": ["0.9", 2, float("inf"), 0.0],
            "seed": [-1, 2**32, 2**40, "0", 1.5, None], "trials": ["10", 0, -3, 2.5, 10**12],
            "batch_size": [0, "8", -1], "jobs": [0, "2", -1, 10**6],
            "sampler": [5, "bogus", None], "gpu": [5, "bogus"], "gpus_per_node": [0, "8", 3.5],
            "space": ["tp", 5, {"tp": "x"}, {"bogus": [1]}, {"tp": [3]}, {"tp": None}],
            "training": ["x", 5, {"bogus": 1}, {"seq_length": "x"}],
            "storage": [5, "", "ftp://x"], "study_name": [5, ""],
            "cluster": [5, "bogus", {"num_nodes": "x"}]}
for key, values in API_JUNK.items():
    for i, v in enumerate(values):
        add(f"api-optimize-{key}-{i}", key.split("_")[0], api=_api_optimize(**{key: v}))
for i, run in enumerate([5, None, "bogus.yaml", {"model": "7b"}, [RUN], {},
                         mutated(RUN, "parallel.tp", "x"), mutated(RUN, "parallel.tp", 3),
                         mutated(RUN, "training", 5)]):
    add(f"api-evaluate-{i}", "", api=_api_evaluate(run))


# ---------------------------------------------------------------------------------------------------
def _materialise(case: Case, d: Path) -> None:
    for name, content in case.files:
        p = d / name
        if content == "fifo":
            os.mkfifo(p)
        elif isinstance(content, str) and content.startswith("chardev-"):
            # a device node inside the case folder (a twin of /dev/null or /dev/full), so a
            # case that wrongly replaces it cannot damage the machine's /dev
            if os.geteuid() != 0:
                pytest.skip("mknod needs root")
            minor = {"chardev-null": 3, "chardev-full": 7}[content]
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        elif isinstance(content, str) and content.startswith("sqlite-"):
            p.write_bytes(_sqlite_bytes(content.split("-", 1)[1]))
        elif isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, str):
            p.write_text(content)
        elif name.endswith(".json"):
            p.write_text(json.dumps(content))
        else:
            p.write_text(yaml.safe_dump(content, allow_unicode=False))


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link"
        elif p.is_fifo():
            out[str(p)] = "fifo"
        elif p.is_char_device():
            out[str(p)] = "chardev"
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _alarm(signum, frame):
    raise _Timeout()


def _norm(text: str) -> str:
    return text.lower().replace("-", "_")


#: CI runs every third case (and every valid one), about 10 s; PARAPLAN_FULL_CORPUS=1 (or
#: benchmarks/hostile_corpus.py) runs all of them.
FULL = os.environ.get("PARAPLAN_FULL_CORPUS") == "1"
SELECTED = [c for i, c in enumerate(CASES) if FULL or c.ok or i % 3 == 0]


@pytest.mark.parametrize("case", SELECTED, ids=[c.id for c in SELECTED])
def test_bad_input(case: Case, tmp_path: Path, monkeypatch):
    from costmodel.errors import InfeasibleError, InputError

    monkeypatch.chdir(tmp_path)
    _materialise(case, tmp_path)
    before = _snapshot(tmp_path)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIME_LIMIT_S)
    t0 = time.perf_counter()
    try:
        if case.api is not None:
            try:
                case.api(tmp_path)
                rc, err = 0, ""
            except InputError as e:
                rc, err = 2, f"error: {e}"
                assert isinstance(e.field, str)
            except InfeasibleError as e:
                rc, err = 3, f"error: {e}"
        else:
            argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
            rc, _out, err = run_cli(argv)
    except _Timeout:
        pytest.fail(f"{case.id}: no answer within {CASE_TIME_LIMIT_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    elapsed = time.perf_counter() - t0
    assert elapsed < CASE_TIME_LIMIT_S
    if case.ok:
        assert rc == 0, f"valid input refused: {err.strip()}"
        return
    assert rc in case.codes, f"exit {rc}, expected {case.codes}: {err.strip()[:300]}"
    assert "Traceback" not in err and "internal error" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got {len(lines)}: {err[:300]!r}"
    assert lines[0].startswith("error: ")
    assert _norm(case.field) in _norm(lines[0]), f"field {case.field!r} not named: {lines[0]}"
    assert len(lines[0]) < 2000
    assert "\x1b" not in lines[0] and "\x07" not in lines[0]
    assert "sk-live" not in lines[0]  # file contents are not echoed
    after = _snapshot(tmp_path)
    if case.creates:
        changed = {k for k in before if after.get(k) != before[k]}
        assert not changed, f"changed or removed: {sorted(changed)}"
    else:
        assert after == before, "the case changed the files it was given"
    assert not Path("/tmp/paraplan-pwned").exists()


def test_corpus_size():
    """Acceptance: at least 400 distinct cases over every entry point."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 400, len(CASES)
