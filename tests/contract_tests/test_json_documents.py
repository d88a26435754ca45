"""Outputs people and schedulers use (issue 7): JSON documents against the shipped schema,
launch artefacts of the recommended configuration, the Pareto plot, scheduler files, human
output. The CLI runs in-process (``optimizer.cli.main``)."""

from __future__ import annotations

import copy
import json
import re

import pytest
from conftest import assert_valid, run_cli, run_cli_json

from costmodel.errors import InputError
from costmodel.specs import NCCL_ALGOS, NCCL_PROTOS, PRECISIONS, RECOMPUTE, SCHEDULES

ARGS_65B = ["--model", "65b", "--gpus", "16"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANSI = re.compile(r"\x1b\[")


def flag_values(argv: list[str]) -> dict[str, list[str]]:
    """``--flag v1 v2 --switch`` -> {"--flag": ["v1", "v2"], "--switch": []}."""
    out: dict[str, list[str]] = {}
    key = None
    for tok in argv:
        if tok.startswith("--"):
            key = tok
            assert key not in out, f"flag {key} given twice"
            out[key] = []
        else:
            assert key is not None, f"value {tok!r} before any flag"
            out[key].append(tok)
    return out


# ---------------------------------------------------------------------------------------------
# The front document and the recommended configuration's launch artefacts
def test_front_document_matches_contract(front_doc):
    assert front_doc["schema_version"] == 1
    assert front_doc["tool"]["name"] == "paraplan"
    assert front_doc["inputs"]["model"]["name"] == "llama-65b"
    assert front_doc["inputs"]["cluster"]["num_gpus"] == 16
    assert front_doc["inputs"]["fingerprint"].startswith("sha256:")
    # the front is sorted by throughput, fastest first (the human table's order)
    tps = [p["metrics"]["tokens_per_s"] for p in front_doc["pareto_front"]]
    assert tps == sorted(tps, reverse=True)


def test_megatron_args_carry_the_recommended_layout(front_doc, recommended):
    cfg = recommended["config"]
    flags = flag_values(recommended["launch"]["megatron_args"])
    assert flags["--tensor-model-parallel-size"] == [str(cfg["tp"])]
    assert flags["--pipeline-model-parallel-size"] == [str(cfg["pp"])]
    assert flags["--micro-batch-size"] == [str(cfg["micro_batch_size"])]
    # the global batch is the training input (1024 sequences by default)
    gbs = front_doc["inputs"]["training"]["global_batch_size"]
    assert gbs == 1024
    assert flags["--global-batch-size"] == [str(gbs)]


def test_deepspeed_config_satisfies_the_batch_invariant(front_doc, recommended):
    cfg = recommended["config"]
    ds = recommended["launch"]["deepspeed_config"]
    # DeepSpeed _batch_assertion: train_batch_size == micro * accumulation * dp
    assert ds["train_micro_batch_size_per_gpu"] == cfg["micro_batch_size"]
    assert ds["train_batch_size"] == (ds["train_micro_batch_size_per_gpu"]
                                      * ds["gradient_accumulation_steps"] * cfg["dp"])
    # ... and it is the global batch: accumulation = 1024 / (mbs * dp)
    assert ds["train_batch_size"] == front_doc["inputs"]["training"]["global_batch_size"]
    assert ds["gradient_accumulation_steps"] == recommended["metrics"]["microbatches_per_step"]


def test_torchtitan_overrides_carry_the_tp_degree(recommended):
    cfg = recommended["config"]
    flags = flag_values(recommended["launch"]["torchtitan_args"])
    assert flags["--parallelism.tensor_parallel_degree"] == [str(cfg["tp"])]
    assert flags["--parallelism.pipeline_parallel_degree"] == [str(cfg["pp"])]


def test_every_front_point_validates_with_launch_artefacts(front_doc):
    for point in front_doc["pareto_front"]:
        launch = point["launch"]
        assert launch["megatron_args"] and launch["torchtitan_args"]
        tb = point["metrics"]["time_breakdown_s"]
        assert any("bubble" in k for k in tb)


# ---------------------------------------------------------------------------------------------
# The other documents
def test_evaluate_document_validates(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama-65b\n"
                   "cluster: {gpu: a100-sxm-80gb, num_nodes: 2, gpus_per_node: 8}\n"
                   "training: {seq_length: 2048, global_batch_size: 1024}\n"
                   "parallel: {tp: 4, pp: 4, dp: 1, micro_batch_size: 1, precision: bf16,\n"
                   "           recompute: full, sequence_parallel: true}\n")
    doc = run_cli_json(["evaluate", str(run)], "evaluate")
    assert doc["config"]["tp"] == 4 and doc["config"]["pp"] == 4
    assert doc["metrics"]["step_time_s"] > 0
    # the evaluate document also feeds --emit-style scheduler files
    from optimizer.launch.files import emit_for_doc

    assert "#SBATCH --nodes=2" in emit_for_doc(doc, "slurm")


def test_run_file_tp_comm_overlap(tmp_path):
    docs = []
    for overlap in ("false", "true"):
        run = tmp_path / f"run_{overlap}.yaml"
        run.write_text("model: llama-65b\n"
                       "cluster: {gpu: h100-sxm-80gb, num_nodes: 2, gpus_per_node: 8}\n"
                       "training: {seq_length: 4096, global_batch_size: 64, "
                       f"tp_comm_overlap: {overlap}}}\n"
                       "parallel: {tp: 8, pp: 2, dp: 1, micro_batch_size: 1, precision: bf16,\n"
                       "           recompute: selective, sequence_parallel: true}\n")
        docs.append(run_cli_json(["evaluate", str(run)], "evaluate"))
    plain, over = docs
    tp = [d["metrics"]["time_breakdown_s"]["tp_comm"] for d in docs]
    assert tp[1] < 0.6 * tp[0]
    assert over["metrics"]["step_time_s"] < plain["metrics"]["step_time_s"]
    assert "--tp-comm-overlap" in " ".join(over["launch"]["megatron_args"])
    assert "--tp-comm-overlap" not in " ".join(plain["launch"]["megatron_args"])


def test_infeasible_document_validates_and_lists_least_violating():
    doc = run_cli_json([*ARGS_65B, "--memory-limit-gib", "1"], "infeasible", expect_rc=3)
    err = doc["error"]
    assert err["code"] == 3
    assert err["memory_limit_bytes"] == 1024**3  # 1 GiB
    least = doc["least_violating"]
    assert least, "the infeasible document must list candidates"
    peaks = [c["metrics"]["peak_memory_bytes"] for c in least]
    assert peaks == sorted(peaks)  # least-violating first
    assert err["least_memory_bytes"] == peaks[0] > err["memory_limit_bytes"]


def test_python_api_documents_validate():
    from costmodel.errors import InfeasibleError
    from optimizer import evaluate, optimize

    res = optimize("llama-65b", 16, seed=0)
    assert assert_valid(json.loads(res.to_json()), "front") == "front"
    assert res.to_dict()["pareto_front"][res.recommended_index]["config"] == \
        res.recommended.config.as_dict()
    ev = evaluate({"model": "llama-65b",
                   "cluster": {"gpu": "a100-sxm-80gb", "num_nodes": 2, "gpus_per_node": 8},
                   "training": {"seq_length": 2048, "global_batch_size": 1024},
                   "parallel": {"tp": 8, "pp": 2, "dp": 1, "micro_batch_size": 1,
                                "recompute": "full", "sequence_parallel": True}})
    assert assert_valid(json.loads(ev.to_json()), "evaluate") == "evaluate"
    with pytest.raises(InfeasibleError) as e:
        optimize("llama-65b", 16, memory_limit_gib=1)
    assert assert_valid(json.loads(json.dumps(e.value.payload)), "infeasible") == "infeasible"


def test_nccl_document_validates():
    doc = run_cli_json(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "16"],
                       "nccl")
    chosen = doc["chosen"]
    assert chosen["time_s"] > 0 and doc["alternatives"]
    # nccl-tests: allreduce busbw = algbw * 2(n-1)/n = algbw * 2*15/16 = 1.875 * algbw
    for c in [chosen, *doc["alternatives"]]:
        assert c["busbw_GBps"] == pytest.approx(1.875 * c["algbw_GBps"], rel=1e-6)


# ---------------------------------------------------------------------------------------------
# The schema itself: it must reject what the contract forbids
def test_schema_is_valid_draft_2020_12_and_shipped():
    jsonschema = pytest.importorskip("jsonschema", reason="needs the test extra")
    from importlib import resources

    from optimizer.output.schemas import load_schema

    text = resources.files("optimizer").joinpath("schema.json").read_text()
    schema = json.loads(text)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert load_schema() == schema


def test_schema_enums_match_the_specs():
    from optimizer.output.schemas import load_schema

    props = load_schema()["$defs"]["config"]["properties"]
    assert tuple(props["precision"]["enum"]) == PRECISIONS
    assert tuple(props["recompute"]["enum"]) == RECOMPUTE
    assert tuple(props["schedule"]["enum"]) == SCHEDULES
    # nccl fields are free strings (per-collective syntax), but every plain value is one
    assert "auto" in NCCL_ALGOS and "auto" in NCCL_PROTOS


def _rejects(doc, kind, path_part):
    pytest.importorskip("jsonschema", reason="needs the test extra")
    from optimizer.output.schemas import SchemaError, validate_document

    with pytest.raises(SchemaError) as e:
        validate_document(doc, kind)
    assert path_part in e.value.path, e.value


def test_schema_rejects_a_time_breakdown_without_bubble(front_doc):
    doc = copy.deepcopy(front_doc)
    tb = doc["pareto_front"][0]["metrics"]["time_breakdown_s"]
    for k in [k for k in tb if "bubble" in k]:
        tb["stall"] = tb.pop(k)
    _rejects(doc, "front", "time_breakdown_s")


def test_schema_rejects_missing_launch_and_bad_values(front_doc):
    doc = copy.deepcopy(front_doc)
    del doc["pareto_front"][0]["launch"]["megatron_args"]
    _rejects(doc, "front", "pareto_front[0].launch")
    doc = copy.deepcopy(front_doc)
    doc["pareto_front"][0]["config"]["precision"] = "bf17"
    _rejects(doc, "front", "config.precision")
    doc = copy.deepcopy(front_doc)
    doc["schema_version"] = 2
    _rejects(doc, "front", "schema_version")
    doc = copy.deepcopy(front_doc)
    del doc["stats"]["wall_s"]
    _rejects(doc, "front", "stats")


def test_invariants_beyond_json_schema(front_doc):
    doc = copy.deepcopy(front_doc)
    doc["recommended"] = len(doc["pareto_front"])
    _rejects(doc, "front", "recommended")
    doc = copy.deepcopy(front_doc)
    doc["pareto_front"][0]["metrics"]["peak_memory_bytes"] = \
        doc["inputs"]["memory_limit_bytes"] * 1.01
    _rejects(doc, "front", "peak_memory_bytes")


def test_kind_is_detected_and_documents_match_exactly_one_kind(front_doc):
    from optimizer.output.schemas import validate_document

    assert validate_document(front_doc) == "front"
    # a front document is not an evaluate document
    _rejects(front_doc, "evaluate", "$")


def test_unknown_kind_is_an_input_error():
    from optimizer.output.schemas import schema_for

    with pytest.raises(InputError, match="did you mean 'front'"):
        schema_for("frnt")


# ---------------------------------------------------------------------------------------------
# Flags into the document
def _with_and_without(base, flag, field):
    """The front without and with a training switch: it lands in inputs.training and the
    fingerprint, and only with it."""
    plain = run_cli_json(base, "front")
    over = run_cli_json(base + [flag], "front")
    assert field not in plain["inputs"]["training"]
    assert over["inputs"]["training"][field] is True
    assert over["inputs"]["fingerprint"] != plain["inputs"]["fingerprint"]
    return plain, over


def test_training_flags_on_the_command_line():
    # --tp-comm-overlap and --framework land in inputs.training (and the fingerprint); TP
    # overlap makes the fastest sequence-parallel layout faster, never slower.
    base = ["--model", "70b", "--gpus", "64", "--gpu", "h100-sxm-80gb", "--seq-length", "8192",
            "--global-batch-size", "512", "--sequence-parallel", "true", "--tp", "4,8"]
    plain, over = _with_and_without(base, "--tp-comm-overlap", "tp_comm_overlap")
    best = lambda d: max(p["metrics"]["tokens_per_s"] for p in d["pareto_front"])  # noqa: E731
    assert best(over) > best(plain)
    ds = run_cli_json(["--model", "7b", "--gpus", "8", "--framework", "deepspeed"], "front")
    assert ds["inputs"]["training"]["framework"] == "deepspeed"
    rc, _, err = run_cli(["--model", "7b", "--gpus", "8", "--framework", "jax"])
    assert rc == 2 and "--framework" in err and "Traceback" not in err


def test_moe_ep_overlap_on_the_command_line():
    # --moe-ep-overlap lands in inputs.training and the fingerprint; the EP all-to-all of
    # Qwen3-30B-A3B over two H100 nodes then hides under compute where Megatron runs the
    # overlap (no full recompute), so the fastest layout is faster and does not recompute
    base = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--gpu", "h100-sxm-80gb",
            "--seq-length", "4096", "--global-batch-size", "256", "--ep", "8,16"]
    plain, over = _with_and_without(base, "--moe-ep-overlap", "moe_ep_overlap")

    def fastest(doc):
        return max(doc["pareto_front"], key=lambda p: p["metrics"]["tokens_per_s"])
    assert (fastest(over)["metrics"]["tokens_per_s"]
            > 1.05 * fastest(plain)["metrics"]["tokens_per_s"])
    assert fastest(over)["config"]["recompute"] != "full"
    assert "--overlap-moe-expert-parallel-comm" in fastest(over)["launch"]["megatron_args"]
    assert "--overlap-moe-expert-parallel-comm" not in fastest(plain)["launch"]["megatron_args"]
    # --moe-dispatcher flex: in the inputs, priced (DeepEP-style NIC bytes) and emitted
    flex = run_cli_json(base + ["--moe-dispatcher", "flex"], "front")
    assert flex["inputs"]["training"]["moe_dispatcher"] == "flex"
    args = fastest(flex)["launch"]["megatron_args"]
    if fastest(flex)["config"]["ep"] > 1:
        assert args[args.index("--moe-token-dispatcher-type") + 1] == "flex"
    rc, _, err = run_cli(base + ["--moe-dispatcher", "deepep"])
    assert rc == 2 and "--moe-dispatcher" in err and "Traceback" not in err
