"""paraplan's analytical cost model: compute, memory, communication and pipeline schedule.

Kept light at import time: submodules are imported where they are used.
"""

# Recorded in every result document and study, so a stored front says which model made it.
# Bumped when predictions change: 0.2.0 (2026-11-30) counts DeepSpeed's own optimizer states,
# NCCL buffers per communicator, allocator fragmentation on step-time memory and fp8 casts;
# 0.3.0 (2026-11-30) the loss buffers per framework and per micro-batch in flight, the
# interleaved schedule's per-stage memory, fp16 main gradients, selective recompute of fused
# attention, the 16-bit output layer in fp8, BF16_Optimizer's all-reduce and sharding,
# FSDP's SHARD_GRAD_OP gathers and FULL_SHARD states, Transformer Engine's fp8 memory;
# 0.4.0 (2026-11-30) cuBLAS's tile choice (256x128, 128x256, 128x128) with tile and wave
# quantisation, the host/GPU overlap as a p-norm, the unfused softmax's passes per kernel;
# 0.4.1 (2026-11-30) Megatron's PyTorch softmax where its fused kernel does not apply;
# 0.4.2 (2026-11-30) the optimizer step's fp32 gradient copy as a phase of its own, not on
# top of the backward's activations (nvidia-smi's reading still adds the two);
# 0.4.3 (2026-11-30) DeepSpeed BF16_Optimizer's bf16 cast of its fp32 gradients for the
# all-reduce (in place of a reduce bucket) and its fp32 gradient update after every
# micro-batch; nvidia-smi's reading capped at the GPU's memory where each phase fits.
COST_MODEL_VERSION = "0.4.3"
