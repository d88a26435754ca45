"""paraplan's analytical cost model: compute, memory, communication and pipeline schedule.

Kept light at import time: submodules are imported where they are used.
"""

# Recorded in every result document and study, so a stored front says which model made it.
# Bumped when predictions change; the history is docs/changelog-cost-model.md.
COST_MODEL_VERSION = "0.10.0"
