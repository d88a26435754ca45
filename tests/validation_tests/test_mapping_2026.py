"""The 2026 collection (``published_runs_2026.yaml``): the README's mapping conventions, the
skip reasons per entry, and that reading it leaves the calibrated figures unchanged."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest

from costmodel.errors import InputError
from optimizer.validation import compare as cmp
from optimizer.validation import published as v

NVL72 = {"gpu": "NVIDIA GB200 (Grace-Blackwell, GB200 NVL72 rack)", "gpus_per_node": 4,
         "nvlink_domain_gpus": 72, "inter_node": "between NVL72 racks: not stated in source",
         "num_gpus": 32}
LLAMA3_70B = {"name": "Llama 3 70B", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
              "ffn_hidden": 28672, "vocab": 128000, "seq_len": 4096,
              "arch_notes": "GQA, SwiGLU, RoPE"}
BRIDGE_ROW = {  # trimmed mbridge_26p06_gb200_llama3_70b_mxfp8_32gpu_sft
    "id": "bridge_gb200_70b", "group": "mbridge_perf_dense_sft", "layout_complete": True,
    "_file": v.PUBLISHED_2026_FILE, "model": LLAMA3_70B, "hardware": NVL72,
    "parallel": {"tp": 1, "pp": 8, "dp": 4, "cp": 1, "ep": 1, "vpp": 10, "micro_batch": 1,
                 "global_batch": 32, "zero_stage": 1, "sequence_parallel": False,
                 "precision": "MXFP8 (MXFP8, 1x32 block scaling, Blackwell)",
                 "precision_norm": "mxfp8",
                 "framework": "Megatron-Bridge / NeMo 26.06 container (Megatron-Core)",
                 "recompute": "none (llama recipes leave recompute_granularity unset/None)",
                 "recipe_hint": {"tag": "v0.5.0", "preset": ["X"], "layout_matches_table": True,
                                 "cuda_graph_impl": "transformer_engine",
                                 "cuda_graph_scope": "mlp"}},
    "measured": {"tokens_per_s_per_gpu": 3600, "model_tflops_per_gpu": 1500},
    "derived": {"iteration_time_s": 1.138},
}
TORCHTITAN_ROW = {  # trimmed torchtitan_2412_llama31_8b_128gpu_fsdp_compile_float8
    "id": "tt_8b_float8", "group": "torchtitan_llama3_h100_2412", "layout_complete": True,
    "_file": v.PUBLISHED_2026_FILE,
    "model": {"name": "Llama 3 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
              "ffn_hidden": 14336, "vocab": 128000, "seq_len": 8192},
    "hardware": {"gpu": "NVIDIA H100 SXM 96GB HBM2e (500 W power limit)", "gpu_memory_gb": 96,
                 "gpus_per_node": 8, "inter_node": "RDMA backend network, 400 Gb/s per GPU",
                 "num_gpus": 128},
    "parallel": {"tp": 1, "pp": 1, "dp": 128, "cp": 1, "local_batch": 2, "global_batch": 256,
                 "fsdp": "128", "zero_stage": 3, "precision": "Float8 + BF16",
                 "recompute": "selective", "framework": "torchtitan (PyTorch FSDP2/DTensor)"},
    "measured": {"tokens_per_s_per_gpu": 8380, "peak_memory_gib": 61.8},
}
MLPERF_ROW = {  # trimmed mlperf_v51_amd_mi355x_..._llama31_8b
    "id": "mlperf_mi355x", "group": "mlperf_training_v5p1_llama31", "layout_complete": True,
    "_file": v.PUBLISHED_2026_FILE,
    "model": {"name": "Llama 3.1 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
              "ffn_hidden": 14336, "vocab": 128000, "seq_len": 8192},
    "hardware": {"gpu": "AMD Instinct MI355X", "gpus_per_node": 8, "num_gpus": 8},
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 2,
                 "global_batch": 32, "zero_stage": "not stated", "precision_norm": "fp8",
                 "precision": "FP8 (recipe not stated)", "recompute": "not stated",
                 "framework": "PyTorch 2.8.0 ROCm 7.0.0"},
    "measured": {"throughput_samples_per_s": 25.0},
}


def _with(entry, **sections):
    out = json.loads(json.dumps(entry))
    for key, change in sections.items():
        if isinstance(change, dict):
            out[key].update(change)
        else:
            out[key] = change
    return out


# ---- mapping ---------------------------------------------------------------------------------
def test_nvl72_row_maps_to_a_72_gpu_domain_of_4_gpu_hosts():
    run = v.map_entry(BRIDGE_ROW)
    c = run.cluster
    assert c.gpu.name == "gb200" and c.gpus_per_node == 4 and c.num_nodes == 8
    assert c.domain_gpus == 72 and c.num_domains == 1
    assert c.inter_node.nics_per_node == 4  # the preset's, the text names none
    p = run.parallel
    assert (p.precision, run.precision_recipe) == ("fp8", "mxfp8")
    assert (p.recompute, p.zero_stage, p.schedule, p.virtual_stages) == ("none", 1,
                                                                        "interleaved", 10)
    assert "cuda_graph_impl=transformer_engine" in run.recipe
    assert run.step_time_s == pytest.approx(32 * 4096 / (3600 * 32))
    assert run.dataset == v.PUBLISHED_2026_FILE
    assert run.reported_tflops_per_gpu == 1500


@pytest.mark.parametrize("norm,precision", [("bf16", "bf16"), ("fp8", "fp8"),
                                            ("mxfp8", "fp8"), ("nvfp4", "fp8"),
                                            ("blockwise", "fp8"), ("fp8_presumed", "fp8")])
def test_precision_norm_maps_to_the_nearest_model_precision(norm, precision):
    run = v.map_entry(_with(BRIDGE_ROW, parallel={"precision_norm": norm}))
    assert run.parallel.precision == precision and run.precision_recipe == norm


@pytest.mark.parametrize("text,expected", [
    ("not stated in table; family default: none (llama recipes ...)", "none"),
    ("not stated [preset @ v0.4.2 sets no recompute override]", "none"),  # dense Llama
    ("not stated in table; family default: selective (...)", "selective"),
    ("full", "full"), ("selective", "selective"),
])
def test_nvidia_recompute_defaults(text, expected):
    run = v.map_entry(_with(BRIDGE_ROW, parallel={"recompute": text}))
    assert run.parallel.recompute == expected


def test_recipe_hint_comes_before_the_defaults():
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], "recompute_modules": ["core_attn"]}
    assert v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint})).parallel.recompute \
        == "selective"
    # Megatron-Core ignores the method and layer count under selective granularity
    hint = {**hint, "recompute_num_layers": 5, "recompute_method": "block"}
    run = v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint}))
    assert (run.parallel.recompute, run.parallel.recompute_num_layers) == ("selective", 0)


def _partial(**fields):
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], **fields}
    return v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint, "vpp": 1})).parallel


@pytest.mark.parametrize(("modules", "expected"), [
    (["mlp"], "mlp"),                       # DeepSeek-V3 26.04: the dense layers' MLP only
    (["layernorm", "moe_act"], "layernorm+moe_act"),   # GPT-OSS-120B recipes
    (["moe_act", "layernorm"], "layernorm+moe_act"),   # order does not matter
    (["core_attn", "mlp"], "core_attn+mlp"),
    (["core_attn"], "core_attn"),
    (["mla_up_proj"], "core_attn"),         # not priced yet: the nearest, as before
    (["mla_up_proj", "mlp"], "core_attn"),
])
def test_named_recompute_modules_are_mapped(modules, expected):
    """recipe_hint.recompute_modules replaces Megatron-Core's default ["core_attn"]
    (TransformerConfig.recompute_modules): a set the cost model prices is mapped as named,
    not as the attention core."""
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], "recompute_modules": modules}
    p = v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint})).parallel
    assert (p.recompute, p.recompute_modules) == ("selective", expected)


def test_recompute_modules_only_with_selective_recompute():
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], "recompute_modules": ["mlp"],
            "recompute_granularity": "full"}
    p = v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint})).parallel
    assert (p.recompute, p.recompute_modules) == ("full", "core_attn")


def test_partial_recompute_is_mapped():
    """Issue 21: a partial recompute is scored, not skipped. BRIDGE_ROW: 80 layers on pp 8,
    10 per stage. Block recomputes N layers of every chunk; uniform, or a block count at or
    over the chunk, every layer; a text "N of M layers" per chunk or spread evenly; a method
    or count missing is an incomplete layout."""
    p = _partial(recompute_method="block", recompute_num_layers=4)
    assert (p.recompute, p.recompute_num_layers) == ("full", 4)
    assert _partial(recompute_method="uniform", recompute_num_layers=2).recompute_num_layers == 0
    assert _partial(recompute_method="block", recompute_num_layers=10).recompute_num_layers == 0
    per_chunk = v.map_entry(_with(BRIDGE_ROW, parallel={"vpp": 1, "recompute": "3 of 10 layers"}))
    assert (per_chunk.parallel.recompute, per_chunk.parallel.recompute_num_layers) == ("full", 3)
    total = v.map_entry(_with(BRIDGE_ROW, parallel={"vpp": 1, "recompute": "24 of 80 layers"}))
    assert total.parallel.recompute_num_layers == 3
    with pytest.raises(v.SkipEntry, match=r"^incomplete layout: partial recompute"):
        _partial(recompute_num_layers=4)
    with pytest.raises(v.SkipEntry, match=r"^incomplete layout: partial recompute"):
        v.map_entry(_with(BRIDGE_ROW, parallel={"vpp": 1, "recompute": "5 of 80 layers"}))
    assert v.skip_category("incomplete layout: partial recompute 'x'") == \
        "incomplete layout or model"
    # the block count keeps the other layers' activations: a smaller predicted peak, and a
    # shorter step than recomputing every layer
    full = _partial(recompute_method="uniform", recompute_num_layers=1)
    assert full.recompute == "full"
    runs = [replace(v.map_entry(_with(BRIDGE_ROW, parallel={
        "vpp": 1, "recipe_hint": {"recompute_method": m, "recompute_num_layers": n}})), id=m)
        for m, n in (("uniform", 1), ("block", 4))]
    pred, errors = v.predict(runs)
    assert not errors
    assert pred["block"].step_time_s < pred["uniform"].step_time_s
    assert pred["block"].peak_memory_bytes > pred["uniform"].peak_memory_bytes


def test_activation_offload_is_mapped():
    """Megatron-Core's --cpu-offloading-num-layers from the entry or its recipe hint; a false
    field is no offload; offload without a count is an incomplete layout."""
    one = {"pp": 1, "vpp": 1, "dp": 32}
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], "cpu_offloading_num_layers": 6}
    run = v.map_entry(_with(BRIDGE_ROW, parallel={**one, "recipe_hint": hint}))
    assert run.parallel.cpu_offloading_num_layers == 6
    off = v.map_entry(_with(BRIDGE_ROW, parallel={**one, "activation_cpu_offload": False}))
    assert off.parallel.cpu_offloading_num_layers == 0
    with pytest.raises(v.SkipEntry, match=r"^incomplete layout: activation CPU offload"):
        v.map_entry(_with(BRIDGE_ROW, parallel={**one, "activation_cpu_offload": True}))
    pred, errors = v.predict([replace(run, id="offload"), off])
    assert not errors
    assert pred["offload"].peak_memory_bytes < pred[off.id].peak_memory_bytes


def test_megatron_fsdp_column_is_zero_3():
    """Megatron-FSDP (ZeRO-3) with a pipeline is mapped and scored (issue 21: ZeRO-3 / FSDP
    with pp > 1 is modelled): its sharded weights make the peak smaller than ZeRO-1's."""
    run = v.map_entry(_with(BRIDGE_ROW, parallel={"fsdp": 32, "pp": 1, "dp": 32, "vpp": 1}))
    assert run.parallel.zero_stage == 3
    piped = v.map_entry(_with(BRIDGE_ROW, parallel={"fsdp": 4}))
    assert (piped.parallel.zero_stage, piped.parallel.pp) == (3, 8)
    pred, errors = v.predict([replace(piped, id="fsdp_pp"), v.map_entry(BRIDGE_ROW)])
    assert not errors
    assert pred["fsdp_pp"].peak_memory_bytes < pred[BRIDGE_ROW["id"]].peak_memory_bytes


def test_torchtitan_row():
    run = v.map_entry(TORCHTITAN_ROW)
    p = run.parallel
    assert (p.micro_batch_size, p.zero_stage, p.precision, p.recompute) == (2, 3, "fp8",
                                                                           "selective")
    assert run.precision_recipe == "float8 (torchao)"
    assert run.training.framework == "torchtitan"  # PyTorch FSDP2, op-level SAC
    assert run.cluster.gpu.name == "h100-sxm-96gb-hbm2e"  # the Grand Teton 96 GB HBM2e parts
    assert run.reserved_memory_bytes == pytest.approx(61.8 * 2**30)
    assert run.memory_bytes is None  # nvidia-smi memory is BLOOM's; this is reserved memory


def test_torchtitan_tp_is_sequence_parallel():
    """torchtitan's TP plan runs the norms under SequenceParallel (enable_sequence_parallel
    defaults to True): an entry with tp > 1 that does not state SP is mapped with SP; an
    explicit field still wins, and tp = 1 has no SP."""
    tp8 = _with(TORCHTITAN_ROW, parallel={"tp": 8, "dp": 16, "global_batch": 32},
                hardware={"num_gpus": 128})
    assert v.map_entry(tp8).parallel.sequence_parallel
    off = _with(tp8, parallel={"sequence_parallel": False})
    assert not v.map_entry(off).parallel.sequence_parallel
    assert not v.map_entry(TORCHTITAN_ROW).parallel.sequence_parallel
    # a Megatron row that does not state SP keeps it off
    other = _with(tp8, group="megatron_core_x", parallel={"framework": "Megatron-Core"})
    assert not v.map_entry(other).parallel.sequence_parallel


def test_torchtitan_async_tp_is_mapped_to_tp_comm_overlap():
    """torchtitan's async TP (compile.enable_async_tensor_parallel) is scored as the TP
    collectives pipelined with their GEMMs: stated in the text (AsyncTP), or at tp > 1 under
    torch.compile (its 405B recipe sets both); not without TP, not eager, not where the entry
    says async_tp: false."""
    tp8 = _with(TORCHTITAN_ROW, parallel={"tp": 8, "dp": 16, "global_batch": 32,
                                          "torch_compile": True},
                hardware={"num_gpus": 128})
    assert v.map_entry(tp8).training.tp_comm_overlap
    eager = _with(tp8, parallel={"torch_compile": False})
    assert not v.map_entry(eager).training.tp_comm_overlap
    named = _with(tp8, parallel={"precision": "Float8 + BF16 (AsyncTP)"})
    del named["parallel"]["torch_compile"]  # not stated: AsyncTP implies compile
    assert v.map_entry(named).training.tp_comm_overlap
    off = _with(tp8, parallel={"async_tp": False})
    assert not v.map_entry(off).training.tp_comm_overlap
    no_tp = _with(TORCHTITAN_ROW, parallel={"torch_compile": True})
    assert not v.map_entry(no_tp).training.tp_comm_overlap


def test_torchtitan_async_tp_hides_tp_collectives():
    """Scored with async TP a torchtitan tp-8 step is faster and needs no more memory."""
    from costmodel.batch import ConfigBatch
    from costmodel.model import score

    tp8 = _with(TORCHTITAN_ROW, parallel={"tp": 8, "dp": 16, "global_batch": 32,
                                          "torch_compile": True},
                hardware={"num_gpus": 128})
    run = v.map_entry(tp8)
    plain = replace(run.training, tp_comm_overlap=False)
    batch = ConfigBatch.from_configs([run.parallel])
    over = score(run.model, run.cluster, run.training, batch)
    base = score(run.model, run.cluster, plain, batch)
    assert over.step_time_s[0] < 0.97 * base.step_time_s[0]
    assert over.peak_memory_bytes[0] == base.peak_memory_bytes[0]


def test_mlperf_row():
    run = v.map_entry(MLPERF_ROW)
    assert run.cluster.gpu.name == "mi355x"
    assert run.step_time_s == pytest.approx(32 / 25.0)
    assert run.step_time_source == "throughput_samples_per_s"
    p = run.parallel
    # MLPerf's Llama 3.1 implementations have no recompute option: "not stated" is
    # Megatron-Core's default (none); not an NVIDIA config: ZeRO "not stated" reads as absent
    assert (p.precision, p.recompute, p.zero_stage) == ("fp8", "none", 0)
    t = v.map_entry(_with(MLPERF_ROW, measured={"iteration_time_s": 1.1}))
    assert t.step_time_s == 1.1 and t.step_time_source == "iteration_time_s"


@pytest.mark.parametrize("change,reason", [
    ({"model": {"moe": {"num_experts": 64, "top_k": 8}}}, "MoE (issue 22)"),
    ({"model": {"mamba": {"num_heads": 64}}}, "mamba"),
    ({"layout_complete": False, "layout_missing": ["model_dims"]},
     "incomplete layout (layout_complete: false): missing model_dims"),
    ({"parallel": {"vpp": 3}}, "uneven interleaved split: 80 layers on pp 8 x vpp 3"),
])
def test_skips_name_what_is_missing(change, reason):
    with pytest.raises(v.SkipEntry) as e:
        v.map_entry(_with(BRIDGE_ROW, **change))
    assert str(e.value).startswith(reason)


def test_skip_categories():
    col = v.collect_runs([_with(BRIDGE_ROW, parallel={"vpp": 3}),
                          _with(BRIDGE_ROW, model={"moe": {"num_experts": 8}}),
                          BRIDGE_ROW])
    assert [r.id for r in col.runs] == ["bridge_gb200_70b"]
    assert [x["category"] for x in col.skipped] == ["uneven interleaved split (issue 21)",
                                                    "MoE (issue 22)"]
    assert v.skip_counts(col.skipped) == {v.PUBLISHED_2026_FILE: {
        "uneven interleaved split (issue 21)": 1, "MoE (issue 22)": 1}}


def test_cp_rows_are_mapped():
    """cp > 1 is scored (issue 21): dp excludes cp (world = tp cp pp dp); the comm type is
    the entry's, else Megatron's p2p, torchtitan's all-gather."""
    run = v.map_entry(_with(BRIDGE_ROW, parallel={"cp": 2, "dp": 2}))
    assert (run.parallel.cp, run.parallel.dp, run.parallel.cp_comm_type) == (2, 2, "p2p")
    a2a = v.map_entry(_with(BRIDGE_ROW, parallel={"cp": 2, "dp": 2, "cp_comm_type": "a2a"}))
    assert a2a.parallel.cp_comm_type == "a2a"
    assert v.cp_comm_type_of("torchtitan_cp_h100_2412", {}) == "all_gather"
    with pytest.raises(v.SkipEntry, match="tp\\*cp\\*pp\\*dp"):
        v.map_entry(_with(BRIDGE_ROW, parallel={"cp": 2}))


@pytest.mark.parametrize("text,key", [
    ("NVIDIA GB200 (Grace-Blackwell, GB200 NVL72 rack)", "gb200"),
    ("NVIDIA Blackwell Ultra GPU (GB300)", "gb300"),
    ("NVIDIA Blackwell Ultra GPU (B300-SXM-270GB)", "b300"),
    ("NVIDIA Blackwell GPU (B200-SXM-180GB)", "b200"), ("NVIDIA B200 (DGX-B200)", "b200"),
    ("AMD Instinct MI355X", "mi355x"), ("AMD Instinct MI350X", "mi350x"),
    ("NVIDIA H800", "h800-sxm-80gb"), ("NVIDIA H100 SXM 96GB HBM2e", "h100-sxm-96gb-hbm2e"),
    ("NVIDIA A100 40GB", "a100-sxm-40gb"),
])
def test_gpu_keys(text, key):
    assert v.gpu_key(text) == key


def test_unreliable_oom_is_kept_and_marked():
    e = {"id": "x_oom", "group": "bloom_prequel_config_sweep", "model": LLAMA3_70B,
         "hardware": {"gpu": "NVIDIA A100 80GB", "num_gpus": 64},
         "parallel": {"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "global_batch": 64},
         "measured": {"oom": True, "oom_reliable": False}}
    run = v.map_entry(e)
    assert run.oom and not run.oom_reliable


# ---- the comparison tool ---------------------------------------------------------------------
def test_compare_reports_changes_and_ignores_additions(tmp_path, capsys):
    before = {"groups": [{"group": "a", "mape": 0.1}], "runs": [{"id": "r", "ape": 0.2}],
              "timing_s": {"total": 1.0}, "step_time": {"count": 2}}
    same = {**before, "groups": before["groups"] + [{"group": "new", "mape": 0.9}],
            "timing_s": {"total": 9.0}, "new_groups": {}}
    assert cmp.diff(before, same) == []
    changed = {**same, "runs": [{"id": "r", "ape": 0.25}]}
    assert cmp.diff(before, changed) == [".runs[id=r].ape: 0.2 -> 0.25"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(before))
    b.write_text(json.dumps(changed))
    assert cmp.main([str(a), str(b)]) == 1
    assert "1 difference(s)" in capsys.readouterr().out
    assert cmp.main([str(a), str(a)]) == 0


# ---- the real data -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data_dir():
    try:
        path = v.resolve_data_dir()
    except InputError as e:
        pytest.skip(f"validation data not available: {e}")
    if not (path / v.PUBLISHED_2026_FILE).is_file():
        pytest.skip(f"no {v.PUBLISHED_2026_FILE}")
    return path


@pytest.fixture(scope="module")
def result(data_dir):
    return v.validate(data_dir)


def test_every_gpu_in_the_data_has_a_catalog_key(data_dir):
    entries, _ = v.load_data(data_dir)
    gpus = {str((e.get("hardware") or {}).get("gpu")) for e in entries
            if (e.get("hardware") or {}).get("gpu")}
    assert len(gpus) > 20
    for text in gpus:
        v.gpu_key(text)  # raises SkipEntry for a GPU without a key


def test_no_run_is_skipped_for_its_gpu(result):
    bad = [x for x in result["skipped"] if x["category"] in (
        "GPU without a catalog key", "precision the GPU lacks") or "GPU" in x["reason"]]
    assert bad == []


ALLOWED_2026_SKIPS = {"MoE (issue 22)", "mamba",
                      "uneven interleaved split (issue 21)",
                      "uneven pipeline layout (issue 21)",
                      "incomplete layout (layout_complete: false)",
                      "incomplete layout or model", "no measured step time, memory or OOM",
                      # mbridge 25.09 DeepSeek-V3 *_alt row: tp1 pp8 dp32 with ep64 (Megatron's
                      # expert grid needs etp*ep*pp | world: 64*8 > 256)
                      "expert grid does not tile the world (published layout)",
                      # mbridge 25.11 GPT-OSS-120B H100 row: GA 2 printed beside GBS 512,
                      # MBS 4, DP 16 (GBS / (MBS x DP) = 8)
                      "gradient accumulation contradicts the layout (published layout)"}


def test_2026_entries_are_mapped_or_skipped_for_a_known_reason(result):
    cats = result["skip_counts"][v.PUBLISHED_2026_FILE]
    assert set(cats) <= ALLOWED_2026_SKIPS, cats
    by = result["counts"]["by_dataset"][v.PUBLISHED_2026_FILE]
    assert by["runs"] + by["skipped"] == 176
    assert by["step_time_runs"] >= 30


ISSUE_21_FEATURES = re.compile(r"cp > 1|context parallel|partial recompute|offload|"
                               r"ZeRO-3/FSDP with pp|uneven interleaved|issue 21")


def test_no_complete_dense_entry_is_skipped_for_an_issue_21_feature(data_dir, result):
    """Issue 21 acceptance: every entry of both files with a complete dense layout is mapped;
    none is skipped for cp > 1, partial recompute, offload, FSDP + PP or an uneven
    interleaved split. What stays skipped for such a feature is a MoE entry (an explicit
    pipeline layout of DeepSeek-V3) or an entry whose layout is incomplete."""
    entries, _ = v.load_data(data_dir)
    by_id = {str(e.get("id")): e for e in entries if isinstance(e, dict)}
    bad = []
    for x in result["skipped"]:
        e = by_id.get(x["id"])
        if e is None or not ISSUE_21_FEATURES.search(x["reason"]):
            continue
        dense = not v.mixture_of_experts(e.get("model") or {}, e.get("parallel") or {}) \
            and not isinstance((e.get("model") or {}).get("moe"), dict)
        if dense and e.get("layout_complete") is not False \
                and not x["reason"].startswith("incomplete layout"):
            bad.append((x["id"], x["reason"]))
    assert bad == []


def test_the_moe_group_is_scored(result):
    """Issue 22: the MoE rows with a complete model.moe block are mapped and scored; what is
    left of the group is skipped for a pipeline reason (issue 21), not for MoE."""
    groups = {g["group"]: g["count"] for g in result["new_groups"]["groups"]}
    assert groups.get("mbridge_perf_moe", 0) >= 40
    moe = [x for x in result["skipped"] if x["group"] == "mbridge_perf_moe"]
    assert all(x["category"] != "MoE (issue 22)" for x in moe)


def test_every_dense_2026_group_is_scored(result):
    groups = {g["group"]: g["count"] for g in result["new_groups"]["groups"]}
    for g in ("mbridge_perf_dense_blackwell", "mbridge_perf_dense_sft",
              "megatron_lm_examples_llama_fp8", "mlperf_training_v5p1_llama31",
              "torchtitan_llama3_h100_2412", "torchtitan_docs_perf_2024_a100"):
        assert groups.get(g, 0) >= 1, g
    gpus = {x["gpu"] for x in result["new_groups"]["by_gpu"]}
    assert {"h100-sxm-80gb", "b200", "b300", "gb200", "gb300", "mi355x"} <= gpus


def test_2026_ooms_and_reserved_memory_are_reported(result):
    ids = {x["id"] for x in result["oom"]["runs"]}
    assert {"torchtitan_2404_a100_llama2_70b_64gpu_lbs2_selective_op_OOM"} <= ids
    assert result["reserved_memory"]["count"] >= 4


def test_torchtitan_reserved_memory_within_ten_percent(result):
    """Issue 23: torchtitan's measured peaks (max reserved memory) within 10%, and its OOM
    runs predicted not to fit (op-level SAC, the fp32 loss, the gathered FSDP2 root)."""
    rm = result["reserved_memory"]
    assert rm["count"] >= 8
    assert rm["mape"] <= 0.10 and rm["max_ape"] <= 0.10
    tt = [x for x in result["oom"]["runs"] if x["id"].startswith("torchtitan")]
    assert len(tt) >= 2 and not any(x["predicted_to_fit"] for x in tt)


def test_torchtitan_layer_sac_is_full_recompute_of_every_second_block():
    """torchtitan's "selective (layer)" fully checkpoints every second block; "selective
    (op)" stays its op-level SAC; other frameworks' "selective" is unchanged."""
    bf16 = {"precision": "BF16"}
    layer = v.map_entry(_with(TORCHTITAN_ROW, parallel={**bf16, "recompute": "selective (layer)"}))
    assert (layer.parallel.recompute, layer.parallel.recompute_num_layers) == ("full", 16)
    op = v.map_entry(_with(TORCHTITAN_ROW, parallel={**bf16, "recompute": "selective (op)"}))
    assert (op.parallel.recompute, op.parallel.recompute_num_layers) == ("selective", 0)
    assert v.torchtitan_layer_sac("megatron_core_x", {"recompute": "selective (layer)"},
                                  "selective", 32, 1) == ("selective", 0)


def test_torch_compile_follows_the_entry():
    """The torchtitan rows state torch.compile (issue 23): the mapper passes it into
    TrainingSpec (absent: None, not stated); the compiled run, whose element-wise traffic is
    the fused minimum, is predicted faster than the eager one, the same run otherwise."""
    bf16 = {"precision": "BF16"}
    eager = v.map_entry(_with(TORCHTITAN_ROW, parallel={**bf16, "torch_compile": False}))
    fused = v.map_entry(_with(TORCHTITAN_ROW, parallel={**bf16, "torch_compile": True}))
    unstated = v.map_entry(_with(TORCHTITAN_ROW, parallel=bf16))
    assert (eager.training.torch_compile, fused.training.torch_compile,
            unstated.training.torch_compile) == (False, True, None)
    fused = replace(fused, id="compiled")
    pred, errors = v.predict([eager, fused])
    assert not errors
    assert pred["compiled"].step_time_s < pred[eager.id].step_time_s


def test_fp8_param_gather_follows_the_source():
    """Megatron-LM's llama examples (train_llama3_8b_h100_fp8.sh) pass --fp8-param-gather;
    torchtitan's Float8 rows gather in fp8; an entry's own field wins."""
    assert v.gathers_in_fp8("megatron_lm_examples_llama_fp8", {})
    assert not v.gathers_in_fp8("megatron_lm_examples_llama_fp8", {"fp8_param_gather": False})
    assert not v.gathers_in_fp8("mbridge_perf_dense_h100", {"precision": "FP8"})
    assert v.gathers_in_fp8("mbridge_perf_dense_h100", {"fp8_param_gather": True})
    assert v.map_entry(TORCHTITAN_ROW).training.fp8_param_gather


def test_the_2026_file_leaves_the_calibrated_figures_unchanged(data_dir, result, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for f in (v.PUBLISHED_FILE, v.VTRAIN_FILE):
        if (data_dir / f).is_file():
            shutil.copy(data_dir / f, old / f)
    before = v.validate(old)
    keys = ("groups", "step_time", "sweeps", "memory", "ran_predicted_over_memory",
            "korthikanti_table5", "korthikanti_table4", "nccl", "skipped")
    d = cmp.diff({k: before[k] for k in keys}, {k: result[k] for k in keys})
    assert d == []
    assert {x["id"] for x in before["runs"]} <= {x["id"] for x in result["runs"]}


def test_report_prints_the_new_groups(result):
    text = v.format_report(result, worst=0)
    assert "published_runs_2026.yaml groups (reported, not checked)" in text
    assert "per group and GPU" in text and "Skipped entries per reason" in text
    assert "not counted (oom_reliable: false): bloom_prequel_110" in text


def test_head_dim_when_given():
    m = {**LLAMA3_70B, "hidden": 2880, "heads": 64, "head_dim": 64}
    spec, _ = v.model_spec(m, name="gpt-oss-like")
    assert spec.head_dim == 64
    assert v.model_spec(LLAMA3_70B, name="x")[0].head_dim == 128


def test_grace_blackwell_row_without_a_domain_is_on_its_nvl72_rack():
    """GB200/GB300 come only as NVLink racks: an entry with 4-GPU hosts that does not state
    nvlink_domain_gpus (MLPerf's Lambda GB300 n18) gets the rack's 72-GPU domain."""
    hw = {k: x for k, x in NVL72.items() if k != "nvlink_domain_gpus"}
    def mapped(hardware):
        entry = _with(BRIDGE_ROW)
        entry["hardware"] = hardware
        return v.map_entry(entry)

    assert mapped(hw).cluster.domain_gpus == 72
    eight = mapped(hw | {"gpus_per_node": 8})
    assert eight.cluster.domain_gpus in (None, 8)  # not the rack's host: one-host domain


def test_mlperf_nvidia_rows_use_the_distributed_optimizer_where_not_stated():
    """NVIDIA's MLPerf Llama 3.1 implementation (NeMo / Megatron-Core) runs the distributed
    optimizer; AMD's PyTorch implementation keeps "not stated" as absent."""
    assert v.map_entry(MLPERF_ROW).parallel.zero_stage == 0
    nv = _with(MLPERF_ROW, hardware={"gpu": "NVIDIA B200"},
               parallel={"framework": "PyTorch NVIDIA Release 25.09"})
    run = v.map_entry(nv)
    assert run.parallel.zero_stage == 1 and run.parallel.recompute == "none"


def test_gpt_oss_named_modules_recompute_the_norm_and_expert_activation(data_dir):
    """The GPT-OSS-120B rows (recompute_modules layernorm + moe_act) re-run the pre-MLP norm
    and the experts' activation in the backward, not the attention core; they store less
    than the attention-core checkpoint would (the norm's output and each routed copy's FC2
    input freed outweigh the attention core's intermediates kept)."""
    from costmodel.trace import trace

    entries, _ = v.load_data(data_dir)
    runs = v.collect_runs(entries).runs
    run = next(r for r in runs if r.id == "mbridge_26p04_gb200_gpt_oss_120b_bf16_64gpu")
    assert run.parallel.recompute_modules == "layernorm+moe_act"
    named = trace(run.model, run.cluster, run.training, run.parallel)
    core = trace(run.model, run.cluster, run.training,
                 replace(run.parallel, recompute_modules="core_attn"))
    rc = {o.name: o.time_s for o in named.ops if o.pass_ == "recompute"}
    assert set(rc) == {"norm.rc_module", "moe_act.rc_module"} and min(rc.values()) > 0
    assert [o.name for o in core.ops if o.pass_ == "recompute"] == ["attn.recompute"]
    assert named.metrics["peak_memory_bytes"] < core.metrics["peak_memory_bytes"]


def test_fp8_dot_product_attention_follows_the_recipe_hint():
    """recipe_hint.fp8_dot_product_attention (the 26.06 MoE recipes) turns on the FP8
    attention core for fp8 rows; a bf16 row or a row without the hint keeps it in 16 bits."""
    hint = {**BRIDGE_ROW["parallel"]["recipe_hint"], "fp8_dot_product_attention": True}
    on = v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint}))
    assert on.training.fp8_dot_product_attention is True
    assert v.map_entry(BRIDGE_ROW).training.fp8_dot_product_attention is False
    bf16 = v.map_entry(_with(BRIDGE_ROW, parallel={"recipe_hint": hint, "precision_norm": "bf16",
                                                   "precision": "BF16"}))
    assert bf16.training.fp8_dot_product_attention is False


def test_mlperf_llama_rows_without_a_recompute_field_run_none():
    """The benchmark's NeMo / Megatron-Core implementations have no recompute option
    (runs_mlperf_llama_impl); a stated recompute still wins, and other groups keep the
    README's "absent means full"."""
    assert v.runs_mlperf_llama_impl("mlperf_training_v5p1_llama31", {})
    assert not v.runs_mlperf_llama_impl("bloom_prequel_config_sweep", {})
    assert v.map_entry(MLPERF_ROW).parallel.recompute == "none"
    stated = _with(MLPERF_ROW, parallel={"recompute": "full"})
    assert v.map_entry(stated).parallel.recompute == "full"
    other = _with(MLPERF_ROW, group="some_other_group")
    assert v.map_entry(other).parallel.recompute == "full"


def test_a_logged_gradient_accumulation_overrides_an_inferred_micro_batch():
    """GigaComputing's MI355X row: config-matched micro-batch 4, log says 2 accumulation
    steps at global batch 32 on 8 ranks -> micro-batch 2 (logged_micro_batch)."""
    inferred = {"layout_source": "INFERRED: submitter config(s) whose ...",
                "grad_accum_logged": 2, "micro_batch": 4}
    assert v.map_entry(_with(MLPERF_ROW, parallel=inferred)).parallel.micro_batch_size == 2
    # stated (not inferred) layouts, consistent logs and counts that do not divide keep theirs
    stated = dict(inferred, layout_source="config named in the result log")
    assert v.map_entry(_with(MLPERF_ROW, parallel=stated)).parallel.micro_batch_size == 4
    agree = dict(inferred, grad_accum_logged=1.0)
    assert v.map_entry(_with(MLPERF_ROW, parallel=agree)).parallel.micro_batch_size == 4
    odd = dict(inferred, grad_accum_logged=3)
    assert v.map_entry(_with(MLPERF_ROW, parallel=odd)).parallel.micro_batch_size == 4


def test_source_flagged_regression_is_reported_beside_the_headline():
    # a note quoting the source's "known issue" regression footnote marks the run; the group's
    # headline MAPE keeps it, the figure without it is reported beside it
    from optimizer.validation.published import new_groups_section, source_regression_note

    flagged = {"notes": ['Footnote: "Performance regression in X pre-training is a known '
                         'issue (cudnn-frontend#256)."']}
    assert source_regression_note(flagged).startswith("Footnote")
    assert source_regression_note({"notes": ["Same layout in 3 releases"]}) == ""
    assert source_regression_note({}) == ""
    rows = [{"id": f"r{i}", "group": "g", "gpu": "b200", "ape": a, "signed_error": -a,
             "dataset": "published_runs_2026.yaml", "source_regression": n,
             "mfu_bf16_measured": 0.5, "mfu_bf16_predicted": 0.5, "mfu_bf16_reported": 0.5}
            for i, (a, n) in enumerate([(0.1, ""), (0.2, ""), (0.6, "regression")])]
    g = new_groups_section(rows, [])["groups"][0]
    assert abs(g["mape"] - 0.3) < 1e-12
    assert abs(g["mape_without_source_flagged"] - 0.15) < 1e-12
    assert [x["id"] for x in g["source_flagged"]] == ["r2"]


def test_ep_overlap_mapping_follows_megatrons_graph_rule():
    from optimizer.validation.published import moe_ep_overlap_of

    def hint(**h):
        return {"recipe_hint": {"moe_a2a_overlap": True, **h}}
    assert moe_ep_overlap_of(hint())
    assert moe_ep_overlap_of(hint(cuda_graph_impl="transformer_engine",
                                  cuda_graph_scope=["attn", "moe_router"]))
    assert not moe_ep_overlap_of(hint(cuda_graph_impl="transformer_engine",
                                      cuda_graph_scope=["attn", "mlp"]))
    assert not moe_ep_overlap_of(hint(cuda_graph_impl="local", cuda_graph_scope=["attn"]))
    assert not moe_ep_overlap_of({"recipe_hint": {"moe_a2a_overlap": False}})
    assert not moe_ep_overlap_of({})
    # full-iteration graphs: asked for, refused by the cost model's own rule (moe_cuda_graph)
    assert moe_ep_overlap_of(hint(cuda_graph_impl="full_iteration"))
