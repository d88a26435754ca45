"""The sbatch script's shell lines run by bash as Slurm runs them (``set -euo pipefail``):
the first-host line must survive a long node list (``head -n 1`` closes the pipe early,
``scontrol`` dies of SIGPIPE and pipefail turns that into exit 141)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from costmodel.loaders import load_cluster
from costmodel.models_catalog import get_model
from costmodel.specs import ParallelConfig, TrainingSpec
from optimizer.launch.scripts import slurm_script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_first_host_line_survives_a_long_node_list(tmp_path):
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 2048, "gpus_per_node": 8})
    script = slurm_script(get_model("llama3-405b"), cluster, TrainingSpec(8192, 2048),
                          ParallelConfig(tp=8, pp=16, dp=128, zero_stage=1))
    lines = script.splitlines()
    start = lines.index("set -euo pipefail")
    head = [ln for ln in lines[start:] if not ln.startswith("srun")][:4]
    assert any("MASTER_ADDR=" in ln for ln in head)
    fake = tmp_path / "scontrol"  # 2,048 real-length host names, as scontrol prints them
    fake.write_text("#!/bin/bash\nfor i in $(seq 1 2048); do "
                    "printf 'gpu-h100-rack%03d-node%04d.cluster.example.com\\n' $((i/32)) $i; "
                    "done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    body = "\n".join([*head, 'echo "$MASTER_ADDR"'])
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}",
           "SLURM_JOB_NODELIST": "gpu-[0001-2048]"}
    r = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.strip() == "gpu-h100-rack000-node0001.cluster.example.com"
