"""An explicit pipeline layout (Megatron's --pipeline-model-parallel-layout) as a stage plan:
the grammar, per-rank layers, validity checks, the scored plan, the rule and the mapper."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.errors import InputError
from costmodel.loaders import load_cluster
from costmodel.model import run_phases, score
from costmodel.pipeline_layout import (
    check_layout,
    parse_layout,
    rank_layout,
    without_mtp,
    write_layout,
)
from costmodel.specs import ModelSpec, ParallelConfig, TrainingSpec

B200_LAYOUT = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge DeepSeek-V3 on DGX-B200, pp 8 x vpp 2
SMALL = ModelSpec("layout-test", num_layers=10, hidden_size=2048, num_attention_heads=16,
                  ffn_hidden_size=8192, vocab_size=32000)
CLUSTER = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8})


def test_grammar_is_megatrons():
    # Megatron's own example (parse_str_to_list docstring)
    assert parse_layout("Ettt|(tt|)*29,m|L") == ("Ettt",) + ("tt",) * 29 + ("m", "L")
    st = parse_layout(B200_LAYOUT)
    assert len(st) == 16 and st[0] == "Etttt" and st[1:15] == ("tttt",) * 14
    assert st[15] == "tmL"


def test_rank_layout_of_the_b200_recipe():
    rl = rank_layout(B200_LAYOUT, 8)
    # virtual stage s on rank s mod pp: rank 0 holds E + 4 and 4, rank 7 holds 4 and t m L
    assert rl.vpp == 2
    assert rl.layers == (8, 8, 8, 8, 8, 8, 8, 5)
    assert rl.mtp == (0,) * 7 + (1,)
    assert (rl.embedding_rank, rl.loss_rank) == (0, 7)
    assert sum(rl.layers) == 61
    # the same layout on 4 ranks has 4 chunks each
    assert rank_layout(B200_LAYOUT, 4).layers == (16, 16, 16, 13)


@pytest.mark.parametrize("text, layers, mtp, words", [
    ("Et*4|(t*4|)*14tmL", 60, 1, "holds 61 decoder layers; the model has 60"),
    ("t*4E|(t*4|)*14tL", 61, 0, "embedding E must come first"),
    ("Et*4|(t*4|)*14t", 61, 0, "loss L must come last"),
    ("Et*4|(t*4|)*14tmmL", 61, 1, "holds 2 MTP modules"),
    ("Et*4|(t*4|)*13t*4m|tL", 61, 1, "decoder layers must come before the MTP"),
    ("Et*4|(t*4|)*14txL", 61, 0, "unknown layer character 'x'"),
])
def test_invalid_layouts_are_refused_clearly(text, layers, mtp, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(")):
        check_layout(text, layers, mtp)


def test_pp_must_divide_the_stages_and_mtp_sits_in_a_last_chunk():
    with pytest.raises(InputError, match="16 stages, not a multiple of pp=3"):
        rank_layout(B200_LAYOUT, 3)
    # 4 stages on pp 2: the MTP module in rank 1's first chunk (stage 1)
    with pytest.raises(InputError, match="last chunk"):
        rank_layout("Et|tm|t|tL", 2)
    with pytest.raises(InputError, match="unknown layer character"):
        TrainingSpec(pipeline_layout="Et|q|L")


def test_scoring_and_flags_check_the_layout_against_the_model():
    tr = TrainingSpec(2048, 64, pipeline_layout="Et*3|t*3|tt|tL")  # 9 layers, the model 10
    c = ParallelConfig(tp=2, pp=4, dp=1)
    with pytest.raises(InputError, match="holds 9 decoder layers; the model has 10"):
        score(SMALL, CLUSTER, tr, _batch([c]))
    from optimizer.launch.flags import megatron_args

    with pytest.raises(InputError, match="not a multiple of pp=3"):
        megatron_args(SMALL, CLUSTER, replace(tr, pipeline_layout="Et*3|t*3|tt|ttL"),
                      ParallelConfig(tp=2, pp=3, dp=1, micro_batch_size=1))


def test_writer_round_trips_and_drops_mtp():
    for text in (B200_LAYOUT, "Ettt|(tt|)*29,m|L", "Et*3|t*3|tt|ttL"):
        assert parse_layout(write_layout(parse_layout(text))) == parse_layout(text)
    assert without_mtp(B200_LAYOUT) == "Et*4|(t*4|)*14tL"


def _batch(configs):
    return ConfigBatch.from_configs(configs)


def test_stage_plan_takes_the_layout_vectorised():
    layout = "Et*3|t*3|tt|ttL"  # 10 layers on pp 4: 3/3/2/2 (the default split is 2/3/3/2)
    tr = TrainingSpec(2048, 64, pipeline_layout=layout)
    fit = ParallelConfig(tp=2, pp=4, dp=1)
    other = ParallelConfig(tp=4, pp=2, dp=1)  # pp x chunks = 2 != 4: keeps the default split
    ph = run_phases(SMALL, CLUSTER, tr, _batch([fit, other]))
    assert [int(ph.plan.stage_layers(r)[0]) for r in range(4)] == [3, 3, 2, 2]
    assert [int(ph.plan.stage_layers(r)[1]) for r in range(2)] == [5, 5]
    one = run_phases(SMALL, CLUSTER, tr, _batch([fit]))
    assert [int(one.plan.stage_layers(r)[0]) for r in range(4)] == [3, 3, 2, 2]
    # a batch of one is the same code path: the same step time as its row in the batch
    assert float(one.scores.step_time_s[0]) == pytest.approx(float(ph.scores.step_time_s[0]))
    default = run_phases(SMALL, CLUSTER, TrainingSpec(2048, 64), _batch([fit]))
    assert [int(default.plan.stage_layers(r)[0]) for r in range(4)] == [2, 3, 3, 2]
    # the heavier first stage (3 layers + the embedding) is scored
    assert float(one.scores.step_time_s[0]) > float(default.scores.step_time_s[0])


def test_layout_of_the_default_split_scores_as_the_default():
    tr = TrainingSpec(2048, 64)
    c = ParallelConfig(tp=2, pp=4, dp=1)
    plain = score(SMALL, CLUSTER, tr, _batch([c]))
    same = score(SMALL, CLUSTER, replace(tr, pipeline_layout="Ett|t*3|t*3|ttL"), _batch([c]))
    assert float(same.step_time_s[0]) == pytest.approx(float(plain.step_time_s[0]), rel=1e-12)
    assert float(same.peak_memory_bytes[0]) == pytest.approx(float(plain.peak_memory_bytes[0]))


def test_interleaved_layout_with_uneven_middle_ranks():
    # 12 layers, pp 4 x vpp 2: ranks hold 1+2, 2+2, 1+1, 1+2 -> middle runs 4 and 2
    layout = "Et|tt|t|t|tt|tt|t|ttL"
    rl = rank_layout(layout, 4)
    assert rl.layers == (3, 4, 2, 3)
    model = replace(SMALL, num_layers=12)
    tr = TrainingSpec(2048, 64, pipeline_layout=layout)
    c = ParallelConfig(tp=2, pp=4, dp=1, schedule="interleaved", virtual_stages=2)
    ph = run_phases(model, CLUSTER, tr, _batch([c]))
    assert [int(ph.plan.stage_layers(r)[0]) for r in range(4)] == [3, 4, 2, 3]
    assert len(ph.plan.groups) == 4  # first, last, the two middle runs


def test_rule_rejects_layouts_that_do_not_fit():
    from search_spaces.rules import Context, check, explain

    tr = TrainingSpec(2048, 64, pipeline_layout="Et*3|t*3|tt|ttL")
    ctx = Context(SMALL, CLUSTER, tr)
    ok = {"tp": 2, "pp": 4}
    bad = {"tp": 4, "pp": 2}
    assert explain(ctx, ok) == []
    assert any("pipeline_layout_fits" in str(x) or "pipeline layout" in str(x)
               for x in explain(ctx, bad))
    from search_spaces.space import batch_from_choices
    assert check(ctx, batch_from_choices([ok, bad], 8)).tolist() == [True, False]


def test_fingerprint_records_the_layout():
    from optimizer.core.problem import resolve_problem

    base = resolve_problem(model=SMALL, gpus=8, gpu="h100-sxm-80gb",
                           training=TrainingSpec(2048, 64))
    lay = resolve_problem(model=SMALL, gpus=8, gpu="h100-sxm-80gb",
                          training=TrainingSpec(2048, 64, pipeline_layout="Et*3|t*3|tt|ttL"))
    assert base.fingerprint() != lay.fingerprint()
    assert lay.inputs_json()["training"]["pipeline_layout"] == "Et*3|t*3|tt|ttL"


def test_mapper_scores_the_b200_layout_row():
    from costmodel.errors import InputError
    from optimizer.validation.published import collect_runs, load_data, resolve_data_dir

    try:  # the shipped copy of the data, or ../shared/validation (resolve_data_dir's order)
        data = resolve_data_dir()
    except InputError as e:
        pytest.skip(f"validation data not available: {e}")
    pub, _ = load_data(data)
    col = collect_runs(pub, [])
    rid = "mbridge_26p04p01_b200_deepseek_v3_mxfp8_256gpu"
    run = next((r for r in col.runs if r.id == rid), None)
    if run is None and not any(s.get("id") == rid for s in col.skipped):
        pytest.skip("the 2026 validation data is not here")
    assert run is not None, [s for s in col.skipped if s.get("id") == rid]
    # the entry states no MTP module in its model block: scored without the layout's m
    assert run.training.pipeline_layout == "Et*4|(t*4|)*14tL"
    ph = run_phases(run.model, run.cluster, run.training, _batch([run.parallel]))
    assert [int(ph.plan.stage_layers(r)[0]) for r in range(8)] == [8] * 7 + [5]
    assert np.isfinite(ph.scores.step_time_s[0])


def test_other_targets_and_the_diagnosis_name_the_layout():
    from optimizer.launch.flags import launch_bundle

    tr = TrainingSpec(2048, 64, pipeline_layout="Et*3|t*3|tt|ttL")
    c = ParallelConfig(tp=2, pp=4, dp=1)
    b = launch_bundle(SMALL, CLUSTER, tr, c)
    assert b["targets"]["megatron"]["supported"]
    assert "Et*3|t*3|tt|ttL" in b["megatron_args"]
    for target in ("torchtitan", "deepspeed"):
        assert not b["targets"][target]["supported"]
        assert any("pipeline layout" in r for r in b["targets"][target]["reasons"])
    assert not any("--decoder-first-pipeline-num-layers" in w for w in b["warnings"])
    from optimizer.output.diagnose import plan_layers_of

    class P:  # what plan_layers_of reads of a Problem
        model, cluster, training = SMALL, CLUSTER, tr

    assert plan_layers_of(P, c)[:3] == (3, 3, 2)
    from optimizer.output.diagnose import _stage_plan

    # every rank's layers (a layout's middle ranks may differ), not first / middle x n / last
    uneven = TrainingSpec(2048, 64, pipeline_layout="Ett|t*4|t|t*3L")

    class Q:
        model, cluster, training = SMALL, CLUSTER, uneven

    note = _stage_plan(Q, c, {"stage_imbalance": 1.1}).message
    assert "stage plan layout Ett|t*4|t|t*3L: 2, 4, 1, 3 layers" in note


@pytest.mark.parametrize("text", ["Et*999999999L", "(t*99999|)*99999", "Et*" + "9" * 5000 + "L",
                                  ["Et*4", "t*4L"]])
def test_a_hostile_layout_is_refused_before_it_is_expanded(text):
    """Repeat counts are bounded before the expansion allocates (a 10^10-character layout
    used to be built in memory), and a non-string is an InputError, not the cache's
    TypeError."""
    from costmodel.errors import InputError
    from costmodel.pipeline_layout import parse_layout

    with pytest.raises(InputError) as e:
        parse_layout(text)
    assert e.value.field == "training.pipeline_layout"



def test_cli_pipeline_layout_keeps_the_layouts_it_fits():
    """``--pipeline-layout`` sets training.pipeline_layout: every front point has pp x virtual
    stages equal to the layout's stages, its launch writes the layout; a layout that does not
    hold the model's layers is exit 2 naming the field."""
    from conftest import run_cli, run_cli_json

    layout = "Et*9|(t*10|)*6t*11L"  # 8 stages, 80 layers
    doc = run_cli_json(["--model", "llama3-70b", "--gpus", "64", "--gpu", "h100-sxm-80gb",
                        "--pipeline-layout", layout, "-q"], "front")
    assert doc["inputs"]["training"]["pipeline_layout"] == layout
    for p in doc["pareto_front"]:
        c = p["config"]
        v = c["virtual_stages"] if c["schedule"] == "interleaved" else 1
        assert c["pp"] * v == 8, c
        args = p["launch"]["megatron_args"]
        assert args[args.index("--pipeline-model-parallel-layout") + 1] == layout
    rc, _, err = run_cli(["--model", "llama3-70b", "--gpus", "64", "--pipeline-layout",
                          "Et*9|t*10L", "-q"])
    assert rc == 2 and "training.pipeline_layout" in err and "80" in err
    # 3 stages on 64 GPUs: no pp divides them; the error names the layout, not the rules
    # that reject the most configurations
    rc, _, err = run_cli(["--model", "llama3-70b", "--gpus", "64", "--pipeline-layout",
                          "Et*26|t*27|t*27L", "-q"])
    assert rc == 2 and "training.pipeline_layout" in err and "has 3 stages" in err


def test_a_pp_the_layout_cannot_place_is_invalid_not_a_failed_batch():
    """Megatron puts an MTP module in its rank's last chunk: at pp 2 x 3 chunks the layout
    below has it in chunk 1 of rank 1. That pp is rejected by the rule and scores the default
    plan inside a batch, instead of failing the whole batch (and the search); all MTP modules
    in one virtual stage (Megatron's validate_layer_layout)."""
    from costmodel.pipeline_layout import check_layout
    from costmodel.specs import MoESpec
    from search_spaces.rules import Context, explain

    moe = ModelSpec("layout-mtp", num_layers=6, hidden_size=1024, num_attention_heads=16,
                    ffn_hidden_size=4096, vocab_size=32000,
                    moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024,
                                mtp_layers=1))
    six = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 6})
    tr = TrainingSpec(2048, 60, pipeline_layout="Et*2|t*2|t*2|m||L")
    good = ParallelConfig(tp=1, pp=3, dp=2, schedule="interleaved", virtual_stages=2)
    bad = ParallelConfig(tp=1, pp=2, dp=3, schedule="interleaved", virtual_stages=3)
    both = score(moe, six, tr, _batch([good, bad])).step_time_s
    alone = score(moe, six, tr, _batch([good])).step_time_s
    assert both[0] == alone[0] and np.isfinite(both[1])
    assert [n for n, _ in explain(Context(moe, six, tr), bad)] == ["pipeline_layout_fits"]
    assert explain(Context(moe, six, tr), good) == []
    with pytest.raises(InputError, match="one virtual stage"):
        check_layout("Et*2|t*2|t*2|m|m|L", 6, 2)


def test_partial_recompute_needs_chunks_the_count_prices():
    """The block method recomputes sum(min(N, chunk)) layers on a rank; the cost model prices
    v x min(N, layers / v). Under an explicit layout the two agree only where a rank's chunks
    are all >= N or all <= N: Et|t*5|t*5|tL (chunks 1 and 5 on each rank) at N = 2 is refused,
    N = 1 is not; equal chunks take any N below a chunk."""
    from search_spaces.rules import Context, explain

    model = ModelSpec("layout-rc", num_layers=12, hidden_size=2048, num_attention_heads=16,
                      ffn_hidden_size=8192, vocab_size=32000)
    eight = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 1, "gpus_per_node": 8})

    def rules(layout, n):
        tr = TrainingSpec(2048, 64, pipeline_layout=layout)
        c = ParallelConfig(tp=2, pp=2, dp=2, schedule="interleaved", virtual_stages=2,
                           recompute="full", recompute_num_layers=n)
        return [name for name, _ in explain(Context(model, eight, tr), c)]

    assert rules("Et|t*5|t*5|tL", 2) == ["partial_recompute"]
    assert rules("Et|t*5|t*5|tL", 1) == []
    assert rules("Et*3|t*3|t*3|t*3L", 2) == []


def test_a_plan_leaves_out_the_counts_a_layout_cannot_fit_and_its_advice_fits_the_layout():
    """A GPU-count plan plans the counts the layout fits and lists the others as having no
    valid layout (it aborted the whole plan); every count failing is exit 2. The imbalance
    advice names the layout, not Megatron's first/last-stage flags that do not combine
    with it."""
    from conftest import run_cli, run_cli_json

    args = ["--model", "llama3-8b", "--gpu", "h100-sxm-80gb", "--tokens", "1e10",
            "--pipeline-layout", "Et*10|t*11|t*11L", "-q"]
    doc = run_cli_json([*args, "--gpus", "24,32"], "plan")
    status = {e["gpus"]: e["status"] for e in doc["plan"]}
    assert status == {24: "ok", 32: "infeasible"}
    assert doc["plan"][1]["message"].startswith("no valid configuration")
    rc, out, _ = run_cli([*args, "--gpus", "24,32"])
    assert rc == 0 and "no valid layout" in out
    rc, _, err = run_cli([*args, "--gpus", "32,64"])
    assert rc == 2 and "training.pipeline_layout" in err
    rc, out, _ = run_cli(["--model", "llama3-8b", "--gpus", "24", "--gpu", "h100-sxm-80gb",
                          "--pipeline-layout", "Et*10|t*11|t*11L", "-q"])
    assert rc == 0 and "decoder-first" not in out and "stages of the layout" in out


def test_megatron_flags_refuse_a_schedule_the_layout_does_not_have():
    """Megatron derives vpp = stages / pp from the layout: an 8-stage layout on pp 4 under
    1F1B would run vpp 2 (another schedule than scored), so the flags refuse it; pp 4 x 2
    interleaved is the layout's."""
    from optimizer.launch.flags import megatron_args

    tr = TrainingSpec(2048, 64, pipeline_layout="Et|t|t|t|t|t|t*2|t*2L")
    with pytest.raises(InputError, match="8 stages"):
        megatron_args(SMALL, CLUSTER, tr, ParallelConfig(tp=2, pp=4, dp=1))
    a = megatron_args(SMALL, CLUSTER, tr, ParallelConfig(tp=2, pp=4, dp=1,
                                                          schedule="interleaved",
                                                          virtual_stages=2))
    assert a[a.index("--pipeline-model-parallel-layout") + 1] == "Et|(t|)*5tt|ttL"
