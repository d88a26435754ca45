"""The whole bad-input corpus of tests/hostile_tests/test_hostile_corpus.py (CI runs a third of it), tests/hostile_tests/.

    PYTHONPATH=. python benchmarks/hostile_corpus.py

Prints the number of cases per entry point, and the passed/failed counts of pytest.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path[:0] = [str(ROOT / "tests" / "hostile_tests"), str(ROOT / "tests"), str(ROOT)]
    import test_hostile_corpus as corpus

    kinds = collections.Counter(c.id.split("-")[0] for c in corpus.CASES)
    print(f"{len(corpus.CASES)} cases: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    env = {**os.environ, "PARAPLAN_FULL_CORPUS": "1", "PYTHONPATH": str(ROOT)}
    test = ROOT / "tests" / "hostile_tests" / "test_hostile_corpus.py"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(test)], env=env, cwd=ROOT)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
