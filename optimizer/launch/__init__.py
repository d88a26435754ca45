"""Launch artefacts for one parallel configuration (ecosystem.md section 2).

- :mod:`~optimizer.launch.flags`: Megatron-LM flags, a DeepSpeed config, torchtitan 0.3
  arguments and config module, the environment, warnings and per-target support
  (docs/launch-targets.md); :func:`launch_bundle` is the JSON ``launch`` object;
- :mod:`~optimizer.launch.model_facts`: the model-definition facts the flags need beyond
  ``ModelSpec`` (rotary base and scaling, norm epsilon, ALiBi, q/k/v biases, q/k norms);
- :mod:`~optimizer.launch.scripts`: ``torchrun``, Slurm ``sbatch`` and Kubeflow
  ``PyTorchJob`` wrappers;
- :mod:`~optimizer.launch.tuner`: NCCL's example tuner plugin CSV;
- :mod:`~optimizer.launch.files`: the scheduler file for a front document's recommended point
  (``optimize --emit``).

Everything is a pure function of the frozen input records. Modules inside the package import
each other by module, never through this ``__init__``.
"""

from __future__ import annotations

from optimizer.launch.flags import (
    LL128_WARNING,
    NCCL_PRODUCTION_WARNING,
    deepspeed_config,
    job_shape,
    launch_bundle,
    launch_env,
    launch_targets,
    launch_warnings,
    megatron_args,
    megatron_script,
    nccl_algo_env,
    nccl_proto_env,
    torchtitan_args,
    torchtitan_config_source,
)
from optimizer.launch.scripts import (
    k8s_manifest,
    k8s_yaml,
    shell_join,
    slurm_script,
    torchrun_command,
)
from optimizer.launch.tuner import nccl_tuner_csv

__all__ = [
    "LL128_WARNING", "NCCL_PRODUCTION_WARNING", "deepspeed_config", "job_shape", "k8s_manifest",
    "k8s_yaml", "launch_bundle", "launch_env", "launch_targets", "launch_warnings",
    "megatron_args", "megatron_script", "nccl_algo_env", "nccl_proto_env", "nccl_tuner_csv",
    "shell_join", "slurm_script", "torchrun_command", "torchtitan_args",
    "torchtitan_config_source",
]
