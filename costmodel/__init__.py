"""paraplan's analytical cost model: compute, memory, communication and pipeline schedule.

Kept light at import time: submodules are imported where they are used.
"""

COST_MODEL_VERSION = "0.1.0"
