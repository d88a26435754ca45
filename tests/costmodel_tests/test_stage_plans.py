"""Searched stage plans and the new pipeline schedules (issue 21, item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.batch import ConfigBatch
from costmodel.model import run_phases, score
from costmodel.schedule import (
    balanced_layers,
    head_share,
    pipeline_timeline,
    stage_layers,
    zero_bubble_ratio,
)
from costmodel.specs import ModelSpec
from costmodel.stages import stage_plan
from optimizer.api import resolve_problem
from optimizer.output.diagnose import plan_layers_of


@pytest.mark.parametrize("layers", [24, 78, 80, 126])
def test_balanced_plan_without_a_head_is_the_default(layers):
    pp = np.arange(1, layers + 1)
    f, m, la, differs = balanced_layers(layers, pp, head=0.0)
    df, dm, dl, ok = stage_layers(layers, pp)
    ok = ok & (pp >= 2)  # (where no default split exists the rules reject the row anyway)
    assert (f == df)[ok].all() and (la == dl)[ok].all() and not differs[ok].any()


def test_balanced_plan_moves_layers_off_a_heavy_head():
    # a head of 2.5 layers on 4 stages of 20: the last gets fewer layers, Megatron's
    # middle stages stay equal, every stage has a layer and they add up to L
    f, m, la, differs = balanced_layers(80, np.array([4]), head=2.5)
    assert differs[0] and la[0] < 20 and f[0] + 2 * m[0] + la[0] == 80
    slowest = max(f[0], m[0], la[0] + 2.5)
    assert slowest < 22.5  # better than the default's 20 + 2.5
    # the plan the cost model builds from it
    plan = stage_plan(80, np.array([4]), np.array([True]), head=2.5)
    assert [plan.stage_layers(i)[0] for i in range(4)] == [f[0], m[0], m[0], la[0]]


def test_balanced_plan_equivalent_where_no_layer_moves():
    # LLaMA-65B's LM head is 0.31 layers' worth: no whole-layer move helps, and a row asking
    # for the balanced plan scores exactly like the default
    p = resolve_problem(model="65b", gpus=16)
    assert head_share(p.model, 2048) == pytest.approx(0.31, abs=0.01)
    cols = dict(tp=[4, 4], pp=[4, 4], dp=[1, 1], recompute=[2, 2],
                sequence_parallel=[True, True], stage_plan=[0, 1])
    s = score(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))
    assert s.step_time_s[0] == s.step_time_s[1]
    assert s.peak_memory_bytes[0] == s.peak_memory_bytes[1]


def test_article_case_prints_the_plan_and_its_imbalance():
    from costmodel.specs import ParallelConfig
    from optimizer.output.diagnose import diagnose

    p = resolve_problem(model="65b", gpus=16, global_batch_size=4)
    c = ParallelConfig(tp=4, pp=4, dp=1, schedule="gpipe")
    assert plan_layers_of(p, c) == (20, 20, 20, False)
    got = [f.message for f in diagnose(p, c, {"stage_imbalance": 1.01, "step_time_s": 1.0,
                                            "time_breakdown_s": {"compute": 1.0},
                                            "bubble_share": 0.0})
           if f.kind == "stage_plan"]
    assert got and "already balanced" in got[0] and "0.31 layers' worth" in got[0]
    assert "1.0% above the mean" in got[0]


L8 = ModelSpec("l8", 32, 4096, 32, 14336, 128256, num_kv_heads=8, gated_mlp=True)


def test_balanced_plan_found_for_a_large_vocabulary():
    # Llama-3-8B-like: 128k vocabulary, h 4096: the head is ~1.5 layers; on pp 4 the
    # balanced plan takes a layer off the last stage (9, 8, 8, 7): the slowest stage and the
    # step get shorter, the first stage holds more
    assert head_share(L8, 8192) > 1.0
    f, mid, la, differs = balanced_layers(32, np.array([4]), head_share(L8, 8192))
    assert differs[0] and la[0] == 7
    q = resolve_problem(model=L8, gpus=8, gpu="h100-sxm-80gb", seq_length=8192,
                        global_batch_size=64)
    b = ConfigBatch.from_columns(tp=[2, 2], pp=[4, 4], dp=[1, 1], sequence_parallel=[True] * 2,
                                 stage_plan=[0, 1])
    ph = run_phases(q.model, q.cluster, q.training, b)
    assert [ph.plan.stage_layers(i)[1] for i in range(4)] == [9, 8, 8, 7]
    s = ph.scores
    assert s.step_time_s[1] < 0.97 * s.step_time_s[0]
    assert s.stage_imbalance[1] < s.stage_imbalance[0]
    assert s.peak_memory_bytes[1] > s.peak_memory_bytes[0]


def test_zero_bubble_ratio_at_known_points():
    # T_F = T_B = T_W: ZB-H1's bubble is a third of 1F1B's (ZB README "ZB1P: B/3")
    assert zero_bubble_ratio(1.0, 1.0, 1.0) == pytest.approx(1 / 3)
    # T_W = 0: no gain
    assert zero_bubble_ratio(1.0, 2.0, 0.0) == pytest.approx(1.0)
    t = pipeline_timeline(np.array([3.0]), np.array([12.0]), np.array([8.0]), np.array([3]),
                          np.array([1.0]), zb_ratio=np.array([1 / 3]))
    assert t.bubble_s[0] == pytest.approx((12.0 - 3.0) / 3)


def test_zb_h1_scores_between_1f1b_and_no_bubble():
    p = resolve_problem(model="65b", gpus=16, global_batch_size=64)
    cols = dict(tp=[4, 4], pp=[4, 4], dp=[1, 1], recompute=[2, 2],
                sequence_parallel=[True, True], schedule=[1, 3])
    ph = run_phases(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))
    b = ph.timeline.bubble_s
    assert 0 < b[1] < b[0]
    # same steady state and the same memory as 1F1B (p micro-batches on the first stage)
    assert ph.timeline.steady_s[0] == ph.timeline.steady_s[1]
    assert ph.memory.peak_bytes[0] == ph.memory.peak_bytes[1]


def test_uneven_interleaved_405b_is_scored():
    from search_spaces.rules import Context, explain

    m = ModelSpec("l405", 126, 16384, 128, 53248, 128256, num_kv_heads=8, gated_mlp=True)
    p = resolve_problem(model=m, gpus=16384, gpu="h100-sxm-80gb", seq_length=8192,
                        global_batch_size=2048)
    ctx = Context(p.model, p.cluster, p.training)
    cfg = dict(tp=8, pp=16, dp=128, micro_batch_size=1, schedule="interleaved",
               virtual_stages=8, recompute="none", sequence_parallel=True, zero_stage=1)
    assert explain(ctx, cfg) == []
    cols = {k: [v] for k, v in cfg.items()}
    cols["schedule"], cols["recompute"] = [2], [0]
    s = score(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))
    one = dict(cols, schedule=[1], virtual_stages=[1])
    s1 = score(p.model, p.cluster, p.training, ConfigBatch.from_columns(**one))
    assert np.isfinite(s.step_time_s[0]) and s.bubble_share[0] < s1.bubble_share[0]


def test_v_schedules_bubble_at_known_points():
    # T_F = T_B = T_W: ZB-V has no bubble (ZB README "ZBV 0"); DualPipeV's
    # (PP/2 - 1)(F&B + B - 3W) on 2p chunk-stages is a third of 1F1B's
    assert zero_bubble_ratio(1.0, 1.0, 1.0, 4) == pytest.approx(0.0)
    assert zero_bubble_ratio(1.0, 1.0, 1.0, 5) == pytest.approx(1 / 3)
    assert zero_bubble_ratio(1.0, 1.0, 1.0, 1) == 1.0


def test_v_schedules_scored_with_loss_on_rank_0():
    p = resolve_problem(model="65b", gpus=16, global_batch_size=64)
    cols = dict(tp=[4] * 3, pp=[4] * 3, dp=[1] * 3, recompute=[2] * 3,
                sequence_parallel=[True] * 3, schedule=[1, 4, 5])
    ph = run_phases(p.model, p.cluster, p.training, ConfigBatch.from_columns(**cols))
    b = ph.timeline.bubble_s
    assert b[1] < b[0] and b[2] < b[0]
    first, last, _ = ph.plan.groups
    assert list(first.head) == [False, True, True] and list(last.head) == [True, False, False]
    # twice the transfers of 1F1B (two chunks per rank)
    assert ph.pipeline.middle_s[1] == pytest.approx(2 * ph.pipeline.middle_s[0])
    from search_spaces.rules import Context, explain

    ctx = Context(p.model, p.cluster, p.training)
    assert explain(ctx, dict(tp=4, pp=4, schedule="dualpipev")) == []
    few = Context(p.model, p.cluster, resolve_problem(model="65b", gpus=16,
                                                      global_batch_size=4).training)
    assert "v_schedule_chunks" in {n for n, _ in explain(few, dict(tp=4, pp=4,
                                                                   schedule="dualpipev"))}


def _parse_layout(text):
    """Megatron-Core's PipelineParallelLayerLayout.parse_str_to_list, without torch."""
    import re

    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return [list(s) for s in text.split("|")]


@pytest.mark.parametrize("split", [(7, 8, 7, 16, 8), (7, 8, 7, 16, 4), (20, 20, 20, 4, 2),
                                   (27, 27, 26, 3, 2), (9, 10, 9, 8, 3), (5, 5, 5, 2, 5)])
def test_pipeline_layout_places_every_layer(split):
    from costmodel.schedule import pipeline_layout

    first, mid, last, pp, v = split
    stages = _parse_layout(pipeline_layout(*split))
    assert len(stages) == pp * v
    flat = sum(stages, [])
    assert flat[0] == "E" and flat[-1] == "L" and flat.count("E") == flat.count("L") == 1
    per_rank = [sum(stages[a * pp + b].count("t") for a in range(v)) for b in range(pp)]
    assert per_rank == [first] + [mid] * (pp - 2) + [last]


def test_launch_flags_for_plans_and_schedules():
    from costmodel.specs import ParallelConfig
    from optimizer.launch.flags import launch_warnings, megatron_args, torchtitan_args

    m = ModelSpec("l405", 126, 16384, 128, 53248, 128256, num_kv_heads=8, gated_mlp=True)
    p = resolve_problem(model=m, gpus=16384, gpu="h100-sxm-80gb", seq_length=8192,
                        global_batch_size=2048)
    c = ParallelConfig(tp=8, pp=16, dp=128, schedule="interleaved", virtual_stages=8,
                       sequence_parallel=True)
    a = megatron_args(p.model, p.cluster, p.training, c)
    lay = a[a.index("--pipeline-model-parallel-layout") + 1]
    assert lay == "E|(t|)*126L" and "--num-layers-per-virtual-pipeline-stage" not in a
    assert "--decoder-first-pipeline-num-layers" not in a  # the layout excludes them
    t = torchtitan_args(p.model, p.cluster, p.training, c)
    assert t[t.index("--parallelism.pipeline_parallel_schedule") + 1] == "Interleaved1F1B"
    assert t[t.index("--parallelism.pipeline_parallel_layers_per_stage") + 1] == "1"
    assert t[t.index("--parallelism.pipeline_parallel_first_stage_less_layers") + 1] == "1"
    for sched, name in (("zb-v", "ZBVZeroBubble"), ("dualpipev", "DualPipeV")):
        cv = ParallelConfig(tp=8, pp=16, dp=128, schedule=sched)
        t = torchtitan_args(p.model, p.cluster, p.training, cv)
        assert t[t.index("--parallelism.pipeline_parallel_schedule") + 1] == name
        assert any("Megatron-LM has no" in w for w in launch_warnings(
            cv, model=p.model, cluster=p.cluster, training=p.training))
    # a balanced plan that moves layers: Megatron's first/last flags with its counts
    q = resolve_problem(model=L8, gpus=8, gpu="h100-sxm-80gb", seq_length=8192,
                        global_batch_size=64)
    cb = ParallelConfig(tp=2, pp=4, dp=1, stage_plan="balanced", sequence_parallel=True)
    a = megatron_args(q.model, q.cluster, q.training, cb)
    f, mid, la, moves = plan_layers_of(q, cb)
    assert moves and a[a.index("--decoder-last-pipeline-num-layers") + 1] == str(la)
    assert a[a.index("--decoder-first-pipeline-num-layers") + 1] == str(f)
