"""Validation harness: the cost model against published measurements of real training runs.

``optimize validate [--data DIR] [--json] [--check] [--verbose] [--worst N]
[--include-derived]`` (also ``python benchmarks/validate.py ...``) maps every usable entry of
``published_runs.yaml`` and ``published_runs_2026.yaml`` and every row of
``vtrain_single_node.yaml`` to a run -- (ModelSpec,
ClusterSpec, TrainingSpec, ParallelConfig) plus the measured step time and, for BLOOM, the
measured per-GPU memory peak -- scores all of them with :func:`costmodel.model.score` and
prints, per group: count, MAPE, median and max absolute percentage error (APE) of the step
time and the mean Spearman rank correlation of predicted vs measured step time within sweeps;
then the group-balanced MAPE, memory MAPE against BLOOM's peaks, the OOM check, Korthikanti
Table 5 (end-to-end iteration times, each within 5 %), Korthikanti Table 4 (one layer's
forward + backward time) and the NCCL AllReduce bus bandwidths. ``--check`` exits 1 when a
threshold of :data:`THRESHOLDS` fails (a little looser than issue 3's targets).

Data: ``--data DIR``, else ``$PARAPLAN_VALIDATION_DIR``, else the copy of ``../shared/validation``
shipped in the package (``optimizer/validation/data``).

Mapping (``../shared/validation/README.md``, followed exactly)
---------------------------------------------------------------
- Step time: ``measured.iteration_time_s`` (MLPerf: the median of the logged per-step times)
  or ``iteration_time_ms``; else global batch tokens (global_batch x seq_len) / measured
  tokens per second (``throughput_tokens_per_s``, or ``throughput_tokens_per_s_per_gpu`` /
  ``tokens_per_s_per_gpu`` x GPUs), or global batch / ``throughput_samples_per_s``. Every
  ``derived.iteration_time_s`` of the 2026 file is one of these conversions of a measured
  throughput, so it is not read; Megatron SC21 Table 1's (computed from TFLOP/s, which the
  README says not to compare) stays behind ``--include-derived`` as before.
- GPU: "A100" + "40GB" -> a100-sxm-40gb, other A100 -> a100-sxm-80gb, H100 -> h100-sxm-80gb
  (torchtitan's 94-96 GB HBM2e parts -> h100-sxm-96gb-hbm2e), H200 -> h200-sxm-141gb, H800 ->
  h800-sxm-80gb, GB200 / GB300 -> gb200 / gb300, B200 / B300 -> b200 / b300, V100 ->
  v100-sxm-32gb, MI300X / MI325X / MI350X / MI355X -> their keys; nodes of ``gpus_per_node``
  (default 8) GPUs, the GPU's default intra-node fabric; ``hardware.nvlink_domain_gpus`` (72
  on NVL72 racks) is ``ClusterSpec.gpus_per_domain`` (groups inside it run on NVLink, NCCL's
  multi-node NVLink: cost model 0.5.0).
- Inter-node: "Nx ... G Gb/s" -> N NICs of G Gb/s; "N Gbps (per node)" -> N/200 NICs of
  200 Gb/s; Omni-Path -> 4 NICs of 100 Gb/s; otherwise the GPU's default cluster. RoCE in the
  text -> RoCE fabric (latency), else InfiniBand.
- Model: layers, hidden, heads, kv_heads, ffn_hidden (default 4h), vocab (default 51200;
  BLOOM's "250k" = 250880), seq_len. Llama-family or SwiGLU: gated MLP, untied embeddings,
  RMSNorm, no biases, no position table. Others: LayerNorm, tied embeddings, biases unless the
  notes say "no biases", learned positions unless ALiBi/RoPE (MPT, BLOOM: ALiBi).
- Layout: tp, pp, dp, micro_batch (torchtitan's ``local_batch`` when pp = 1), global_batch;
  vpp > 1 -> interleaved with vpp virtual stages, else 1F1B; recompute = first word (absent
  or "not stated" -> full; torchtitan's "selective (layer)" -> full recompute of every
  second block, its "selective (op)" -> its op-level SAC); ``recipe_hint`` first
  (``recompute_modules`` -> selective with that module set where the cost model prices it,
  ``recompute_modules_of``, else the attention core, the nearest; a recompute method / layer count
  -> full on that many layers per model chunk, ``recompute_layers_of``; an offload count ->
  ``cpu_offloading_num_layers``); ZeRO from zero_stage (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2, absent or
  "not stated" = 0); sequence_parallel as given (absent = off, except torchtitan, whose TP
  plan is sequence parallel: on when tp > 1); ``torch_compile`` as given (absent = not stated,
  the framework profile's default element-wise traffic). Precision from ``precision_norm`` where the
  README lists it (bf16; fp8, blockwise fp8, mxfp8 and nvfp4 are scored as fp8, the nearest
  precision the model has, and the recipe is kept in ``Run.precision_recipe``; the weight
  copies follow the recipe), else from the text outside parentheses:
  fp8 if it says fp8 (or float8), bf16 if it says bf16, else fp16 (so BLOOM's "fp16 mixed
  (inferred: ... bf16 optimizer testing starts there ...)" is fp16, "amp_bf16" is bf16).
- vTrain rows (both files): A100 80GB nodes of 8, fp16, full recompute, 1F1B, ZeRO 0, ffn 4h,
  vocab 51200.
- NVIDIA NeMo / Megatron-Bridge tables (group or framework naming them): where the entry
  omits them or says "not stated": no recompute (the family default the entry quotes, else
  none: the README's dense Llama / GPT-3 / Qwen3 / GPT-OSS rule), SP when tp > 1, ZeRO-1
  (distributed optimizer) unless an ``fsdp`` column > 0 says Megatron-FSDP (ZeRO-3);
  precision "not stated" -> fp8. Not modelled and only recorded: bf16 gradient reduction,
  CUDA graphs (``Run.recipe``).
- MLPerf Training Llama 3.1 rows: their NeMo / Megatron-Core implementations have no
  recompute option, so a row that does not state it runs none (:func:`runs_mlperf_llama_impl`);
  NVIDIA's rows also run the distributed optimizer where not stated
  (:func:`runs_nvidia_mlperf_impl`). Where a layout inferred from the submitter's configs
  contradicts the gradient accumulation the result log states, the log's count sets the
  micro-batch (:func:`logged_micro_batch`).
- Skipped, each with a reason (``--verbose`` lists them; ``skip_counts`` counts them per
  class and file): hybrid Mamba models; mixture-of-experts models (a ``model.moe`` block,
  more than one expert, ep > 1, or a Mixtral / MoE name, without a complete ``model.moe``
  block; issue 22); an explicit pipeline layout (``recipe_hint.pp_layout``, scored as
  ``TrainingSpec.pipeline_layout``: :func:`pipeline_layout_of`) that Megatron's checks refuse
  for the model or the entry's pp x vpp; interleaving no layout gives every chunk a layer
  (issue 21); a
  partial recompute or offload without its count or method; ``layout_complete: false``;
  incomplete layout or model shape, heads (or KV heads) not divisible by tp, GPU count !=
  tp*cp*pp*dp, global batch not a multiple of micro_batch x dp, unknown GPU, no measured step
  time/memory, NCCL bus-bandwidth entries (they go to the NCCL section), Korthikanti Table 4
  per-layer entries (own section).
- One measurement quoted twice counts once (:func:`drop_requotes`): an entry with the same
  model, cluster, training settings and layout as an earlier one and the same measured values
  (BLOOM's chronicles repeat a baseline row in a later comparison table, e.g. 121.28 s in
  "Final round comparison" and in "NHEADs comparison"). Repeated measurements of one layout
  that differ (a re-run) all count.

Framework flags per group (TrainingSpec)
----------------------------------------
===================================  =====  =======  =======  ==========================================
group (prefix)                       flash  dropout  overlap  why
===================================  =====  =======  =======  ==========================================
megatron_sc21_*                      no     yes      ddp      Megatron-LM 2021, GPT-3 dropout 0.1; DDP
                                                              overlap only with ddp_impl torch (local:
                                                              reduction after backward)
korthikanti_*                        no     yes      no       Megatron-LM 2022 (pre-FlashAttention);
                                                              the paper's activation model has dropout
                                                              masks; text: no all-reduce overlap
megatron_readme_2020_*               no     yes      no       Megatron-LM 2020, local DDP
bloom_*                              no     no       no       Megatron-DeepSpeed 2022, fused softmax,
                                                              BLOOM hidden/attention dropout 0.0;
                                                              DeepSpeed ZeRO-1 reduces after backward
vtrain_*                             no     yes      no       Megatron-DeepSpeed defaults (dropout 0.1),
                                                              DeepSpeed engine reduces at the boundary
llmfoundry_*                         yes    no       yes      MPT: FlashAttention, pdrop 0, FSDP
torchtitan_*                         yes    no       yes      PyTorch FSDP2 (framework fsdp)
mlperf_*                             yes    no       yes      NeMo/Megatron-Core or PyTorch
megatron_core_* / nemo / bridge      yes    no       yes      Megatron-Core: TE fused attention, no
                                                              dropout in recipes, --overlap-grad-reduce;
                                                              NeMo / Bridge also --tp-comm-overlap
                                                              (TP collectives pipelined with GEMMs,
                                                              sequence parallel only), which their
                                                              performance recipes set; plain
                                                              Megatron-Core only where the entry's
                                                              ``overlap`` text names it (its default
                                                              is off)
===================================  =====  =======  =======  ==========================================

Other groups: from ``parallel.framework`` (Megatron-Core/NeMo/Bridge/FSDP/llm-foundry like the
last row; DeepSpeed like vtrain; else like Megatron-LM 2021). ``parallel.ddp_impl`` (torch /
local) and ``parallel.dp_overlap`` ("NO overlap") override the overlap column; a
``parallel.overlap`` text naming ``tp-comm-overlap`` turns TP overlap on.

Metrics
-------
- APE = |predicted - measured| / measured per run; per group MAPE (mean), median, max.
- Sweep: runs of one group with the same GPU, model shape, seq_len, GPU count and global batch,
  at least 3 of them. Spearman = Pearson correlation of average ranks (ties averaged); sweeps
  whose measured (or predicted) times are all equal are left out. Mean over sweeps. The
  checks use it as is; a second figure, reported beside it and never checked, averages the
  repeated measurements of one configuration within a sweep first (BLOOM re-ran some layouts
  two or three times, measured up to 14% apart, which the model can only tie; a copy of one
  measurement is already dropped by :func:`drop_requotes`), over the sweeps that keep at
  least 3 distinct configurations.
- Group-balanced MAPE: mean of the group MAPEs (each group weighs the same).
- Memory: BLOOM's ``max_gpu_mem_GB_nvidia_smi_first_last_node`` is read as GiB (nvidia-smi
  reports MiB; /1024 gives the "GB" the chronicles print) and compared with the model's peak
  memory (the largest stage; the first/last stages hold the embeddings, as measured).
- OOM: entries with ``measured.oom: true`` whose predicted peak fits in the GPU's memory
  (catalog ``memory_bytes``) are counted; the target is 0. A report the data's owner marks
  ``oom_reliable: false`` (bloom_prequel_110) is listed apart and not counted.
- Reserved memory: torchtitan's ``peak_memory_gib`` (PyTorch's max reserved memory) against
  the predicted reserved peak, allocated + fragmentation reserve (reported, not checked).
- Memory verdict (``memory_verdict``): every run with a measured step time and every reliable
  OOM report under paraplan's default verdict (costmodel.memory_verdict: the predicted peak
  against the GPU's memory less the default safety margin); the allocator each run used is
  :func:`uses_expandable_segments`.
- Scope: the checks and the headline figures cover ``published_runs.yaml`` and vTrain (the
  calibrated data); the 2026 groups are reported per group, per group and GPU and per GPU
  (``new_groups``), with MFU against the bf16 dense peak per run, until the Hopper/Blackwell
  fidelity work (issue 23) makes them checkable. The converse is reported, not
  checked: runs with a measured step time (they ran, so they fitted) whose predicted peak
  exceeds the GPU's memory, the model's pessimism that would hide a working layout.
- Korthikanti Table 5: the end-to-end iteration times (``source.location`` names Table 5),
  each within 5 %.
- Korthikanti Table 4: one transformer layer's forward + backward (+ recompute) time for one
  micro-batch. The model's per-stage breakdown lumps layers with the embedding and LM head, so
  the layer time is isolated as the difference of (compute + recompute + tp_comm) per
  micro-batch between the model with L and with L - pp layers (one layer less per stage;
  everything else cancels).
- NCCL: nccl-tests AllReduce bus bandwidth at 8 GiB predicted by
  :func:`costmodel.collectives.collective_time_s` (busbw = S/t x 2(n-1)/n) vs the published
  peak; the interconnect text is mapped to a catalog cluster (see :func:`nccl_case`).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.errors import InputError
from costmodel.specs import (
    RECOMPUTE_MODULES,
    ClusterSpec,
    InterNodeSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
)

ENV_VAR = "PARAPLAN_VALIDATION_DIR"
PUBLISHED_FILE = "published_runs.yaml"
PUBLISHED_2026_FILE = "published_runs_2026.yaml"  # read beside PUBLISHED_FILE when present
VTRAIN_FILE = "vtrain_single_node.yaml"
VTRAIN_SINGLE_GROUP = "vtrain_single_node"

# --check thresholds: a little looser than issue 3's targets (10 %, 20 %, 0.9, 10 %, 0, 5 %).
THRESHOLDS: dict[str, float] = {
    "group_balanced_mape": 0.12,  # <=
    "worst_group_median_ape": 0.22,  # <= (every group's median)
    "mean_spearman": 0.87,  # >=
    "memory_mape": 0.12,  # <=
    "oom_predicted_to_fit": 0,  # <=
    "korthikanti_table5_max_ape": 0.07,  # <= (target: each within 5 %)
}

BLOOM_VOCAB = 250880  # BLOOM's 250,680-token tokenizer padded (README: "250k" is 250880)
DEFAULT_VOCAB = 51200
MEASURED_MEMORY_UNIT_BYTES = 2.0**30  # nvidia-smi MiB / 1024 ("GB" in the BLOOM chronicles)
MIN_SWEEP = 3
NCCL_MESSAGE_BYTES = 8 * 2**30  # large-message regime of nccl-tests (nccl.md section 8)
NCCL_MULTI_NODE_GPUS = 32  # GTC25 footnote "32 GPUs"; GTC24 multi-node rows assumed the same


class SkipEntry(Exception):
    """An entry that cannot be mapped to a run; the message is the reason."""


# =============================================================================================
# Data location and loading
# =============================================================================================
def default_data_dir() -> Path:
    """The copy shipped inside the package (``optimizer/validation/data``, package data: see
    its README), so ``optimize validate`` works after ``pip install``."""
    return Path(__file__).resolve().parent / "data"


def resolve_data_dir(data: str | os.PathLike | None = None) -> Path:
    """``data``, else ``$PARAPLAN_VALIDATION_DIR``, else :func:`default_data_dir`; must hold
    ``published_runs.yaml``."""
    if data is not None:
        path, how = Path(data), "--data"
    elif os.environ.get(ENV_VAR):
        path, how = Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    else:
        path, how = default_data_dir(), "default"
    if not path.is_dir():
        raise InputError("data", f"validation data folder {str(path)!r} ({how}) not found",
                         f"pass --data DIR or set {ENV_VAR} to the folder holding "
                         f"{PUBLISHED_FILE}")
    if not (path / PUBLISHED_FILE).is_file():
        raise InputError("data", f"{str(path)!r} ({how}) has no {PUBLISHED_FILE}",
                         f"pass --data DIR or set {ENV_VAR} to the folder holding it")
    return path


def _load_yaml(path: Path) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=loader)  # noqa: S506 (safe loader)
    except yaml.YAMLError as e:
        raise InputError("data", f"{str(path)!r} is not valid YAML: {e}") from None


def _entries(path: Path) -> list:
    pub = _load_yaml(path)
    if not isinstance(pub, Mapping) or not isinstance(pub.get("entries"), list):
        raise InputError("data", f"{path}: expected a mapping with a list 'entries'")
    return list(pub["entries"])


def load_data(data_dir: Path, *, include_2026: bool = True) -> tuple[list[dict], list[dict]]:
    """(published entries of ``published_runs.yaml`` then ``published_runs_2026.yaml``,
    vTrain single-node rows); the 2026 file (left out with ``include_2026=False``) and the
    vTrain rows are optional. Entries of the 2026 file carry ``_file:
    published_runs_2026.yaml`` (its groups are reported beside the checked ones, see
    :func:`validate`)."""
    entries = _entries(data_dir / PUBLISHED_FILE)
    path_2026 = data_dir / PUBLISHED_2026_FILE
    if include_2026 and path_2026.is_file():
        entries += [{**e, "_file": PUBLISHED_2026_FILE} if isinstance(e, Mapping) else e
                    for e in _entries(path_2026)]
    rows: list[dict] = []
    vpath = data_dir / VTRAIN_FILE
    if vpath.is_file():
        v = _load_yaml(vpath)
        if not isinstance(v, Mapping) or not isinstance(v.get("rows"), list):
            raise InputError("data", f"{vpath}: expected a mapping with a list 'rows'")
        rows = list(v["rows"])
    return entries, rows


# =============================================================================================
# Mapping one entry to a run
# =============================================================================================
@dataclass(frozen=True)
class FrameworkFlags:
    flash_attention: bool
    dropout: bool
    overlap_grad_reduce: bool
    framework: str = "megatron"
    tp_comm_overlap: bool = False
    overlap_p2p_comm: bool = False  # interleaved p2p behind compute (NVIDIA recipes)


_MEGATRON_2021 = FrameworkFlags(flash_attention=False, dropout=True, overlap_grad_reduce=False)
_DEEPSPEED_NO_DROPOUT = FrameworkFlags(False, False, False, "deepspeed")
_DEEPSPEED = FrameworkFlags(False, True, False, "deepspeed")
_MODERN = FrameworkFlags(True, False, True)
_MCORE = FrameworkFlags(True, False, True, tp_comm_overlap=True, overlap_p2p_comm=True)
_FSDP = FrameworkFlags(True, False, True, "fsdp")
# torchtitan: FSDP2, its "selective" recompute is op-level SAC (framework profile torchtitan)
_TORCHTITAN = FrameworkFlags(True, False, True, "torchtitan")

# group prefix -> flags (see the module docstring's table)
GROUP_FLAGS: tuple[tuple[str, FrameworkFlags], ...] = (
    ("megatron_sc21", _MEGATRON_2021),
    ("korthikanti", _MEGATRON_2021),
    ("megatron_readme_2020", _MEGATRON_2021),
    ("bloom", _DEEPSPEED_NO_DROPOUT),
    ("vtrain", _DEEPSPEED),
    ("llmfoundry", _FSDP),
    ("torchtitan", _TORCHTITAN),  # PyTorch FSDP2 (+ TP/PP/CP over DTensor)
    ("mlperf", _MODERN),  # NeMo / Megatron-Core or PyTorch implementations
    ("megatron_core", _MODERN),
    ("nemo", _MCORE),
    ("megatron_bridge", _MCORE),
)


def framework_flags(group: str, parallel: Mapping[str, Any]) -> FrameworkFlags:
    """flash attention / dropout / DP overlap for an entry (module docstring table)."""
    flags = None
    for prefix, f in GROUP_FLAGS:
        if group.startswith(prefix):
            flags = f
            break
    if flags is None:
        fw = str(parallel.get("framework", "")).lower()
        if any(k in fw for k in ("nemo", "bridge")):
            flags = _MCORE
        elif any(k in fw for k in ("megatron-core", "megatron core", "fsdp", "foundry",
                                   "composer", "torchtitan")):
            flags = _MODERN
        elif "deepspeed" in fw:
            flags = _DEEPSPEED
        else:
            flags = _MEGATRON_2021
    ddp = str(parallel.get("ddp_impl", "")).lower()
    if ddp == "torch":
        flags = replace(flags, overlap_grad_reduce=True)
    elif ddp == "local":
        flags = replace(flags, overlap_grad_reduce=False)
    if "no overlap" in str(parallel.get("dp_overlap", "")).lower():
        flags = replace(flags, overlap_grad_reduce=False)
    if "tp-comm-overlap" in str(parallel.get("overlap", "")).lower():
        flags = replace(flags, tp_comm_overlap=True)
    return flags


def reduces_in_bf16(group: str, par: Mapping[str, Any], flags: FrameworkFlags) -> bool:
    """Megatron-Bridge's recipes reduce gradients in bf16, not the fp32 main gradients (data
    README); older NeMo tables are left as they were."""
    fw = str(par.get("framework", "")).lower()
    return flags.framework == "megatron" and ("bridge" in group.lower() or "bridge" in fw)


# Groups whose source's launch script passes Megatron's --fp8-param-gather: Megatron-LM's
# examples/llama README tables were measured with examples/llama/train_llama3_8b_h100_fp8.sh
# ("--fp8-format hybrid --fp8-param-gather --use-distributed-optimizer --overlap-grad-reduce
# --overlap-param-gather", reference/ecosystem.md)
FP8_PARAM_GATHER_GROUPS = ("megatron_lm_examples_llama_fp8",)


def gathers_in_fp8(group: str, par: Mapping[str, Any]) -> bool:
    """Whether the run's fp8 parameters are the gathered (and kept) weights: torchtitan's
    Float8 runs all-gather their FSDP2 parameters in fp8 (its float8 recipes,
    llama3_405b.toml and the docs' float8 runs, set enable_fsdp_float8_all_gather and
    precompute_float8_dynamic_scale_for_fsdp, "recommended for tensorwise"); Megatron's
    ``--fp8-param-gather`` where the entry says so (``parallel.fp8_param_gather``) or its
    group's launch script does (FP8_PARAM_GATHER_GROUPS)."""
    given = _bool_field(par.get("fp8_param_gather"))
    if given is not None:
        return given
    if group in FP8_PARAM_GATHER_GROUPS:
        return True
    return group.startswith("torchtitan") and "float8" in str(par.get("precision") or
                                                              "").lower()


def runs_torchtitan(group: str, par: Mapping[str, Any]) -> bool:
    """Whether the entry ran torchtitan (group or framework naming it). Its tensor-parallel
    plan is sequence parallel: the norms run under ``SequenceParallel`` and activations
    between the blocks are sharded on the sequence dimension (``Shard(1)``) whenever TP is on
    (torchtitan 0.3.0 ``ParallelismConfig.enable_sequence_parallel = True`` by default,
    models/common/decoder_sharding.py; the 2024 llama parallelize_llama plan used
    ``SequenceParallel()`` for attention_norm / ffn_norm / norm unconditionally)."""
    return group.startswith("torchtitan") or "torchtitan" in str(
        par.get("framework", "")).lower()


def torchtitan_async_tp(group: str, par: Mapping[str, Any], tp: int) -> bool:
    """Whether a torchtitan entry runs async TP (``compile.enable_async_tensor_parallel``:
    Inductor's micro-pipeline TP pass overlaps each all-gather -> matmul and matmul ->
    reduce-scatter, scored as TrainingSpec.tp_comm_overlap). ``parallel.async_tp`` where
    given; else where the entry's parallel text names AsyncTP; else at tp > 1 under
    torch.compile, which async TP requires and which torchtitan's only TP recipe of the data,
    Llama 3.1 405B, sets together with it (0.3.0 ``config_registry.llama3_405b``:
    ``CompileConfig(enable=True, enable_async_tensor_parallel=True)``; the 2024
    llama3_405b.toml the docs rows quote, assumed the same)."""
    if tp <= 1 or not runs_torchtitan(group, par):
        return False
    given = _bool_field(par.get("async_tp"))
    if given is not None:
        return given
    text = " ".join(str(par.get(k) or "") for k in ("precision", "framework", "overlap"))
    compiled = _bool_field(par.get("torch_compile"))
    if re.search(r"async\s*-?\s*tp", text, re.IGNORECASE):
        return compiled is not False  # async TP needs compile (torchtitan's CompileConfig)
    return compiled is True


# torchtitan's layer-level selective checkpointing wraps every ac_freq-th block in a full
# checkpoint (selective_ac_option = "2", its default, in the 2024 configs the data quote)
TORCHTITAN_LAYER_SAC_FREQ = 2


def torchtitan_layer_sac(group: str, par: Mapping[str, Any], recompute: str, layers: int,
                         pp: int) -> tuple[str, int]:
    """(recompute, recompute_num_layers) of an entry. torchtitan's "selective (layer)"
    checkpointing is not its op-level SAC: ``_apply_ac_to_transformer_block`` (2024,
    ``selective_ac_option`` an integer) fully checkpoints every second block and leaves the
    others whole, which is full recompute of half a stage's layers (Megatron-Core's block
    method with N = layers / 2: the same memory and recompute time at pp = 1). Other entries
    keep their recompute and every layer (0)."""
    text = str(par.get("recompute") or "").lower()
    if not (runs_torchtitan(group, par) and recompute == "selective"
            and re.search(r"\blayer\b|selective_layer", text)):
        return recompute, 0
    return "full", max(1, layers // (pp * TORCHTITAN_LAYER_SAC_FREQ))


def overlaps_p2p(entry: Mapping[str, Any], flags: FrameworkFlags) -> bool:
    """Megatron-Core's interleaved schedule overlaps p2p with compute (its default since
    2023; the data README says so for the NVIDIA recipes): the Megatron rows of the 2026
    file. The 2021-22 Megatron-LM of the calibrated file blocks on them."""
    return flags.framework == "megatron" and str(entry.get("_file", "")).endswith(
        "published_runs_2026.yaml")


def runs_nvidia_mlperf_impl(group: str, gpu_text: Any) -> bool:
    """MLPerf Training Llama 3.1 rows on NVIDIA GPUs run NVIDIA's NeMo / Megatron-Core
    reference implementation (its DGX configs, e.g. config_DGXB200_*.sh, or submitters'
    copies): the distributed optimizer, as the rows of the same implementation that state
    it (zero_stage: 1), where an entry leaves zero_stage "not stated". Only the optimizer:
    a precision the entry leaves unknown keeps the README's text rule. AMD's rows (PyTorch
    on ROCm) are another implementation."""
    return group.startswith("mlperf") and "NVIDIA" in str(gpu_text).upper()


def runs_mlperf_llama_impl(group: str, parallel: Mapping[str, Any]) -> bool:
    """MLPerf Training Llama 3.1 rows: the benchmark's implementations are NeMo / Megatron-Core
    ports (the MLCommons reference is NeMo; NVIDIA's DGX configs; AMD's ROCm port, which
    GigaComputing's MI355X row ships under ``implementations/MI355X/nemo/``, its
    ``layout_source``), and their configs have no recompute option: the NVIDIA rows state
    "none set (no recompute option in the MLPerf NeMo implementation configs; MCore default
    is no recompute)". A row that does not state it (AMD's) therefore runs Megatron-Core's
    default, no recomputation, not the README's "absent means full" of older tables. Only the
    recompute: the distributed optimizer is a config setting (``--use-distributed-optimizer``
    is off by default in Megatron-Core), which only NVIDIA's configs are known to set
    (:func:`runs_nvidia_mlperf_impl`)."""
    return group.startswith("mlperf") and "llama" in group.lower()


def is_nemo_table(group: str, parallel: Mapping[str, Any]) -> bool:
    """NVIDIA NeMo / Megatron-Bridge performance tables (recipes' defaults apply)."""
    g = group.lower()
    fw = str(parallel.get("framework", "")).lower()
    return ("nemo" in g or "bridge" in g or "nemo" in fw or "megatron-bridge" in fw
            or "megatron bridge" in fw)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    return None


def _leading_int(value: Any, default: int) -> int:
    v = _as_int(value)
    if v is not None:
        return v
    m = re.match(r"\s*(\d+)", str(value)) if value is not None else None
    return int(m.group(1)) if m else default


def _require_int(section: Mapping[str, Any], key: str, what: str) -> int:
    v = _as_int(section.get(key))
    if v is None or v < 1:
        got = section.get(key)
        raise SkipEntry(f"incomplete {what}: {key} " + ("missing" if got is None
                                                        else f"not an integer ({got!r})"))
    return v


# README GPU names -> catalog keys, tried in order (GB200 before B200, GB300 before B300)
_GPU_KEYS: tuple[tuple[str, str], ...] = (
    ("H100", "h100-sxm-80gb"), ("H200", "h200-sxm-141gb"), ("H800", "h800-sxm-80gb"),
    ("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"),
    ("V100", "v100-sxm-32gb"), ("MI355X", "mi355x"), ("MI350X", "mi350x"),
    ("MI325X", "mi325x"), ("MI300X", "mi300x"),
)


def gpu_key(text: str, memory_gb: Any = None) -> str:
    """The catalog key the README names for a GPU description: "A100 40GB" -> a100-sxm-40gb,
    other A100 -> a100-sxm-80gb, H100 -> h100-sxm-80gb (96 GB HBM2e -> h100-sxm-96gb-hbm2e), H200 -> h200-sxm-141gb,
    H800, B200, B300, GB200, GB300, V100, MI300X, MI325X, MI350X, MI355X -> their keys."""
    t = str(text).upper().replace(" ", "")
    mem = _as_int(memory_gb)
    if "H100" in t and ("HBM2E" in t or mem in (94, 95, 96)) and "NVL" not in t:
        # torchtitan's Grand Teton H100s (96 GB HBM2e, 500 W): their own key, whose memory
        # holds the measured 77-84 GiB peaks the 80 GB key cannot
        return "h100-sxm-96gb-hbm2e"
    if "A100" in t:
        return "a100-sxm-40gb" if ("40GB" in t or mem == 40) else "a100-sxm-80gb"
    for name, key in _GPU_KEYS:
        if name in t:
            return key
    raise SkipEntry(f"GPU {text!r} has no catalog key under the README's mapping")


def inter_node_spec(text: Any, default: InterNodeSpec) -> InterNodeSpec:
    """README: "8x ... 200 Gb/s" -> 8 NICs of 200 Gb/s; "N Gbps per node" -> N/200 NICs of
    200 Gb/s; Omni-Path -> 4 NICs of 100 Gb/s; otherwise the GPU's default cluster."""
    from costmodel import hardware as hw

    if not text:
        return default
    t = str(text)
    low = t.lower()
    roce = "roce" in low

    def spec(nics: int, gbit: float, fabric: str | None = None) -> InterNodeSpec:
        fab = fabric or ("roce" if roce else "infiniband")
        lat = hw.ROCE_LATENCY_S if fab == "roce" else hw.IB_LATENCY_S
        return InterNodeSpec(fabric=fab, nics_per_node=nics, nic_bandwidth_bytes_per_s=gbit * 1e9 / 8,
                             oversubscription=1.0, latency_s=lat)

    if "omni-path" in low or "omnipath" in low:
        return spec(4, 100.0, "infiniband")
    m = re.search(r"(\d+)\s*x\b[^;]*?(\d+(?:\.\d+)?)\s*Gb/s", t, re.IGNORECASE)
    if m:
        return spec(int(m.group(1)), float(m.group(2)))
    m = re.search(r"(\d+(?:\.\d+)?)\s*Gbps", t, re.IGNORECASE)
    if m:
        nics = float(m.group(1)) / 200.0
        if nics < 1 or not nics.is_integer():
            raise SkipEntry(f"inter-node {t!r}: {m.group(1)} Gbps is not a whole number of "
                            "200 Gb/s NICs")
        return spec(int(nics), 200.0)
    return default


def parse_precision(text: Any, *, nemo: bool = False) -> str:
    """fp8 if the text says fp8, bf16 if it says bf16, else fp16; parenthetical remarks are
    not read (they discuss other runs). NeMo tables: "not stated" -> fp8."""
    raw = "" if text is None else str(text)
    main = re.sub(r"\([^)]*\)", " ", raw).lower()
    if not main.strip():
        main = raw.lower()
    if nemo and (not raw.strip() or "not stated" in main or _not_stated(raw)):
        return "fp8"
    if "fp8" in main or "float8" in main:
        return "fp8"
    if "bf16" in main:
        return "bf16"
    return "fp16"


def parse_recompute(text: Any) -> str:
    """The first word: full / selective / none (absent -> full)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return "full"
    if isinstance(text, bool):
        return "full" if text else "none"
    word = re.split(r"[\s(,;:]+", str(text).strip().lower())[0]
    if word in ("full", "selective", "none"):
        return word
    if word in ("no", "off", "false", "disabled"):
        return "none"
    raise SkipEntry(f"recompute {text!r} not understood (first word full/selective/none)")


def parse_zero(value: Any) -> int:
    """zero_stage as given; FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0."""
    if value is None:
        return 0
    v = _as_int(value)
    if v is not None:
        return v
    t = str(value).upper()
    if "FULL_SHARD" in t or "HYBRID_SHARD" in t:
        return 3
    if "SHARD_GRAD_OP" in t:
        return 2
    if "NO_SHARD" in t:
        return 0
    m = re.search(r"(?:ZERO|STAGE)[-\s_]*(\d)", t)
    if m:
        return int(m.group(1))
    raise SkipEntry(f"zero_stage {value!r} not understood")


def parse_vocab(value: Any) -> int:
    if value is None:
        return DEFAULT_VOCAB
    v = _as_int(value)
    if v is not None:
        return v
    t = str(value).lower().replace(",", "")
    if "250k" in t or "250680" in t or "250880" in t:
        return BLOOM_VOCAB
    m = re.fullmatch(r"\s*(\d+)\s*k\s*", t)
    if m:
        return int(m.group(1)) * 1000
    m = re.fullmatch(r"\s*(\d+)\s*\([^)]*\)\s*", t)  # "32000 (recalled, not verified)"
    if m:
        return int(m.group(1))
    raise SkipEntry(f"vocab {value!r} not understood")


def _bool_field(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value is None:
        return None
    t = str(value).strip().lower()
    if t.startswith(("true", "yes", "on")):
        return True
    if t.startswith(("false", "no", "off")):
        return False
    return None


def model_spec(m: Mapping[str, Any], *, name: str, default_vocab: int = DEFAULT_VOCAB
               ) -> tuple[ModelSpec, int]:
    """(ModelSpec, seq_len) of an entry's ``model`` block (README defaults)."""
    L = _require_int(m, "layers", "model")
    h = _require_int(m, "hidden", "model")
    a = _require_int(m, "heads", "model")
    s = _require_int(m, "seq_len", "model")
    kv = _as_int(m.get("kv_heads")) if m.get("kv_heads") is not None else None
    if m.get("kv_heads") is not None and kv is None:
        raise SkipEntry(f"kv_heads {m.get('kv_heads')!r} not an integer")
    ffn = _as_int(m.get("ffn_hidden")) if m.get("ffn_hidden") is not None else 4 * h
    if ffn is None:
        raise SkipEntry(f"ffn_hidden {m.get('ffn_hidden')!r} not an integer")
    vocab = parse_vocab(m.get("vocab")) if m.get("vocab") is not None else default_vocab
    head_dim = _as_int(m.get("head_dim"))  # when given (Qwen3, GPT-OSS: not hidden / heads)
    text = f"{m.get('name', '')} {name} {m.get('arch_notes', '')}".lower()
    llama = "llama" in text or "swiglu" in text
    no_pos = llama or any(k in text for k in ("alibi", "rope", "rotary", "bloom"))
    try:
        spec = ModelSpec(
            name=str(m.get("name") or name), num_layers=L, hidden_size=h,
            num_attention_heads=a, ffn_hidden_size=ffn, vocab_size=vocab, num_kv_heads=kv,
            head_dim=head_dim, gated_mlp=llama, tied_embeddings=not llama,
            learned_position_embeddings=not no_pos,
            max_position_embeddings=None if no_pos else s,
            linear_bias=not (llama or "no bias" in text),
            normalization="rmsnorm" if (llama or "rmsnorm" in text) else "layernorm",
            source="shared/validation")
    except InputError as e:
        raise SkipEntry(f"model shape rejected: {e}") from None
    return spec, s


def build_cluster(gpu: str, num_gpus: int, gpus_per_node: int, inter_text: Any, *,
                  nvlink_domain: int | None = None) -> ClusterSpec:
    """Hosts of ``gpus_per_node`` on the GPU's default fabric; ``nvlink_domain``
    (``hardware.nvlink_domain_gpus``, 72 on NVL72 racks) is the NVLink domain of whole hosts
    (``ClusterSpec.gpus_per_domain``); a job on part of one host has no multi-host domain."""
    from costmodel import hardware as hw

    spec = hw.get_gpu(gpu)
    try:
        nodes, per_node = hw.split_gpus(num_gpus, gpus_per_node)
    except InputError as e:
        raise SkipEntry(f"GPU count: {e}") from None
    intra, inter = hw.default_node_fabric(spec)
    inter = inter_node_spec(inter_text, inter)
    domain = nvlink_domain if nvlink_domain and per_node == gpus_per_node else None
    try:
        return ClusterSpec(name=f"{nodes}x{per_node}-{spec.name}", num_nodes=nodes,
                           gpus_per_node=per_node, gpu=spec, intra_node=intra,
                           inter_node=inter, source="shared/validation",
                           gpus_per_domain=domain)
    except InputError as e:
        raise SkipEntry(f"NVLink domain: {e}") from None


@dataclass(frozen=True)
class Run:
    """One published run mapped to the cost model's inputs plus what was measured."""

    id: str
    group: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelConfig
    step_time_s: float | None = None  # measured (or derived, with --include-derived)
    step_time_source: str = ""
    memory_bytes: float | None = None  # measured per-GPU peak
    oom: bool = False
    table: str = ""  # "table5" / "table4" for Korthikanti
    per_layer_s: float | None = None  # Korthikanti Table 4: one layer fwd+bwd
    measured_raw: str = ""  # the source's measured fields as given (canonical JSON)
    oom_reliable: bool = True  # False: the data's owner marks the OOM report unreliable
    reserved_memory_bytes: float | None = None  # torchtitan: PyTorch's max reserved memory
    precision_recipe: str = ""  # the recipe the entry names (mxfp8, nvfp4, ...): scored as
    #                             parallel.precision, the nearest the model has
    recipe: str = ""  # parallel.recipe_hint's launch fields (CUDA graphs, ...), as text
    dataset: str = PUBLISHED_FILE  # the file the entry came from
    reported_tflops_per_gpu: float | None = None  # the source's model TFLOP/s per GPU
    reported_mfu: float | None = None  # the source's MFU (torchtitan: over the bf16 peak)
    # the entry's note quoting its source's footnote that the number is a known performance
    # regression (SOURCE_REGRESSION); "" for every other run
    source_regression: str = ""

    @property
    def num_gpus(self) -> int:
        return self.parallel.world_size


def _layout_check(model: ModelSpec, tp: int) -> None:
    if model.num_attention_heads % tp:
        raise SkipEntry(f"heads {model.num_attention_heads} not divisible by tp {tp}")
    g = model.num_kv_heads
    if g % tp and tp % g:
        raise SkipEntry(f"kv_heads {g} and tp {tp}: neither divides the other")


def measured_step_time(measured: Mapping[str, Any], derived: Mapping[str, Any], tokens: int,
                       num_gpus: int, *, include_derived: bool = False,
                       global_batch: int | None = None) -> tuple[float | None, str]:
    """README: iteration_time_s / _ms (MLPerf: the median of the logged per-step times), else
    global batch tokens / tokens per second (total, per GPU x GPUs, or samples per second x
    the sequence length: global batch / samples per second)."""
    def num(x: Any) -> float | None:
        return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x > 0 \
            else None

    if num(measured.get("iteration_time_s")):
        return num(measured["iteration_time_s"]), "iteration_time_s"
    if num(measured.get("iteration_time_ms")):
        return num(measured["iteration_time_ms"]) / 1e3, "iteration_time_ms"
    for key in ("throughput_tokens_per_s", "tokens_per_s"):
        if num(measured.get(key)):
            return tokens / num(measured[key]), key
    for key in ("throughput_tokens_per_s_per_gpu", "tokens_per_s_per_gpu"):
        if num(measured.get(key)):
            return tokens / (num(measured[key]) * num_gpus), key
    if global_batch and num(measured.get("throughput_samples_per_s")):
        return global_batch / num(measured["throughput_samples_per_s"]), \
            "throughput_samples_per_s"
    if include_derived and num(derived.get("iteration_time_s")):
        return num(derived["iteration_time_s"]), "derived.iteration_time_s"
    return None, ""


def _measured_memory(measured: Mapping[str, Any]) -> float | None:
    for key, value in measured.items():
        k = key.lower()
        if (k.startswith("max_gpu_mem_gb") or k.startswith("peak_memory_gb")) \
                and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) * MEASURED_MEMORY_UNIT_BYTES
    return None


_MOE_NAME = re.compile(r"\bmoe\b|mixtral|dbrx|deepseek-?v[23]|grok-?1|arctic|switch-|"
                       r"\b\d+x\d+(\.\d+)?b\b", re.IGNORECASE)


def mixture_of_experts(model: Mapping[str, Any], par: Mapping[str, Any]) -> str:
    """Why an entry is a mixture-of-experts model ('' when dense): more than one expert in the
    model section (a number, or text leading with one such as "64 routed + 2 shared"), expert
    parallelism > 1, ``moe: true``, or a name such as "Mixtral 8x7B", "DBRX", "... MoE"."""
    for section, what in ((model, "model"), (par, "parallel")):
        for key, value in section.items():
            k = str(key).lower()
            if not ("expert" in k or k in ("ep", "moe")):
                continue
            if value is True:
                return f"{what}.{key}=true"
            n = _as_int(value) if not isinstance(value, str) else _leading_int(value, 0)
            if n is not None and n > 1:
                return f"{what}.{key}={value}"
    name = str(model.get("name", ""))
    return f"name {name!r}" if _MOE_NAME.search(name) else ""


# ---- the 2026 conventions (README: precision_norm, recipe_hint, NVIDIA recipe defaults) ------
# precision_norm -> the nearest precision the cost model has today (the recipe is recorded)
PRECISION_NORM: dict[str, str] = {
    "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_presumed": "fp8",
    "fp8_cs": "fp8", "fp8_delayed": "fp8", "blockwise": "fp8", "blockwise_fp8": "fp8",
    "fp8_blockwise": "fp8", "mxfp8": "fp8", "nvfp4": "fp8",
    # the submitter's configs say FP8 or NVFP4; both are scored as fp8 today
    "ambiguous_fp8_or_nvfp4": "fp8",
}
# dense model families whose NVIDIA performance recipes run without recomputation (README)
_NO_RECOMPUTE_FAMILIES = re.compile(r"llama|gpt-?3|qwen\s*3|qwen3|gpt-?oss", re.IGNORECASE)
_NOT_STATED = re.compile(r"\s*(not\s+stated|not\s+determined|unknown|n/?a\b)", re.IGNORECASE)
SKIP_CP = "cp > 1 (issue 21): the entry's context-parallel layout cannot be scored"
SKIP_MOE = ("MoE (issue 22): a mixture of experts without a complete model.moe block (experts, "
            "top-k, expert width), or a hybrid Mamba one")
SKIP_MAMBA = "mamba: hybrid Mamba models are not modelled"


def _not_stated(value: Any) -> bool:
    return value is None or (isinstance(value, str) and (not value.strip()
                                                         or bool(_NOT_STATED.match(value))))


def precision_of(par: Mapping[str, Any], *, nemo: bool) -> tuple[str, str]:
    """(the cost model's precision, the recipe as the entry names it). ``precision_norm``
    where the README lists it (bf16, fp8 current scaling, blockwise fp8, mxfp8, nvfp4: all
    low-precision recipes are scored as fp8, the nearest precision the model has), else the
    text rule of :func:`parse_precision`."""
    norm = par.get("precision_norm")
    key = str(norm).strip().lower() if isinstance(norm, str) else ""
    if key in PRECISION_NORM:
        return PRECISION_NORM[key], key
    p = parse_precision(par.get("precision"), nemo=nemo)
    text = str(par.get("precision") or "").lower()
    recipe = "float8 (torchao)" if "float8" in text else p
    return p, recipe


# precision_norm -> TrainingSpec.fp8_recipe. The README's "fp8" is current scaling
# (Megatron-Bridge's fp8_cs), as are MLPerf's presumed-fp8 rows and torchao's Float8
# (tensorwise scales from the current amax); an ambiguous FP8-or-NVFP4 row takes FP8, the
# slower reading. Without precision_norm, fp8 text is Transformer Engine's default (delayed).
FP8_RECIPE_OF_NORM: dict[str, str] = {
    "fp8": "tensorwise", "fp8_cs": "tensorwise", "fp8_presumed": "tensorwise",
    "fp8_delayed": "delayed", "blockwise": "blockwise", "blockwise_fp8": "blockwise",
    "fp8_blockwise": "blockwise", "mxfp8": "mxfp8", "nvfp4": "nvfp4",
    "ambiguous_fp8_or_nvfp4": "tensorwise",
}


def fp8_recipe_of(par: Mapping[str, Any]) -> str:
    """The fp8 recipe the entry's ``precision_norm`` names (FP8_RECIPE_OF_NORM); torchao's
    Float8 is tensorwise; else Transformer Engine's default, delayed scaling."""
    norm = par.get("precision_norm")
    key = str(norm).strip().lower() if isinstance(norm, str) else ""
    if key in FP8_RECIPE_OF_NORM:
        return FP8_RECIPE_OF_NORM[key]
    if "float8" in str(par.get("precision") or "").lower():
        return "tensorwise"
    return "delayed"


def recipe_hint_text(hint: Any) -> str:
    """The launch-recipe fields of ``parallel.recipe_hint`` (no tag/file/preset), as text."""
    if not isinstance(hint, Mapping):
        return "" if hint is None else str(hint)
    keep = {k: v for k, v in hint.items()
            if k not in ("tag", "file", "preset", "layout_matches_table")}
    return ", ".join(f"{k}={v}" for k, v in keep.items())


def _family_default(text: str) -> str | None:
    m = re.search(r"family default:\s*(\w+)", text, re.IGNORECASE)
    if m and m.group(1).lower() in ("none", "selective", "full"):
        return m.group(1).lower()
    return None


def _hint(par: Mapping[str, Any]) -> Mapping[str, Any]:
    return par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}


_PARTIAL_TEXT = re.compile(r"\b(\d+)\s+of\s+(\d+)\s+layers\b")


def recompute_of(par: Mapping[str, Any], model: Mapping[str, Any], *, nemo: bool) -> str:
    """README: ``recompute``'s first word (absent means full); ``recipe_hint`` first
    (recompute modules -> selective, recompute layer counts -> full, their count from
    :func:`recompute_layers_of`); NVIDIA tables that do not state it: the family default the
    entry quotes, else no recompute for the dense Llama / GPT-3 / Qwen3 / GPT-OSS rows."""
    hint = _hint(par)
    granularity = str(hint.get("recompute_granularity") or "").strip().lower()
    if granularity in ("full", "selective"):
        return granularity
    if hint.get("recompute_modules"):
        return "selective"  # named modules: recompute_modules_of maps the set
    if hint.get("recompute_num_layers") or str(hint.get("recompute_method", "")).strip():
        return "full"  # Megatron-Core's method / layer count belong to full granularity
    text = par.get("recompute")
    t = "" if text is None else str(text)
    if _PARTIAL_TEXT.search(t) or t.strip().lower().startswith("partial"):
        return "full"
    if nemo and _not_stated(text):
        fam = _family_default(t)
        if fam is not None:
            return fam
        name = f"{model.get('name', '')}"
        if _NO_RECOMPUTE_FAMILIES.search(name) or not model.get("moe"):
            return "none"
    if _not_stated(text) and text is not None:
        return "full"  # "not stated" is absent: full (README)
    return parse_recompute(text)


def recompute_modules_of(par: Mapping[str, Any], recompute: str) -> str:
    """ParallelConfig.recompute_modules of an entry: ``recipe_hint.recompute_modules``
    (Megatron-Core ``--recompute-modules``; TransformerConfig.recompute_modules replaces the
    default ``["core_attn"]``, so a list without it does not recompute the attention core)
    joined with "+" where the cost model has that set (costmodel.specs.RECOMPUTE_MODULES:
    core_attn, mlp, layernorm, moe_act). A set naming a module the cost model does not
    price (``mla_up_proj``, ``moe``, ``shared_experts``, ...) keeps the nearest, the
    attention core (``core_attn``), as every selective entry was scored before the modules
    existed. ``core_attn`` where recompute is not selective or the hint names none."""
    mods = _hint(par).get("recompute_modules")
    if recompute != "selective" or not mods:
        return "core_attn"
    if not isinstance(mods, str | list | tuple):  # a malformed hint: the default set
        return "core_attn"
    names = [mods] if isinstance(mods, str) else [str(x) for x in mods]
    names = [n.strip().lower() for n in names if str(n).strip()]
    for cand in RECOMPUTE_MODULES:
        if sorted(cand.split("+")) == sorted(set(names)):
            return cand
    return "core_attn"


def recompute_layers_of(par: Mapping[str, Any], recompute: str, layers: int, chunks: int) -> int:
    """ParallelConfig.recompute_num_layers of an entry with ``recompute`` full whose layers
    are split in ``chunks`` model chunks (pp x vpp): 0 = every layer. Megatron-Core
    (TransformerBlock._checkpointed_forward): ``--recompute-method block
    --recompute-num-layers N`` recomputes the first N layers of every model chunk and keeps the
    others' activations; ``uniform`` recomputes every layer (checkpointing groups of N layers:
    the cost model stores every layer's input, an upper bound on its memory), as does a block
    count at or over the chunk. A text "N of M layers" is per chunk where M is a chunk's
    layers, an even split of the model's where M is all of them. Raises :class:`SkipEntry`
    where the entry states a partial recompute without its count or method."""
    if recompute != "full":
        return 0
    hint = _hint(par)
    method = str(hint.get("recompute_method") or "").strip().lower()
    text = "" if par.get("recompute") is None else str(par.get("recompute"))
    per_chunk = -(-layers // chunks)
    n = _as_int(hint.get("recompute_num_layers"))
    if method or n:
        if method == "uniform":
            return 0
        if method != "block" or n is None:
            raise SkipEntry(f"incomplete layout: partial recompute (recipe_hint recompute_method "
                            f"{method or 'not stated'!r}, recompute_num_layers {n}): Megatron-Core "
                            "needs block or uniform and a layer count")
        return 0 if n >= per_chunk else n
    m = _PARTIAL_TEXT.search(text)
    if m:
        n, of = int(m.group(1)), int(m.group(2))
        if of == per_chunk:
            return 0 if n >= per_chunk else n
        if of == layers and n % chunks == 0:
            return 0 if n // chunks >= per_chunk else n // chunks
        raise SkipEntry(f"incomplete layout: partial recompute {text.strip()[:60]!r}: {n} of "
                        f"{of} layers is not one count per model chunk ({layers} layers on "
                        f"{chunks} chunks)")
    if text.strip().lower().startswith("partial"):
        raise SkipEntry(f"incomplete layout: partial recompute {text.strip()[:60]!r} without "
                        "a layer count")
    return 0


def offload_layers_of(par: Mapping[str, Any]) -> int:
    """ParallelConfig.cpu_offloading_num_layers of an entry (Megatron-Core
    ``--cpu-offloading-num-layers``): the count an ``offload`` field of the entry or its
    ``recipe_hint`` gives; a false / 0 field is no offload. Raises :class:`SkipEntry` where
    the entry offloads without saying how many layers."""
    fields = {**{k: x for k, x in par.items() if k != "recipe_hint"}, **_hint(par)}
    stated = [x for k, x in fields.items() if "offload" in str(k).lower()]
    counts = [x for x in stated if isinstance(x, int) and not isinstance(x, bool)]
    if counts:
        return max(0, max(counts))
    on = [x for x in stated if _bool_field(x)]
    if on or "offload" in str(par.get("recompute", "")).lower():
        raise SkipEntry("incomplete layout: activation CPU offload without its layer count "
                        "(--cpu-offloading-num-layers)")
    return 0


def cp_comm_type_of(group: str, par: Mapping[str, Any]) -> str:
    """The CP communication of an entry: ``cp_comm_type`` (or the recipe hint's) where it is
    given; torchtitan's default rotate method all-gathers the K/V shards (TT-0.2.2
    ``context_parallel_rotate_method = "allgather"``); Megatron-Core's default is p2p."""
    hint = par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}
    given = str(par.get("cp_comm_type") or hint.get("cp_comm_type") or "").strip().lower()
    given = {"allgather": "all_gather"}.get(given, given)
    if given in ("p2p", "all_gather", "a2a", "a2a+p2p"):
        return given
    fw = f"{group} {par.get('framework', '')}".lower()
    return "all_gather" if "torchtitan" in fw else "p2p"


def zero_of(par: Mapping[str, Any], *, nemo: bool) -> int:
    """README: ``zero_stage`` (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2); an ``fsdp`` column
    > 0 in an NVIDIA table is Megatron-FSDP (3); NVIDIA tables otherwise use the distributed
    optimizer (1); "not stated" reads as absent."""
    fsdp = _as_int(par.get("fsdp"))
    z = par.get("zero_stage")
    if nemo and fsdp is not None and fsdp > 0:
        return 3
    if _not_stated(z):
        return 1 if nemo else 0
    return parse_zero(z)


def moe_block(model: Mapping[str, Any]) -> dict[str, Any] | None:
    """The MoESpec fields of an entry's ``model.moe`` block (README: experts, top-k, expert
    and shared-expert widths, dense layers), or None when it is absent or incomplete."""
    m = model.get("moe")
    if not isinstance(m, Mapping):
        return None
    e, k, f = (_as_int(m.get(x)) for x in ("num_experts", "top_k", "expert_ffn_hidden"))
    if not (e and k and f) or e < 2:
        return None
    shared = _as_int(m.get("shared_experts")) or 0
    fs = _as_int(m.get("shared_expert_ffn_hidden")) or 0
    if shared and not fs:
        fs = shared * f
    out = dict(num_experts=e, top_k=k, expert_ffn_hidden_size=f,
               dense_layers=_as_int(m.get("dense_layers")) or 0,
               router="sigmoid" if "sigmoid" in str(m.get("router", "")).lower()
               else "softmax")
    if shared and fs:
        out.update(shared_experts=shared, shared_ffn_hidden_size=fs)
    if str(model.get("moe_token_dropping", "")).lower().startswith("token-drop"):
        # the tables' token-drop variant: Megatron-Bridge's capacity factor 1.0, padded to
        # capacity (static expert shapes)
        out["capacity_factor"] = 1.0
    return out


def moe_segment_domain(domain: int | None, world: int, gpus_per_node: int) -> int | None:
    """The NVLink domain a MoE job's expert-parallel groups see on NVL72 racks. Megatron-Bridge
    places a job with Slurm's ``--segment`` (hardware.intra_node: "slurm --segment up to 18
    nodes"): whole segments of ``s`` hosts in one rack, ``s`` dividing the job's hosts. A
    256-GPU job on 4-GPU trays runs as 4 segments of 16 trays, 64 GPUs a rack, so its
    64-rank EP groups sit inside one rack; the cost model's contiguous 72-GPU domains would
    cut them. The domain is the largest whole number of hosts, at most the rack, whose GPUs
    divide the world (the world itself when it fits in one rack)."""
    if not domain or world <= domain:
        return domain
    for hosts in range(domain // gpus_per_node, 0, -1):
        if world % (hosts * gpus_per_node) == 0:
            return hosts * gpus_per_node
    return domain


def logged_micro_batch(par: Mapping[str, Any], gbs: int, mbs: int, dp: int) -> int:
    """The micro-batch of an entry whose layout was inferred by matching submitter configs
    (``layout_source`` "INFERRED") and whose result log states the gradient accumulation
    (``grad_accum_logged``, MLPerf): where the two contradict, the log is the run's own
    record and the micro-batch is ``global_batch / (dp x logged accumulation)``, if whole.
    GigaComputing's MI355X Llama 3.1 8B row matches a config of micro-batch 4 but logs 2
    accumulation steps at global batch 32 on 8 ranks (its notes: "CHECK"), i.e. micro-batch 2,
    AMD's own MI355X setting; at 4 and without recompute it would need 292 GiB of the 288."""
    ga = _as_int(par.get("grad_accum_logged"))
    if ga is None or ga < 1 or "INFERRED" not in str(par.get("layout_source", "")).upper():
        return mbs
    if gbs == mbs * dp * ga or gbs % (dp * ga):
        return mbs
    return gbs // (dp * ga)


def moe_layout_consistent(par: Mapping[str, Any], gbs: int, mbs: int, dp: int) -> None:
    """Raise :class:`SkipEntry` when a MoE table row's own gradient-accumulation column
    (``grad_accum_reported``) contradicts its layout (``global_batch / (micro_batch x dp)``):
    one of the four columns is misprinted and the run's micro-batch, batch or DP degree (and
    so its step and its memory) cannot be told. Megatron-Bridge 25.11's GPT-OSS-120B on 64
    H100 prints GA 2 beside GBS 512, MBS 4 and DP 16 (8); scored as printed it needs 116 GiB
    of the 80."""
    ga = _as_int(par.get("grad_accum_reported"))
    if ga is not None and mbs * dp and ga * mbs * dp != gbs:
        raise SkipEntry(f"inconsistent layout: grad_accum_reported {ga} != global_batch {gbs} "
                        f"/ (micro_batch {mbs} x dp {dp}) = {gbs / (mbs * dp):g}")


def moe_graphed(par: Mapping[str, Any]) -> bool:
    """Whether a MoE entry's recipe runs its MoE layers inside CUDA graphs
    (``recipe_hint.cuda_graph_impl: full_iteration``, or a graph scope naming the whole MoE
    block, ``moe``): no host stall at the dispatcher (:func:`costmodel.moe.moe_host_stall_s`).
    Scopes of the router and preprocess only leave the dispatch and the experts eager."""
    hint = par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}
    if str(hint.get("cuda_graph_impl", "")).lower() == "full_iteration":
        return True
    scope = hint.get("cuda_graph_scope") or []
    scope = [scope] if isinstance(scope, str) else list(scope)
    return any(str(x).lower() == "moe" for x in scope)


def moe_ep_overlap_of(par: Mapping[str, Any]) -> bool:
    """The recipe's ``moe_a2a_overlap`` (Megatron's --overlap-moe-expert-parallel-comm) where
    its CUDA graphs let Megatron run it: core_v0.16.1 ``TransformerConfig.__post_init__``
    accepts the overlap with no graphs or ``transformer_engine`` graphs without the ``moe``
    and ``mlp`` scopes. Full-iteration graphs (``TrainingSpec.moe_cuda_graph``) are refused by
    the cost model's own rule; a ``local`` impl or an ``mlp`` scope is refused here."""
    hint = par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}
    if _bool_field(hint.get("moe_a2a_overlap")) is not True:
        return False
    impl = str(hint.get("cuda_graph_impl") or "none").lower()
    scope = hint.get("cuda_graph_scope") or []
    scope = {str(x).lower() for x in ([scope] if isinstance(scope, str) else scope)}
    return impl in ("none", "full_iteration") or (impl == "transformer_engine"
                                                  and not scope & {"moe", "mlp"})


def moe_attention_graphed(par: Mapping[str, Any]) -> bool:
    """Whether a MoE entry's recipe captures each layer's attention block in a per-layer CUDA
    graph (``recipe_hint.cuda_graph_impl`` transformer_engine / local with ``attn`` in
    ``cuda_graph_scope``); full-iteration graphs are :func:`moe_graphed`."""
    hint = par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}
    if str(hint.get("cuda_graph_impl", "")).lower() not in ("transformer_engine", "local"):
        return False
    scope = hint.get("cuda_graph_scope") or []
    scope = [scope] if isinstance(scope, str) else list(scope)
    return any(str(x).lower() == "attn" for x in scope)


def pipeline_layout_of(par: Mapping[str, Any], spec: ModelSpec, pp: int, vpp: int
                       ) -> str | None:
    """The recipe's explicit pipeline layout (``recipe_hint.pp_layout``, Megatron's
    ``--pipeline-model-parallel-layout``) after Megatron's checks against the model and the
    entry's pp x vpp; SkipEntry where it does not fit them."""
    text = _hint(par).get("pp_layout")
    if not text:
        return None
    from costmodel.pipeline_layout import check_fit, check_layout, without_mtp
    mtp = spec.moe.mtp_layers if spec.moe is not None else 0
    text = str(text)
    if not mtp and "m" in text:
        # the entries' model blocks state no MTP module (DeepSeek-V3's is prose), and no row
        # prices one: the layout is scored with its stages' MTP modules left out
        text = without_mtp(text)
    try:
        check_layout(text, spec.num_layers, mtp)
        check_fit(text, pp, max(vpp, 1), field="recipe_hint.pp_layout")
    except InputError as e:
        raise SkipEntry(f"pipeline layout rejected: {e}") from None
    return text


def moe_dispatcher_of(par: Mapping[str, Any]) -> str:
    """``flex`` where the recipe names a flex dispatcher backend (``recipe_hint``
    ``moe_flex_dispatcher_backend``: deepep / hybridep), else Megatron's ``alltoall``."""
    hint = par.get("recipe_hint") if isinstance(par.get("recipe_hint"), Mapping) else {}
    return "flex" if hint.get("moe_flex_dispatcher_backend") else "alltoall"


def mla_block(model: Mapping[str, Any]) -> MLASpec | None:
    m = model.get("mla")
    if not isinstance(m, Mapping):
        return None
    try:
        return MLASpec(q_lora_rank=_as_int(m.get("q_lora_rank")),
                       kv_lora_rank=_as_int(m.get("kv_lora_rank")),
                       qk_nope_head_dim=_as_int(m.get("qk_nope_head_dim")),
                       qk_rope_head_dim=_as_int(m.get("qk_rope_head_dim")),
                       v_head_dim=_as_int(m.get("v_head_dim")))
    except InputError as e:
        raise SkipEntry(f"model.mla rejected: {e}") from None


def moe_model_spec(spec: ModelSpec, model: Mapping[str, Any]) -> ModelSpec:
    """A MoE entry's ModelSpec: the dense shape plus its MoE (and MLA) blocks. Every MoE
    family of the data (DeepSeek-V3, Qwen3-MoE, GPT-OSS) is a RoPE, RMSNorm, SwiGLU model
    with untied embeddings; GPT-OSS has attention biases and sinks, Qwen3 q/k norms."""
    name = f"{model.get('name', '')}".lower()
    oss = "gpt-oss" in name or "gpt_oss" in name
    moe = dict(moe_block(model))
    if oss:
        # biased expert linears and the clamped SwiGLU (Bridge GPTOSSProvider:
        # activation_func_clamp_value 7.0; HF swiglu_limit)
        moe.update(router_bias=True, expert_bias=True, activation_clamp=7.0)
    try:
        return replace(spec, moe=MoESpec(**moe), mla=mla_block(model), gated_mlp=True,
                       tied_embeddings=False, learned_position_embeddings=False,
                       max_position_embeddings=None, normalization="rmsnorm",
                       linear_bias=oss, attention_sinks=oss, qk_norm=True if "qwen3" in name else None)
    except InputError as e:
        raise SkipEntry(f"model.moe rejected: {e}") from None


def not_modelled(entry: Mapping[str, Any], model: Mapping[str, Any],
                 par: Mapping[str, Any]) -> list[str]:
    """Why the cost model cannot score an entry yet, one reason per feature ([] if it can)."""
    out = []
    arch = f"{model.get('name', '')} {model.get('arch_notes', '')}"
    if model.get("mamba") or re.search(r"\bhybrid\b|mamba", arch, re.IGNORECASE):
        out.append(SKIP_MAMBA)
    moe = mixture_of_experts(model, par)
    if not moe and isinstance(model.get("moe"), Mapping):
        moe = f"model.moe: {model['moe'].get('num_experts', '?')} experts"
    if moe and not (moe_block(model) and not out):  # a complete MoE block is modelled
        out.append(f"{SKIP_MOE} ({moe})")
    return out


def skip_category(reason: str) -> str:
    """The class of a skip reason (the report counts skips per class)."""
    r = reason
    for prefix, cat in ((SKIP_MAMBA, "mamba"), (SKIP_MOE, "MoE (issue 22)"),
                        (SKIP_CP, "cp > 1 (issue 21)")):
        if r.startswith(prefix):
            return cat
    if r.startswith("incomplete layout:"):
        return "incomplete layout or model"
    for key, cat in (("uneven interleaved", "uneven interleaved split (issue 21)"),
                     ("uneven pipeline layout", "uneven pipeline layout (issue 21)"),
                     ("layout_complete: false", "incomplete layout (layout_complete: false)"),
                     ("expert grid", "expert grid does not tile the world (published layout)"),
                     ("grad_accum_reported", "gradient accumulation contradicts the layout "
                      "(published layout)"),
                     ("incomplete", "incomplete layout or model"),
                     ("NCCL", "NCCL bus-bandwidth entry"),
                     ("analytical", "analytical formula"),
                     ("the same measurement", "a measurement quoted twice"),
                     ("no measured step time", "no measured step time, memory or OOM"),
                     ("catalog key", "GPU without a catalog key"),
                     ("no fp", "precision the GPU lacks")):
        if key in r:
            return cat
    return r.split(":")[0]


def _uneven_interleaves(spec: ModelSpec, pp: int, vpp: int) -> bool:
    """Whether Megatron's uneven split of ``spec``'s layers on ``pp`` stages interleaves in
    ``vpp`` chunks through a pipeline layout (the rule ``virtual_stages_divide_layers``):
    Megatron-Bridge's Llama 3.1 405B, 126 layers on pp 16 (7, 8 x 14, 7: the embedding and the
    loss counted as a layer each) in 4 or 8 chunks."""
    import numpy as np

    from costmodel.schedule import stage_layers

    first, mid, last, ok = (float(x[0]) for x in stage_layers(spec.num_layers, np.array([pp])))
    uneven = first != last or (pp >= 3 and (first != mid or last != mid))
    return (bool(ok) and uneven and first >= vpp - 1 and last >= vpp - 1
            and (pp <= 2 or mid >= vpp))


def uses_expandable_segments(entry: Mapping[str, Any]) -> bool:
    """Whether the run's PyTorch allocator ran with ``expandable_segments:True`` (it sets the
    fragmentation reserve, stage_memory.fragmentation_fraction). The 2026 collection's stacks
    set it in their launch scripts (torchtitan's run_train.sh; Megatron-Bridge / NeMo
    performance recipes, as Megatron-LM's MoE README recommends; modern-training.md 4.5);
    ``published_runs.yaml``'s runs (2021-2023: Megatron-LM SC21, Korthikanti, BLOOM on
    PyTorch 1.11, vTrain, llm-foundry on PyTorch 2.0) predate the option (PyTorch 2.1) and ran
    fixed segments. ``parallel.expandable_segments`` overrides."""
    par = entry.get("parallel") or {}
    given = par.get("expandable_segments") if isinstance(par, Mapping) else None
    if isinstance(given, bool):
        return given
    return str(entry.get("_file", PUBLISHED_FILE)) == PUBLISHED_2026_FILE


def map_entry(entry: Mapping[str, Any], *, include_derived: bool = False) -> Run:
    """Map one ``published_runs.yaml`` / ``published_runs_2026.yaml`` entry; raises
    :class:`SkipEntry` with the reason."""
    if not isinstance(entry, Mapping):
        raise SkipEntry(f"malformed entry: a {type(entry).__name__}, not a mapping")
    eid = str(entry.get("id", "?"))
    group = str(entry.get("group", ""))
    sections = {}
    for key in ("model", "hardware", "parallel", "measured", "derived"):
        value = entry.get(key) or {}
        if not isinstance(value, Mapping):
            raise SkipEntry(f"malformed entry: {key} is a {type(value).__name__}, "
                            "not a mapping")
        sections[key] = value
    model, hardware, par, measured, derived = sections.values()
    if group.startswith("nccl") or "busbw_GBps" in measured:
        raise SkipEntry("NCCL bus-bandwidth entry (see the NCCL section)")
    if str(entry.get("type", "")) == "analytical_formula":
        raise SkipEntry("analytical formula, not a measured run")
    reasons = not_modelled(entry, model, par)
    if reasons:
        raise SkipEntry("; ".join(reasons))
    if entry.get("layout_complete") is False:
        missing = entry.get("layout_missing") or []
        raise SkipEntry("incomplete layout (layout_complete: false): missing "
                        + (", ".join(map(str, missing)) if missing else "not listed"))
    tp = _require_int(par, "tp", "layout")
    pp = _require_int(par, "pp", "layout")
    dp = _require_int(par, "dp", "layout")
    if par.get("micro_batch") is None and pp == 1 and _as_int(par.get("local_batch")):
        # torchtitan's local_batch: the per-rank batch; without a pipeline it is the
        # micro-batch (no other split)
        mbs = _require_int(par, "local_batch", "layout")
    else:
        mbs = _require_int(par, "micro_batch", "layout")
    gbs = _require_int(par, "global_batch", "layout")
    mbs = logged_micro_batch(par, gbs, mbs, dp)
    vtrain = group.startswith("vtrain")
    nemo = is_nemo_table(group, par)
    moe = moe_block(model)
    if moe is not None and isinstance(model.get("mla"), Mapping):
        model = {k: v for k, v in model.items() if k != "kv_heads"}  # MLA: no GQA groups
    spec, seq = model_spec(model, name=eid)
    if moe is not None:
        spec = moe_model_spec(spec, model)
    _layout_check(spec, tp)
    if gbs % (mbs * dp):
        raise SkipEntry(f"global_batch {gbs} not a multiple of micro_batch {mbs} x dp {dp}")
    cp = _as_int(par.get("cp")) or 1  # dp excludes cp: world = tp * cp * pp * dp
    world = tp * cp * pp * dp
    n_gpus = _as_int(hardware.get("num_gpus"))
    if n_gpus is not None and n_gpus != world:
        raise SkipEntry(f"num_gpus {n_gpus} != tp*cp*pp*dp = {world}")

    # hardware
    if vtrain:
        gpu = "a100-sxm-80gb"
    else:
        if not hardware.get("gpu"):
            raise SkipEntry("hardware.gpu missing")
        gpu = gpu_key(hardware["gpu"], hardware.get("gpu_memory_gb"))
    gpn = _leading_int(hardware.get("gpus_per_node"), 8)
    domain = _as_int(hardware.get("nvlink_domain_gpus"))
    if domain is None:
        # GB200 / GB300 exist only as NVLink racks (NVL72: 18 hosts of 4 GPUs): an entry that
        # does not state the domain (MLPerf's Lambda GB300 n18) is on its GPU's rack, not on
        # hosts joined by NICs alone; a host of another size keeps a one-host domain
        from costmodel import hardware as hw

        host, preset_domain = hw.default_host_and_domain(hw.get_gpu(gpu))
        domain = preset_domain if preset_domain and gpn == host else None
    if moe is not None:
        domain = moe_segment_domain(domain, world, gpn)
    cluster = build_cluster(gpu, world, gpn, hardware.get("inter_node"), nvlink_domain=domain)

    # layout
    vpp = _as_int(par.get("vpp")) or 1
    recipe = ""
    if vtrain:
        precision, recompute, zero, vpp = "fp16", "full", 0, 1
    else:
        precision, recipe = precision_of(par, nemo=nemo)
        recompute = recompute_of(par, model, nemo=nemo or runs_mlperf_llama_impl(group, par))
        zero = zero_of(par, nemo=nemo or runs_nvidia_mlperf_impl(
            group, (entry.get("hardware") or {}).get("gpu")))
    if vpp > 1 and spec.num_layers % (pp * vpp) and not _uneven_interleaves(spec, pp, vpp) \
            and not _hint(par).get("pp_layout"):  # an explicit layout: pipeline_layout_of
        raise SkipEntry(f"uneven interleaved split: {spec.num_layers} layers on pp {pp} x vpp "
                        f"{vpp} chunks: no pipeline layout gives every chunk a layer")
    sp = _bool_field(par.get("sequence_parallel"))
    if sp is None:
        sp = (nemo or runs_torchtitan(group, par)) and tp > 1
    partial = 0 if vtrain else recompute_layers_of(par, recompute, spec.num_layers, pp * vpp)
    offload = 0 if vtrain else offload_layers_of(par)
    recompute, recompute_layers = torchtitan_layer_sac(group, par, recompute, spec.num_layers,
                                                       pp)
    recompute_layers = recompute_layers or partial
    experts = {}
    if moe is not None:  # etp not stated: 1, the MoE recipes' setting (MoE README)
        moe_layout_consistent(par, gbs, mbs, dp)
        experts = dict(ep=_as_int(par.get("ep")) or 1, etp=_as_int(par.get("etp")) or 1)
        if (tp * cp * dp) % (experts["ep"] * experts["etp"]) or \
                moe["num_experts"] % experts["ep"]:
            raise SkipEntry(f"expert grid ep={experts['ep']} etp={experts['etp']} does not "
                            f"tile tp*cp*dp={tp * cp * dp} or the {moe['num_experts']} experts")
    try:
        # at cp = 1 the comm type is moot and only p2p is a configuration (rule cp_comm_type)
        pc = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp,
                            cp_comm_type=cp_comm_type_of(group, par) if cp > 1 else "p2p",
                            micro_batch_size=mbs, precision=precision,
                            recompute=recompute, sequence_parallel=bool(sp) and tp > 1,
                            recompute_modules=recompute_modules_of(par, recompute),
                            recompute_num_layers=recompute_layers, zero_stage=zero,
                            cpu_offloading_num_layers=offload,
                            schedule="interleaved" if vpp > 1 else "1f1b",
                            virtual_stages=vpp if vpp > 1 else 1, **experts)
    except InputError as e:
        raise SkipEntry(f"layout rejected: {e}") from None
    if not cluster.gpu.supports(precision):
        raise SkipEntry(f"{cluster.gpu.name} has no {precision} peak")
    flags = framework_flags(group, par)
    training = TrainingSpec(seq_length=seq, global_batch_size=gbs,
                            flash_attention=flags.flash_attention,
                            overlap_grad_reduce=flags.overlap_grad_reduce, dropout=flags.dropout,
                            framework=flags.framework,
                            tp_comm_overlap=flags.tp_comm_overlap or torchtitan_async_tp(
                                group, par, tp),
                            fp8_recipe="delayed" if vtrain else fp8_recipe_of(par),
                            overlap_p2p_comm=overlaps_p2p(entry, flags),
                            fp8_param_gather=gathers_in_fp8(group, par),
                            grad_reduce_in_bf16=reduces_in_bf16(group, par, flags),
                            expandable_segments=uses_expandable_segments(entry),
                            # the torchtitan rows state torch.compile (their tables' *_compile
                            # rows); None: not stated, the profile's default element-wise traffic
                            torch_compile=_bool_field(par.get("torch_compile")),
                            # NVIDIA's MoE benchmarks force-balance the routing (README)
                            moe_load_imbalance=1.0 if moe is not None and nemo else None,
                            moe_cuda_graph=moe is not None and moe_graphed(par),
                            moe_attention_graphed=moe is not None and moe_attention_graphed(par),
                            fp8_dot_product_attention=_bool_field(_hint(par).get(
                                "fp8_dot_product_attention")) is True and precision == "fp8",
                            moe_dispatcher=moe_dispatcher_of(par) if moe is not None
                            else "alltoall",
                            # --overlap-moe-expert-parallel-comm (the recipe's
                            # moe_a2a_overlap); the cost model applies it where Megatron runs it
                            moe_ep_overlap=moe is not None and moe_ep_overlap_of(par),
                            pipeline_layout=pipeline_layout_of(par, spec, pp, vpp))

    step, src = measured_step_time(measured, derived, training.tokens_per_step, world,
                                   include_derived=include_derived, global_batch=gbs)
    location = str((entry.get("source") or {}).get("location", ""))
    table = ""
    per_layer = None
    if group.startswith("korthikanti") and "Table 5" in location and step is not None:
        table = "table5"
    if isinstance(measured.get("per_layer_combined_ms"), int | float):
        table = "table4"
        per_layer = float(measured["per_layer_combined_ms"]) / 1e3
    reserved = measured.get("peak_memory_gib")
    reserved = float(reserved) * 2**30 if isinstance(reserved, int | float) \
        and not isinstance(reserved, bool) and reserved > 0 else None
    return Run(id=eid, group=group, model=spec, cluster=cluster, training=training,
               parallel=pc, step_time_s=step, step_time_source=src,
               memory_bytes=_measured_memory(measured), oom=measured.get("oom") is True,
               table=table, per_layer_s=per_layer,
               oom_reliable=measured.get("oom_reliable") is not False,
               reserved_memory_bytes=reserved, precision_recipe=recipe,
               recipe=recipe_hint_text(par.get("recipe_hint")),
               dataset=str(entry.get("_file", PUBLISHED_FILE)),
               reported_tflops_per_gpu=_positive(measured.get("model_tflops_per_gpu")),
               reported_mfu=(_positive(measured.get("mfu_pct_reported")) or 0.0) / 100 or None,
               source_regression=source_regression_note(entry))


#: an entry note quoting the source's own footnote that its figure is a known performance
#: regression (Megatron-Bridge 26.06.01 GPT-OSS-120B: "Performance regression in GPT-OSS 120B
#: pre-training is a known issue (cudnn-frontend#256). It will be resolved with the next
#: container release.")
SOURCE_REGRESSION = re.compile(r"performance regression.*known issue", re.IGNORECASE)


def source_regression_note(entry: Mapping[str, Any]) -> str:
    """The entry's note saying its source flags the figure as a known regression, or ""."""
    notes = entry.get("notes") or []
    notes = [notes] if isinstance(notes, str) else notes
    return next((str(n) for n in notes if SOURCE_REGRESSION.search(str(n))), "")


def _positive(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x > 0 \
        else None



def map_vtrain_row(row: Mapping[str, Any]) -> Run:
    """A ``vtrain_single_node.yaml`` row: one A100 80GB node, fp16, full recompute, 1F1B,
    ZeRO 0, ffn 4h, vocab 51200."""
    entry = {
        "id": row.get("id", "?"), "group": VTRAIN_SINGLE_GROUP, "_file": VTRAIN_FILE,
        "model": {k: row.get(k) for k in ("layers", "hidden", "heads", "seq_len")},
        "hardware": {"gpu": "A100 80GB", "num_gpus": row.get("num_gpus"), "gpus_per_node": 8},
        "parallel": {k: row.get(k) for k in ("tp", "pp", "dp", "micro_batch", "global_batch")},
        "measured": {"iteration_time_ms": row.get("iteration_time_ms")},
    }
    return map_entry(entry)


@dataclass
class Collected:
    runs: list[Run] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {id, group, reason}
    nccl_entries: list[dict] = field(default_factory=list)
    n_entries: int = 0


def _release_key(eid: str) -> tuple:
    m = re.match(r"mbridge_(\d+)p(\d+)(?:p(\d+))?_(.*)$", eid)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), m.group(4)) if m else ()


def inherit_moe_recipe_hints(entries: Sequence[Mapping[str, Any]]) -> list:
    """A Megatron-Bridge MoE row without a ``recipe_hint`` (no layout-matching preset was
    found for its release: the 26.08 rows) takes the hint of the same system, model,
    precision and layout in the latest earlier release that has one; the measured step times
    agree (26.08 vs 26.06 on GB200: Qwen3-30B 6.56 / 6.44 s, DeepSeek-V3 13.34 / 13.19 s,
    GPT-OSS-120B 2.86 / 2.83 s), so the launch recipe (CUDA graphs, dispatcher) is taken to
    be the same. Other entries pass unchanged."""
    def layout(e):
        p = e.get("parallel") or {}
        return (str((e.get("model") or {}).get("name")), str(p.get("precision_norm")),
                tuple(str(p.get(k)) for k in ("tp", "pp", "dp", "cp", "ep", "vpp",
                                               "micro_batch", "global_batch")))
    hinted = {}
    for e in entries:
        if not isinstance(e, Mapping) or e.get("group") != "mbridge_perf_moe":
            continue
        p = e.get("parallel") or {}
        k = _release_key(str(e.get("id", "")))
        if isinstance(p.get("recipe_hint"), Mapping) and k:
            key = (k[3], layout(e))
            if key not in hinted or hinted[key][0] < k[:3]:
                hinted[key] = (k[:3], p["recipe_hint"])
    out = []
    for e in entries:
        k = _release_key(str(e.get("id", ""))) if isinstance(e, Mapping) else ()
        p = (e.get("parallel") or {}) if isinstance(e, Mapping) else {}
        if k and e.get("group") == "mbridge_perf_moe" and isinstance(p, Mapping) \
                and not p.get("recipe_hint"):
            src = hinted.get((k[3], layout(e)))
            if src is not None and src[0] < k[:3]:
                e = {**e, "parallel": {**p, "recipe_hint": src[1]}}
        out.append(e)
    return out


def collect_runs(entries: Iterable[Mapping[str, Any]], vtrain_rows: Iterable[Mapping[str, Any]]
                 = (), *, include_derived: bool = False) -> Collected:
    out = Collected()
    entries = inherit_moe_recipe_hints(list(entries))
    for e in entries:
        out.n_entries += 1
        if not isinstance(e, Mapping):
            out.skipped.append({"id": "?", "group": "", "reason":
                                f"malformed entry: a {type(e).__name__}, not a mapping"})
            continue
        group = str(e.get("group", ""))
        if group.startswith("nccl"):
            out.nccl_entries.append(dict(e))
        try:
            run = map_entry(e, include_derived=include_derived)
        except SkipEntry as s:
            out.skipped.append({"id": str(e.get("id", "?")), "group": group, "reason": str(s),
                                "dataset": str(e.get("_file", PUBLISHED_FILE))})
            continue
        if run.step_time_s is None and run.memory_bytes is None and not run.oom \
                and run.per_layer_s is None:
            why = "no measured step time, memory or OOM"
            if (e.get("derived") or {}).get("iteration_time_s") is not None:
                why += " (only derived.iteration_time_s: use --include-derived)"
            out.skipped.append({"id": run.id, "group": group, "reason": why,
                                "dataset": run.dataset})
            continue
        out.runs.append(replace(run, measured_raw=_canonical(e.get("measured"))))
    for r in vtrain_rows:
        out.n_entries += 1
        if not isinstance(r, Mapping):
            out.skipped.append({"id": "?", "group": VTRAIN_SINGLE_GROUP, "reason":
                                f"malformed row: a {type(r).__name__}, not a mapping"})
            continue
        try:
            run = map_vtrain_row(r)
        except SkipEntry as s:
            out.skipped.append({"id": str(r.get("id", "?")), "group": VTRAIN_SINGLE_GROUP,
                                "reason": str(s)})
            continue
        row = {k: x for k, x in r.items() if k != "id"}
        out.runs.append(replace(run, measured_raw=_canonical(row)))
    out.runs, requoted = drop_requotes(out.runs)
    out.skipped.extend(requoted)
    for x in out.skipped:
        x.setdefault("dataset", VTRAIN_FILE if x["group"] == VTRAIN_SINGLE_GROUP
                     else PUBLISHED_FILE)
        x["category"] = skip_category(x["reason"])
    return out


def _canonical(x: Any) -> str:
    try:
        return json.dumps(x, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types, a circular structure
        return repr(x)


def _measured_key(r: Run) -> tuple:
    return (r.step_time_s, r.step_time_source, r.memory_bytes, r.oom, r.table, r.per_layer_s,
            r.measured_raw)


def drop_requotes(runs: Sequence[Run]) -> tuple[list[Run], list[dict]]:
    """Keep the first of runs that are one measurement quoted twice: the same group, model,
    cluster, training settings and layout, and identical measured values (the source's
    measured fields as given, and the step time, memory, OOM and per-layer time mapped from
    them). Counting such a copy would weigh one measurement twice in every metric and, in a
    sweep, let a single other run form a 3-run sweep. Only runs with a measured time are
    merged: two OOM reports (or two equal memory readings) of one layout carry no value that
    could tell a copy from a second run. Returns (kept runs, skipped rows {id, group,
    reason})."""
    first: dict[tuple, str] = {}
    kept: list[Run] = []
    dropped: list[dict] = []
    for r in runs:
        if r.step_time_s is None and r.per_layer_s is None:
            kept.append(r)
            continue
        key = (r.group, r.model, r.cluster, r.training, r.parallel, _measured_key(r))
        if key in first:
            dropped.append({"id": r.id, "group": r.group, "reason":
                            f"the same measurement as {first[key]} (same layout and measured "
                            "values): counted once", "dataset": r.dataset})
            continue
        first[key] = r.id
        kept.append(r)
    return kept, dropped


# =============================================================================================
# Scoring
# =============================================================================================
@dataclass(frozen=True)
class Predicted:
    step_time_s: float
    peak_memory_bytes: float  # what must fit (OOM checks)
    observed_memory_bytes: float  # nvidia-smi's maximum (compared with measured memory)
    per_layer_s: float | None = None
    # PyTorch's reserved memory (torchtitan's peak_memory_gib): the allocated peak plus the
    # fragmentation reserve; the CUDA context and NCCL's own buffers (cudaMalloc'd by NCCL)
    # are not in the caching allocator
    reserved_memory_bytes: float = float("nan")
    allocated_memory_bytes: float = float("nan")  # PyTorch's max_memory_allocated


def _score_group(model, cluster, training, configs: Sequence[ParallelConfig]):
    from costmodel.batch import ConfigBatch
    from costmodel.model import score

    return score(model, cluster, training, ConfigBatch.from_configs(list(configs)))


def _layer_part(scores, i: int) -> float:
    keys = ("compute", "recompute", "tp_comm")
    tb = scores.time_breakdown_s
    if all(k in tb for k in keys):
        part = float(sum(tb[k][i] for k in keys))
        if "cp_comm" in tb and tb["cp_comm"][i] > 0:  # the layers' CP communication
            part += float(tb["cp_comm"][i])
        return part / float(scores.microbatches[i])
    return float(scores.step_time_s[i]) / float(scores.microbatches[i])


def predict(runs: Sequence[Run]) -> tuple[dict[str, Predicted], list[dict]]:
    """Score every run, one ``score`` call per (model, cluster, training). Returns
    (id -> prediction, model errors [{id, group, reason}])."""
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.model, r.cluster, r.training), []).append(r)
    out: dict[str, Predicted] = {}
    errors: list[dict] = []
    for (model, cluster, training), rs in groups.items():
        try:
            sc = _score_group(model, cluster, training, [r.parallel for r in rs])
            batches = [(rs, sc)]
        except Exception:  # isolate the failing run(s): score one by one
            batches = []
            for r in rs:
                try:
                    batches.append(([r], _score_group(model, cluster, training, [r.parallel])))
                except Exception as e:  # reported, never hidden: printed in every report
                    errors.append({"id": r.id, "group": r.group,
                                   "reason": f"{type(e).__name__}: {e}"})
        for rr, sc in batches:
            for i, r in enumerate(rr):
                peak = float(sc.peak_memory_bytes[i])
                out[r.id] = Predicted(float(sc.step_time_s[i]), peak,
                                      float(sc.observed_memory_bytes[i]),
                                      reserved_memory_bytes=float(sc.reserved_memory_bytes[i]),
                                      allocated_memory_bytes=float(
                                          sc.allocated_memory_bytes[i]))
    # Korthikanti Table 4: one layer = difference between L and L - pp layers (one layer less
    # on every pipeline stage, so the heaviest stage's ceil(L/pp) drops by exactly one)
    for r in runs:
        pp = r.parallel.pp
        if r.per_layer_s is None or r.id not in out or r.model.num_layers <= pp:
            continue
        fewer = replace(r.model, num_layers=r.model.num_layers - pp)
        try:
            a = _score_group(r.model, r.cluster, r.training, [r.parallel])
            b = _score_group(fewer, r.cluster, r.training, [r.parallel])
        except Exception as e:
            errors.append({"id": r.id, "group": r.group, "reason": f"{type(e).__name__}: {e}"})
            continue
        out[r.id] = replace(out[r.id], per_layer_s=_layer_part(a, 0) - _layer_part(b, 0))
    return out, errors


# =============================================================================================
# Statistics
# =============================================================================================
def average_ranks(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they occupy."""
    x = np.asarray(x, dtype=float)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    start = np.cumsum(counts) - counts + 1.0
    return (start + (counts - 1.0) / 2.0)[inv.reshape(-1)]


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (Pearson of average ranks); nan when either side is
    constant or fewer than 2 points."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape:
        raise ValueError("spearman: x and y differ in length")
    if x.size < 2:
        return float("nan")
    rx = average_ranks(x) - (x.size + 1) / 2.0
    ry = average_ranks(y) - (y.size + 1) / 2.0
    den = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / den if den > 0 else float("nan")


def ape(predicted: float, measured: float) -> float:
    if not (math.isfinite(predicted) and measured > 0):
        return float("inf")
    return abs(predicted - measured) / measured


def _summary(errors: Sequence[float]) -> dict[str, float]:
    e = np.asarray(errors, dtype=float)
    if e.size == 0:
        return {"count": 0, "mape": float("nan"), "median_ape": float("nan"),
                "max_ape": float("nan")}
    return {"count": int(e.size), "mape": float(e.mean()), "median_ape": float(np.median(e)),
            "max_ape": float(e.max())}


def replicates_averaged(runs: Sequence[Run], pred: Mapping[str, Predicted]
                        ) -> tuple[list[float], list[float]]:
    """(predicted, measured) step times of a sweep's distinct configurations, the repeated
    measurements of one configuration (same parallel layout and training settings) averaged."""
    by_cfg: dict[tuple, list[Run]] = {}
    for r in runs:
        by_cfg.setdefault((r.parallel, r.training), []).append(r)
    return ([pred[rs[0].id].step_time_s for rs in by_cfg.values()],
            [float(np.mean([r.step_time_s for r in rs])) for rs in by_cfg.values()])


def sweep_key(r: Run) -> tuple:
    m = r.model
    return (r.group, r.cluster.gpu.name, m.num_layers, m.hidden_size, m.num_attention_heads,
            m.num_kv_heads, m.ffn_hidden_size, m.vocab_size, r.training.seq_length,
            r.num_gpus, r.training.global_batch_size)


def group_sweeps(runs: Iterable[Run]) -> dict[tuple, list[Run]]:
    """The runs by :func:`sweep_key`, keeping the sweeps of at least ``MIN_SWEEP`` runs."""
    sweeps: dict[tuple, list[Run]] = {}
    for r in runs:
        sweeps.setdefault(sweep_key(r), []).append(r)
    return {k: rs for k, rs in sweeps.items() if len(rs) >= MIN_SWEEP}


def _sweep_name(key: tuple) -> str:
    g, gpu, L, h, a, kv, f, V, s, n, B = key
    return f"{g}: {gpu} L{L} h{h} a{a} s{s} gpus{n} gbs{B}"


# =============================================================================================
# NCCL section
# =============================================================================================
@dataclass(frozen=True)
class NcclCase:
    cluster: ClusterSpec
    algos: tuple[str, ...]  # tried in order, first valid wins
    n_ranks: int
    n_nodes: int


def nccl_case(entry: Mapping[str, Any]) -> NcclCase:
    """Map an NCCL bus-bandwidth entry's interconnect text to a catalog cluster.

    Intra-node rows: one node of 8 GPUs of the named generation (PCIe Gen4 -> A100 PCIe,
    Gen5 -> H100 PCIe, NVLink2 -> DGX-1 V100, NVLink3 -> A100, NVLink4 -> H100, NVLink5 -> B200).
    Multi-node rows: 32 GPUs (4 nodes); "Nx G Gb" -> N NICs of G Gb/s, a bare "G Gb RDMA" -> one
    NIC. SHARP/NVLS rows use NVLS (multi-node: NVLS or CollNet, i.e. IB SHARP; skipped when
    the model offers neither); the plain NVLink rows of NVLS-capable
    GPUs (H100, B200) are NCCL's Ring (the slides contrast the two); other rows let the model
    choose ("auto"). Not modelled: TCP sockets, PCIe Gen6, GB200 NVL72.
    """
    from costmodel import hardware as hw

    hwb = entry.get("hardware") or {}
    text = str(hwb.get("interconnect", ""))
    low = text.lower()
    scope = str(hwb.get("scope", "")).lower()
    eid = str(entry.get("id", ""))
    if not text:
        raise SkipEntry("no interconnect named")
    if any(k in low for k in ("tcp", "gen6", "gb200", "nvl72")):
        raise SkipEntry(f"{text!r}: not in the catalog / not modelled")
    if "gen4" in low:
        preset, gen = "pcie-roce-a100", None
    elif "gen5" in low:
        preset, gen = "pcie-roce-h100", None
    elif "nvlink2" in low or "v100" in low:
        preset, gen = "dgx-1-v100", None
    elif "nvlink5" in low or "b200" in low:
        preset, gen = "dgx-b200", "b200"
    elif "nvlink4" in low or "nvl4" in low or "h100" in low:
        preset, gen = "dgx-h100", "h100"
    else:  # NVLink3 / A100 and generic RDMA rows
        preset, gen = "dgx-a100-80gb", None
    multi = "multi-node" in scope or "_inter_" in eid or "rdma" in low
    nodes = NCCL_MULTI_NODE_GPUS // 8 if multi else 1
    base = hw.get_cluster_preset(preset, nodes)
    inter = base.inter_node
    m = re.search(r"(\d+)\s*x\s*(\d+)\s*gb", low)
    if m:
        inter = replace(inter, nics_per_node=int(m.group(1)),
                        nic_bandwidth_bytes_per_s=int(m.group(2)) * 1e9 / 8)
    elif multi:
        m = re.search(r"(\d+)\s*gb\s*rdma", low)
        if m:
            inter = replace(inter, nics_per_node=1,
                            nic_bandwidth_bytes_per_s=int(m.group(1)) * 1e9 / 8)
    cluster = replace(base, inter_node=inter)
    if "sharp" in low or "nvls" in low:
        # multi-node SHARP is IB SHARP: NVLS with CollNet, or CollNet; NVLSTree is not SHARP
        algos = ("nvls",) if not multi else ("nvls", "collnet")
    elif gen in ("h100", "b200") and not multi:
        algos = ("ring",)
    else:
        algos = ("auto",)
    return NcclCase(cluster, algos, cluster.num_gpus, nodes)


def nccl_section(entries: Sequence[Mapping[str, Any]]) -> dict:
    try:
        from costmodel import collectives as coll
    except ImportError as e:
        return {"available": False, "reason": f"costmodel.collectives not importable: {e}",
                "runs": [], "skipped": []}
    runs, skipped = [], []
    for e in entries:
        eid = str(e.get("id", "?"))
        measured = (e.get("measured") or {}).get("busbw_GBps")
        if not isinstance(measured, int | float):
            skipped.append({"id": eid, "reason": "no busbw_GBps"})
            continue
        try:
            case = nccl_case(e)
        except SkipEntry as s:
            skipped.append({"id": eid, "reason": str(s)})
            continue
        system = coll.nccl_system(case.cluster)
        busbw = None
        used = ""
        for algo in case.algos:
            try:
                res = coll.collective_time_s(
                    system, "allreduce", np.array([float(NCCL_MESSAGE_BYTES)]),
                    np.array([case.n_ranks]), np.array([case.n_nodes]), algo=algo,
                    proto="auto", on_invalid="inf")
            except Exception as ex:  # noqa: BLE001 - reported as a skip reason
                skipped.append({"id": eid, "reason": f"{algo}: {type(ex).__name__}: {ex}"})
                break
            t = float(np.asarray(getattr(res, "time_s", res), dtype=float).reshape(-1)[0])
            if math.isfinite(t) and t > 0:
                n = case.n_ranks
                busbw = NCCL_MESSAGE_BYTES / t * 2.0 * (n - 1) / n / 1e9
                used = algo
                break
        if busbw is None:
            if not any(s["id"] == eid for s in skipped):
                skipped.append({"id": eid, "reason": f"none of {', '.join(case.algos)} is valid "
                                f"on {case.cluster.name} in the model"})
            continue
        runs.append({"id": eid, "interconnect": (e.get("hardware") or {}).get("interconnect"),
                     "cluster": case.cluster.name, "algo": used,
                     "predicted_busbw_GBps": busbw, "measured_busbw_GBps": float(measured),
                     "ape": ape(busbw, float(measured))})
    out = {"available": True, "message_bytes": NCCL_MESSAGE_BYTES, "runs": runs,
           "skipped": skipped}
    out.update(_summary([r["ape"] for r in runs]))
    return out


# =============================================================================================
# The whole validation
# =============================================================================================
def finite(x: Any) -> Any:
    """JSON-safe: non-finite floats become None (recursively)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def _checked(r: Run) -> bool:
    """Runs the checks (and the headline figures) cover: the calibrated data of
    ``published_runs.yaml`` and vTrain. The 2026 groups are scored and reported beside them
    (``new_groups``), not checked, until the Hopper/Blackwell fidelity work (issue 23)."""
    return r.dataset != PUBLISHED_2026_FILE


def _step_summary(run_rows: Sequence[dict], sweep_rows: Sequence[dict]) -> tuple[list, dict]:
    """(per-group rows, step-time block) of a set of runs and their sweeps."""
    by_group: dict[str, list[dict]] = {}
    for row in run_rows:
        by_group.setdefault(row["group"], []).append(row)
    groups = []
    for g, rows_g in by_group.items():
        s = _summary([x["ape"] for x in rows_g])
        rhos = [x["spearman"] for x in sweep_rows if x["group"] == g
                and math.isfinite(x["spearman"])]
        signed = [x["signed_error"] for x in rows_g if math.isfinite(x["signed_error"])]
        s.update({"group": g, "sweeps": len(rhos),
                  "spearman_mean": float(np.mean(rhos)) if rhos else float("nan"),
                  "mean_signed_error": float(np.mean(signed)) if signed else float("nan"),
                  "dataset": rows_g[0]["dataset"]})
        groups.append(s)
    groups.sort(key=lambda x: x["group"])
    valid_rhos = [x["spearman"] for x in sweep_rows if math.isfinite(x["spearman"])]
    avg_rhos = [x["spearman_replicates_averaged"] for x in sweep_rows
                if math.isfinite(x["spearman_replicates_averaged"])]
    mapes = [g["mape"] for g in groups]
    step = {
        "count": len(run_rows),
        "group_balanced_mape": float(np.mean(mapes)) if mapes else float("nan"),
        "overall": _summary([x["ape"] for x in run_rows]),
        "worst_group_median_ape": max((g["median_ape"] for g in groups), default=float("nan")),
        "mean_spearman": float(np.mean(valid_rhos)) if valid_rhos else float("nan"),
        "n_sweeps": len(valid_rhos),
        "n_sweeps_undefined": len(sweep_rows) - len(valid_rhos),
        "mean_spearman_replicates_averaged": float(np.mean(avg_rhos)) if avg_rhos
        else float("nan"),
        "n_sweeps_replicates_averaged": len(avg_rhos),
    }
    return groups, step


def _error_block(rows: Sequence[dict]) -> dict:
    s = _summary([x["ape"] for x in rows])
    signed = [x["signed_error"] for x in rows if math.isfinite(x["signed_error"])]
    s["mean_signed_error"] = float(np.mean(signed)) if signed else float("nan")
    return s


def new_groups_section(run_rows: Sequence[dict], sweep_rows: Sequence[dict]) -> dict:
    """The 2026 groups as the model scores them today: per group, per group and GPU, per GPU
    (n, MAPE, median, max, bias = mean signed error)."""
    rows = [x for x in run_rows if x["dataset"] == PUBLISHED_2026_FILE]
    groups, step = _step_summary(rows, [x for x in sweep_rows
                                        if any(r["group"] == x["group"] for r in rows)])
    for g in groups:  # MFU against the bf16 dense peak, as NVIDIA and Meta report it
        rg = [x for x in rows if x["group"] == g["group"]]
        for k in ("mfu_bf16_measured", "mfu_bf16_predicted", "mfu_bf16_reported"):
            vals = [x[k] for x in rg if math.isfinite(x[k])]
            g[k] = float(np.mean(vals)) if vals else float("nan")
    for g in groups:  # the headline keeps every row; beside it, without source-flagged ones
        rg = [x for x in rows if x["group"] == g["group"]]
        flagged = [x for x in rg if x.get("source_regression")]
        g["source_flagged"] = [{"id": x["id"], "ape": x["ape"],
                                "signed_error": x["signed_error"],
                                "note": x["source_regression"]} for x in flagged]
        kept = [x["ape"] for x in rg if not x.get("source_regression")]
        g["mape_without_source_flagged"] = (_summary(kept)["mape"] if flagged and kept
                                            else g["mape"])
    by_gg: dict[tuple[str, str], list[dict]] = {}
    by_gpu: dict[str, list[dict]] = {}
    for x in rows:
        by_gg.setdefault((x["group"], x["gpu"]), []).append(x)
        by_gpu.setdefault(x["gpu"], []).append(x)
    return {
        "groups": groups, "step_time": step,
        "by_group_and_gpu": [{"group": g, "gpu": gpu, **_error_block(v)}
                             for (g, gpu), v in sorted(by_gg.items())],
        "by_gpu": [{"gpu": gpu, **_error_block(v)} for gpu, v in sorted(by_gpu.items())],
    }


def skip_counts(skipped: Sequence[Mapping[str, Any]]) -> dict:
    """Skipped entries per reason class, per data file."""
    out: dict[str, dict[str, int]] = {}
    for x in skipped:
        d = out.setdefault(str(x.get("dataset", PUBLISHED_FILE)), {})
        d[x["category"]] = d.get(x["category"], 0) + 1
    return {k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in sorted(out.items())}


def _bf16_mfu(r: Run, step_s: float | None) -> float:
    """Model FLOPs per second over the bf16 dense peak (how NVIDIA and Meta report MFU)."""
    from costmodel.compute import model_flops_per_step

    peak = r.cluster.gpu.peak_flops_per_s.get("bf16") or r.cluster.gpu.peak_flops_per_s.get(
        "fp16")
    if not step_s or not peak or not math.isfinite(step_s):
        return float("nan")
    flops = model_flops_per_step(r.model, r.training.seq_length, r.training.global_batch_size)
    return flops / (step_s * r.num_gpus * peak)


def validate(data_dir: str | os.PathLike | None = None, *, include_derived: bool = False,
             thresholds: Mapping[str, float] | None = None) -> dict:
    """Run the harness; returns the metrics as one JSON-ready dict (see ``--json``).

    The headline figures and the checks (``groups``, ``step_time``, ``memory``,
    ``ran_predicted_over_memory``) cover ``published_runs.yaml`` and vTrain, as before the 2026
    file; its groups are scored and reported in ``new_groups`` (per group, per group and GPU,
    per GPU), ``step_time_all_groups`` (every group), ``reserved_memory`` (torchtitan) and
    ``ran_predicted_over_memory_2026``. The OOM check counts every reliable OOM report."""
    t0 = time.perf_counter()
    path = resolve_data_dir(data_dir)
    entries, rows = load_data(path)
    col = collect_runs(entries, rows, include_derived=include_derived)
    t1 = time.perf_counter()
    pred, model_errors = predict(col.runs)
    t2 = time.perf_counter()
    th = dict(THRESHOLDS if thresholds is None else thresholds)

    # ---- step time ------------------------------------------------------------------------
    step_runs = [r for r in col.runs if r.step_time_s is not None and r.id in pred]
    run_rows = []
    for r in step_runs:
        p = pred[r.id]
        run_rows.append({
            "id": r.id, "group": r.group, "gpu": r.cluster.gpu.name, "gpus": r.num_gpus,
            "tp": r.parallel.tp, "pp": r.parallel.pp, "dp": r.parallel.dp,
            "micro_batch": r.parallel.micro_batch_size,
            "global_batch": r.training.global_batch_size,
            "precision": r.parallel.precision, "recompute": r.parallel.recompute,
            "zero_stage": r.parallel.zero_stage, "schedule": r.parallel.schedule,
            "measured_s": r.step_time_s, "measured_from": r.step_time_source,
            "predicted_s": p.step_time_s, "ape": ape(p.step_time_s, r.step_time_s),
            "signed_error": (p.step_time_s - r.step_time_s) / r.step_time_s
            if math.isfinite(p.step_time_s) else float("inf"),
            "dataset": r.dataset, "virtual_stages": r.parallel.virtual_stages,
            "sequence_parallel": r.parallel.sequence_parallel,
            "nvlink_domain_gpus": r.cluster.domain_gpus,
            "precision_recipe": r.precision_recipe, "recipe": r.recipe,
            "source_regression": r.source_regression,
            "mfu_bf16_measured": _bf16_mfu(r, r.step_time_s),
            "mfu_bf16_predicted": _bf16_mfu(r, p.step_time_s),
            "mfu_bf16_reported": (r.reported_tflops_per_gpu * 1e12
                                  / r.cluster.gpu.peak_flops_per_s["bf16"])
            if r.reported_tflops_per_gpu and "bf16" in r.cluster.gpu.peak_flops_per_s
            else r.reported_mfu if r.reported_mfu else float("nan"),
        })
    sweep_rows = []
    for key, rs in group_sweeps(step_runs).items():
        rho = spearman([pred[r.id].step_time_s for r in rs], [r.step_time_s for r in rs])
        p_avg, m_avg = replicates_averaged(rs, pred)
        rho_avg = spearman(p_avg, m_avg) if len(p_avg) >= MIN_SWEEP else float("nan")
        sweep_rows.append({"sweep": _sweep_name(key), "group": key[0], "n": len(rs),
                           "spearman": rho, "configs": len(p_avg),
                           "spearman_replicates_averaged": rho_avg,
                           "dataset": rs[0].dataset})
    checked_ids = {r.id for r in col.runs if _checked(r)}
    checked_rows = [x for x in run_rows if x["id"] in checked_ids]
    checked_sweeps = [x for x in sweep_rows if x["dataset"] != PUBLISHED_2026_FILE]
    groups, step = _step_summary(checked_rows, checked_sweeps)
    _, step_all = _step_summary(run_rows, sweep_rows)

    # ---- memory and OOM --------------------------------------------------------------------
    from costmodel.memory_verdict import DEFAULT_MEMORY_FRACTION, FITS, verdict

    mem_rows, oom_rows, over_rows, over_2026, reserved_rows = [], [], [], [], []
    verdict_ran, verdict_ran_over, verdict_oom, verdict_oom_fit = 0, [], 0, []
    for r in col.runs:
        if r.id not in pred:
            continue
        p = pred[r.id]
        cap = r.cluster.gpu.memory_bytes
        # the default memory verdict (costmodel.memory_verdict): the predicted peak against
        # the GPU's memory less the one default safety margin
        said = verdict(p.peak_memory_bytes, DEFAULT_MEMORY_FRACTION * cap, cap)
        vrow = {"id": r.id, "group": r.group, "dataset": r.dataset, "verdict": said,
                "predicted_GiB": p.peak_memory_bytes / 2**30, "capacity_GiB": cap / 2**30,
                "limit_GiB": DEFAULT_MEMORY_FRACTION * cap / 2**30,
                "ratio": p.peak_memory_bytes / cap,
                "expandable_segments": r.training.expandable_segments}
        if r.step_time_s is not None:
            verdict_ran += 1
            if said != FITS:
                verdict_ran_over.append(vrow)
        if r.oom and r.oom_reliable:
            verdict_oom += 1
            if said == FITS:
                verdict_oom_fit.append(vrow)
        if r.memory_bytes is not None:
            mem_rows.append({"id": r.id, "group": r.group,
                             "measured_GiB": r.memory_bytes / 2**30,
                             "predicted_GiB": p.observed_memory_bytes / 2**30,
                             "ape": ape(p.observed_memory_bytes, r.memory_bytes),
                             "signed_error": (p.observed_memory_bytes - r.memory_bytes)
                             / r.memory_bytes})
        if r.reserved_memory_bytes is not None:
            reserved_rows.append({"id": r.id, "group": r.group, "gpu": r.cluster.gpu.name,
                                  "measured_GiB": r.reserved_memory_bytes / 2**30,
                                  "predicted_GiB": p.reserved_memory_bytes / 2**30,
                                  "capacity_GiB": cap / 2**30,
                                  "ape": ape(p.reserved_memory_bytes, r.reserved_memory_bytes),
                                  "signed_error": (p.reserved_memory_bytes
                                                   - r.reserved_memory_bytes)
                                  / r.reserved_memory_bytes})
        if r.oom:
            oom_rows.append({"id": r.id, "group": r.group,
                             "predicted_GiB": p.peak_memory_bytes / 2**30,
                             "capacity_GiB": cap / 2**30,
                             "predicted_to_fit": bool(p.peak_memory_bytes <= cap),
                             "oom_reliable": r.oom_reliable, "dataset": r.dataset})
        if r.step_time_s is not None and p.peak_memory_bytes > cap:
            # it ran (a step time was measured), so it fitted: the model is too pessimistic
            row = {"id": r.id, "group": r.group, "predicted_GiB": p.peak_memory_bytes / 2**30,
                   "capacity_GiB": cap / 2**30, "ratio": p.peak_memory_bytes / cap}
            (over_rows if _checked(r) else over_2026).append(row)
    memory = _summary([x["ape"] for x in mem_rows])
    memory.update({"unit": "GiB (measured 'GB' read as 2**30 bytes)", "runs": mem_rows})
    signed = [x["signed_error"] for x in mem_rows if math.isfinite(x["signed_error"])]
    memory["mean_signed_error"] = float(np.mean(signed)) if signed else float("nan")
    reserved = _error_block(reserved_rows)
    reserved.update({"unit": "GiB", "what": "torchtitan peak_memory_gib (PyTorch max reserved) "
                     "vs the predicted reserved peak (allocated + fragmentation reserve)",
                     "runs": reserved_rows})
    # the data's owner marks some OOM reports unreliable (bloom_prequel_110): listed, not
    # counted
    reliable = [x for x in oom_rows if x["oom_reliable"]]
    oom = {"count": len(reliable),
           "predicted_to_fit": sum(1 for x in reliable if x["predicted_to_fit"]),
           "runs": reliable,
           "excluded_unreliable": [x for x in oom_rows if not x["oom_reliable"]]}
    over_rows.sort(key=lambda x: -x["ratio"])
    over_2026.sort(key=lambda x: -x["ratio"])
    ran = sum(1 for r in col.runs if r.id in pred and r.step_time_s is not None and _checked(r))
    ran_over = {"count": ran, "predicted_over": len(over_rows), "runs": over_rows}
    verdict_ran_over.sort(key=lambda x: -x["ratio"])
    memory_verdict = {"margin": 1.0 - DEFAULT_MEMORY_FRACTION, "ran": verdict_ran,
                      "ran_not_fitting": len(verdict_ran_over), "ran_not_fitting_runs":
                      verdict_ran_over, "oom": verdict_oom,
                      "oom_predicted_to_fit": len(verdict_oom_fit),
                      "oom_predicted_to_fit_runs": verdict_oom_fit}
    ran_2026 = sum(1 for r in col.runs if r.id in pred and r.step_time_s is not None
                   and not _checked(r))
    ran_over_2026 = {"count": ran_2026, "predicted_over": len(over_2026), "runs": over_2026}

    # ---- Korthikanti Table 5 and Table 4 ---------------------------------------------------
    t5 = [x for x in run_rows if any(r.id == x["id"] and r.table == "table5" for r in step_runs)]
    table5 = _summary([x["ape"] for x in t5])
    table5.update({"within_5pct": sum(1 for x in t5 if x["ape"] <= 0.05),
                   "runs": [{k: x[k] for k in ("id", "predicted_s", "measured_s", "ape")}
                            for x in t5]})
    t4 = []
    for r in col.runs:
        if r.table == "table4" and r.id in pred and pred[r.id].per_layer_s is not None:
            t4.append({"id": r.id, "predicted_ms": pred[r.id].per_layer_s * 1e3,
                       "measured_ms": r.per_layer_s * 1e3,
                       "ape": ape(pred[r.id].per_layer_s, r.per_layer_s)})
    table4 = _summary([x["ape"] for x in t4])
    table4["runs"] = t4

    nccl = nccl_section(col.nccl_entries)

    # ---- checks ------------------------------------------------------------------------------
    def check(name: str, value: float, op: str) -> dict:
        limit = th[name]
        ok = math.isfinite(value) and (value <= limit if op == "<=" else value >= limit)
        return {"name": name, "value": value, "op": op, "threshold": limit, "ok": bool(ok)}

    checks = []
    if "group_balanced_mape" in th:
        checks.append(check("group_balanced_mape", step["group_balanced_mape"], "<="))
    if "worst_group_median_ape" in th:
        checks.append(check("worst_group_median_ape", step["worst_group_median_ape"], "<="))
    if "mean_spearman" in th:
        checks.append(check("mean_spearman", step["mean_spearman"], ">="))
    if "memory_mape" in th:
        checks.append(check("memory_mape", memory["mape"], "<="))
    if "oom_predicted_to_fit" in th:
        checks.append(check("oom_predicted_to_fit", float(oom["predicted_to_fit"]), "<="))
    if "korthikanti_table5_max_ape" in th and table5["count"]:
        checks.append(check("korthikanti_table5_max_ape", table5["max_ape"], "<="))
    if model_errors:
        checks.append({"name": "model_errors", "value": len(model_errors), "op": "<=",
                       "threshold": 0, "ok": False})

    return {
        "data_dir": str(path),
        "include_derived": include_derived,
        "counts": {"entries": col.n_entries, "runs": len(col.runs),
                   "step_time_runs": len(run_rows), "skipped": len(col.skipped),
                   "model_errors": len(model_errors),
                   "by_dataset": _dataset_counts(col, run_rows)},
        "groups": groups,
        "step_time": step,
        "step_time_all_groups": step_all,
        "new_groups": new_groups_section(run_rows, sweep_rows),
        "skip_counts": skip_counts(col.skipped),
        "sweeps": sweep_rows,
        "memory": memory,
        "reserved_memory": reserved,
        "oom": oom,
        "ran_predicted_over_memory": ran_over,
        "ran_predicted_over_memory_2026": ran_over_2026,
        "memory_verdict": memory_verdict,
        "korthikanti_table5": table5,
        "korthikanti_table4": table4,
        "nccl": nccl,
        "checks": checks,
        "passed": all(c["ok"] for c in checks),
        "runs": run_rows,
        "skipped": col.skipped,
        "model_errors": model_errors,
        "thresholds": th,
        "timing_s": {"load_and_map": t1 - t0, "score": t2 - t1,
                     "total": time.perf_counter() - t0},
    }


def _dataset_counts(col: Collected, run_rows: Sequence[dict]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for r in col.runs:
        out.setdefault(r.dataset, {"runs": 0, "step_time_runs": 0, "skipped": 0})["runs"] += 1
    for x in run_rows:
        out[x["dataset"]]["step_time_runs"] += 1
    for x in col.skipped:
        out.setdefault(x["dataset"], {"runs": 0, "step_time_runs": 0, "skipped": 0})[
            "skipped"] += 1
    return dict(sorted(out.items()))


# =============================================================================================
# Text report
# =============================================================================================
def _pct(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None or x != x else "inf"
    return f"{100.0 * x:.{digits}f}%"


def _num(x: Any, fmt: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None or x != x else "inf"
    return format(x, fmt)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    w = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
         for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(cells))
    return "\n".join([line(headers), line(["-" * x for x in w]), *(line(r) for r in rows)])


def format_report(res: Mapping[str, Any], *, verbose: bool = False, worst: int = 10) -> str:
    out: list[str] = []
    c = res["counts"]
    out.append(f"paraplan validation against {res['data_dir']}")
    out.append(f"{c['entries']} entries/rows: {c['step_time_runs']} step-time runs, "
               f"{c['runs']} mapped runs, {c['skipped']} skipped, "
               f"{c['model_errors']} model errors"
               + (" (derived SC21 times included)" if res.get("include_derived") else ""))
    out.append("")
    out.append("Step time, per group (APE = |pred - meas| / meas; bias = mean signed error)")
    rows = [[g["group"], str(g["count"]), _pct(g["mape"]), _pct(g["median_ape"]),
             _pct(g["max_ape"]), _pct(g["mean_signed_error"]), str(g["sweeps"]),
             _num(g["spearman_mean"], ".3f")] for g in res["groups"]]
    out.append(_table(["group", "n", "MAPE", "median", "max", "bias", "sweeps", "Spearman"],
                      rows))
    s = res["step_time"]
    out.append("")
    out.append(f"group-balanced MAPE {_pct(s['group_balanced_mape'])}; overall MAPE "
               f"{_pct(s['overall']['mape'])} (median {_pct(s['overall']['median_ape'])}) "
               f"over {s['count']} runs; worst group median {_pct(s['worst_group_median_ape'])}")
    out.append(f"mean Spearman within sweeps {_num(s['mean_spearman'])} over {s['n_sweeps']} "
               f"sweeps (>= {MIN_SWEEP} runs; {s['n_sweeps_undefined']} with constant times "
               "left out)")
    out.append(f"  ({_num(s['mean_spearman_replicates_averaged'])} over "
               f"{s['n_sweeps_replicates_averaged']} sweeps with repeated measurements of one "
               "configuration averaged; not checked)")
    ng = res.get("new_groups")
    if ng and ng["groups"]:
        out.append("")
        out.append(f"{PUBLISHED_2026_FILE} groups (reported, not checked): step time as the "
                   "model scores them today")
        out.append(_table(["group", "n", "MAPE", "median", "max", "bias", "MFU meas",
                           "MFU pred", "MFU src"],
                          [[g["group"], str(g["count"]), _pct(g["mape"]), _pct(g["median_ape"]),
                            _pct(g["max_ape"]), _pct(g["mean_signed_error"]),
                            _pct(g["mfu_bf16_measured"]), _pct(g["mfu_bf16_predicted"]),
                            _pct(g["mfu_bf16_reported"])]
                           for g in ng["groups"]]))
        out.append("  MFU: model FLOPs (paraplan's count, full s^2 attention) per second over "
                   "the bf16 dense peak, at the measured / predicted step time; MFU src: the "
                   "source's model TFLOP/s per GPU over the bf16 peak, or its own MFU "
                   "(torchtitan; against the FP8 peak on its Float8 405B row)")
        for g in ng["groups"]:
            for x in g.get("source_flagged", []):
                out.append(f"  {g['group']}: {x['id']} ({_pct(x['signed_error'])}) is a "
                           "regression its source flags (" + x["note"][:60].rstrip()
                           + "...); without it the group's MAPE is "
                           + _pct(g["mape_without_source_flagged"]))
        out.append("")
        out.append("  per group and GPU")
        out.append(_table(["group", "gpu", "n", "MAPE", "median", "max", "bias"],
                          [[x["group"], x["gpu"], str(x["count"]), _pct(x["mape"]),
                            _pct(x["median_ape"]), _pct(x["max_ape"]),
                            _pct(x["mean_signed_error"])] for x in ng["by_group_and_gpu"]]))
        out.append("")
        out.append("  per GPU")
        out.append(_table(["gpu", "n", "MAPE", "median", "max", "bias"],
                          [[x["gpu"], str(x["count"]), _pct(x["mape"]), _pct(x["median_ape"]),
                            _pct(x["max_ape"]), _pct(x["mean_signed_error"])]
                           for x in ng["by_gpu"]]))
        sa = res["step_time_all_groups"]
        out.append(f"  all groups together: group-balanced MAPE "
                   f"{_pct(sa['group_balanced_mape'])} over {sa['count']} runs")
    if res.get("skip_counts"):
        out.append("")
        out.append("Skipped entries per reason (per data file)")
        for f, cats in res["skip_counts"].items():
            out.append(f"  {f}: " + "; ".join(f"{k} {n}" for k, n in cats.items()))
    m = res["memory"]
    out.append("")
    out.append(f"Memory vs measured per-GPU peaks ({m['unit']}): n={m['count']} MAPE "
               f"{_pct(m['mape'])} median {_pct(m['median_ape'])} max {_pct(m['max_ape'])} "
               f"bias {_pct(m['mean_signed_error'])}")
    o = res["oom"]
    out.append(f"OOM runs predicted to fit: {o['predicted_to_fit']} of {o['count']}"
               + "".join(f"\n  {x['id']}: predicted {x['predicted_GiB']:.1f} GiB of "
                         f"{x['capacity_GiB']:.1f} GiB -> "
                         f"{'FITS (wrong)' if x['predicted_to_fit'] else 'OOM (right)'}"
                         for x in o["runs"]))
    if o.get("excluded_unreliable"):
        out.append("  not counted (oom_reliable: false): "
                   + ", ".join(f"{x['id']} (predicted {x['predicted_GiB']:.1f} GiB)"
                               for x in o["excluded_unreliable"]))
    rm = res.get("reserved_memory")
    if rm and rm["count"]:
        out.append(f"Reserved memory (torchtitan peak_memory_gib, GiB): n={rm['count']} MAPE "
                   f"{_pct(rm['mape'])} median {_pct(rm['median_ape'])} max "
                   f"{_pct(rm['max_ape'])} bias {_pct(rm['mean_signed_error'])}")
    mv = res.get("memory_verdict")
    if mv:
        out.append(f"Default memory verdict (fits = predicted peak under the GPU's memory less "
                   f"a {mv['margin']:.0%} safety margin): {mv['ran_not_fitting']} of "
                   f"{mv['ran']} runs that ran predicted not to fit; "
                   f"{mv['oom_predicted_to_fit']} of {mv['oom']} OOM reports predicted to fit"
                   + "".join(f"\n  ran, predicted '{x['verdict']}': {x['id']} "
                             f"{x['predicted_GiB']:.1f} of {x['capacity_GiB']:.1f} GiB"
                             for x in mv["ran_not_fitting_runs"][:10])
                   + "".join(f"\n  OOM, predicted to fit: {x['id']} "
                             f"{x['predicted_GiB']:.1f} of {x['capacity_GiB']:.1f} GiB"
                             for x in mv["oom_predicted_to_fit_runs"]))
    ro = res["ran_predicted_over_memory"]
    top = ro["runs"][:5]
    out.append(f"Runs that ran (step time measured) but are predicted over the GPU's memory: "
               f"{ro['predicted_over']} of {ro['count']}"
               + ("; worst: " + ", ".join(f"{x['id']} {x['ratio']:.2f}x" for x in top)
                  if top else ""))
    r26 = res.get("ran_predicted_over_memory_2026")
    if r26 and r26["count"]:
        out.append(f"  {PUBLISHED_2026_FILE}: {r26['predicted_over']} of {r26['count']}"
                   + ("; worst: " + ", ".join(f"{x['id']} {x['ratio']:.2f}x"
                                              for x in r26["runs"][:5]) if r26["runs"] else ""))
    t5 = res["korthikanti_table5"]
    out.append("")
    out.append(f"Korthikanti Table 5 (end-to-end iteration time): {t5['within_5pct']} of "
               f"{t5['count']} within 5%, max error {_pct(t5['max_ape'])}")
    if t5["runs"]:
        out.append(_table(["entry", "pred s", "meas s", "error"],
                          [[x["id"], _num(x["predicted_s"], ".2f"), _num(x["measured_s"], ".2f"),
                            _pct(x["ape"])] for x in t5["runs"]]))
    t4 = res["korthikanti_table4"]
    out.append("")
    out.append(f"Korthikanti Table 4 (one layer fwd+bwd, 22B, tp 8, mbs 4): MAPE "
               f"{_pct(t4['mape'])}")
    if t4["runs"]:
        out.append(_table(["entry", "pred ms", "meas ms", "error"],
                          [[x["id"], _num(x["predicted_ms"], ".1f"), _num(x["measured_ms"], ".1f"),
                            _pct(x["ape"])] for x in t4["runs"]]))
    n = res["nccl"]
    out.append("")
    if not n.get("available"):
        out.append(f"NCCL AllReduce busbw: not available ({n.get('reason')})")
    else:
        out.append(f"NCCL AllReduce busbw at {n['message_bytes'] / 2**30:.0f} GiB: n={n['count']} "
                   f"MAPE {_pct(n['mape'])} max {_pct(n['max_ape'])}; "
                   f"{len(n['skipped'])} not modelled")
        if n["runs"]:
            out.append(_table(["entry", "cluster", "algo", "pred GB/s", "meas GB/s", "error"],
                              [[x["id"], x["cluster"], x["algo"],
                                _num(x["predicted_busbw_GBps"], ".0f"),
                                _num(x["measured_busbw_GBps"], ".0f"), _pct(x["ape"])]
                               for x in n["runs"]]))
        if verbose:
            out.extend(f"  not modelled: {x['id']}: {x['reason']}" for x in n["skipped"])
    if worst > 0 and res["runs"]:
        out.append("")
        out.append(f"Worst {min(worst, len(res['runs']))} step-time runs")
        top = sorted(res["runs"], key=lambda x: -x["ape"] if math.isfinite(x["ape"]) else -1e300
                     )[:worst]
        out.append(_table(["entry", "layout", "pred s", "meas s", "error"],
                          [[x["id"], f"t{x['tp']}p{x['pp']}d{x['dp']}b{x['micro_batch']}",
                            _num(x["predicted_s"], ".3f"), _num(x["measured_s"], ".3f"),
                            _pct(x["signed_error"])] for x in top]))
    if res["model_errors"]:
        out.append("")
        out.append("Model errors (the cost model raised):")
        out.extend(f"  {x['id']}: {x['reason']}" for x in res["model_errors"])
    if verbose:
        out.append("")
        out.append("Sweeps")
        out.extend(f"  {x['sweep']} (n={x['n']}): {_num(x['spearman'])}" for x in res["sweeps"])
        out.append("")
        out.append("Skipped entries")
        out.extend(f"  {x['id']} [{x['group']}]: {x['reason']}" for x in res["skipped"])
        out.append("")
        out.append("All step-time runs")
        out.extend(f"  {x['id']}: pred {_num(x['predicted_s'], '.4g')} s, meas "
                   f"{_num(x['measured_s'], '.4g')} s ({x['measured_from']}), error "
                   f"{_pct(x['signed_error'])}" for x in res["runs"])
    out.append("")
    out.append("Checks (--check):")
    for ch in res["checks"]:
        v = ch["value"]
        shown = _num(v, ".3f") if isinstance(v, float) else str(v)
        out.append(f"  {'PASS' if ch['ok'] else 'FAIL'}  {ch['name']} = {shown} "
                   f"(must be {ch['op']} {ch['threshold']})")
    t = res["timing_s"]
    out.append(f"time: load+map {t['load_and_map']:.2f} s, score {t['score']:.2f} s, "
               f"total {t['total']:.2f} s")
    return "\n".join(out)


__all__ = [
    "THRESHOLDS", "Run", "SkipEntry", "FrameworkFlags", "Predicted", "NcclCase",
    "default_data_dir", "resolve_data_dir", "load_data", "map_entry", "map_vtrain_row",
    "collect_runs", "drop_requotes", "predict", "average_ranks", "spearman", "ape", "sweep_key",
    "nccl_case", "nccl_section", "validate", "format_report", "framework_flags", "gpu_key",
    "inter_node_spec", "parse_precision", "parse_recompute", "parse_zero", "parse_vocab",
    "model_spec", "build_cluster", "measured_step_time",
]

