"""Throughput of the vectorised cost model: configurations scored per second on one core.

Random valid configurations (from ``enumerate_valid``, drawn with replacement to size) are
scored in one call of :func:`costmodel.model.score` for 100k and 1M configurations, for two
spaces: 65b on 16 GPUs, default space (1245 distinct configurations), and 175b on 1024 GPUs
with a wide space (all ZeRO stages, NCCL algorithms and protocols, four precisions, more
virtual stages: ~150k distinct configurations). The model computes per-layer terms once per
distinct layer shape, so the narrow space flatters it; the wide one is closer to a worst
case. Run with ``taskset -c 0 python benchmarks/bench_score.py`` (the script caps the
BLAS/OpenMP thread pools at one). Not a timed test: it prints numbers.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.model import score  # noqa: E402
from optimizer.api import resolve_problem  # noqa: E402
from optimizer.search import problem_space  # noqa: E402
from search_spaces.enumerate import enumerate_valid  # noqa: E402
from search_spaces.rules import Context  # noqa: E402

WIDE_SPACE = {"zero_stage": [0, 1, 2, 3], "precision": ["bf16", "fp16", "fp32", "tf32"],
              "nccl_algo": ["auto", "ring", "tree", "nvls", "nvlstree", "collnet", "pat"],
              "nccl_proto": ["auto", "simple", "ll", "ll128"],
              "virtual_stages": [1, 2, 3, 4, 6, 8]}
DATASETS = (("65b", 16, None, "default space"), ("175b", 1024, WIDE_SPACE, "wide space"))


def bench(model: str, gpus: int, space, label: str, sizes: tuple[int, ...], repeats: int,
          seed: int) -> None:
    problem = resolve_problem(model=model, gpus=gpus)
    ctx = Context(problem.model, problem.cluster, problem.training)
    valid = enumerate_valid(ctx, problem_space(problem, space))
    rng = np.random.default_rng(seed)
    print(f"{model} on {gpus} GPUs, {label}: {len(valid)} distinct valid configurations, "
          f"drawn with replacement; one process, BLAS threads capped at 1")
    score(problem.model, problem.cluster, problem.training, valid)  # warm caches
    for n in sizes:
        batch = valid.take(rng.integers(0, len(valid), size=n))
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            score(problem.model, problem.cluster, problem.training, batch)
            best = min(best, time.perf_counter() - t0)
        print(f"  {n:>9,} configurations: {best:7.3f} s  ->  {n / best:12,.0f} configs/s "
              f"(best of {repeats})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for model, gpus, space, label in DATASETS:
        bench(model, gpus, space, label, tuple(int(x) for x in a.sizes.split(",")), a.repeats,
              a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
