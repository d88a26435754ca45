"""Search dimensions, defaults, validity rules and exact enumeration (no optuna, no joblib).

    ctx = Context(model, cluster, training)
    space = restrict(default_space(model, cluster, training), tp=(4, 8))
    batch = enumerate_valid(ctx, space)        # ConfigBatch of the valid configurations
    explain(ctx, config)                       # [(rule name, message)] a config breaks
"""

from search_spaces.enumerate import (
    count_product,
    enumerate_valid,
    rejected_by_rule,
    space_size,
)
from search_spaces.rules import (
    ALL_RULES,
    RULES_BY_NAME,
    Context,
    Rule,
    available_algos,
    available_protos,
    check,
    explain,
    nccl_problem,
    used_collectives,
    violations,
)
from search_spaces.space import (
    DIMENSIONS,
    SEARCH_DIMENSIONS,
    SearchSpace,
    batch_from_choices,
    check_dimension,
    default_space,
    optuna_choices,
    parse_nccl,
    restrict,
    space_from_mapping,
)

__all__ = [
    "ALL_RULES", "DIMENSIONS", "RULES_BY_NAME", "SEARCH_DIMENSIONS", "Context", "Rule",
    "SearchSpace",
    "available_algos", "available_protos", "batch_from_choices", "check", "check_dimension",
    "count_product", "default_space", "enumerate_valid", "explain", "nccl_problem",
    "optuna_choices", "parse_nccl", "rejected_by_rule", "restrict", "space_from_mapping",
    "space_size", "used_collectives", "violations",
]
