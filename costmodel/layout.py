"""The parallel layout as named axes in a rank order, and the geometry of its groups.

A :class:`Layout` holds the degree of every parallel axis -- tensor (``tp``), context
(``cp``), expert (``ep``), expert-tensor (``etp``), data (``dp``) and pipeline (``pp``)
parallelism; unused axes are 1 -- and the order in which they are laid over the global ranks,
fastest-varying first. The default is Megatron-Core's ``tp-cp-ep-dp-pp`` (``--order`` of
``megatron/core/parallel_state.py``): tensor parallelism innermost, pipeline outermost.

Two views share the same ranks, as Megatron-Core's two ``RankGenerator`` instances (and
torchtitan's dense and sparse device meshes) do:

* the **dense view** (attention, dense MLP, embeddings): axes ``tp, cp, dp, pp`` in the
  order's positions of ``tp, cp, dp, pp`` (``ep`` is 1 there);
* the **expert view** (MoE layers): ``etp`` in the ``tp`` position, ``ep``, the expert data
  parallel axis ``edp = world / (etp * ep * pp)`` in the ``dp`` position, ``pp`` (``cp`` is 1
  there; Megatron's expert generator is built with ``cp=1`` and the dense ``dp * cp`` ranks
  re-split as ``etp * ep * edp / tp``).

A group is named by the axes it spans, e.g. ``"tp"``, ``"dp-cp"`` (the gradient reduction of
context-parallel training), ``"tp-pp"`` (model parallel) or ``"ep"``; the axes of one group
come from one view (``pp`` is in both and is the same in both whenever the order ends in
``pp``, which the layout checks as Megatron does). The ranks of a group vary over its axes and
keep every other axis fixed; within a group they are listed with the order's first axis
fastest (Megatron's ``generate_masked_orthogonal_rank_groups``), and the groups are listed by
the fixed axes, again first axis fastest. Every group of an axis set is a translate of the
first (the group holding rank 0) by its lowest rank.

Placement: rank ``r`` runs on host ``r // gpus_per_node`` and in NVLink domain
``r // cluster.domain_gpus`` (ranks fill hosts and domains in order; a domain is one host
unless the cluster says otherwise, see :class:`costmodel.specs.ClusterSpec`).
:func:`group` reports how the groups of an axis set sit on hosts and domains; it is pure
arithmetic (no graph) and memoised per distinct (hosts, domains, layout, axes), the way
``costmodel.model._geometry`` memoises per (tp, pp, dp). What a group's links cost is the
topology's business (:func:`costmodel.topology.layout_group_path`).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from costmodel.errors import InputError, did_you_mean

if TYPE_CHECKING:
    from costmodel.specs import ClusterSpec

__all__ = [
    "AXES", "DEFAULT_ORDER", "DENSE_AXES", "EXPERT_AXES", "ORDER_TOKENS",
    "GroupGeometry", "Layout",
    "group", "group_geometry", "group_of", "group_offsets", "group_ranks", "parse_axes",
    "start_residues",
]

#: Degrees a layout holds.
AXES: tuple[str, ...] = ("tp", "cp", "ep", "etp", "dp", "pp")
#: Tokens of an order string (Megatron-Core's ``--order``): ``etp`` takes ``tp``'s position
#: and the expert data-parallel axis ``edp`` takes ``dp``'s.
ORDER_TOKENS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
#: Axis names of the dense and the expert view (``pp`` is in both).
DENSE_AXES: tuple[str, ...] = ("tp", "cp", "dp", "pp")
EXPERT_AXES: tuple[str, ...] = ("etp", "ep", "edp", "pp")
_EXPERT_NAME = {"tp": "etp", "cp": None, "ep": "ep", "dp": "edp", "pp": "pp"}
_DENSE_NAME = {"tp": "tp", "cp": "cp", "ep": None, "dp": "dp", "pp": "pp"}


def _degree(name: str, value: object) -> int:
    if type(value) is int and value >= 1:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"parallel.{name}", f"must be an integer >= 1, got {value!r}")
    return int(value)


def _parse_order(order: object, sizes: dict[str, int]) -> tuple[str, ...]:
    """Order tokens, fastest first. Tokens left out must have degree 1 (as in
    ``RankGenerator.__init__``); they are inserted before the last token, where they change
    no rank and an order ending in ``pp`` keeps ending in ``pp``."""
    if not isinstance(order, str) or not order.strip():
        raise InputError("parallel.order", f"must be a string such as {DEFAULT_ORDER!r}, "
                                           f"got {order!r}")
    tokens = tuple(t.strip() for t in order.lower().split("-"))
    for t in tokens:
        if t not in ORDER_TOKENS:
            raise InputError("parallel.order", f"unknown axis {t!r} in {order!r}",
                             did_you_mean(t, ORDER_TOKENS))
    if len(set(tokens)) != len(tokens):
        raise InputError("parallel.order", f"names an axis twice: {order!r}")
    missing = tuple(t for t in ORDER_TOKENS if t not in tokens)
    for t in missing:
        if sizes[t] != 1:
            raise InputError("parallel.order", f"{t}={sizes[t]} but {order!r} does not "
                                               f"place {t}", f"e.g. {DEFAULT_ORDER!r}")
    return tokens[:-1] + missing + tokens[-1:]


# ============================================================================================
# The layout
# ============================================================================================
@dataclass(frozen=True)
class Layout:
    """Degrees of the parallel axes and their rank order (see the module docstring).

    ``etp`` defaults to ``tp`` (Megatron-Core's ``--expert-tensor-parallel-size``). The world
    is ``tp * cp * dp * pp``; the expert view re-splits it as ``etp * ep * edp * pp``, so
    ``etp * ep * pp`` must divide it. With ``pp > 1`` and an order not ending in ``pp`` the
    two views would place pipeline stages differently, which is allowed only when
    ``edp == dp`` (Megatron's own assertion).

    >>> lay = Layout(tp=2, dp=4, pp=2)
    >>> lay.world_size, lay.order, lay.dense_view
    (16, 'tp-cp-ep-dp-pp', (('tp', 2), ('cp', 1), ('dp', 4), ('pp', 2)))
    """

    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    dp: int = 1
    pp: int = 1
    order: str = DEFAULT_ORDER

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "ep", "dp", "pp"):
            object.__setattr__(self, name, _degree(name, getattr(self, name)))
        etp = self.tp if self.etp is None else _degree("etp", self.etp)
        object.__setattr__(self, "etp", etp)
        sizes = {"tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp}
        tokens = _parse_order(self.order, sizes)
        object.__setattr__(self, "order", "-".join(tokens))
        expert_mp = etp * self.ep * self.pp
        if self.world_size % expert_mp:
            raise InputError("parallel.ep", f"etp*ep*pp = {etp}*{self.ep}*{self.pp} = "
                                            f"{expert_mp} does not divide the world of "
                                            f"tp*cp*dp*pp = {self.world_size} ranks")
        if tokens[-1] != "pp" and self.pp > 1 and self.expert_dp != self.dp:
            raise InputError("parallel.order",
                             f"{self.order!r} does not end in pp, so the expert data-parallel "
                             f"size ({self.expert_dp}) must equal dp ({self.dp})",
                             "end the order in pp")

    @property
    def tokens(self) -> tuple[str, ...]:
        """The order's axis tokens, fastest first (all five)."""
        return tuple(self.order.split("-"))

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def expert_dp(self) -> int:
        """``edp``: the expert data-parallel degree, ``world / (etp * ep * pp)``."""
        return self.world_size // (self.etp * self.ep * self.pp)

    def degree(self, axis: str) -> int:
        """The degree of one axis name of either view (``edp`` included)."""
        if axis == "edp":
            return self.expert_dp
        if axis not in AXES:
            raise InputError("axes", f"unknown axis {axis!r}",
                             did_you_mean(axis, (*AXES, "edp")))
        return getattr(self, axis)

    def _view(self, names: dict[str, str | None]) -> tuple[tuple[str, int], ...]:
        return tuple((names[t], self.degree(names[t])) for t in self.tokens
                     if names[t] is not None)

    @property
    def dense_view(self) -> tuple[tuple[str, int], ...]:
        """``(axis, degree)`` of the dense view, fastest first."""
        return self._view(_DENSE_NAME)

    @property
    def expert_view(self) -> tuple[tuple[str, int], ...]:
        """``(axis, degree)`` of the expert view, fastest first."""
        return self._view(_EXPERT_NAME)


# ============================================================================================
# Groups
# ============================================================================================
def parse_axes(axes: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Normalise a group name (``"dp-cp"``, ``("cp", "dp")``) to its axes in view order
    (the order string decides the rank order inside a group, not the spelling); raises when
    the axes mix the two views."""
    names = tuple(axes.split("-")) if isinstance(axes, str) else tuple(axes)
    names = tuple(str(a).strip().lower() for a in names)
    if not names or len(set(names)) != len(names):
        raise InputError("axes", f"must name distinct axes, got {axes!r}")
    for a in names:
        if a not in DENSE_AXES and a not in EXPERT_AXES:
            raise InputError("axes", f"unknown axis {a!r}",
                             did_you_mean(a, (*DENSE_AXES, *EXPERT_AXES)))
    dense = all(a in DENSE_AXES for a in names)
    if not dense and not all(a in EXPERT_AXES for a in names):
        raise InputError("axes", f"{'-'.join(names)!r} mixes the dense axes {DENSE_AXES} "
                                 f"and the expert axes {EXPERT_AXES}",
                         "a group lives in one view (pp is in both)")
    view = DENSE_AXES if dense else EXPERT_AXES
    return tuple(a for a in view if a in names)


def _view_of(layout: Layout, axes: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    return layout.dense_view if all(a in DENSE_AXES for a in axes) else layout.expert_view


@functools.lru_cache(maxsize=4096)
def _offsets_and_fixed(layout: Layout, axes: tuple[str, ...]
                       ) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Ranks of the group holding rank 0 (in group order) and the (size, stride) of every
    axis the groups do not span (first fastest). Offsets ascend: each axis's stride exceeds
    the span of the axes before it."""
    offsets, stride = [0], 1
    fixed: list[tuple[int, int]] = []
    for axis, size in _view_of(layout, axes):
        if axis in axes:  # first dimension fastest
            offsets = [i + stride * k for k in range(size) for i in offsets]
        else:
            fixed.append((size, stride))
        stride *= size
    return tuple(offsets), tuple(fixed)


def _offsets_and_starts(layout: Layout, axes: tuple[str, ...]
                        ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:func:`_offsets_and_fixed`'s offsets and the lowest rank of every group (in
    group-index order). Lists every group: for :func:`group_ranks` and clusters whose groups
    are not translates of each other; :func:`start_residues` is what geometry needs."""
    offsets, fixed = _offsets_and_fixed(layout, axes)
    starts = [0]
    for size, step in fixed:
        starts = [i + step * k for k in range(size) for i in starts]
    return offsets, tuple(starts)


def group_offsets(layout: Layout, axes: tuple[str, ...]) -> tuple[int, ...]:
    """Ranks of the group over ``axes`` (as :func:`parse_axes` returns them) holding rank 0;
    every group is this one translated by its lowest rank."""
    return _offsets_and_fixed(layout, axes)[0]


@functools.lru_cache(maxsize=8192)
def start_residues(layout: Layout, axes: tuple[str, ...], unit: int
                   ) -> tuple[tuple[int, int], ...]:
    """``(residue, start)`` for every residue modulo ``unit`` that the lowest rank of a group
    over ``axes`` takes, ``start`` one such lowest rank; ascending by residue.

    Computed without listing the groups (up to the world size of them): along a fixed axis of
    stride ``s`` the residues repeat after ``unit / gcd(s, unit)`` steps, and there are at
    most ``unit`` residues, so the work is bounded by ``unit`` times the number of axes."""
    reps = {0: 0}
    for size, step in _offsets_and_fixed(layout, axes)[1]:
        if len(reps) == unit:  # every residue already taken: later axes add none
            break
        period = unit // math.gcd(step, unit)
        grown: dict[int, int] = {}
        for k in range(min(size, period)):
            for start in reps.values():
                s = start + step * k
                grown.setdefault(s % unit, s)
        reps = grown
    return tuple(sorted(reps.items()))


def group_ranks(layout: Layout, axes: str | tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """All groups over ``axes``, each a tuple of global ranks (Megatron-Core's
    ``RankGenerator.get_ranks``).

    >>> group_ranks(Layout(tp=2, dp=2, pp=2), "dp")
    ((0, 2), (1, 3), (4, 6), (5, 7))
    >>> group_ranks(Layout(tp=2, dp=2, pp=2), "tp-pp")
    ((0, 1, 4, 5), (2, 3, 6, 7))
    """
    offsets, starts = _offsets_and_starts(layout, parse_axes(axes))
    return tuple(tuple(s + o for o in offsets) for s in starts)


def group_of(layout: Layout, axes: str | tuple[str, ...], rank: int) -> tuple[int, ...]:
    """The group over ``axes`` holding ``rank``.

    >>> group_of(Layout(tp=2, dp=2, pp=2), "dp", 5)
    (5, 7)
    """
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) \
            or not 0 <= rank < layout.world_size:
        raise InputError("rank", f"must be an integer in 0..{layout.world_size - 1}, got "
                                 f"{rank!r}")
    names = parse_axes(axes)
    offsets = group_offsets(layout, names)
    start, stride = int(rank), 1
    for axis, size in _view_of(layout, names):  # drop the rank's coordinates on ``axes``
        if axis in names:
            start -= (int(rank) // stride) % size * stride
        stride *= size
    return tuple(start + o for o in offsets)


@dataclass(frozen=True)
class GroupGeometry:
    """Where the groups over ``axes`` of a layout sit: each field is the worst over all
    groups (most hosts spanned, most ranks of one group on one host, ...).

    ``stride`` is the rank distance between consecutive members when it is constant (a single
    axis, or axes adjacent in the order), else 0. ``hosts``/``domains`` count the hosts and
    NVLink domains a group touches; ``ranks_per_host``/``ranks_per_domain`` its most ranks on
    one of them.
    """

    axes: tuple[str, ...]
    n_ranks: int
    n_groups: int
    stride: int
    hosts: int
    ranks_per_host: int
    domains: int
    ranks_per_domain: int

    @property
    def crosses_hosts(self) -> bool:
        return self.hosts > 1

    @property
    def crosses_domains(self) -> bool:
        return self.domains > 1

    @property
    def inside_domain(self) -> bool:
        """Every group runs inside one NVLink domain."""
        return self.domains == 1


def _spans_np(ranks: np.ndarray, unit: int) -> tuple[int, int]:
    """For rows of ascending ranks (one group each): the most distinct ``rank // unit``
    values in a row and the most ranks sharing one value."""
    cell = ranks // unit
    new = np.ones(cell.shape, dtype=bool)  # a row's first rank opens a run
    new[:, 1:] = cell[:, 1:] != cell[:, :-1]
    opens = np.flatnonzero(new)
    runs = np.diff(np.append(opens, cell.size))
    return int(new.sum(axis=1).max()), int(runs.max())


def _spans(rows: list[int], offsets: tuple[int, ...], unit: int) -> tuple[int, int]:
    """:func:`_spans_np` in plain Python (faster for the small groups of most layouts)."""
    most_cells = most_run = 1
    for r in rows:
        cells, run, prev = 0, 0, -1
        for o in offsets:
            c = (r + o) // unit
            if c != prev:
                cells, run, prev = cells + 1, 1, c
            else:
                run += 1
            if run > most_run:
                most_run = run
        if cells > most_cells:
            most_cells = cells
    return most_cells, most_run


@functools.lru_cache(maxsize=8192)
def group_geometry(gpus_per_host: int, gpus_per_domain: int, layout: Layout,
                   axes: tuple[str, ...]) -> GroupGeometry:
    """:func:`group` for hosts of ``gpus_per_host`` GPUs in domains of ``gpus_per_domain``
    (a multiple of it); ``axes`` as :func:`parse_axes` returns them. Memoised."""
    offsets = group_offsets(layout, axes)
    # A group's translate by whole domains sits the same way on hosts and domains (a domain is
    # whole hosts), so one group per residue of its lowest rank modulo the domain is enough.
    rows = [r for r, _ in start_residues(layout, axes, gpus_per_domain)]
    if len(rows) * len(offsets) > 4096:
        ranks = np.asarray(rows, dtype=np.int64)[:, None] + np.asarray(offsets)[None, :]
        hosts, per_host = _spans_np(ranks, gpus_per_host)
        domains, per_domain = (hosts, per_host) if gpus_per_domain == gpus_per_host \
            else _spans_np(ranks, gpus_per_domain)
    else:
        hosts, per_host = _spans(rows, offsets, gpus_per_host)
        domains, per_domain = (hosts, per_host) if gpus_per_domain == gpus_per_host \
            else _spans(rows, offsets, gpus_per_domain)
    n = len(offsets)
    steps = {b - a for a, b in zip(offsets, offsets[1:], strict=False)}
    stride = steps.pop() if len(steps) == 1 else (1 if n == 1 else 0)
    return GroupGeometry(axes=axes, n_ranks=n, n_groups=layout.world_size // n, stride=stride,
                         hosts=hosts, ranks_per_host=per_host, domains=domains,
                         ranks_per_domain=per_domain)


def group(cluster: ClusterSpec, layout: Layout, axes: str | tuple[str, ...]) -> GroupGeometry:
    """Geometry of the groups over ``axes`` of ``layout`` on ``cluster`` (a
    :class:`~costmodel.specs.ClusterSpec`; only its host and domain sizes and its GPU count
    are read). Memoised per distinct (host size, domain size, layout, axes).

    >>> from costmodel.specs import ClusterSpec, GPUSpec
    >>> gpu = GPUSpec("x", {"bf16": 1e15}, 80e9, 2e12, 300e9)
    >>> g = group(ClusterSpec("c", 4, 8, gpu), Layout(tp=8, dp=4), "dp")
    >>> g.n_ranks, g.stride, g.hosts, g.ranks_per_host, g.crosses_hosts
    (4, 8, 4, 1, True)
    """
    names = parse_axes(axes)
    if layout.world_size > cluster.num_gpus:
        raise InputError("parallel", f"the layout's {layout.world_size} ranks exceed the "
                                     f"cluster's {cluster.num_gpus} GPUs")
    return group_geometry(cluster.gpus_per_node, cluster.domain_gpus, layout, names)
