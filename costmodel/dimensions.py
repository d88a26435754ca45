"""One declaration per dimension of a parallel configuration.

Each field of :class:`costmodel.specs.ParallelConfig` carries a :class:`Dimension` in its
metadata (``tp: int = dim(INT, 1, ...)``). Everything that used to list the dimensions by hand
is generated from those declarations:

- ``costmodel.batch.ConfigBatch``: one column per dimension (dtype and encoding from the kind),
  ``from_columns`` / ``from_configs`` / ``config`` / ``take`` / ``concat``, and one per-batch
  string table per ``STRING`` dimension (``nccl_algo_table``);
- ``ParallelConfig.__post_init__``: the ``parallel.<name>`` validation;
- ``search_spaces``: ``DIMENSIONS``, the ``SearchSpace`` fields, the ``space.<name>``
  validation, ``default_space``, ``batch_from_choices``, the enumerator's expansion order and
  value tables, the rows that ``explain`` reports;
- ``optimizer``: the Optuna parameters (name, draw order, joint tokens such as ``layout``), the
  ``--<flag>`` options restricting the space, the front table's columns.

The declaration of ``zero_stage``, for example::

    zero_stage: int = dim(INT, 0, "ZeRO stage: 1 distributed optimizer, 3 fully sharded",
                          minimum=0, maximum=3, space_default=(0, 1), expand_rank=6,
                          optuna=OptunaParam("zero_stage", 4), column=Column("ZeRO", 80))

Adding a dimension is one field on ``ParallelConfig`` plus the rules that read it
(``search_spaces.rules``) and the cost-model ops that use it. This module imports no other
``costmodel`` module at import time (``costmodel.specs`` imports it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, replace
from enum import IntEnum
from typing import Any

#: Kinds of dimension. INT: an integer column; CHOICE: an integer code into ``values`` (the
#: vocabulary tuple; ``codes`` is its IntEnum); BOOL: a bool column; STRING: a free string in
#: the dimension's own grammar (its ``parse`` and ``grammar``; NCCL_ALGO / NCCL_PROTO today),
#: stored as a code into the batch's own ``<name>_table`` (per-batch, because values such as
#: ``allreduce:tree;allgather:ring`` are open-ended).
INT, CHOICE, BOOL, STRING = "int", "choice", "bool", "string"
KINDS = (INT, CHOICE, BOOL, STRING)

#: ``space_default`` may depend on the problem: ``(model, cluster, training) -> values``.
SpaceDefault = Callable[[Any, Any, Any], Sequence[Any]]


@dataclass(frozen=True)
class Column:
    """A column of the human front table: ``header``, its place (``order``, ascending; the
    report's own columns such as ``m`` take orders in between) and ``format(value, config)``
    (None: ``str(value)``), where ``config`` is the front point's config dict."""

    header: str
    order: int
    format: Callable[[Any, Mapping[str, Any]], str] | None = None
    left: bool = False  # left-aligned (text) rather than right-aligned (numbers)
    # shown only when some row of the table holds a value other than the dimension's default
    # (a dimension most problems never use, such as cp, leaves their tables as they were)
    hide_default: bool = False


@dataclass(frozen=True)
class OptunaParam:
    """How a dimension reaches Optuna: the trial parameter ``name`` (one fixed categorical
    choice list per name), its draw ``order`` (ascending), and for a joint parameter (several
    dimensions naming the same parameter) the owner's ``token(*member values)``, members in
    declaration order. ``log_steps``: the polish measures steps as |log2 ratio| of the member
    values (the layout) instead of positions in the choice list."""

    name: str
    order: int
    token: Callable[..., Any] | None = None
    log_steps: bool = False


@dataclass(frozen=True)
class Dimension:
    """Everything paraplan knows about one field of a parallel configuration.

    ``name`` is filled in from the field (:func:`dimensions_of`). ``help`` says what it is
    (CLI help). ``values``: a CHOICE's vocabulary or a STRING's tokens; ``minimum`` /
    ``maximum``: an INT's range. ``space_default``: the default search-space list (a tuple,
    or a function of the problem; None: the config default only). ``derived`` (how the value
    is derived) marks a field that is not searched (``dp``): validated and stored in batches,
    never searched, sampled or given a flag. ``expand_rank``: the enumerator expands
    dimensions in ascending rank, so the ones that structural rules read come first.
    ``optuna=None`` makes a searched dimension its own Optuna parameter (draw order 100);
    ``column=None`` gives it no column of its own in the front table. A STRING dimension
    brings its grammar: ``parse(value, field)`` returns the normalised value or raises
    InputError naming ``field``; ``grammar`` says the valid values in words (CLI help, error
    hints); ``values`` are then only the tokens it lists.
    """

    kind: str
    default: Any
    help: str
    values: tuple[Any, ...] = ()
    codes: type[IntEnum] | None = None
    minimum: int = 1
    maximum: int | None = None
    derived: str = ""
    space_default: tuple[Any, ...] | SpaceDefault | None = None
    expand_rank: int = 100
    optuna: OptunaParam | None = None
    column: Column | None = None
    parse: Callable[[Any, str], Any] | None = None
    grammar: str = ""
    # a dimension added after studies were stored: while its space list is its default alone,
    # it is left out of the space's fingerprints (Optuna study names, study-file hashes), so
    # the studies of problems that never use it keep their names (see in_fingerprint)
    new: bool = False
    name: str = ""
    #: left out of config and space documents (and so fingerprints) at its default, and its
    #: front-table column shown only when a point leaves the default: ``ep`` and ``etp``,
    #: which dense problems never leave at 1
    omit_default: bool = False

    def in_fingerprint(self, values: Sequence[Any]) -> bool:
        """Whether a space listing ``values`` for this dimension names it in its
        fingerprint: always for the original dimensions, for a ``new`` one only when the
        list is not its default alone."""
        return not (self.new and tuple(values) == (self.default,))

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown dimension kind {self.kind!r}")
        if self.kind == CHOICE and (self.codes is None
                                    or [m.value for m in self.codes] != list(
                                        range(len(self.values)))):
            raise ValueError(f"{self.name or 'a CHOICE dimension'}: codes must number values")
        if self.kind == STRING and (self.parse is None or not self.grammar):
            raise ValueError(f"{self.name or 'a STRING dimension'} needs parse and grammar")

    @property
    def searched(self) -> bool:
        return not self.derived

    # -- batches -------------------------------------------------------------------------
    @property
    def dtype(self) -> str:
        """The batch column's numpy dtype."""
        return "bool" if self.kind == BOOL else "int64"

    @property
    def table_name(self) -> str | None:
        """The ConfigBatch field holding this dimension's strings (STRING kind only)."""
        return f"{self.name}_table" if self.kind == STRING else None

    def encode(self, values: Iterable[Any], table: Sequence[str] = ()) -> Any:
        """The column holding ``values`` (codes into ``values`` / ``table`` where coded)."""
        import numpy as np  # not at import time: the CLI starts without numpy

        if self.kind == CHOICE:
            return np.array([self.values.index(v) for v in values], dtype=np.int64)
        if self.kind == STRING:
            return np.array([table.index(v) for v in values], dtype=np.int64)
        return np.array(list(values), dtype=self.dtype)

    def decode_column(self, column: Any, table: Sequence[str] = ()) -> list[Any]:
        """Plain Python values (int, bool, str) of a column."""
        if self.kind == CHOICE:
            return [self.values[c] for c in column]
        if self.kind == STRING:
            return [table[c] for c in column]
        if self.kind == BOOL:
            return [bool(x) for x in column]
        return column.tolist()

    def decode(self, code: Any, table: Sequence[str] = ()) -> Any:
        """One plain value from one column entry."""
        if self.kind == CHOICE:
            return self.values[int(code)]
        if self.kind == STRING:
            return table[int(code)]
        return bool(code) if self.kind == BOOL else int(code)

    @property
    def default_code(self) -> Any:
        """The column entry of the default (a STRING default is code 0 of its table)."""
        if self.kind == CHOICE:
            return self.values.index(self.default)
        return 0 if self.kind == STRING else self.default

    # -- search space --------------------------------------------------------------------
    def default_values(self, model: Any, cluster: Any, training: Any) -> tuple[Any, ...]:
        """The values :func:`search_spaces.default_space` searches for this dimension."""
        d = self.space_default
        if d is None:
            return (self.default,)
        return tuple(d(model, cluster, training) if callable(d) else d)

    @property
    def default_values_text(self) -> str:
        """What :meth:`default_values` gives, in words (the CLI help)."""
        d = self.space_default
        if callable(d):
            text = " ".join((d.__doc__ or "").split(". ")[0].split()).rstrip(".")
            return text[:1].lower() + text[1:]
        return ", ".join(str(v).lower() for v in ((self.default,) if d is None else d))

    @property
    def param(self) -> OptunaParam:
        return self.optuna or OptunaParam(self.name, 100)

    @property
    def flag(self) -> str:
        """The ``optimize --<flag>`` option that restricts this dimension."""
        return self.name.replace("_", "-")

    @property
    def valid_text(self) -> str:
        """The valid values, as the CLI help and error hints say them."""
        if self.kind == STRING:
            return self.grammar
        if self.kind == CHOICE:
            return ", ".join(self.values)
        if self.kind == BOOL:
            return "true, false"
        if self.maximum is not None:
            return ", ".join(str(v) for v in range(self.minimum, self.maximum + 1))
        return f"integers >= {self.minimum}"


def dim(kind: str, default: Any, help: str, **kw: Any) -> Any:
    """A ``ParallelConfig`` field declared as a dimension (see :class:`Dimension`)."""
    return field(default=default, metadata={"dim": Dimension(kind, default, help, **kw)})


def dimensions_of(cls: type) -> tuple[Dimension, ...]:
    """The declarations on ``cls``'s fields, in field order, with their names filled in."""
    out = []
    for f in fields(cls):
        d = _field_dim(f)
        if d is not None:
            out.append(replace(d, name=f.name))
    return tuple(out)


def _field_dim(f: Field) -> Dimension | None:
    return f.metadata.get("dim")


def searched(dims: Sequence[Dimension]) -> tuple[Dimension, ...]:
    return tuple(d for d in dims if d.searched)


def optuna_params(dims: Sequence[Dimension]) -> tuple[tuple[OptunaParam, tuple[Dimension, ...]],
                                                      ...]:
    """(parameter, member dimensions) in draw order; a joint parameter's owner (the member
    with ``token``) gives the parameter's settings."""
    groups: dict[str, list[Dimension]] = {}
    for d in searched(dims):
        groups.setdefault(d.param.name, []).append(d)
    out = []
    for name, members in groups.items():
        owner = next((m for m in members if m.param.token is not None), members[0])
        if len(members) > 1 and owner.param.token is None:
            raise ValueError(f"joint Optuna parameter {name!r} needs a token")
        out.append((owner.param, tuple(members)))
    return tuple(sorted(out, key=lambda pm: pm[0].order))


def joint_tokens(param: OptunaParam, members: Sequence[Dimension],
                 values: Sequence[Sequence[Any]]) -> list[Any]:
    """The parameter's tokens for per-member value lists (zipped: one token per row)."""
    if param.token is None:
        (only,) = values
        return list(only)
    return [param.token(*row) for row in zip(*values, strict=True)]


def joint_order(param: OptunaParam, space_values: Sequence[Sequence[Any]]) -> list[Any]:
    """The parameter's tokens in the space's order (the product of the members' lists, the
    first member varying slowest)."""
    if param.token is None:
        (only,) = space_values
        return list(only)
    return [param.token(*combo) for combo in itertools.product(*space_values)]


# --------------------------------------------------------------------------------------------
# Problem-dependent default search values (search_spaces.default_space)
def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` (>= 1) in increasing order, in O(sqrt n) steps."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


#: micro_batch_size candidates, kept up to the global batch size.
DEFAULT_MICRO_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)


def default_tp(model: Any, cluster: Any, training: Any) -> list[int]:
    """Powers of two and divisors of gpus_per_node up to min(2 * gpus_per_node,
    num_attention_heads, num_gpus). Cross-node values
    (``tp > gpus_per_node``) are kept so the search can show why they are bad; the
    ``tp_within_node`` rule rejects them unless cross-node TP is allowed."""
    gpn = cluster.gpus_per_node
    tp_cap = min(2 * gpn, model.num_attention_heads, cluster.num_gpus)
    powers = [1 << k for k in range(tp_cap.bit_length()) if (1 << k) <= tp_cap]
    return sorted(set(powers) | {d for d in _divisors(gpn) if d <= tp_cap})


def default_pp(model: Any, cluster: Any, training: Any) -> list[int]:
    """Divisors of num_layers or of num_gpus, up to both. pp values that tile the GPUs
    need not divide the layers (uneven split, see the pp_splits_layers rule): Llama 3 405B's
    126 layers on 16 stages."""
    world = cluster.num_gpus
    return sorted(d for d in set(_divisors(model.num_layers)) | set(_divisors(world))
                  if d <= min(world, model.num_layers))


def default_micro_batch_sizes(model: Any, cluster: Any, training: Any) -> list[int]:
    """1, 2, 4, 8, 16 up to the global batch size."""
    return [b for b in DEFAULT_MICRO_BATCH_SIZES if b <= training.global_batch_size]


#: the shortest sequence the default space offers context parallelism for: below it the
#: K/V ring's transfer is not hidden by attention (modern-training.md 1.4: s/cp >~ 3k tokens
#: over a 400 Gb/s NIC) and activations fit without it
CP_MIN_SEQUENCE = 16384
#: the largest cp the default space offers, and the fewest tokens it leaves a CP rank
CP_MAX_DEFAULT = 128
CP_MIN_LOCAL_TOKENS = 2048


#: below 16k tokens, the default space still offers cp (up to this) where the global batch
#: has fewer sequences than there are GPUs (MLPerf's Llama 3.1 runs at 8k tokens: CP2-CP4 on
#: 64-5120 GPUs; Megatron-Bridge's 405B at 8k: CP2)
CP_MAX_SHORT = 8
#: the shortest sequence that offers cp when the batch is small (s/cp >= 2048 tokens)
CP_MIN_SHORT_SEQUENCE = 4096
#: from 8k tokens the default space offers cp = 2 whatever the batch: a memory and bubble
#: lever of Megatron-Bridge's and MLPerf's Llama 3.1 405B layouts (TP4 PP8 CP2 at 8k)
CP_PAIR_SEQUENCE = 8192


def default_cp(model: Any, cluster: Any, training: Any) -> list[int]:
    """1 for sequences under 16k tokens; from 16k, also powers of two up to 128 that leave
    each CP rank at least 2048 tokens, divide the GPUs and split the sequence into 2 cp
    chunks (Megatron asserts seq % (2 cp) == 0); under 16k, 2 from 8k tokens, and up to 8
    from 4k where the global batch has fewer sequences than there are GPUs."""
    s = training.seq_length
    out = [1]
    cap = min(CP_MAX_DEFAULT, cluster.num_gpus)
    if s < CP_MIN_SEQUENCE:
        small_batch = s >= CP_MIN_SHORT_SEQUENCE and training.global_batch_size < cluster.num_gpus
        if not small_batch and s < CP_PAIR_SEQUENCE:
            return out
        cap = min(CP_MAX_SHORT if small_batch else 2, cap)
    c = 2
    while c <= cap and s // c >= CP_MIN_LOCAL_TOKENS:
        if s % (2 * c) == 0 and cluster.num_gpus % c == 0:
            out.append(c)
        c *= 2
    return out


def default_cp_comm_types(model: Any, cluster: Any, training: Any) -> tuple[str, ...]:
    """p2p alone where the space has no cp > 1; else p2p, all_gather, a2a and a2a+p2p;
    torchtitan: p2p (the value at cp = 1) and all_gather, its context parallelism."""
    if len(default_cp(model, cluster, training)) == 1:
        return ("p2p",)
    if training.framework == "torchtitan":
        return ("p2p", "all_gather")
    return ("p2p", "all_gather", "a2a", "a2a+p2p")


def default_precision(model: Any, cluster: Any, training: Any) -> tuple[str, ...]:
    """bf16 where the GPU has it, else fp16, tf32 or fp32, and fp8 where the GPU has fp8
    Tensor Cores. (A GPU with none of them: its first precision.)"""
    best = next((p for p in ("bf16", "fp16", "tf32", "fp32") if cluster.gpu.supports(p)),
                next(iter(cluster.gpu.peak_flops_per_s)))
    return (best, "fp8") if best != "fp8" and cluster.gpu.supports("fp8") else (best,)


#: the most virtual stages (model chunks per pipeline rank) the default space offers for any
#: chunk size
MAX_VIRTUAL_STAGES = 8
#: beyond MAX_VIRTUAL_STAGES, the default space offers fine-grained interleaving: an even split
#: into chunks of at most this many layers, up to MAX_FINE_VIRTUAL_STAGES virtual stages.
#: Megatron-Bridge's presets interleave that finely (scripts/performance/configs, published
#: in validation/published_runs_2026.yaml): Llama 3 70B SFT on GB300 pp 2 x v 20 (2 layers a
#: chunk) and on GB200 pp 8 x v 10 (1 layer), the 48-layer MoE presets pp 2 x v 12 and v 24
FINE_CHUNK_MAX_LAYERS = 2
MAX_FINE_VIRTUAL_STAGES = 24


def default_virtual_stages(model: Any, cluster: Any, training: Any) -> list[int]:
    """1 and every count up to 8 that some default pp can interleave: pp * v divides the
    layers, or pp leaves an uneven split whose middle stages hold v layers (a pipeline
    layout; the virtual_stages_divide_layers rule checks each (pp, v, plan)); and counts from
    9 to 24 that split the layers evenly into chunks of one or two layers on some default pp
    (Megatron-Bridge's fine-grained presets: v 10, 12, 20, 24)."""
    L = model.num_layers
    pps = [p for p in default_pp(model, cluster, training) if p > 1]
    out = [1]
    for v in range(2, MAX_VIRTUAL_STAGES + 1):
        if any(L % (p * v) == 0 or (L % p and -(-L // p) >= v) for p in pps):
            out.append(v)
    for v in range(MAX_VIRTUAL_STAGES + 1, MAX_FINE_VIRTUAL_STAGES + 1):
        if any(L % (p * v) == 0 and L // (p * v) <= FINE_CHUNK_MAX_LAYERS for p in pps):
            out.append(v)
    return out


def default_zero_stages(model: Any, cluster: Any, training: Any) -> tuple[int, ...]:
    """0, 1 and 3: no sharding, the distributed optimizer, and ZeRO-3 / FSDP (with pipelines
    too, except under DeepSpeed's pipeline engine: the zero3_no_pp rule); torchtitan: 0, 2 and
    3 (DDP, FSDP2 without and with resharding after the forward; it has no ZeRO-1)."""
    if training.framework == "torchtitan":
        return (0, 2, 3)
    return (0, 1, 3)


#: partial-recompute candidates (Megatron --recompute-method block --recompute-num-layers N):
#: the partial_recompute rule keeps those under a model chunk's layers
RECOMPUTE_NUM_LAYERS = (0, 1, 2, 4, 8)


def default_recompute_num_layers(model: Any, cluster: Any, training: Any) -> list[int]:
    """0 (every layer with full recompute) and 1, 2, 4, 8 recomputed layers per model chunk
    (partial recompute, framework megatron, or torchtitan through its config module's
    PartialFullAC), below the layers per stage."""
    if training.framework not in ("megatron", "torchtitan"):
        return [0]
    return [n for n in RECOMPUTE_NUM_LAYERS if n < model.num_layers]


def default_recompute_modules(model: Any, cluster: Any, training: Any) -> tuple[str, ...]:
    """With recompute selective (framework megatron): the attention core (the default), and
    the module sets that matter for the model's layers: the dense MLP (``mlp``) where the
    model has dense layers, the MoE layers' pre-MLP norm and expert activation
    (``layernorm+moe_act``) for MoE models (costmodel.recompute)."""
    if training.framework != "megatron":
        return ("core_attn",)
    moe = getattr(model, "moe", None)
    out = ["core_attn"]
    if moe is None or model.moe_layers < model.num_layers:
        out.append("mlp")
    if moe is not None:
        out.append("layernorm+moe_act")
    return tuple(out)


def _powers_of_two_dividing(n: int, cap: int) -> list[int]:
    return [1 << k for k in range(max(cap, 1).bit_length()) if (1 << k) <= cap
            and n % (1 << k) == 0]


def default_ep(model: Any, cluster: Any, training: Any) -> list[int]:
    """1 for dense models; for MoE, powers of two dividing the routed experts up to the
    NVLink domain and the GPUs (the ep_within_domain rule keeps EP x ETP inside it)."""
    moe = getattr(model, "moe", None)
    if moe is None:
        return [1]
    cap = min(moe.num_experts, cluster.num_gpus, max(cluster.domain_gpus, 1))
    return _powers_of_two_dividing(moe.num_experts, cap)


def default_etp(model: Any, cluster: Any, training: Any) -> list[int]:
    """1 for dense models; for MoE 1, 2, 4, 8 up to gpus_per_node (the MoE README prefers
    etp = 1 for fine-grained experts; etp <= tp is a rule)."""
    if getattr(model, "moe", None) is None:
        return [1]
    return [e for e in (1, 2, 4, 8) if e <= cluster.gpus_per_node
            and model.moe.expert_ffn_hidden_size % e == 0]


# --------------------------------------------------------------------------------------------
# Optuna tokens and table formats of the joint parameters / columns
def layout_token(tp: int, pp: int, ep: int = 1, etp: int = 1) -> str:
    """The joint layout parameter's token; ep and etp are named only when not 1, so dense
    studies keep their tokens."""
    tok = f"tp{tp}_pp{pp}"
    if ep != 1 or etp != 1:
        tok += f"_ep{ep}_etp{etp}"
    return tok


def schedule_token(schedule: str, virtual_stages: int) -> str:
    return f"interleaved_v{virtual_stages}" if schedule == "interleaved" else schedule


def schedule_label(value: Any, cfg: Mapping[str, Any]) -> str:
    if cfg["schedule"] == "interleaved":
        return f"interleaved/{cfg['virtual_stages']}"
    return cfg["schedule"]


def stage_plan_label(value: Any, cfg: Mapping[str, Any]) -> str:
    return "-" if value == "default" else str(value)


def nccl_label(value: Any, cfg: Mapping[str, Any]) -> str:
    if cfg["nccl_algo"] == "auto" and cfg["nccl_proto"] == "auto":
        return "auto"
    return f"{cfg['nccl_algo']}/{cfg['nccl_proto']}"


def cp_comm_label(value: Any, cfg: Mapping[str, Any]) -> str:
    return value if cfg.get("cp", 1) > 1 else "-"


def yes_dash(value: Any, cfg: Mapping[str, Any]) -> str:
    return "y" if value else "-"


__all__ = [
    "BOOL", "CHOICE", "DEFAULT_MICRO_BATCH_SIZES", "INT", "KINDS", "STRING", "Column",
    "CP_MAX_DEFAULT", "CP_MIN_LOCAL_TOKENS", "CP_MIN_SEQUENCE", "Dimension", "OptunaParam",
    "cp_comm_label", "default_cp", "default_cp_comm_types", "default_ep", "default_etp",
    "default_micro_batch_sizes", "default_pp", "default_precision", "default_recompute_modules",
    "default_tp", "dim", "dimensions_of", "joint_order", "joint_tokens", "layout_token",
    "nccl_label", "optuna_params", "schedule_label", "schedule_token", "searched",
    "stage_plan_label", "yes_dash",
]
