"""Build the golden characterisation fixture of the cost model (tests/golden/golden.npz).

Run only in a commit that bumps ``costmodel.COST_MODEL_VERSION`` and says why the numbers
moved: ``python tests/golden/make_golden.py``. The fixture stores, for each problem, the
configuration columns it scored and every metric and breakdown term of ``score``;
``tests/test_golden.py`` re-scores the same columns and compares at a relative tolerance of
1e-12.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from golden.problems import PROBLEMS, build_batch, flatten_scores  # noqa: E402


def main() -> None:
    from costmodel import COST_MODEL_VERSION
    from costmodel.model import score

    arrays: dict[str, np.ndarray] = {"cost_model_version": np.array(COST_MODEL_VERSION)}
    for name, problem, batch, tables in build_batch():
        scores = score(problem.model, problem.cluster, problem.training, batch)
        for col, values in batch_columns(batch).items():
            arrays[f"{name}/batch/{col}"] = values
        arrays[f"{name}/tables/nccl_algo"] = np.array(tables[0])
        arrays[f"{name}/tables/nccl_proto"] = np.array(tables[1])
        for key, values in flatten_scores(scores).items():
            arrays[f"{name}/scores/{key}"] = values
        print(f"{name}: {len(batch)} configurations")
    out = Path(__file__).with_name("golden.npz")
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {len(PROBLEMS)} problems)")


def batch_columns(batch) -> dict[str, np.ndarray]:
    from dataclasses import fields

    return {f.name: getattr(batch, f.name) for f in fields(batch)
            if not f.name.endswith("_table")}


if __name__ == "__main__":
    main()
