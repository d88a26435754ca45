"""Planning the job, not only the layout: GPU counts, time-to-train and cost (issue 25).

- :mod:`~optimizer.planning.counts`: ``--gpus`` lists and ranges;
- :mod:`~optimizer.planning.plan`: one search per count (the API's ``optimizer.api.plan``), time-to-train, GPU-hours, cost and
  their front;
- :mod:`~optimizer.planning.recipes`: a catalog model's training-recipe defaults;
- :mod:`~optimizer.planning.intervals`: 80% intervals from the validation residuals.
"""

from __future__ import annotations

from optimizer.planning.counts import RANGE_RULE, parse_gpu_counts
from optimizer.planning.plan import PlanEntry, PlanResult, run_plan

__all__ = ["RANGE_RULE", "PlanEntry", "PlanResult", "parse_gpu_counts", "run_plan"]
