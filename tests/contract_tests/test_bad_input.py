"""Bad input at every CLI boundary (issue 8; contract.md sections 2 and 5).

Each case runs ``optimizer.cli.main([...])`` in-process and asserts
- the exit code (2 bad input, 3 nothing fits the memory limit),
- that the one stderr line starts with ``error:`` and names the field (and, for unknown names,
  offers a did-you-mean hint),
- that no traceback and no "internal error" reaches stderr.
One subprocess test checks the real process exit code. Also here: the security checks (safe
YAML, no pickle/eval, relative paths); atomic writes are optimizer_tests/test_output_fileio.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, ROOT

from costmodel.errors import InputError
from optimizer.cli import main

GARBAGE = DATA / "garbage.bin"  # PNG header, 0xff 0xfe, NUL bytes, repeated


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_bad(result: tuple[int, str, str], code: int, *needles: str) -> str:
    """Exit ``code``, one clean ``error:`` line on stderr containing every needle."""
    rc, _out, err = result
    assert rc == code, f"exit {rc} (expected {code}); stderr: {err!r}"
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


RUN_TEMPLATE = """\
model: {model}
cluster: {{gpu: a100-sxm-80gb, num_nodes: {nodes}, gpus_per_node: {per_node}}}
training: {{seq_length: 2048, global_batch_size: 64}}
parallel: {{tp: {tp}, pp: {pp}, dp: {dp}, precision: {precision}}}
"""


def run_file(tmp_path: Path, *, model="llama-7b", nodes=1, per_node=8, tp=8, pp=1, dp=1,
             precision="bf16") -> Path:
    return write(tmp_path / "run.yaml", RUN_TEMPLATE.format(
        model=model, nodes=nodes, per_node=per_node, tp=tp, pp=pp, dp=dp, precision=precision))


# ==== names =================================================================================
def test_unknown_model_name_suggests(capsys):
    line = assert_bad(run_cli(capsys, "--model", "llama-65", "--gpus", "8"), 2,
                      "model", "'llama-65'", "did you mean")
    assert "llama-65b" in line


def test_unknown_gpu_suggests(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--gpu", "a200"), 2,
               "gpu", "'a200'", "did you mean")


def test_unknown_sampler(capsys):
    line = assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--sampler", "tpee"), 2,
                      "sampler", "'tpee'")
    assert "tpe" in line.split("'tpee'", 1)[1]  # the valid spelling is offered


def test_nccl_grammar_is_checked_before_scoring(capsys):
    # NCCL lets only the first entry omit the collective; the space used to admit this and
    # scoring then failed (issue 20): one grammar, costmodel.nccl_grammar, decides
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "16", "--nccl-algo",
                       "allreduce:tree;ring"), 2, "space.nccl_algo", "first entry")


def test_unknown_precision_flag(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--precision", "bf17"), 2,
               "precision", "'bf17'", "did you mean 'bf16'")


# ==== GPU counts ============================================================================
@pytest.mark.parametrize("gpus", ["0", "-8"])
def test_gpus_zero_or_negative(capsys, gpus):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", gpus), 2, "gpus", gpus)


@pytest.mark.parametrize("gpus", ["1.5", "eight"])
def test_gpus_not_an_integer(capsys, gpus):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", gpus), 2, "--gpus", gpus)


def test_gpus_not_a_multiple_of_node_size(capsys):
    # 12 GPUs with 8 per node: one and a half nodes. The hint offers 8 or 16.
    line = assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "12"), 2,
                      "gpus", "12", "gpus_per_node=8")
    assert "8" in line and "16" in line


def test_negative_trials(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--sampler", "tpe",
                       "--trials", "-5"), 2, "trials", "-5")


def test_zero_memory_limit(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--memory-limit-gib", "0"), 2,
               "memory_limit_gib")


def test_infinite_memory_limit(capsys):
    # `inf` passed the `> 0` check and gave an infinite limit (JSON output then holds the
    # invalid token Infinity)
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--memory-limit-gib", "inf"), 2,
               "memory_limit_gib", "inf")


def test_infinite_memory_limit_in_study(capsys, tmp_path):
    f = write(tmp_path / "s.yaml", "schema_version: 1\nname: t\nmodel: 7b\n"
              "cluster: {gpus: 8, gpu: a100-sxm-80gb}\nconstraints: {memory_limit_gib: .inf}\n")
    assert_bad(run_cli(capsys, "--study", f), 2, "study.constraints.memory_limit_gib")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


# ==== memory limit: exit 3 ==================================================================
def test_one_gib_limit_is_infeasible(capsys):
    # LLaMA-7B (6.74e9 parameters) on 8 GPUs: even fully sharded the weights alone are
    # 6.74e9 * 2 B / 8 = 1.7 GB per GPU, above 1 GiB, so nothing fits.
    line = assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8",
                              "--memory-limit-gib", "1"), 3, "memory")
    m = re.search(r"least memory any configuration needs is ([0-9.]+) GiB", line)
    assert m, line
    assert float(m.group(1)) > 1.0


def test_one_gib_limit_json_lists_least_violating(capsys):
    from conftest import assert_valid

    rc, out, err = run_cli(capsys, "--model", "7b", "--gpus", "8",
                           "--memory-limit-gib", "1", "--json")
    assert rc == 3 and "Traceback" not in err
    doc = json.loads(out)
    assert_valid(doc, "infeasible")
    assert doc["error"]["code"] == 3
    assert doc["error"]["least_memory_bytes"] > 2**30
    assert doc["least_violating"], doc
    mems = [c["metrics"]["peak_memory_bytes"] for c in doc["least_violating"]]
    assert mems == sorted(mems) and mems[0] == doc["error"]["least_memory_bytes"]


# ==== model files ===========================================================================
def test_missing_model_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_bad(run_cli(capsys, "--model", "./nope.yaml", "--gpus", "8"), 2,
               "model", "file not found", "nope.yaml")


def test_malformed_yaml(capsys):
    assert_bad(run_cli(capsys, "--model", DATA / "bad-yaml.yaml", "--gpus", "8"), 2,
               "model", "invalid YAML", "line 3")


def test_malformed_json(capsys):
    assert_bad(run_cli(capsys, "--model", DATA / "bad-json.json", "--gpus", "8"), 2,
               "model", "invalid JSON", "line 5")


def test_unknown_key_in_model_yaml(capsys):
    assert_bad(run_cli(capsys, "--model", DATA / "model-typo.yaml", "--gpus", "8"), 2,
               "model.ffn_hiden_size", "unknown key", "did you mean 'ffn_hidden_size'")


def test_duplicate_key_in_model_yaml(capsys):
    assert_bad(run_cli(capsys, "--model", DATA / "duplicate-key.yaml", "--gpus", "8"), 2,
               "model", "duplicate key", "num_layers")


def test_model_document_not_a_mapping(capsys):
    assert_bad(run_cli(capsys, "--model", DATA / "not-a-mapping.yaml", "--gpus", "8"), 2,
               "model", "mapping")


def test_empty_model_file(capsys, tmp_path):
    assert_bad(run_cli(capsys, "--model", write(tmp_path / "m.yaml", "\n  \n"),
                       "--gpus", "8"), 2, "model", "empty")


def test_hidden_not_divisible_by_heads(capsys, tmp_path):
    f = write(tmp_path / "m.yaml", "name: odd\nnum_layers: 4\nhidden_size: 1000\n"
              "num_attention_heads: 3\nffn_hidden_size: 4000\nvocab_size: 32000\n")
    assert_bad(run_cli(capsys, "--model", f, "--gpus", "8"), 2,
               "model.hidden_size", "1000", "num_attention_heads=3")


def test_partial_hf_config(capsys):
    # hf-missing-layers.json: a Llama config.json without num_hidden_layers
    assert_bad(run_cli(capsys, "--model", DATA / "hf-missing-layers.json", "--gpus", "8"), 2,
               "model.num_hidden_layers", "missing")


def test_binary_garbage_model(capsys):
    assert_bad(run_cli(capsys, "--model", GARBAGE, "--gpus", "8"), 2,
               "model", "garbage.bin", "not a UTF-8 text file")


def test_binary_with_nul_model(capsys, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_bytes(b"num_layers: 4\x00\x00\x01hidden")
    assert_bad(run_cli(capsys, "--model", f, "--gpus", "8"), 2, "model", "binary")


def test_model_directory_without_config(capsys, tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    assert_bad(run_cli(capsys, "--model", d, "--gpus", "8"), 2, "model", "directory")


# ==== cluster files =========================================================================
def test_unknown_key_in_cluster_yaml(capsys, tmp_path):
    f = write(tmp_path / "c.yaml", "gpu: a100-sxm-80gb\nnum_nodes: 1\ngpus_per_node: 8\n"
              "inter_node: {nic_bandwidth_GBps: 200}\n")
    # GBps (gigabytes) vs Gbps (gigabits): the hint explains the case difference
    assert_bad(run_cli(capsys, "--model", "7b", "--cluster", f), 2,
               "cluster.inter_node.nic_bandwidth_GBps", "unknown key", "nic_bandwidth_Gbps")


def test_cluster_gpus_disagree_with_flag(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--cluster",
                       DATA / "cluster-2x-dgx-a100.yaml"), 2, "gpus", "16")


def test_binary_garbage_cluster(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--cluster", GARBAGE), 2, "cluster",
               "garbage.bin")


def test_unknown_cluster_preset(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "16", "--cluster", "dgx-h10"), 2,
               "cluster", "'dgx-h10'", "did you mean")


# ==== optimize evaluate: run files ==========================================================
def test_run_world_size_mismatch(capsys):
    # run-mismatch.yaml: tp 8 * pp 4 * dp 1 = 32 on 2 x 8 = 16 GPUs
    assert_bad(run_cli(capsys, "evaluate", DATA / "run-mismatch.yaml"), 2,
               "parallel", "tp*pp*dp", "32", "16")


def test_run_tp_does_not_divide_heads(capsys, tmp_path):
    # llama-7b has 32 heads; tp = 3 on one node of 3 GPUs is otherwise a valid layout
    f = run_file(tmp_path, per_node=3, tp=3)
    assert_bad(run_cli(capsys, "evaluate", f), 2, "tp_divides_heads", "tp=3",
               "num_attention_heads=32")


def test_run_unknown_precision(capsys, tmp_path):
    f = run_file(tmp_path, precision="bf17")
    assert_bad(run_cli(capsys, "evaluate", f), 2, "parallel.precision", "'bf17'",
               "did you mean 'bf16'")


def test_run_unknown_key(capsys, tmp_path):
    f = write(tmp_path / "run.yaml", "model: 7b\ncluster: {gpu: a100, num_nodes: 1}\n"
              "paralel: {tp: 8}\n")
    assert_bad(run_cli(capsys, "evaluate", f), 2, "run.paralel", "unknown key",
               "did you mean 'parallel'")


def test_run_missing_file(capsys, tmp_path):
    assert_bad(run_cli(capsys, "evaluate", tmp_path / "none.yaml"), 2, "run", "file not found")


def test_run_binary_garbage(capsys):
    assert_bad(run_cli(capsys, "evaluate", GARBAGE), 2, "run", "not a UTF-8 text file")


def test_evaluate_missing_argument(capsys):
    assert_bad(run_cli(capsys, "evaluate"), 2, "run")


# ==== study files ===========================================================================
def test_missing_study_file(capsys, tmp_path):
    assert_bad(run_cli(capsys, "--study", tmp_path / "none.yaml"), 2, "study", "none.yaml")


def test_binary_garbage_study(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    shutil.copy(GARBAGE, f)
    assert_bad(run_cli(capsys, "--study", f), 2, "study")
    assert f.read_bytes() == GARBAGE.read_bytes()  # a failed run never touches the file


def test_unknown_key_in_study(capsys, tmp_path):
    f = write(tmp_path / "s.yaml", "schema_version: 1\nname: t\nmodel: 7b\n"
              "cluster: {gpu: a100-sxm-80gb, num_nodes: 1, gpus_per_node: 8}\n"
              "serch: {sampler: tpe}\n")
    before = f.read_bytes()
    assert_bad(run_cli(capsys, "--study", f), 2, "serch", "did you mean 'search'")
    assert f.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no storage created


def test_unknown_sampler_in_study(capsys, tmp_path):
    f = write(tmp_path / "s.yaml", "schema_version: 1\nname: t\nmodel: 7b\n"
              "cluster: {gpu: a100-sxm-80gb, num_nodes: 1, gpus_per_node: 8}\n"
              "search: {sampler: tpee, trials: 10}\n")
    assert_bad(run_cli(capsys, "--study", f), 2, "sampler", "'tpee'")


def test_report_missing_study(capsys, tmp_path):
    assert_bad(run_cli(capsys, "report", "--study", tmp_path / "none.yaml"), 2, "study",
               "none.yaml")


STUDY = """\
schema_version: 1
name: t
model: llama-7b
cluster: {gpus: 8, gpu: a100-sxm-80gb, gpus_per_node: 8}
training: {seq_length: 2048, global_batch_size: 64}
space: {tp: [2, 4, 8], pp: [1, 2]}
search: {sampler: tpe, trials: 16, seed: 0, batch_size: 8}
"""


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_study_writes_only_its_storage_and_a_failed_run_changes_nothing(capsys, tmp_path,
                                                                        monkeypatch):
    work, sub = tmp_path / "cwd", tmp_path / "studies"
    work.mkdir()
    sub.mkdir()
    monkeypatch.chdir(work)
    f = write(sub / "s.yaml", STUDY)
    rc, out, err = run_cli(capsys, "--study", f, "--json")
    assert rc == 0, err
    # the storage (journal beside the study file) and nothing else; the study file intact
    assert sorted(_tree(tmp_path)) == ["studies/s.journal", "studies/s.yaml"]
    assert f.read_text() == STUDY
    before = _tree(tmp_path)
    # the same study with a bad value: exit 2, the file and its storage byte-identical
    write(f, STUDY.replace("sampler: tpe", "sampler: tpee"))
    before["studies/s.yaml"] = f.read_bytes()
    assert_bad(run_cli(capsys, "--study", f), 2, "sampler", "'tpee'")
    assert _tree(tmp_path) == before


def test_search_without_storage_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _out, err = run_cli(capsys, "--model", "7b", "--gpus", "8", "--sampler", "tpe",
                            "--trials", "16", "--tp", "2,4,8", "--json")
    assert rc == 0, err
    assert list(tmp_path.iterdir()) == []


# ==== NCCL settings: the cost model's grammar, checked before the search ====================
BAD_NCCL = [("--nccl-algo", "allreduce:tree;ring", "names no collective"),
            ("--nccl-algo", "allreduce:tree;allreduce:ring", "given twice"),
            ("--nccl-proto", "allreduce:ll;simple", "names no collective")]


@pytest.mark.parametrize("flag, value, why", BAD_NCCL)
def test_nccl_flag_the_scoring_parser_rejects_exits_2_before_the_search(capsys, monkeypatch,
                                                                       flag, value, why):
    def no_search(*_a, **_k):
        raise AssertionError("the space was enumerated before its NCCL settings were checked")

    monkeypatch.setattr("optimizer.search.engine.enumerate_valid", no_search)
    field = "space." + flag[2:].replace("-", "_")
    line = assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "16", flag, value), 2,
                      f"error: {field}:", repr(value), why)
    assert line.startswith(f"error: {field}:")


def test_nccl_setting_of_a_run_file_names_the_parallel_field(capsys, tmp_path):
    f = write(tmp_path / "run.yaml", RUN_TEMPLATE.format(
        model="llama-7b", nodes=2, per_node=8, tp=8, pp=1, dp=2, precision="bf16").replace(
        "precision: bf16}", "precision: bf16, nccl_algo: 'allreduce:tree;ring'}"))
    # ParallelConfig checks the grammar when the run file is read, before any rule
    line = assert_bad(run_cli(capsys, "evaluate", f), 2, "parallel.nccl_algo:",
                      "names no collective")
    assert line.startswith("error: parallel.nccl_algo:")


def test_nccl_setting_of_a_study_space_names_the_study_field(capsys, tmp_path):
    f = write(tmp_path / "s.yaml", "schema_version: 1\nname: s\nmodel: llama-7b\n"
              "cluster: {gpus: 16, gpu: a100-sxm-80gb}\n"
              "space: {nccl_algo: ['allreduce:tree;ring']}\n")
    assert_bad(run_cli(capsys, "--study", f), 2, "error: study.space.nccl_algo:",
               "names no collective")


# ==== usage =================================================================================
def test_missing_model_flag(capsys):
    assert_bad(run_cli(capsys, "--gpus", "8"), 2, "--model")


def test_unknown_flag(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--tpp", "2"), 2, "--tpp")


def test_bad_space_flag(capsys):
    assert_bad(run_cli(capsys, "--model", "7b", "--gpus", "8", "--tp", "two"), 2,
               "--tp", "'two'")


# ==== the real process ======================================================================
def test_subprocess_exit_code_and_no_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PARAPLAN_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "optimizer.cli", "--model", "./nope.yaml",
                           "--gpus", "8"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: model: file not found"), proc.stderr
    assert proc.stdout == ""


# ==== security ==============================================================================
PYTHON_TAGS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/new:os.system ['touch {marker}']",
    "!!python/name:os.system",
    "!!python/module:os",
    "num_layers: !!python/object/apply:os.system ['touch {marker}']",
]


@pytest.mark.parametrize("doc", PYTHON_TAGS)
def test_yaml_python_tags_rejected_not_executed(tmp_path, doc):
    from costmodel.loaders import load_model, load_run, parse_document

    marker = tmp_path / "pwned"
    text = doc.format(marker=marker)
    with pytest.raises(InputError):
        parse_document(text, field="model")
    f = write(tmp_path / "m.yaml", text)
    with pytest.raises(InputError):
        load_model(f)
    with pytest.raises(InputError):
        load_run(write(tmp_path / "r.yaml", "model: " + text.replace("num_layers: ", "")))
    assert not marker.exists()


def test_yaml_tags_through_cli(capsys, tmp_path):
    marker = tmp_path / "pwned"
    f = write(tmp_path / "m.yaml", f"!!python/object/apply:os.system ['touch {marker}']\n")
    assert_bad(run_cli(capsys, "--model", f, "--gpus", "8"), 2, "model", "invalid YAML")
    assert not marker.exists()


def test_yaml_billion_laughs_is_bounded(tmp_path):
    # Aliases are shared references in PyYAML (no copy), so a nested alias bomb parses into a
    # small object graph; it must then be rejected as a non-model, not expanded.
    from costmodel.loaders import load_model

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    f = write(tmp_path / "m.yaml", "\n".join(lines) + "\n")
    with pytest.raises(InputError):
        load_model(f)


_PACKAGES = ("costmodel", "search_spaces", "optimizer")
_FORBIDDEN = [
    (re.compile(r"\bimport\s+(c?pickle|marshal|shelve|dill|cloudpickle)\b"), "pickle import"),
    (re.compile(r"\bfrom\s+(c?pickle|marshal|shelve|dill|cloudpickle)\b"), "pickle import"),
    (re.compile(r"\bpickle\."), "pickle use"),
    (re.compile(r"(?<![\w.])eval\s*\("), "eval("),
    (re.compile(r"(?<![\w.])exec\s*\("), "exec("),
    (re.compile(r"\byaml\.(unsafe_load|full_load|load_all)\s*\("), "unsafe YAML load"),
    (re.compile(r"\bLoader\s*=\s*yaml\.(Loader|UnsafeLoader|FullLoader|CLoader)\b"),
     "unsafe YAML loader"),
    (re.compile(r"\b__import__\s*\("), "__import__("),
]


def _source_files() -> list[Path]:
    files = [p for pkg in _PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 10, files  # the scan must actually see the package
    return files


def test_no_pickle_eval_or_unsafe_yaml_in_package():
    hits = []
    for path in _source_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for rx, what in _FORBIDDEN:
                if rx.search(code):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_every_yaml_load_uses_a_safe_loader():
    rx = re.compile(r"\byaml\.load\s*\((?P<args>[^)]*)\)")
    for path in _source_files():
        text = path.read_text(encoding="utf-8")
        for m in rx.finditer(text):
            args = m.group("args")
            assert "Loader=" in args, f"{path}: yaml.load without Loader: {m.group(0)}"
    # the loader paraplan uses is a SafeLoader subclass (C or Python)
    import yaml

    from costmodel.loaders import _yaml_loader

    loader = _yaml_loader()
    assert issubclass(loader, yaml.SafeLoader) or issubclass(loader, yaml.CSafeLoader)


def test_forbidden_pattern_scan_can_fail():
    # the scan's regular expressions catch what they claim to (the test can fail)
    samples = {"import pickle": "pickle import", "x = eval(s)": "eval(",
               "yaml.unsafe_load(t)": "unsafe YAML load",
               "yaml.load(t, Loader=yaml.Loader)": "unsafe YAML loader"}
    for code, what in samples.items():
        assert any(rx.search(code) and w == what for rx, w in _FORBIDDEN), code
    assert not any(rx.search("literal_eval(x); model.evaluate(x)") for rx, _ in _FORBIDDEN)


def test_run_file_paths_resolve_relative_to_run_file(tmp_path, monkeypatch):
    from costmodel.loaders import load_run

    sub = tmp_path / "runs"
    sub.mkdir()
    for name in ("run-llama65b.yaml", "model-llama65b.yaml", "cluster-2x-dgx-a100.yaml"):
        shutil.copy(DATA / name, sub / name)
    # A decoy of the same name in the working directory must not be picked up.
    write(tmp_path / "model-llama65b.yaml", "name: decoy\nnum_layers: 2\nhidden_size: 64\n"
          "num_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n")
    monkeypatch.chdir(tmp_path)
    run = load_run(Path("runs") / "run-llama65b.yaml")
    assert run.model.name == "llama-65b" and run.model.num_layers == 80
    assert run.cluster.num_gpus == 16
