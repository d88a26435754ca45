"""Launch artefacts: Megatron flags, DeepSpeed config, torchtitan overrides, env, wrappers."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from costmodel.errors import InputError
from costmodel.specs import (
    ClusterSpec,
    GPUSpec,
    IntraNodeSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)
from optimizer.launch import (
    NCCL_PRODUCTION_WARNING,
    deepspeed_config,
    job_shape,
    k8s_manifest,
    k8s_yaml,
    launch_bundle,
    launch_env,
    launch_warnings,
    megatron_args,
    nccl_algo_env,
    nccl_proto_env,
    shell_join,
    slurm_script,
    torchrun_command,
    torchtitan_args,
)

# Test fixtures: numbers are only there to build valid records.
A100 = GPUSpec("a100-sxm-80gb", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12,
                                 "fp32": 19.5e12}, 80e9, 2.039e12, 300e9, 12, 108, 80)
H100 = GPUSpec("h100-sxm-80gb", {"bf16": 989e12, "fp8": 1979e12}, 80e9, 3.35e12, 450e9, 18,
               132, 90)
B200 = GPUSpec("b200", {"bf16": 2250e12, "fp8": 4500e12}, 180e9, 8e12, 900e9, 18, 148, 100)
CLUSTER = ClusterSpec("2x-dgx-a100-80gb", 2, 8, A100)
LLAMA_65B = ModelSpec("llama-65b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                      ffn_hidden_size=22016, vocab_size=32000, gated_mlp=True)
LLAMA2_70B = ModelSpec("llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                       num_kv_heads=8, ffn_hidden_size=28672, vocab_size=32000, gated_mlp=True)
GPT_1B = ModelSpec("gpt-1.3b", num_layers=24, hidden_size=2048, num_attention_heads=16,
                   ffn_hidden_size=8192, vocab_size=50257, tied_embeddings=True,
                   learned_position_embeddings=True, max_position_embeddings=2048,
                   linear_bias=True, normalization="layernorm")
TRAIN = TrainingSpec(seq_length=2048, global_batch_size=1024)
BASE = ParallelConfig(tp=4, pp=4, dp=1, micro_batch_size=1, precision="bf16", schedule="1f1b")


def value(args: list[str], flag: str) -> str:
    """The token after ``flag`` (fails the test if the flag is missing)."""
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def cfg(**kw) -> ParallelConfig:
    return ParallelConfig(**{**BASE.as_dict(), **kw})


# ------------------------------------------------------------------------------ Megatron
def test_megatron_golden_llama65b_tp4_pp4():
    # LLaMA-65B (80 x 8192, 64 heads, FFN 22016, SwiGLU, RMSNorm, RoPE, untied, no bias) on
    # 16 A100s: tp=4 pp=4 dp=1, mbs 1, gbs 1024, seq 2048, bf16, 1F1B, no recompute, ZeRO 0.
    assert megatron_args(LLAMA_65B, CLUSTER, TRAIN, BASE) == [
        "--tensor-model-parallel-size", "4",
        "--pipeline-model-parallel-size", "4",
        "--micro-batch-size", "1",
        "--global-batch-size", "1024",
        "--seq-length", "2048",
        "--max-position-embeddings", "2048",
        "--num-layers", "80",
        "--hidden-size", "8192",
        "--ffn-hidden-size", "22016",
        "--num-attention-heads", "64",
        "--vocab-size", "32000",
        "--make-vocab-size-divisible-by", "128",
        "--swiglu",
        "--normalization", "RMSNorm",
        "--norm-epsilon", "1e-06",  # LLaMA 1 rms_norm_eps (Megatron's default is 1e-5)
        "--position-embedding-type", "rope",
        "--rotary-base", "10000",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--attention-dropout", "0", "--hidden-dropout", "0",  # Megatron defaults to 0.1
        "--bf16",
    ]


def test_megatron_interleaved_layers_per_virtual_stage():
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(schedule="interleaved", virtual_stages=2))
    # 80 layers / pp 4 / v 2 = 10 layers per model chunk
    assert value(args, "--num-layers-per-virtual-pipeline-stage") == "10"
    assert "--virtual-pipeline-model-parallel-size" not in args  # no such Megatron flag


def test_megatron_no_virtual_flag_without_interleaving():
    assert "--num-layers-per-virtual-pipeline-stage" not in megatron_args(
        LLAMA_65B, CLUSTER, TRAIN, cfg(schedule="interleaved", virtual_stages=1))


def test_megatron_interleaved_indivisible_layers_is_input_error():
    # 80 layers / (pp 4 * v 3 = 12) is not an integer
    with pytest.raises(InputError) as e:
        megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(schedule="interleaved", virtual_stages=3))
    assert e.value.field == "parallel.virtual_stages"


def test_uneven_pipeline_split_flags():
    # 78 layers on 12 stages (12 GPUs: two nodes of 6): the middle stages hold 7 layers, the
    # first and the last 4 each (costmodel.schedule.stage_layers)
    six = ClusterSpec("2x6-a100", 2, 6, A100)
    model = ModelSpec("m78", num_layers=78, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=16384, vocab_size=32000)
    config = cfg(tp=1, pp=12, dp=1)
    args = megatron_args(model, six, TRAIN, config)
    assert value(args, "--decoder-first-pipeline-num-layers") == "4"
    assert value(args, "--decoder-last-pipeline-num-layers") == "4"
    ds = deepspeed_config(model, six, TRAIN, config)
    assert "pipeline" not in ds  # stages/partition are read by nothing in DeepSpeed
    tt = torchtitan_args(model, six, TRAIN, config)
    # torchtitan: 7 layers per stage, the first and last count 3 "less layers" each
    assert value(tt, "--parallelism.pipeline_parallel_layers_per_stage") == "7"
    assert value(tt, "--parallelism.pipeline_parallel_first_stage_less_layers") == "3"
    assert value(tt, "--parallelism.pipeline_parallel_last_stage_less_layers") == "3"
    assert any("uneven pipeline split" in w for w in launch_warnings(config, model=model))
    # an even split keeps Megatron's default and DeepSpeed's uniform partition
    even = megatron_args(LLAMA_65B, CLUSTER, TRAIN, BASE)
    assert "--decoder-first-pipeline-num-layers" not in even
    assert "--parallelism.pipeline_parallel_first_stage_less_layers" in torchtitan_args(
        LLAMA_65B, CLUSTER, TRAIN, BASE)
    # no split gives 5 layers' first and last stage one each on 4 stages
    five = ModelSpec("m5", num_layers=5, hidden_size=1024, num_attention_heads=16,
                     ffn_hidden_size=4096, vocab_size=32000)
    with pytest.raises(InputError) as e:
        megatron_args(five, CLUSTER, TRAIN, BASE)
    assert e.value.field == "parallel.pp"


def test_megatron_gqa():
    args = megatron_args(LLAMA2_70B, CLUSTER, TRAIN, BASE)
    assert "--group-query-attention" in args
    assert value(args, "--num-query-groups") == "8"
    assert "--kv-channels" not in args  # 8192 / 64 = 128 = head_dim


def test_megatron_kv_channels_when_head_dim_differs():
    # 16 heads of 128 in a 4096-wide model: 4096 / 16 = 256 != 128
    m = ModelSpec("odd", num_layers=8, hidden_size=4096, num_attention_heads=16, head_dim=128,
                  ffn_hidden_size=16384, vocab_size=32000)
    assert value(megatron_args(m, CLUSTER, TRAIN, BASE), "--kv-channels") == "128"


def test_megatron_gpt_style_model():
    args = megatron_args(GPT_1B, CLUSTER, TRAIN, BASE)
    assert value(args, "--position-embedding-type") == "learned_absolute"
    assert value(args, "--normalization") == "LayerNorm"
    assert value(args, "--vocab-size") == "50257"
    assert value(args, "--max-position-embeddings") == "2048"
    for absent in ("--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                   "--group-query-attention"):
        assert absent not in args


def test_megatron_learned_positions_shorter_than_sequence_is_input_error():
    with pytest.raises(InputError) as e:
        megatron_args(GPT_1B, CLUSTER, TrainingSpec(4096, 1024), BASE)
    assert e.value.field == "training.seq_length"


def test_megatron_rope_max_positions_cover_sequence():
    # RoPE model declaring 2048 positions trained at 4096: emit the larger value
    m = ModelSpec("r", num_layers=8, hidden_size=1024, num_attention_heads=8,
                  ffn_hidden_size=4096, vocab_size=32000, max_position_embeddings=2048)
    args = megatron_args(m, CLUSTER, TrainingSpec(4096, 1024), BASE)
    assert value(args, "--max-position-embeddings") == "4096"


@pytest.mark.parametrize(("recompute", "expected"), [
    ("none", []),
    ("selective", ["--recompute-granularity", "selective"]),
    ("full", ["--recompute-granularity", "full", "--recompute-method", "uniform",
              "--recompute-num-layers", "1"]),
])
def test_megatron_recompute(recompute, expected):
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(recompute=recompute))
    if not expected:
        assert "--recompute-granularity" not in args
    else:
        i = args.index("--recompute-granularity")
        assert args[i:i + len(expected)] == expected
        if recompute == "selective":
            assert "--recompute-method" not in args


@pytest.mark.parametrize(("modules", "names"), [
    ("core_attn", ["core_attn"]), ("mlp", ["mlp"]), ("core_attn+mlp", ["core_attn", "mlp"]),
    ("layernorm+moe_act", ["layernorm", "moe_act"])])
def test_megatron_recompute_modules(modules, names):
    c = cfg(recompute="selective", recompute_modules=modules)
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, c)
    i = args.index("--recompute-modules")
    assert args[i + 1:i + 1 + len(names)] == names
    assert i + 1 + len(names) == len(args) or args[i + 1 + len(names)].startswith("--")
    from optimizer.launch.flags import deepspeed_refusal

    faithful = not deepspeed_refusal(c)
    assert faithful == (modules == "core_attn")  # Megatron-DeepSpeed: the core only


@pytest.mark.parametrize(("precision", "expected"), [
    ("bf16", ["--bf16"]),
    ("fp16", ["--fp16"]),
    ("fp8", ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]),
    ("fp32", []),
    ("tf32", []),
])
def test_megatron_precision(precision, expected):
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(precision=precision))
    tail = args[len(args) - len(expected):] if expected else []
    assert tail == expected
    if not expected:
        assert not {"--bf16", "--fp16", "--fp8-format"} & set(args)


def test_megatron_sequence_parallel_only_with_tp():
    assert "--sequence-parallel" in megatron_args(LLAMA_65B, CLUSTER, TRAIN,
                                                  cfg(sequence_parallel=True))
    # tp=1 pp=4 dp=4 = 16 ranks; SP is meaningless without TP
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=1, dp=4, sequence_parallel=True))
    assert "--sequence-parallel" not in args


@pytest.mark.parametrize(("zero", "present", "absent"), [
    (0, ["--overlap-grad-reduce"], ["--use-distributed-optimizer", "--use-megatron-fsdp",
                                    "--overlap-param-gather"]),
    (1, ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"],
     ["--use-megatron-fsdp"]),
    (2, ["--use-megatron-fsdp", "--overlap-grad-reduce", "--overlap-param-gather"],
     ["--use-distributed-optimizer"]),
    (3, ["--use-megatron-fsdp", "--overlap-grad-reduce", "--overlap-param-gather"],
     ["--use-distributed-optimizer"]),
])
def test_megatron_zero_stages(zero, present, absent):
    # tp=2 pp=2 dp=4 = 16 ranks
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=2, pp=2, dp=4, zero_stage=zero))
    for flag in present:
        assert flag in args
    for flag in absent:
        assert flag not in args
    if zero >= 2:
        strategy = {2: "optim_grads", 3: "optim_grads_params"}[zero]
        assert value(args, "--data-parallel-sharding-strategy") == strategy


def test_megatron_no_overlap_flags_without_data_parallelism():
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(zero_stage=1))  # dp = 1
    assert "--use-distributed-optimizer" in args
    assert "--overlap-grad-reduce" not in args and "--overlap-param-gather" not in args


def test_megatron_tp_comm_overlap_needs_sequence_parallelism():
    overlap = TrainingSpec(seq_length=2048, global_batch_size=1024, tp_comm_overlap=True)
    assert "--tp-comm-overlap" in megatron_args(LLAMA_65B, CLUSTER, overlap,
                                                cfg(sequence_parallel=True))
    assert "--tp-comm-overlap" not in megatron_args(LLAMA_65B, CLUSTER, overlap, BASE)
    assert "--tp-comm-overlap" not in megatron_args(LLAMA_65B, CLUSTER, TRAIN,
                                                    cfg(sequence_parallel=True))


def test_world_size_larger_than_cluster_is_input_error():
    with pytest.raises(InputError):
        megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(dp=2))  # 32 ranks on 16 GPUs


# ------------------------------------------------------------------------------ DeepSpeed
@pytest.mark.parametrize(("tp", "pp", "dp", "mbs", "gbs", "gas"), [
    (4, 4, 1, 1, 1024, 1024),  # 1024 / (1*1)
    (2, 2, 4, 2, 1024, 128),   # 1024 / (2*4)
    (1, 1, 16, 4, 512, 8),     # 512 / (4*16)
    (8, 1, 2, 3, 96, 16),      # 96 / (3*2)
    (1, 2, 8, 1, 8, 1),        # 8 / (1*8)
])
def test_deepspeed_batch_invariant(tp, pp, dp, mbs, gbs, gas):
    c = cfg(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs)
    ds = deepspeed_config(LLAMA_65B, CLUSTER, TrainingSpec(2048, gbs), c)
    assert ds["gradient_accumulation_steps"] == gas
    assert ds["train_micro_batch_size_per_gpu"] == mbs
    assert ds["train_batch_size"] == gbs
    # DeepSpeed _batch_assertion: train_batch = micro * gas * dp world
    assert ds["train_batch_size"] == (ds["train_micro_batch_size_per_gpu"]
                                      * ds["gradient_accumulation_steps"] * dp)
    json.dumps(ds)  # must be plain JSON


def test_deepspeed_indivisible_batch_is_input_error():
    # 1000 % (mbs 1 * dp 16) = 8
    with pytest.raises(InputError) as e:
        deepspeed_config(LLAMA_65B, CLUSTER, TrainingSpec(2048, 1000), cfg(tp=1, pp=1, dp=16))
    assert e.value.field == "training.global_batch_size"


def test_deepspeed_blocks():
    ds = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, BASE)
    assert ds["bf16"] == {"enabled": True} and "fp16" not in ds
    # pp > 1: Megatron-DeepSpeed's own TP/PP; no pipeline keys DeepSpeed would not read
    assert "pipeline" not in ds and "tensor_parallel" not in ds
    one = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=4, pp=1, dp=4))
    assert one["tensor_parallel"] == {"autotp_size": 4}  # AutoTP without a pipeline
    full = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, cfg(recompute="full"))
    assert full["pipeline"] == {"activation_checkpoint_interval": 1}
    assert ds["zero_optimization"] == {"stage": 0}
    assert ds["gradient_clipping"] == 1.0
    assert "activation_checkpointing" not in ds


def test_deepspeed_fp16_zero2_recompute():
    c = cfg(tp=1, pp=1, dp=16, precision="fp16", zero_stage=2, recompute="full")
    ds = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, c)
    assert ds["fp16"]["enabled"] is True and ds["fp16"]["loss_scale"] == 0  # dynamic
    assert "bf16" not in ds and "pipeline" not in ds and "tensor_parallel" not in ds
    z = ds["zero_optimization"]
    assert z["stage"] == 2 and z["overlap_comm"] is True and z["contiguous_gradients"] is True
    assert z["reduce_bucket_size"] == 8192 * 8192  # HF "auto": hidden^2 = 67,108,864
    assert "activation_checkpointing" in ds


def test_deepspeed_zero3_buckets():
    ds = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=1, pp=1, dp=16, zero_stage=3))
    z = ds["zero_optimization"]
    assert z["stage3_prefetch_bucket_size"] == 60397977  # int(0.9 * 8192^2 = 60397977.6)
    assert z["stage3_param_persistence_threshold"] == 81920  # 10 * 8192


def test_deepspeed_fp32_has_no_precision_block():
    ds = deepspeed_config(LLAMA_65B, CLUSTER, TRAIN, cfg(precision="fp32"))
    assert "bf16" not in ds and "fp16" not in ds


# ------------------------------------------------------------------------------ torchtitan
def test_torchtitan_golden_values():
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, BASE)
    assert value(a, "--parallelism.tensor_parallel_degree") == "4"
    assert value(a, "--parallelism.pipeline_parallel_degree") == "4"
    assert value(a, "--parallelism.data_parallel_shard_degree") == "1"
    assert value(a, "--parallelism.data_parallel_replicate_degree") == "1"
    assert value(a, "--parallelism.pipeline_parallel_schedule") == "1F1B"
    assert value(a, "--parallelism.pipeline_parallel_microbatch_size") == "1"
    assert value(a, "--training.seq_len") == "2048"
    assert value(a, "--training.global_batch_size") == "1024"
    # with PP the local batch (per DP rank) is gbs/dp = 1024, split into 1024 microbatches
    assert value(a, "--training.local_batch_size") == "1024"
    assert a[-1] == "activation_checkpoint:none"  # a tyro subcommand in torchtitan 0.3
    assert "--parallelism.no_enable_sequence_parallel" in a
    assert "--training.disable_cuda_graphs" in a  # CUDA graphs refuse pipelines
    assert a[:4] == ["--module", "paraplan_torchtitan", "--config", "paraplan"]
    # 80 layers on 4 stages: 20 each, no embedding/output weights
    assert value(a, "--parallelism.pipeline_parallel_layers_per_stage") == "20"
    assert value(a, "--parallelism.pipeline_parallel_first_stage_less_layers") == "0"


def test_torchtitan_async_tp_compiles_the_model():
    """tp_comm_overlap under torchtitan is its async TP, which CompileConfig only accepts with
    the compiled model; without it neither flag is written."""
    c = cfg(tp=2, pp=1, dp=8, sequence_parallel=True)
    tt = TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan")
    a = torchtitan_args(LLAMA_65B, CLUSTER, TrainingSpec(
        seq_length=2048, global_batch_size=1024, framework="torchtitan", tp_comm_overlap=True), c)
    assert "--compile.enable" in a and "--compile.enable_async_tensor_parallel" in a
    plain = torchtitan_args(LLAMA_65B, CLUSTER, tt, c)
    assert not any(x.startswith("--compile.") for x in plain)


@pytest.mark.parametrize("tp", [1, 2])
def test_torchtitan_compiled_score_launches_the_compiled_model(tp):
    """torch_compile: true is priced with Inductor's fused element-wise traffic, so its launch
    compiles the model, with or without async TP (before, only async TP wrote the flag); an
    unstated or false torch_compile keeps torchtitan's eager default."""
    c = cfg(tp=tp, pp=1, dp=16 // tp, sequence_parallel=tp > 1)
    compiled = TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan",
                            torch_compile=True)
    a = torchtitan_args(LLAMA_65B, CLUSTER, compiled, c)
    assert "--compile.enable" in a and "--compile.enable_async_tensor_parallel" not in a
    for off in (None, False):
        eager = TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan",
                             torch_compile=off)
        assert not any(x.startswith("--compile.") for x in torchtitan_args(LLAMA_65B, CLUSTER,
                                                                          eager, c))
    # async TP at tp = 1 has no TP to overlap: the model is still compiled, as it was priced
    overlap = TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan",
                           tp_comm_overlap=True)
    b = torchtitan_args(LLAMA_65B, CLUSTER, overlap, c)
    assert "--compile.enable" in b
    assert ("--compile.enable_async_tensor_parallel" in b) == (tp > 1)


@pytest.mark.parametrize(("zero", "shard", "replicate"), [(0, 1, 4), (1, 1, 4), (3, 4, 1)])
def test_torchtitan_data_parallel_degrees(zero, shard, replicate):
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=2, pp=2, dp=4, zero_stage=zero))
    assert value(a, "--parallelism.data_parallel_shard_degree") == str(shard)
    assert value(a, "--parallelism.data_parallel_replicate_degree") == str(replicate)
    # degrees multiply to the world size: replicate * shard * tp * pp = 4 * 2 * 2 = 16
    assert shard * replicate * 2 * 2 == CLUSTER.num_gpus


def test_torchtitan_zero2_keeps_params_after_forward():
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=1, pp=1, dp=16, zero_stage=2))
    assert value(a, "--parallelism.fsdp_reshard_after_forward") == "never"
    assert value(a, "--parallelism.data_parallel_shard_degree") == "16"


@pytest.mark.parametrize(("schedule", "v", "name"), [
    ("gpipe", 1, "GPipe"), ("1f1b", 1, "1F1B"), ("interleaved", 2, "Interleaved1F1B")])
def test_torchtitan_schedules(schedule, v, name):
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, cfg(schedule=schedule, virtual_stages=v))
    assert value(a, "--parallelism.pipeline_parallel_schedule") == name
    if v > 1:  # 80 layers / (4 * 2) stages = 10 layers per stage
        assert value(a, "--parallelism.pipeline_parallel_layers_per_stage") == "10"


def test_torchtitan_partial_recompute_is_the_config_modules_policy():
    """recompute_num_layers N > 0: no activation_checkpoint subcommand (the CLI's union has
    no partial policy); the config module sets its PartialFullAC with N, the target is
    faithful. N = 0 keeps the CLI's full policy and the module sets none."""
    c = cfg(recompute="full", recompute_num_layers=5)
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, c)
    assert not any(x.startswith("activation_checkpoint") for x in a)
    b = launch_bundle(LLAMA_65B, CLUSTER, TRAIN, c)
    src = b["torchtitan_config"]
    assert "RECOMPUTE_NUM_LAYERS = 5 " in src and "class PartialFullAC(FullAC)" in src
    compile(src, "paraplan_torchtitan.py", "exec")  # the template formats into Python
    assert b["targets"]["torchtitan"]["supported"]
    full = cfg(recompute="full")
    assert torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, full)[-1] == "activation_checkpoint:full"
    assert "RECOMPUTE_NUM_LAYERS = 0 " in launch_bundle(LLAMA_65B, CLUSTER, TRAIN,
                                                        full)["torchtitan_config"]


def test_torchtitan_without_pipeline_accumulates():
    # tp=2 pp=1 dp=8 mbs 2: local batch = mbs = 2, accumulation 1024 / (2*8) = 64 steps
    a = torchtitan_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=2, pp=1, dp=8, micro_batch_size=2,
                                                       recompute="selective",
                                                       sequence_parallel=True))
    assert value(a, "--training.local_batch_size") == "2"
    assert "--parallelism.pipeline_parallel_schedule" not in a
    assert a[-1] == "activation_checkpoint:selective"
    # ... but torchtitan's SAC is not the selective recompute scored: the bundle says so
    c = cfg(tp=2, pp=1, dp=8, micro_batch_size=2, recompute="selective", sequence_parallel=True)
    b = launch_bundle(LLAMA_65B, CLUSTER, TRAIN, c)
    assert not b["targets"]["torchtitan"]["supported"]
    assert any("selective" in r for r in b["targets"]["torchtitan"]["reasons"])
    assert "--parallelism.enable_sequence_parallel" in a


# ------------------------------------------------------------------------------ env
def test_env_tp_on_ampere_sets_max_connections():
    env = launch_env(CLUSTER, BASE)
    assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1",
                   "PYTORCH_ALLOC_CONF": "expandable_segments:True"}


@pytest.mark.parametrize(("cluster", "config"), [
    (CLUSTER, cfg(tp=1, dp=4)),                        # no TP
    (ClusterSpec("b200x2", 2, 8, B200), BASE),         # Blackwell (cc 100)
    (CLUSTER, cfg(tp=2, pp=2, dp=4, zero_stage=3)),    # FSDP must not have it set to 1
    (CLUSTER, cfg(tp=2, pp=2, dp=4, zero_stage=2)),
])
def test_env_without_max_connections(cluster, config):
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in launch_env(cluster, config)


def test_env_hopper_tp_sets_max_connections():
    assert launch_env(ClusterSpec("h", 2, 8, H100), BASE)["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_env_nccl_only_when_forced():
    env = launch_env(CLUSTER, BASE)
    assert "NCCL_ALGO" not in env and "NCCL_PROTO" not in env
    env = launch_env(CLUSTER, cfg(nccl_algo="ring", nccl_proto="simple"))
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_PROTO"] == "Simple"


@pytest.mark.parametrize(("given", "nccl"), [
    ("ring", "Ring"), ("tree", "Tree"), ("nvls", "NVLS"), ("nvlstree", "NVLSTree"),
    ("collnet", "CollNetDirect"), ("pat", "PAT"), ("ring,tree", "Ring,Tree"), ("^tree", "^Tree"),
    ("allreduce:tree;allgather:ring", "allreduce:Tree;allgather:Ring"),
    ("ring;allreduce:^tree", "Ring;allreduce:^Tree"),
    ("AllReduce:NVLSTree", "allreduce:NVLSTree"),
])
def test_nccl_algo_translation(given, nccl):
    assert nccl_algo_env(given) == nccl


@pytest.mark.parametrize(("given", "nccl"), [
    ("simple", "Simple"), ("ll", "LL"), ("ll128", "LL128"), ("^ll128", "^LL128"),
    ("^ll128;allreduce:ll128", "^LL128;allreduce:LL128")])
def test_nccl_proto_translation(given, nccl):
    assert nccl_proto_env(given) == nccl


def test_nccl_auto_is_none():
    assert nccl_algo_env("auto") is None and nccl_proto_env("auto") is None


@pytest.mark.parametrize(("algo", "hint"), [("rign", "ring"), ("allredcue:tree", "allreduce"),
                                            ("ring;tree", "twice"), (";", "auto"),
                                            ("allreduce:", "empty"),
                                            # NCCL: only the first entry may omit the
                                            # collective (costmodel.nccl_grammar)
                                            ("allreduce:tree;ring;", "first entry")])
def test_nccl_bad_values_are_input_errors(algo, hint):
    with pytest.raises(InputError) as e:
        nccl_algo_env(algo)
    assert e.value.field == "parallel.nccl_algo" and hint in str(e.value)


def test_env_collnet_enabled():
    env = launch_env(CLUSTER, cfg(nccl_algo="collnet"))
    assert env["NCCL_ALGO"] == "CollNetDirect" and env["NCCL_COLLNET_ENABLE"] == "1"


# ------------------------------------------------------------------------------ warnings
def test_no_nccl_warnings_for_auto():
    assert not any("NCCL" in w for w in launch_warnings(BASE))


def test_forced_nccl_warns_production():
    w = launch_warnings(cfg(nccl_algo="ring"))
    assert NCCL_PRODUCTION_WARNING in w
    assert any("should not be used in production nor retained in scripts" in x for x in w)
    assert not any("corruption" in x for x in w)


def test_ll128_warns_data_corruption():
    w = launch_warnings(cfg(nccl_proto="ll128"))
    assert any("data corruption" in x for x in w)
    assert not any("corruption" in x for x in launch_warnings(cfg(nccl_proto="^ll128")))


def test_global_tree_leaves_allgather_without_algorithm():
    # Tree runs only AllReduce: AllGather, ReduceScatter, Broadcast, Reduce have nothing left
    w = " ".join(launch_warnings(cfg(nccl_algo="tree")))
    for func in ("AllGather", "ReduceScatter", "Broadcast", "Reduce"):
        assert func in w
    assert "2.24" in w
    # the same algorithm limited to AllReduce is runnable everywhere
    assert "2.24" not in " ".join(launch_warnings(cfg(nccl_algo="allreduce:tree")))


def test_nvls_with_ll_protocol_is_unrunnable():
    # NVLS runs Simple only: forcing LL leaves AllReduce (and AllGather...) nothing
    w = " ".join(launch_warnings(cfg(nccl_algo="nvls", nccl_proto="ll")))
    assert "AllReduce" in w and "2.24" in w


def test_cluster_dependent_nccl_warnings():
    pcie = ClusterSpec("pcie", 2, 8, A100, intra_node=IntraNodeSpec("pcie", 32e9))
    assert any("NVSwitch" in x for x in launch_warnings(cfg(nccl_algo="allreduce:nvls"),
                                                        cluster=pcie))
    assert any("one GPU per node" in x for x in launch_warnings(cfg(nccl_algo="allgather:pat"),
                                                                cluster=CLUSTER))


def test_config_warnings():
    assert any("tp=1" in x for x in launch_warnings(cfg(tp=1, dp=4, sequence_parallel=True)))
    assert any("pipeline engine" in x
               for x in launch_warnings(cfg(tp=2, pp=2, dp=4, zero_stage=3)))
    # 1024 / (mbs 1 * dp 1) = 1024 microbatches, a multiple of pp 4: no warning
    ok = launch_warnings(cfg(schedule="interleaved", virtual_stages=2), training=TRAIN)
    assert not any("microbatches" in x for x in ok)
    # 1026 / (1 * 1) = 1026 = 4*256 + 2: not a multiple of pp 4
    bad = launch_warnings(cfg(schedule="interleaved", virtual_stages=2),
                          training=TrainingSpec(2048, 1026))
    assert any("microbatches" in x for x in bad)


# ------------------------------------------------------------------------------ bundle
def test_launch_bundle_shape_and_json():
    b = launch_bundle(LLAMA_65B, CLUSTER, TRAIN, BASE)
    assert set(b) == {"megatron_args", "deepspeed_config", "torchtitan_args", "torchtitan_config",
                      "env", "warnings", "targets"}
    assert all(t["supported"] for t in b["targets"].values())
    assert b["megatron_args"] == megatron_args(LLAMA_65B, CLUSTER, TRAIN, BASE)
    assert json.loads(json.dumps(b)) == b
    assert b["warnings"] == []  # default config, whole cluster: nothing to say


def test_job_shape():
    assert job_shape(CLUSTER, BASE) == (2, 8)
    assert job_shape(CLUSTER, cfg(tp=2, pp=2, dp=2)) == (1, 8)  # 8 ranks: one node
    assert job_shape(CLUSTER, cfg(tp=2, pp=1, dp=2)) == (1, 4)  # 4 ranks: half a node
    big = ClusterSpec("4n", 4, 8, A100)
    with pytest.raises(InputError):
        job_shape(big, cfg(tp=4, pp=3, dp=1))  # 12 ranks: not whole nodes of 8


# ------------------------------------------------------------------------------ launchers
def test_torchrun_command():
    cmd = torchrun_command(CLUSTER)
    assert cmd[0] == "torchrun" and cmd[-1] == "pretrain_gpt.py"
    assert value(cmd, "--nnodes") == "2" and value(cmd, "--nproc-per-node") == "8"
    assert value(cmd, "--rdzv-backend") == "c10d"
    assert torchrun_command(CLUSTER, "train.py", rdzv_endpoint="h:1")[-3:] == [
        "--rdzv-endpoint", "h:1", "train.py"]


def test_shell_join_keeps_variables_expandable():
    assert shell_join(["a", "${X}:${Y}", "a;b"]) == "a \"${X}:${Y}\" 'a;b'"
    assert shell_join(["$(rm -rf /)"]) == "'$(rm -rf /)'"


def test_slurm_script():
    s = slurm_script(LLAMA_65B, CLUSTER, TRAIN, BASE, job_name="llama")
    assert "#SBATCH --nodes=2\n" in s
    assert "#SBATCH --gpus-per-node=8\n" in s and "#SBATCH --exclusive\n" in s
    assert "#SBATCH --job-name=llama\n" in s
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" in s
    assert "srun torchrun --nnodes 2 --nproc-per-node 8" in s
    assert "pretrain_gpt.py \\\n" in s and "--tensor-model-parallel-size 4 \\\n" in s
    assert s.rstrip().endswith("--bf16")
    # a configuration on half the cluster asks for one node
    one = slurm_script(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=2, pp=4, dp=1))
    assert "#SBATCH --nodes=1\n" in one


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_slurm_script_is_valid_bash_and_exports_nccl_verbatim():
    c = cfg(nccl_algo="allreduce:tree;allgather:ring", nccl_proto="ll128")
    s = slurm_script(LLAMA_65B, CLUSTER, TRAIN, c)
    assert subprocess.run(["bash", "-n"], input=s, text=True).returncode == 0
    exports = "\n".join(line for line in s.splitlines() if line.startswith("export NCCL"))
    out = subprocess.run(["bash", "-c", exports + '\nprintf "%s|%s" "$NCCL_ALGO" "$NCCL_PROTO"'],
                         capture_output=True, text=True, check=True).stdout
    assert out == "allreduce:Tree;allgather:Ring|LL128"
    assert "# WARNING: " in s


def test_k8s_manifest_shape():
    m = k8s_manifest(LLAMA_65B, CLUSTER, TRAIN, BASE, job_name="llama")
    assert m["apiVersion"] == "kubeflow.org/v1" and m["kind"] == "PyTorchJob"
    assert m["metadata"]["name"] == "llama"
    assert m["spec"]["nprocPerNode"] == "8"  # a string in the PyTorchJob schema
    specs = m["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1  # 2 nodes
    for role in ("Master", "Worker"):
        (container,) = specs[role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # a quantity string
        assert {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"} in container["env"]
        assert value(container["args"], "--tensor-model-parallel-size") == "4"
        assert value(container["args"], "--nnodes") == "2"


def test_k8s_single_node_has_no_workers_and_yaml_round_trips():
    c = cfg(tp=8, pp=1, dp=1)
    one = ClusterSpec("1n", 1, 8, A100)
    m = k8s_manifest(LLAMA_65B, one, TRAIN, c)
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    text = k8s_yaml(LLAMA_65B, one, TRAIN, c)
    assert yaml.safe_load(text) == m
    four = k8s_yaml(LLAMA_65B, ClusterSpec("4n", 4, 8, A100), TRAIN, cfg(pp=8))
    assert "&id" not in four and yaml.safe_load(four)["spec"]["pytorchReplicaSpecs"][
        "Worker"]["replicas"] == 3


# ------------------------------------------------------------------------ model definition
def _catalog(name):
    from costmodel.models_catalog import get_model

    return get_model(name)


@pytest.mark.parametrize(("name", "base", "eps", "scaling"), [
    ("llama-7b", "10000", "1e-06", False), ("llama2-70b", "10000", "1e-05", False),
    ("llama3-8b", "500000", "1e-05", False), ("llama3-405b", "500000", "1e-05", True)])
def test_megatron_rotary_base_epsilon_and_rope_scaling(name, base, eps, scaling):
    m = _catalog(name)
    cl = ClusterSpec("big", 128, 8, H100)
    args = megatron_args(m, cl, TrainingSpec(4096, 1024), cfg(tp=8, pp=2, dp=1))
    assert value(args, "--rotary-base") == base and value(args, "--norm-epsilon") == eps
    assert ("--use-rope-scaling" in args) == scaling
    if scaling:
        assert value(args, "--rope-scaling-factor") == "8"
    assert value(args, "--attention-dropout") == value(args, "--hidden-dropout") == "0"


def test_megatron_dropout_follows_the_scored_training():
    args = megatron_args(LLAMA_65B, CLUSTER, TrainingSpec(2048, 1024, dropout=True), BASE)
    assert value(args, "--attention-dropout") == value(args, "--hidden-dropout") == "0.1"


def test_megatron_learned_positions_have_no_rotary_flags():
    args = megatron_args(GPT_1B, CLUSTER, TRAIN, BASE)
    assert value(args, "--position-embedding-type") == "learned_absolute"
    assert "--rotary-base" not in args


def test_megatron_fsdp_checkpoint_format_and_fp8_recipe_by_gpu():
    args = megatron_args(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=1, pp=1, dp=16, zero_stage=3))
    assert value(args, "--ckpt-format") == "fsdp_dtensor"
    blackwell = ClusterSpec("b", 2, 8, B200)
    args = megatron_args(LLAMA_65B, blackwell, TRAIN, cfg(precision="fp8"))
    assert value(args, "--fp8-recipe") == "mxfp8" and value(args, "--fp8-format") == "e4m3"


def test_tf32_sets_the_pytorch_override():
    env = launch_env(CLUSTER, cfg(precision="tf32"))
    assert env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" not in launch_env(CLUSTER, BASE)


def test_encoder_targets_pretrain_bert():
    b = launch_bundle(_catalog("bert-large"), CLUSTER, TrainingSpec(512, 1024), cfg(tp=1, pp=1,
                                                                                 dp=16))
    assert b["targets"]["megatron"]["script"] == "pretrain_bert.py"
    assert any("encoder" in w for w in b["warnings"])
    assert not b["targets"]["torchtitan"]["supported"]


def test_alibi_model_is_refused_by_megatron():
    bloom = ModelSpec("bloom-like", num_layers=4, hidden_size=1024, num_attention_heads=16,
                      ffn_hidden_size=4096, vocab_size=250880, linear_bias=True,
                      normalization="layernorm", tied_embeddings=True,
                      source="Hugging Face config.json (model_type 'bloom')")
    b = launch_bundle(bloom, CLUSTER, TRAIN, cfg(tp=1, pp=1, dp=16))
    assert b["megatron_args"] == [] and not b["targets"]["megatron"]["supported"]
    assert any("ALiBi" in w for w in b["warnings"])


def test_hf_defaults_are_flagged_as_not_read_from_the_checkpoint():
    from optimizer.launch.model_facts import model_facts

    qwen = ModelSpec("qwen3-x", num_layers=4, hidden_size=1024, num_attention_heads=16,
                     ffn_hidden_size=4096, vocab_size=151936, gated_mlp=True,
                     source="Hugging Face config.json (model_type 'qwen3')")
    facts = model_facts(qwen)
    assert facts.qk_norm and not facts.exact
    assert "--qk-layernorm" in megatron_args(qwen, CLUSTER, TRAIN, cfg(tp=1, pp=1, dp=16))
    w = launch_warnings(cfg(tp=1, pp=1, dp=16), model=qwen)
    assert any("check them against the checkpoint" in x for x in w)


def test_deepspeed_pipeline_with_zero2_is_marked_unsupported():
    b = launch_bundle(LLAMA_65B, CLUSTER, TRAIN, cfg(tp=2, pp=2, dp=4, zero_stage=2))
    assert not b["targets"]["deepspeed"]["supported"]
    assert b["targets"]["megatron"]["supported"]


def test_torchtitan_config_module_carries_the_model():
    src = launch_bundle(_catalog("llama3-405b"), ClusterSpec("big", 128, 8, H100),
                        TrainingSpec(4096, 1024), cfg(tp=8, pp=16, dp=8, zero_stage=3,
                                                      precision="fp8"))["torchtitan_config"]
    compile(src, "paraplan_torchtitan.py", "exec")
    assert "'rope_theta': 500000.0" in src and "'rope_scaling': 'llama'" in src
    assert "FLOAT8 = True" in src and "'n_layers': 126" in src


def test_torchtitan_async_tp_is_priced_compiled_when_compile_is_unstated():
    """Its launch writes --compile.enable, so an unstated torch_compile is the compiled run;
    a stated false is refused (CompileConfig)."""
    tt = TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan",
                      tp_comm_overlap=True)
    assert tt.torch_compile is True
    with pytest.raises(InputError, match="torch.compile"):
        TrainingSpec(seq_length=2048, global_batch_size=1024, framework="torchtitan",
                     tp_comm_overlap=True, torch_compile=False)
    assert TrainingSpec(seq_length=2048, global_batch_size=1024,
                        framework="torchtitan").torch_compile is None


def test_fp8_attention_is_megatron_only_and_its_launch_says_there_is_no_flag():
    with pytest.raises(InputError) as e:
        TrainingSpec(seq_length=2048, global_batch_size=1024, framework="fsdp",
                     fp8_dot_product_attention=True)
    assert e.value.field == "training.fp8_dot_product_attention"
    tr = TrainingSpec(seq_length=2048, global_batch_size=1024, fp8_dot_product_attention=True)
    fp8 = cfg(tp=2, pp=1, dp=8, precision="fp8")
    assert any("fp8_dot_product_attention" in w
               for w in launch_warnings(fp8, model=LLAMA_65B, cluster=CLUSTER, training=tr))
    bf16 = cfg(tp=2, pp=1, dp=8)
    assert not any("fp8_dot_product_attention" in w
                   for w in launch_warnings(bf16, model=LLAMA_65B, cluster=CLUSTER, training=tr))


def test_targets_refuse_the_megatron_core_levers_they_do_not_build():
    """The DeepSpeed and torchtitan artefacts would run another configuration than the scored
    one: Megatron-Core's activation offload and precision-aware optimizer (both), its partial
    recompute (DeepSpeed checkpoints every layer; torchtitan builds it: PartialFullAC), context
    parallelism (DeepSpeed has none; torchtitan all-gathers K/V only). Before, these points
    were marked supported."""
    from optimizer.launch.flags import launch_targets

    def supported(**kw):
        t = launch_targets(LLAMA_65B, cfg(**kw))
        return t["deepspeed"]["supported"], t["torchtitan"]["supported"], t

    base = dict(tp=1, pp=1, dp=16, zero_stage=3)
    assert supported(**base)[:2] == (True, True)
    assert supported(**base, recompute="full", recompute_num_layers=40)[:2] == (False, True)
    assert supported(**base, cpu_offloading_num_layers=4)[:2] == (False, False)
    ds, tt, t = supported(**base, precision_aware_optimizer="bf16_moments")
    assert (ds, tt) == (False, False)
    assert any("precision-aware" in r for r in t["torchtitan"]["reasons"])
    assert supported(tp=1, pp=1, dp=8, cp=2, zero_stage=3, cp_comm_type="all_gather")[:2] == (
        False, True)
    ds, tt, t = supported(tp=1, pp=1, dp=8, cp=2, zero_stage=3, cp_comm_type="p2p")
    assert (ds, tt) == (False, False)
    assert any("all-gathers K/V" in r for r in t["torchtitan"]["reasons"])


def test_torchtitan_partial_recompute_on_its_lighter_end_chunks_is_not_faithful():
    """torchtitan's interleaved split makes the first and last chunk lighter (Llama 3 70B on
    pp 6 x 2: chunks 5 and 7 on the end ranks); PartialFullAC's first N blocks per part then
    recompute fewer layers than the cost model prices where 5 < N < 7."""
    from costmodel.loaders import load_cluster, load_model
    from optimizer.launch.flags import launch_targets

    model = load_model("llama3-70b")
    cluster = load_cluster({"gpu": "h100-sxm-80gb", "num_nodes": 6, "gpus_per_node": 8})
    tr = TrainingSpec(seq_length=8192, global_batch_size=240, framework="torchtitan")
    ok = {}
    for n in (4, 5, 6, 7):
        c = ParallelConfig(tp=8, pp=6, dp=1, schedule="interleaved", virtual_stages=2,
                           recompute="full", recompute_num_layers=n, sequence_parallel=True)
        ok[n] = launch_targets(model, c, tr, cluster)["torchtitan"]["supported"]
    assert ok == {4: True, 5: True, 6: False, 7: True}
