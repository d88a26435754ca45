"""Launchers for one configuration: ``torchrun``, a Slurm ``sbatch`` script, a Kubeflow
``PyTorchJob`` (ecosystem.md sections 2.6 and 6), built on :mod:`optimizer.launch.flags`."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from costmodel.errors import InputError
from costmodel.safe_io import check_text, printable
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from optimizer.launch.flags import (
    job_shape,
    launch_env,
    launch_warnings,
    megatron_args,
    megatron_refusal,
)

_MASTER_PORT = 29500


def comment(text: str) -> str:
    """``text`` as ONE ``#`` comment line of a script: control characters (a newline would end
    the comment and start a command) are written as ``\\xNN`` escapes. Safe by construction,
    whatever the loaders let through (a hand-edited front document, a ModelSpec built in
    Python)."""
    return "# " + printable(str(text), limit=10_000)


def script_value(field: str, value: str) -> str:
    """A value for a ``#SBATCH`` line or a job name, shell-quoted; control characters are
    refused (quoting cannot keep a newline inside a ``#SBATCH`` comment line)."""
    return shlex.quote(check_text(field, str(value)))


def torchrun_command(cluster: ClusterSpec, script: str = "pretrain_gpt.py", *,
                     num_nodes: int | None = None, nproc_per_node: int | None = None,
                     rdzv_endpoint: str = "${MASTER_ADDR}:${MASTER_PORT}",
                     rdzv_id: str | None = None) -> list[str]:
    """``torchrun`` with c10d rendezvous (ecosystem.md section 2.6), ending with ``script``.

    The default endpoint is a shell expression: join the tokens with :func:`shell_join` in a
    script that sets ``MASTER_ADDR``/``MASTER_PORT``, or pass a literal ``host:port``.
    """
    nodes = cluster.num_nodes if num_nodes is None else num_nodes
    nproc = cluster.gpus_per_node if nproc_per_node is None else nproc_per_node
    cmd = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
    if rdzv_id is not None:
        cmd += ["--rdzv-id", rdzv_id]
    return [*cmd, script]


def shell_join(tokens: Iterable[str]) -> str:
    """Quote argv tokens for bash. Tokens made of ``${VAR}`` references and plain characters
    (``${MASTER_ADDR}:${MASTER_PORT}``) are double-quoted so that they still expand; all others
    are single-quoted where needed."""
    return " ".join(f'"{t}"' if "$" in t and _EXPANDABLE.fullmatch(t) else shlex.quote(t)
                    for t in tokens)


_EXPANDABLE = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z0-9_.:/@=+-])+")


def slurm_script(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 config: ParallelConfig, *, job_name: str = "paraplan",
                 script: str = "pretrain_gpt.py", partition: str | None = None,
                 time_limit: str | None = None) -> str:
    """An ``sbatch`` script (ecosystem.md section 6.1): one task per node running ``torchrun``
    with one process per GPU, rendezvous on the first node of the allocation."""
    nodes, per_node = job_shape(cluster, config)
    _refuse_megatron(model, "slurm")
    args = megatron_args(model, cluster, training, config)
    env = launch_env(cluster, config, training, model)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={script_value('job_name', job_name)}",
             f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={per_node}",
             "#SBATCH --exclusive"]
    if partition:
        lines.append(f"#SBATCH --partition={script_value('partition', partition)}")
    if time_limit:
        lines.append(f"#SBATCH --time={script_value('time_limit', time_limit)}")
    lines += [comment(f"paraplan: {model.name} on {cluster.name or cluster.gpu.name}, "
                      f"tp={config.tp} pp={config.pp} dp={config.dp} "
                      f"micro_batch_size={config.micro_batch_size} "
                      f"precision={config.precision}")]
    lines += [comment(f"WARNING: {w}") for w in launch_warnings(config, model=model,
                                                                 cluster=cluster,
                                                                 training=training)]
    lines += ["set -euo pipefail", "",
              # sed reads the whole list: head would close the pipe early and, under pipefail,
              # scontrol's SIGPIPE (exit 141) aborts the job once the node list is long
              'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
              "export MASTER_ADDR",
              f"export MASTER_PORT={_MASTER_PORT}"]
    lines += [f"export {_env_name(k)}={shlex.quote(str(v))}" for k, v in env.items()]
    run = ["srun", *torchrun_command(cluster, script, num_nodes=nodes, nproc_per_node=per_node,
                                     rdzv_id="${SLURM_JOB_ID}")]
    lines += ["", shell_join(run) + " \\"]
    pairs = _argv_lines(args)
    lines += [f"    {p}" + (" \\" if i < len(pairs) - 1 else "") for i, p in enumerate(pairs)]
    return "\n".join(lines) + "\n"


def _refuse_megatron(model: ModelSpec, kind: str) -> None:
    """The Slurm and Kubernetes wrappers run Megatron-LM: a model it cannot build as scored
    (flags.megatron_refusal) is an input error (CLI exit 2), not a job without its flags."""
    reason = megatron_refusal(model)
    if reason is not None:
        raise InputError("--emit", f"{kind}: {reason}",
                         "the DeepSpeed or torchtitan artefacts of the JSON document "
                         "(launch.targets) say whether they build this model")


def _env_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not an environment variable name: {name!r}")  # a bug, not input
    return name


def _argv_lines(args: Sequence[str]) -> list[str]:
    """One ``--flag [value ...]`` group per line."""
    groups: list[list[str]] = []
    for t in args:
        if t.startswith("--") or not groups:
            groups.append([t])
        else:
            groups[-1].append(t)
    return [shell_join(g) for g in groups]


def k8s_manifest(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 config: ParallelConfig, *, job_name: str = "paraplan",
                 image: str = "megatron-lm:latest", script: str = "pretrain_gpt.py"
                 ) -> dict[str, Any]:
    """A Kubeflow Training Operator v1 ``PyTorchJob`` (ecosystem.md section 6.2).

    One Master and ``nodes - 1`` Workers, one pod per node (the GPU limit a quantity string,
    as the Kubernetes API types it); the container (named ``pytorch``)
    runs ``torchrun``, which reads the operator's ``PET_NODE_RANK``/``PET_MASTER_ADDR``/
    ``PET_MASTER_PORT``. ``image`` is a placeholder: the operator's templates usually own the
    image and volumes, so treat the replica counts, env and args as the patch to apply.
    """
    nodes, per_node = job_shape(cluster, config)
    _refuse_megatron(model, "k8s")
    env = launch_env(cluster, config, training, model)
    args = ["--nnodes", str(nodes), "--nproc-per-node", str(per_node), script,
            *megatron_args(model, cluster, training, config)]

    def replica(count: int) -> dict[str, Any]:  # fresh lists per replica: no YAML aliases
        container = {"name": "pytorch", "image": image, "command": ["torchrun"],
                     "args": list(args),
                     "env": [{"name": k, "value": v} for k, v in env.items()],
                     "resources": {"limits": {"nvidia.com/gpu": str(per_node)}}}
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": check_text("job_name", str(job_name))},
            "spec": {"nprocPerNode": str(per_node), "pytorchReplicaSpecs": specs}}


def k8s_yaml(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
             config: ParallelConfig, **kwargs: Any) -> str:
    """:func:`k8s_manifest` as YAML (keyword arguments are passed through)."""
    import yaml  # PyYAML, a declared dependency; imported here to keep module import light

    manifest = k8s_manifest(model, cluster, training, config, **kwargs)
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


