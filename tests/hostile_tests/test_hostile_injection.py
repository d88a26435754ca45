"""No value from an input file can run a command in an emitted script (issue 26, defect 1).

Vectors: a model YAML ``name:``, a Hugging Face ``_name_or_path``, a cluster YAML ``name:``,
a study file's inline model and cluster names. Emitters: ``--emit slurm`` (an sbatch script,
executed here with stub ``srun``/``scontrol``), ``--emit k8s`` (a PyTorchJob YAML, parsed
back), ``optimize nccl --tuner-csv`` (NCCL's tuner CSV: no line may be injected). A name with a
control character is refused when the file is loaded; every other name is quoted or kept in
a comment it cannot leave.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

MODEL = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
         "ffn_hidden_size": 11008, "vocab_size": 32000, "gated_mlp": True}
HF = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
      "hidden_act": "silu"}
CLUSTER = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "a100-sxm-80gb"}

#: (payload template, refused at load time?) {m} is the marker file a successful injection
#: creates.
PAYLOADS = [
    ("evil\ntouch {m}", True),
    ("evil\r\ntouch {m}", True),
    ("evil\rtouch {m}", True),
    ("evil\x0btouch {m}", True),
    ("evil\x0ctouch {m}", True),
    ("evil\u2028touch {m}", True),
    ("evil\x85touch {m}", True),
    ("$(touch {m})", False),
    ("`touch {m}`", False),
    ("x; touch {m}", False),
    ("x' ; touch {m} ; '", False),
    ('x" ; touch {m} ; "', False),
    ("x && touch {m} #", False),
]


def _stubs(d: Path) -> dict[str, str]:
    bin_dir = d / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"srun": "exit 0", "scontrol": "echo node0", "torchrun": "exit 0"}.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node0",
            "SLURM_JOB_ID": "1", "HOME": str(d)}


def _execute(script: str, d: Path) -> None:
    path = d / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", str(path)], env=_stubs(d), cwd=d, timeout=30,
                   capture_output=True, check=False)


def _vectors(d: Path, name: str) -> list[tuple[str, list[str]]]:
    """(vector, argv prefix) for each way a name reaches an emitted script."""
    import json

    (d / "m.yaml").write_text(yaml.safe_dump({"name": name, **MODEL}))
    (d / "hf").mkdir()
    (d / "hf" / "config.json").write_text(json.dumps({"_name_or_path": name, **HF}))
    (d / "c.yaml").write_text(yaml.safe_dump({"name": name, **CLUSTER}))
    study = {"schema_version": 1, "name": "inj", "model": {"name": name, **MODEL},
             "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb"},
             "training": {"seq_length": 2048, "global_batch_size": 256},
             "search": {"sampler": "exhaustive"}}
    (d / "s.yaml").write_text(yaml.safe_dump(study))
    study_c = {**study, "name": "injc", "model": "7b",
               "cluster": {"name": name, **CLUSTER}}
    (d / "sc.yaml").write_text(yaml.safe_dump(study_c))
    return [("model-yaml", ["--model", str(d / "m.yaml"), "--gpus", "8"]),
            ("hf-config", ["--model", str(d / "hf" / "config.json"), "--gpus", "8"]),
            ("cluster-yaml", ["--model", "7b", "--cluster", str(d / "c.yaml")]),
            ("study-model", ["--study", str(d / "s.yaml")]),
            ("study-cluster", ["--study", str(d / "sc.yaml")])]


@pytest.mark.parametrize("payload, refused", PAYLOADS, ids=[repr(p)[:24] for p, _ in PAYLOADS])
def test_slurm_and_k8s_emitters(payload, refused, tmp_path):
    marker = tmp_path / "PWNED"
    name = payload.format(m=marker)
    for vector, argv in _vectors(tmp_path, name):
        for kind in ("slurm", "k8s"):
            rc, out, err = run_cli([*argv, "--emit", kind, "-q"])
            if refused:
                assert rc == 2, f"{vector}/{kind}: exit {rc}: {err.strip()}"
                assert "name" in err and "control character" in err, err
                assert len(err.strip().splitlines()) == 1
                continue
            assert rc == 0, f"{vector}/{kind}: {err.strip()}"
            if kind == "slurm":
                _execute(out, tmp_path)
                assert not marker.exists(), f"{vector}: the sbatch script ran the payload"
                for line in out.splitlines():  # comments stay comments
                    assert "touch" not in line or line.startswith("#"), line
            else:
                doc = yaml.safe_load(out)
                assert doc["kind"] == "PyTorchJob"
                assert not any("touch" in a for a in
                               doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
                               ["containers"][0]["command"])
    assert not marker.exists()


@pytest.mark.parametrize("payload, refused", PAYLOADS[:3] + PAYLOADS[7:9],
                         ids=[repr(p)[:24] for p, _ in PAYLOADS[:3] + PAYLOADS[7:9]])
def test_tuner_csv_cannot_gain_lines(payload, refused, tmp_path):
    """The tuner CSV names the cluster in a comment: a newline there would add a CSV row."""
    name = payload.format(m=tmp_path / "PWNED")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"name": name, **CLUSTER}))
    run = {"model": "7b", "cluster": str(tmp_path / "c.yaml"),
           "training": {"seq_length": 2048, "global_batch_size": 256},
           "parallel": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(run))
    rc, out, err = run_cli(["nccl", "--tuner-csv", str(tmp_path / "r.yaml")])
    if refused:
        assert rc == 2 and "control character" in err, err
        return
    assert rc == 0, err
    rows = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert all(line.split(",")[0] in ("allreduce", "allgather", "reducescatter", "broadcast",
                                      "reduce") for line in rows), rows


def test_stored_document_cannot_inject(tmp_path):
    """A front document edited by hand (a name with a newline) still emits a safe script:
    the emitter itself quotes every value (safe by construction, not only by validation)."""
    from optimizer.api import optimize

    marker = tmp_path / "PWNED"
    doc = optimize("7b", 8).to_dict()
    doc["inputs"]["model"]["name"] = f"evil\ntouch {marker}"
    doc["inputs"]["cluster"]["name"] = f"c\r\ntouch {marker}"
    from optimizer.launch.files import emit_for_doc
    script = emit_for_doc(doc, "slurm")
    _execute(script, tmp_path)
    assert not marker.exists()
    assert all(line.startswith(("#", "set ", "MASTER", "export", "srun", "    ")) or not line
               for line in script.splitlines()), script


def test_environment_values_are_quoted(tmp_path):
    """Every ``export`` line of the sbatch script is ``export NAME=<shell-quoted value>``."""
    import shlex

    rc, out, err = run_cli(["--model", "7b", "--gpus", "16", "--emit", "slurm", "-q"])
    assert rc == 0, err
    for line in out.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            assert name.isidentifier()
            assert shlex.split(value) == [shlex.split(value)[0]] if value else True
    assert os.path.exists(tmp_path)
