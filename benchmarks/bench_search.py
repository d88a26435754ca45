"""Search quality and speed: exhaustive front versus Optuna samplers, and CLI wall times.

For each problem (65b/16, 13b/32, 175b/128 on A100-80GB nodes, default space and limit) it
prints the hypervolume of the exact front (exhaustive enumeration) and, per sampler and seed
(one line, seeds in order, then min/mean), the ratio hypervolume(sampler's front) /
hypervolume(exact front): in budget (the counted trials) and after the final polish.
Hypervolume: :func:`optimizer.search.pareto.hypervolume_2d` over the feasible points, reference point
(throughput 0, memory = the memory limit). Target: TPE with 300 trials >= 0.99.

Then the whole-process wall time of ``optimize --model 175b --gpus 1024 --sampler exhaustive``
and of ``optimize --model 65b --gpus 16`` (subprocesses, including interpreter start-up).
Run ``python benchmarks/bench_search.py [--seeds 5] [--samplers tpe,nsga2,random]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimizer import search  # noqa: E402
from optimizer.api import resolve_problem  # noqa: E402
from optimizer.search.pareto import hypervolume_2d  # noqa: E402

PROBLEMS = (("65b", 16), ("13b", 32), ("175b", 128))
#: issue 21's speed targets: 65b/16 whole process < 1 s, the two Llama 3 405B problems < 10 s
L405 = ["--gpu", "h100-sxm-80gb"]
CLI_RUNS = (("175b", 1024, ["--sampler", "exhaustive"]), ("65b", 16, []),
            ("llama3-405b", 16384, [*L405, "--seq-length", "8192", "--global-batch-size", "2048"]),
            ("llama3-405b", 16384, [*L405, "--seq-length", "131072",
                                    "--global-batch-size", "128"]))


def hypervolume(problem, outcome, first: int | None = None) -> float:
    """Hypervolume of the outcome's feasible configurations (its first ``first`` only)."""
    s = outcome.scores
    t, m = s.tokens_per_s[:first], s.peak_memory_bytes[:first]
    return hypervolume_2d(t, m, problem.memory_limit_bytes)


def _line(label: str, ratios: list[float]) -> str:
    return (f"  {label:<22} " + " ".join(f"{r:.4f}" for r in ratios) + f"  | min "
            f"{min(ratios):.4f} mean {statistics.fmean(ratios):.4f} (>= 0.99 in "
            f"{sum(r >= 0.99 for r in ratios)}/{len(ratios)})")


def bench_quality(samplers: list[str], seeds: int, trials: int, problems=PROBLEMS) -> None:
    """Per sampler two rows of ratios: ``in budget``, the front of the counted trials alone
    (the ``trials`` trials, the in-search polish included: it spends that budget), and
    ``+ final polish``, after the final polish (optuna_engine.final_polish), which scores the
    front's one-parameter neighbours beyond the budget (``extra``: how many, per seed)."""
    print(f"hypervolume ratio vs the exhaustive front ({trials} trials, seeds 0..{seeds - 1})")
    for model, gpus in problems:
        problem = resolve_problem(model=model, gpus=gpus)
        t0 = time.perf_counter()
        exact = search.run(problem, sampler="exhaustive")
        t_exact = time.perf_counter() - t0
        hv0 = hypervolume(problem, exact)
        print(f"{model}/{gpus}: {exact.valid_space_size} valid configurations, exhaustive "
              f"hypervolume {hv0:.4e} (tokens/s x bytes) in {t_exact:.3f} s")
        for sampler in samplers:
            budget, final, extra, walls, evaluated = [], [], [], [], []
            for seed in range(seeds):
                t0 = time.perf_counter()
                out = search.run(problem, sampler=sampler, trials=trials, seed=seed)
                walls.append(time.perf_counter() - t0)
                info = out.search_info
                first = info.get("search_configs", out.evaluated)
                budget.append(hypervolume(problem, out, first) / hv0)
                final.append(hypervolume(problem, out) / hv0)
                extra.append(info.get("final_polish_configs", 0))
                evaluated.append(first)
            print(_line(f"{sampler} in budget", budget))
            if any(extra):
                print(_line(f"{sampler} + final polish", final))
                print(f"  {sampler + ' extra configs':<22} " + " ".join(f"{e:>6}" for e in extra))
            print(f"  {sampler}: distinct configs in budget {statistics.fmean(evaluated):.0f}; "
                  f"wall {statistics.fmean(walls):.2f} s/run")


def bench_cli() -> None:
    print("whole-process wall time (python -m optimizer.cli ... --json > /dev/null)")
    for model, gpus, extra in CLI_RUNS:
        args = [sys.executable, "-m", "optimizer.cli", "--model", model, "--gpus", str(gpus),
                *extra, "--json"]
        t0 = time.perf_counter()
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}: " \
            f"{done.stderr.strip()[:200]}"
        print(f"  optimize --model {model} --gpus {gpus} {' '.join(extra)}: {wall:.2f} s "
              f"({status})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samplers", default="tpe,nsga2,random")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--no-cli", action="store_true")
    p.add_argument("--no-quality", action="store_true")
    p.add_argument("--problems", default=None,
                   help="model/gpus,... (default: 65b/16,13b/32,175b/128)")
    a = p.parse_args(argv)
    problems = PROBLEMS if not a.problems else tuple(
        (m, int(g)) for m, g in (x.split("/") for x in a.problems.split(",")))
    if not a.no_quality:
        bench_quality(a.samplers.split(","), a.seeds, a.trials, problems)
    if not a.no_cli:
        bench_cli()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
