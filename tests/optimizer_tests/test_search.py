"""The Optuna search path: encoding, determinism, caching, constraints, budget, samplers."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from optimizer import search
from optimizer.api import optimize, resolve_problem
from optimizer.search import optuna_engine as osr
from optimizer.search.pareto import pareto_mask
from search_spaces.enumerate import enumerate_valid
from search_spaces.rules import Context, check


@pytest.fixture(scope="module")
def p65():
    problem = resolve_problem(model="65b", gpus=16)
    ctx = Context(problem.model, problem.cluster, problem.training)
    sp = search.problem_space(problem, None)
    return problem, ctx, sp, enumerate_valid(ctx, sp)


@pytest.fixture
def memstore(monkeypatch):
    """Every storage string opens one shared in-memory storage (no fsync per journal line:
    the journal itself is tested in test_storage.py); a path still counts as a journal, so
    the multi-process code paths (owner tags, budget checks) run."""
    from optuna.storages import InMemoryStorage

    store = InMemoryStorage()
    monkeypatch.setattr(osr.st, "open_storage", lambda spec: store)
    return store


def _load(store, name):
    return optuna.load_study(study_name=name, storage=store)


def _run(problem, ctx, sp, valid, **kw):
    args = {"valid_count": len(valid), "sampler": "tpe", "requested": "tpe", "trials": 64,
            "seed": 0, "batch_size": 16, "storage": None, "study_name": None,
            "progress": False, "valid": valid}
    args.update(kw)
    return osr.run(problem, ctx, sp, **args)


def _rows(outcome):
    return [c.as_dict() for c in outcome.batch.configs()]


# ---------------------------------------------------------------------------------------------
# encoding
def test_every_valid_configuration_has_params_and_decodes_back(p65):
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    for row in range(len(valid)):
        assert enc.decode(enc.params_for(row)) == row
    # the layout list is exactly the structurally valid (tp, pp) pairs, as tokens
    pairs = sorted(set(zip(valid.tp.tolist(), valid.pp.tolist(), strict=True)))
    assert sorted(enc.tokens["layout"]) == sorted(f"tp{t}_pp{p}" for t, p in pairs)
    # 65b on 16 GPUs: tp in {1,2,4,8} (heads 64, node of 8), tp*pp | 16, pp | 80 layers:
    # tp1: pp 1,2,4,8,16; tp2: 1,2,4,8; tp4: 1,2,4; tp8: 1,2 -> 14 layouts
    assert len(enc.tokens["layout"]) == 14


def test_random_walks_only_reach_valid_configurations(p65):
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    rng = np.random.default_rng(1)
    seen_choices: dict[str, tuple] = {}

    def choose(name, choices):
        # one fixed choice list per parameter name (Optuna's rule, ecosystem 1.5)
        assert seen_choices.setdefault(name, choices) == choices
        return choices[rng.integers(len(choices))]

    rows = [enc.walk(choose) for _ in range(400)]
    assert check(ctx, valid.take(np.array(rows))).all()
    assert "layout" in seen_choices and "micro_batch_size" in seen_choices
    # a parameter restricted by earlier choices gets its own name, e.g. no interleaving at pp=1
    assert any(n.startswith("schedule[") for n in seen_choices) or "schedule" in seen_choices


def test_param_name_spells_a_restricted_list():
    assert osr.param_name("zero_stage", (0, 1), (0, 1)) == "zero_stage"
    assert osr.param_name("schedule", ("1f1b", "interleaved_v2"),
                          ("1f1b", "interleaved_v2", "interleaved_v4")) == \
        "schedule[1f1b,interleaved_v2]"
    assert osr.param_name("sequence_parallel", (True,), (False, True)) == \
        "sequence_parallel[true]"


# ---------------------------------------------------------------------------------------------
# determinism, samplers
def test_seeded_tpe_twice_gives_the_same_front():
    a = optimize("65b", 16, sampler="tpe", trials=200, seed=0)
    b = optimize("65b", 16, sampler="tpe", trials=200, seed=0)
    da, db = a.to_dict(), b.to_dict()
    assert da["pareto_front"] == db["pareto_front"]
    assert da["stats"]["configs_evaluated"] == db["stats"]["configs_evaluated"]
    assert len(da["pareto_front"]) >= 1


def test_another_seed_explores_differently(p65):
    problem, ctx, sp, valid = p65
    a = _run(problem, ctx, sp, valid, seed=1)
    b = _run(problem, ctx, sp, valid, seed=2)
    assert _rows(a) != _rows(b)  # the determinism test above could fail


@pytest.mark.parametrize("sampler", ["nsga2", "random"])
def test_other_samplers_run_and_fill_the_budget(p65, sampler, memstore):
    problem, ctx, sp, valid = p65
    out = _run(problem, ctx, sp, valid, sampler=sampler, requested=sampler, trials=60,
               storage="s.journal", study_name="s")
    study = _load(memstore, "s")
    assert osr.st.count_finished(study) == 60
    assert out.search_info["sampler"] == sampler
    assert out.search_info["sampler_settings"]["class"] == {
        "nsga2": "NSGAIISampler", "random": "RandomSampler"}[sampler]
    assert 1 <= out.evaluated <= 60 + out.search_info["final_polish_configs"]
    assert check(ctx, out.batch).all()


def test_search_info_records_the_run(p65):
    problem, ctx, sp, valid = p65
    out = _run(problem, ctx, sp, valid, storage=None)
    info = out.search_info
    for key in ("sampler", "requested_sampler", "seed", "trials", "batch_size", "study_name",
                "storage", "optuna_version", "sampler_settings"):
        assert key in info
    assert info["optuna_version"] == optuna.__version__
    assert info["sampler_settings"]["multivariate"] is True
    assert info["sampler_settings"]["group"] is True
    assert info["sampler_settings"]["constant_liar"] is True


def test_storage_password_is_redacted_in_search_info(p65, memstore, monkeypatch):
    problem, ctx, sp, valid = p65
    monkeypatch.setattr(osr.st, "storage_kind", lambda spec: "memory")
    out = _run(problem, ctx, sp, valid, storage="postgresql://u:hunter2@db/x", trials=8)
    assert out.search_info["storage"] == "postgresql://u:***@db/x"


# ---------------------------------------------------------------------------------------------
# caching, constraints, the front
def test_repeated_configurations_are_not_rescored(p65, monkeypatch, memstore):
    problem, ctx, sp, valid = p65
    scored_sizes = []
    real = osr.score_batch

    def counting(problem, batch, jobs=1):
        scored_sizes.append(len(batch))
        return real(problem, batch, jobs)

    monkeypatch.setattr(osr, "score_batch", counting)
    out = _run(problem, ctx, sp, valid, trials=150, storage="c.journal", study_name="c")
    study = _load(memstore, "c")
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    enc = osr.Encoding.build(valid, sp)
    distinct = {enc.decode(t.params) for t in complete
                if t.user_attrs.get("origin") != osr.FINAL_POLISH}
    counted = [t for t in complete if osr.st.is_counted(t)]
    assert len(counted) == 150 == len({enc.decode(t.params) for t in counted})
    # TPE repeated itself in this discrete space: not counted...
    assert sum(t.user_attrs.get("origin") != osr.FINAL_POLISH for t in complete) > 150
    # ...and nothing was rescored (the final polish scores configurations not tried yet)
    final = out.search_info["final_polish_configs"]
    assert sum(scored_sizes) == len(distinct) + final == out.evaluated
    # the last 40% of the budget is the local search around the front, as enqueued trials
    polish = [t for t in complete if t.user_attrs.get("origin") == "polish"]
    assert polish and min(sum(osr.st.is_counted(u) for u in complete if u.number < t.number)
                          for t in polish) >= 150 - round(osr.POLISH_FRACTION["tpe"] * 150)
    # a repeated trial was still told its configuration's values
    by_row: dict[int, tuple] = {}
    for t in complete:
        by_row.setdefault(enc.decode(t.params), tuple(t.values))
        assert tuple(t.values) == by_row[enc.decode(t.params)]


def test_polish_rounds_are_small_and_the_in_budget_configurations_come_first(p65, monkeypatch,
                                                                           memstore):
    """The polish asks at most POLISH_BATCH trials a round whatever batch_size (more rounds
    for the local search); search_info.search_configs counts the configurations of the
    counted search, which lead the outcome, the final polish's follow."""
    problem, ctx, sp, valid = p65
    asked: list[int] = []
    real = osr.polish_candidates

    def spy(enc, scored, limit, k, exclude=frozenset()):
        asked.append(k)
        return real(enc, scored, limit, k, exclude)

    monkeypatch.setattr(osr, "polish_candidates", spy)
    out = _run(problem, ctx, sp, valid, trials=120, batch_size=32, storage="q.journal",
               study_name="q")
    assert asked and max(asked) <= osr.POLISH_BATCH < 32
    polish_trials = round(osr.POLISH_FRACTION["tpe"] * 120)
    assert len(asked) >= polish_trials // osr.POLISH_BATCH
    info = out.search_info
    n = info["search_configs"]
    assert 0 < n <= 120 < out.evaluated  # the final polish added configurations
    assert out.evaluated - n <= info["final_polish_configs"]
    enc = osr.Encoding.build(valid, sp)
    searched = osr._study_rows(_load(memstore, "q"), enc)
    tried = {enc.decode(t.params) for t in _load(memstore, "q").get_trials()
             if t.user_attrs.get("origin") != osr.FINAL_POLISH}
    first = [c.as_dict() for c in out.batch.take(np.arange(n)).configs()]
    assert first == [c.as_dict() for c in valid.take(np.array(
        [r for r in searched if r in tried], dtype=np.int64)).configs()]


def test_constraints_are_set_on_every_told_trial(p65, memstore):
    problem, ctx, sp, valid = p65
    _run(problem, ctx, sp, valid, trials=40, storage="k.journal", study_name="k")
    study = _load(memstore, "k")
    limit = problem.memory_limit_bytes
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    # 40 counted trials; a repeat TPE proposes is told too (not counted), constraints and all
    assert sum(osr.st.is_counted(t) for t in complete) == 40 <= len(complete)
    for t in complete:
        tokens, peak = t.values
        # memory_over_limit = (peak - limit) / limit, feasible iff <= 0
        # Optuna 5's form (memory_over_limit) and optuna-dashboard's list (read as "0")
        assert t.constraints == {"memory_over_limit": pytest.approx((peak - limit) / limit),
                                 "0": pytest.approx((peak - limit) / limit)}
        assert t.system_attrs["constraints"] == [pytest.approx((peak - limit) / limit)]
        assert tokens > 0
    assert study.metric_names == ["tokens_per_s", "peak_memory_bytes"]
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    # 65b on 16 x A100-80GB at a 72 GiB limit: most layouts do not fit
    assert any(c > 0 for t in complete for c in t.constraints.values())


def test_front_points_are_feasible_and_non_dominated():
    res = optimize("13b", 32, sampler="tpe", trials=100, seed=0, batch_size=20)
    limit = res.problem.memory_limit_bytes
    pts = [(c.metrics["tokens_per_s"], c.metrics["peak_memory_bytes"]) for c in res.pareto_front]
    assert pts
    for _tps, mem in pts:
        assert mem <= limit
    for i, (t1, m1) in enumerate(pts):
        for j, (t2, m2) in enumerate(pts):
            if i != j:
                assert not (t2 >= t1 and m2 <= m1 and (t2 > t1 or m2 < m1))


def test_front_is_exact_over_everything_the_search_scored(p65):
    problem, ctx, sp, valid = p65
    out = _run(problem, ctx, sp, valid, trials=120, seed=3)
    s = out.scores
    feasible = np.flatnonzero(s.peak_memory_bytes <= problem.memory_limit_bytes)
    assert len(np.unique(np.stack([out.batch.tp, out.batch.pp, out.batch.micro_batch_size,
                                   out.batch.recompute, out.batch.sequence_parallel,
                                   out.batch.zero_stage, out.batch.schedule,
                                   out.batch.virtual_stages, out.batch.stage_plan,
                                   out.batch.recompute_num_layers, out.batch.recompute_modules,
                                   out.batch.cp, out.batch.precision_aware_optimizer,
                                   out.batch.cpu_offloading_num_layers]), axis=1).T
               ) == len(out.batch)
    front = feasible[pareto_mask(s.tokens_per_s[feasible], s.peak_memory_bytes[feasible])]
    for i in feasible:  # every feasible scored point is weakly dominated by the front
        assert ((s.tokens_per_s[front] >= s.tokens_per_s[i])
                & (s.peak_memory_bytes[front] <= s.peak_memory_bytes[i])).any()


def test_infeasible_everywhere_still_tells_values(memstore):
    # 65b on 16 GPUs with a 20 GiB limit: nothing fits, every trial infeasible but told
    problem = resolve_problem(model="65b", gpus=16, memory_limit_gib=20)
    ctx = Context(problem.model, problem.cluster, problem.training)
    sp = search.problem_space(problem, None)
    valid = enumerate_valid(ctx, sp)
    out = _run(problem, ctx, sp, valid, trials=32, storage="i.journal", study_name="i")
    assert (out.scores.peak_memory_bytes > problem.memory_limit_bytes).all()
    study = _load(memstore, "i")
    assert study.best_trials == []  # Optuna's answer (#6242): the optimizer reports exit 3
    assert osr.st.count_finished(study) == 32


# ---------------------------------------------------------------------------------------------
# budget
def test_budget_is_exact_with_a_partial_last_batch(p65, memstore):
    problem, ctx, sp, valid = p65
    _run(problem, ctx, sp, valid, trials=50, batch_size=32, storage="b.journal",
         study_name="b")
    study = _load(memstore, "b")
    states = [t.state for t in study.get_trials()
              if t.user_attrs.get("origin") != osr.FINAL_POLISH]  # uncounted, added after
    assert states.count(optuna.trial.TrialState.COMPLETE) == 50
    assert len(states) == 50


def test_trials_beyond_the_budget_are_kept_apart_not_failed(p65, memstore):
    # another worker already holds 8 of a 10-trial budget; this one asked 4: keep 2, and 2
    # over budget (told uncounted by the loop, never left FAIL)
    problem, ctx, sp, valid = p65
    store = memstore
    study = osr.st.open_study(store, "w", optuna.samplers.RandomSampler(seed=0), {})
    for _ in range(8):
        t = study.ask()
        t.suggest_categorical("x", [1, 2])
        study.tell(t, [1.0, 1.0])
    mine = [(study.ask(), row) for row in range(4)]
    kept, over = osr._within_budget(study, mine, trials=10)
    assert [row for _, row in kept] == [0, 1] and [row for _, row in over] == [2, 3]
    states = {t.number: t.state for t in study.get_trials()}
    assert all(states[n] == optuna.trial.TrialState.RUNNING for n in (8, 9, 10, 11))


def test_polish_candidates_are_unscored_neighbours_of_the_front(p65):
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    scored = osr._Scored.empty()
    scored.add(problem, valid, list(range(0, len(valid), 7)))
    cands = osr.polish_candidates(enc, scored, problem.memory_limit_bytes, 12)
    assert len(cands) == 12 and len(set(cands)) == 12
    assert not set(cands) & set(scored.position)
    codes = np.stack([enc.codes[p] for p in osr.PARAM_ORDER])
    for r in cands:  # each differs from some scored point in one or two parameters
        d = (codes[:, scored.rows] != codes[:, [r]]).sum(axis=0)
        assert d.min() in (1, 2)


def test_polish_places_follow_the_hypervolume_contributions():
    # highest averages: weights 3 and 1 over 8 places give 6 and 2; a dry list drops out and
    # its share goes to the others; rows already taken (or dealt) are skipped
    assert osr._deal([list(range(10)), list(range(10, 20))], [3.0, 1.0], 8, set()) \
        == [0, 1, 2, 10, 3, 4, 5, 11]
    assert osr._deal([[0], list(range(10, 20))], [5.0, 1.0], 3, set()) == [0, 10, 11]
    assert osr._deal([[0, 1, 2], [1, 2, 3]], [1.0, 1.0], 4, {0}) == [1, 2, 3]
    assert osr._deal([[], [7]], [1.0, 0.0], 5, set()) == [7]


def test_polish_places_follow_the_hypervolume_contributions_of_the_front(p65, monkeypatch):
    """The front point that alone dominates most of the hypervolume gets at least its share
    of the places (the highest-averages rule meets the lower quota); dealt round-robin, each
    of the 5 front points got 4 of 20. (The surrogate's share is off here.)"""
    from optimizer.search.pareto import hypervolume_2d

    monkeypatch.setattr(osr, "SURROGATE_SHARE", 0.0)
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    scored = osr._Scored.empty()
    scored.add(problem, valid, list(range(0, len(valid), 11)))
    limit = problem.memory_limit_bytes
    tps, mem = np.asarray(scored.tokens), np.asarray(scored.peaks)
    ok = np.flatnonzero(mem <= limit)
    front = ok[pareto_mask(tps[ok], mem[ok])]
    total = hypervolume_2d(tps[front], mem[front], limit)
    gain = np.array([total - hypervolume_2d(np.delete(tps[front], j), np.delete(mem[front], j),
                                            limit) for j in range(len(front))])
    top = scored.rows[int(front[np.argmax(gain)])]
    k = 20
    quota = int(k * gain.max() / gain.sum())
    assert quota > k / len(front) + 4  # the premise: one point dominates the front
    cands = osr.polish_candidates(enc, scored, limit, k)
    codes = np.stack([enc.codes[p] for p in osr.PARAM_ORDER])
    near_top = sum(int((codes[:, r] != codes[:, top]).sum()) <= 2 for r in cands)
    assert len(cands) == k and near_top >= quota


def test_surrogate_picks_the_best_neighbour_of_an_additive_world(p65):
    """Where log throughput and log memory are exactly additive over the parameter values,
    the surrogate's first pick is the candidate that truly adds the most hypervolume (among
    ~1000, most of them gaining nothing), and a candidate predicted to gain nothing is never
    picked."""
    from optimizer.search.pareto import hypervolume_2d

    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    x = osr._design(enc, np.arange(len(valid)))
    rng = np.random.default_rng(0)
    true_tps = np.exp(10 + x @ rng.normal(0, 0.3, x.shape[1]))
    true_mem = np.exp(24 + x @ rng.normal(0, 0.3, x.shape[1]))
    limit = float(np.median(true_mem))
    rows = list(range(0, len(valid), 5))
    scored = osr._Scored(rows, [], {r: i for i, r in enumerate(rows)},
                         [float(true_tps[r]) for r in rows], [float(true_mem[r]) for r in rows])
    cands = {r: 1.0 for r in range(1, len(valid), 5)}
    ok = [r for r in rows if true_mem[r] <= limit]
    base = hypervolume_2d(true_tps[ok], true_mem[ok], limit)
    gain = {r: hypervolume_2d(true_tps[[*ok, r]], true_mem[[*ok, r]], limit) - base
            for r in cands}
    picks = osr._surrogate_picks(enc, scored, limit, cands, 3)
    assert picks[0] == max(gain, key=gain.get) and gain[picks[0]] > 0
    assert len(set(picks)) == 3 and all(gain[r] > 0 for r in picks)
    assert sum(g > 0 for g in gain.values()) < len(cands) / 2
    assert osr._surrogate_picks(enc, scored, 0.0, cands, 3) == []  # nothing fits: no gain


def test_chosen_marks_the_parameters_walk_suggests(p65):
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    for row in range(0, len(valid), 97):
        asked = set()

        def pick(name, choices, row=row, asked=asked):
            p = name.split("[", 1)[0]
            asked.add(p)
            return enc.tokens[p][int(enc.codes[p][row])]

        assert enc.walk(pick) == row
        assert [p in asked for p in osr.PARAM_ORDER] == list(enc.chosen[:, row])


def test_a_parameter_fixed_at_one_end_is_no_step(p65):
    """dp = 1 fixes ZeRO at 0: a layout move that opens ZeRO-1 is one step, like ZeRO-0."""
    problem, ctx, sp, valid = p65
    enc = osr.Encoding.build(valid, sp)
    z = osr.PARAM_ORDER.index("zero_stage")
    codes = np.stack([enc.codes[p] for p in osr.PARAM_ORDER])
    origin = next(r for r in range(len(valid)) if valid.dp[r] == 1 and not enc.chosen[z, r])
    differ, changed, dist, first = enc.steps(origin)
    others = np.ones(len(codes), dtype=bool)
    others[[0, z]] = False  # the layout and ZeRO may differ, nothing else
    same_rest = (codes[others] == codes[others][:, [origin]]).all(axis=0)
    moved = np.flatnonzero(same_rest & (codes[0] != codes[0, origin])
                           & (valid.zero_stage > 0) & (dist == 1))
    assert len(moved) > 0
    assert (differ[moved] == 2).all() and (changed[moved] == 1).all()
    assert (first[moved] == 0).all()  # the layout


def test_unknown_sampler_is_an_input_error(p65):
    problem, ctx, sp, valid = p65
    from costmodel.errors import InputError

    with pytest.raises(InputError) as e:
        _run(problem, ctx, sp, valid, sampler="cmaes")
    assert e.value.field == "sampler"


def test_progress_changes_nothing_but_stderr(p65, capsys):
    problem, ctx, sp, valid = p65
    quiet = _run(problem, ctx, sp, valid, trials=40, progress=False)
    assert capsys.readouterr().err == ""  # no progress: nothing on stderr
    loud = _run(problem, ctx, sp, valid, trials=40, progress=True)
    assert capsys.readouterr().out == ""  # progress never goes to stdout
    assert _rows(quiet) == _rows(loud)


def test_cli_json_document_of_an_optuna_search():
    from conftest import run_cli_json

    doc = run_cli_json(["--model", "7b", "--gpus", "8", "--sampler", "tpe", "--trials", "40",
                        "--seed", "3", "--batch-size", "8"], "front")
    search_doc = doc["inputs"]["search"]
    assert search_doc["sampler"] == search_doc["requested_sampler"] == "tpe"
    assert (search_doc["seed"], search_doc["trials"], search_doc["batch_size"]) == (3, 40, 8)
    assert search_doc["storage"] is None and search_doc["finished_trials"] == 40
    # the 40 trials, and the final polish's local optimum around their front
    assert doc["stats"]["configs_evaluated"] <= 40 + search_doc["final_polish_configs"]


def test_seeded_tpe_from_the_command_line_twice_gives_identical_fronts():
    # two separate processes, fresh in-memory storage each: the pareto_front JSON is identical
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "optimizer.cli", "--model", "13b", "--gpus", "32",
           "--sampler", "tpe", "--trials", "60", "--seed", "7", "--json"]
    fronts = []
    for _ in range(2):
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        fronts.append(json.loads(res.stdout)["pareto_front"])
    assert fronts[0] == fronts[1]
    assert len(fronts[0]) >= 1


@pytest.mark.parametrize("space", [{"nccl_algo": ("ring", "allreduce:tree;ring")},
                                   {"nccl_proto": ("allreduce:ll;simple",)}])
def test_nccl_settings_are_checked_by_the_scoring_parser(p65, space):
    """The space and ParallelConfig check NCCL values with the grammar scoring reads
    (costmodel.nccl_grammar), naming their own field."""
    from costmodel.errors import InputError
    from costmodel.specs import ParallelConfig
    from search_spaces.space import SearchSpace

    problem, _, base, _ = p65
    (dim,) = space
    with pytest.raises(InputError, match="names no collective") as e:
        search.problem_space(problem, space)
    assert e.value.field == f"space.{dim}"
    with pytest.raises(InputError) as e:
        SearchSpace(**{**base.as_dict(), **space})
    assert e.value.field == f"space.{dim}"
    with pytest.raises(InputError, match="names no collective") as e:
        ParallelConfig(**{dim: space[dim][-1]})
    assert e.value.field == f"parallel.{dim}"
