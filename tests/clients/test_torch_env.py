"""The bundle's environment as PyTorch reads it: a tf32 run (scored at the TF32 peak) must
get TF32 matmuls, which PyTorch leaves off by default and Megatron/torchtitan never switch on."""

from __future__ import annotations

import os
import subprocess
import sys

import realclients as rc
from corpus import bundles

_PROBE = "import torch; print(torch.backends.cuda.matmul.allow_tf32)"


def _allow_tf32(env: dict[str, str]) -> bool:
    full = {k: v for k, v in os.environ.items() if k != "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"}
    r = subprocess.run([sys.executable, "-c", _PROBE], env={**full, **env},
                       capture_output=True, text=True, timeout=300, check=True)
    return r.stdout.strip().splitlines()[-1] == "True"


def test_tf32_runs_get_tf32_matmuls_and_others_do_not():
    rc.require("torch")
    cases = dict((s.name, r) for s, r in bundles())
    assert _allow_tf32(dict(cases["llama2-70b-tf32"].candidate.launch["env"]))
    assert not _allow_tf32(dict(cases["llama2-7b-fp32"].candidate.launch["env"]))
