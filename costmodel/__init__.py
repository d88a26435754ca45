"""paraplan's analytical cost model: compute, memory, communication and pipeline schedule.

Kept light at import time: submodules are imported where they are used.
"""

# Recorded in every result document and study, so a stored front says which model made it.
# Bumped when predictions change: 0.2.0 (2026-11-30) counts DeepSpeed's own optimizer states,
# NCCL buffers per communicator, allocator fragmentation on step-time memory and fp8 casts.
COST_MODEL_VERSION = "0.2.0"
