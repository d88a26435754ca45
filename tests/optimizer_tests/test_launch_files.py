"""Scheduler files for a front document's recommended point (optimizer.launch.files,
``optimize --emit slurm|k8s``)."""

from __future__ import annotations

import copy

import pytest
from conftest import ARGS_65B, run_cli

from costmodel.errors import InputError


# ---------------------------------------------------------------------------------------------
# Scheduler files
def test_emit_slurm_for_two_nodes():
    rc, out, err = run_cli([*ARGS_65B, "--emit", "slurm"])
    assert rc == 0, err
    assert out.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2" in out  # 16 GPUs = 2 nodes of 8
    assert "#SBATCH --gpus-per-node=8" in out
    assert "srun torchrun --nnodes 2 --nproc-per-node 8" in out


def test_emit_k8s_is_a_pytorchjob():
    yaml = pytest.importorskip("yaml")
    rc, out, err = run_cli([*ARGS_65B, "--emit", "k8s"])
    assert rc == 0, err
    job = yaml.safe_load(out)
    assert job["kind"] == "PyTorchJob"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1  # 2 nodes: 1 + 1


def test_emit_rebuilds_exactly_what_the_api_would_launch():
    from optimizer import launch
    from optimizer.api import optimize
    from optimizer.launch.files import emit_for_doc, specs_from_doc

    res = optimize("65b", 16)
    doc = res.to_dict()
    p, cfg = res.problem, res.recommended.config
    assert emit_for_doc(doc, "slurm") == launch.slurm_script(p.model, p.cluster, p.training, cfg)
    assert emit_for_doc(doc, "k8s") == launch.k8s_yaml(p.model, p.cluster, p.training, cfg)
    model, cluster, training = specs_from_doc(doc)
    assert model == p.model and training == p.training
    assert (cluster.num_nodes, cluster.gpus_per_node, cluster.gpu) == \
        (p.cluster.num_nodes, p.cluster.gpus_per_node, p.cluster.gpu)


def test_emit_from_a_broken_document_is_an_input_error(front_doc):
    from optimizer.launch.files import emit_for_doc

    with pytest.raises(InputError, match="did you mean 'slurm'"):
        emit_for_doc(front_doc, "slurn")
    doc = copy.deepcopy(front_doc)
    doc["recommended"] = 99
    with pytest.raises(InputError, match="recommended"):
        emit_for_doc(doc, "slurm")
    doc = copy.deepcopy(front_doc)
    del doc["inputs"]["model"]["num_layers"]
    with pytest.raises(InputError, match="inputs.model"):
        emit_for_doc(doc, "slurm")
