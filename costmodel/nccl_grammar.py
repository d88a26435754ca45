"""``NCCL_ALGO`` / ``NCCL_PROTO``: the one parser of their grammar, and NCCL's capability table.

Grammar (NCCL >= 2.24, ``parseList`` in ``src/graph/tuning.cc``; nccl.md section 4.2,
ecosystem.md section 2.5)::

    value   := entry (";" entry)*
    entry   := [collective ":"] ["^"] name ("," name)*
    collective := broadcast | reduce | allgather | reducescatter | allreduce

* Names are case-insensitive: algorithms ``Tree, Ring, CollNetDirect, CollNetChain, NVLS,
  NVLSTree, PAT``, protocols ``LL, LL128, Simple``. ``CollNet`` (the single CollNet of NCCL
  2.5-2.13) is accepted and means both CollNet variants.
* An entry sets the whole list of the collectives it applies to: the listed names, or with
  ``^`` everything but them. Only the entry at the very start of the value may omit the
  collective; it applies to every collective, and later entries replace it for the
  collectives they name.
* paraplan is stricter than NCCL where a value would mean nothing (changelog-cost-model.md,
  grammar 2): empty entries (``ring;``), empty list items (``ring,,tree``) and empty lists
  (``^``, ``allreduce:``, ``allreduce:^``) are errors, where NCCL's ``strtok`` silently skips
  them; collectives are NCCL's own names only (no ``bcast``).
* paraplan's own conventions on top: the whole value ``auto`` means "not set" (NCCL's own
  choice), and ``collective:auto`` leaves that one collective to NCCL (rendered as NCCL's
  ``collective:^``); surrounding spaces are ignored; naming one collective twice is an error
  (NCCL silently keeps the last one, which hides typos).

Unknown names and collectives raise :class:`~costmodel.errors.InputError` naming the field
(``nccl_algo`` / ``nccl_proto`` unless the caller passes its own), with a did-you-mean hint.

The capability table (:data:`CAPABILITIES`, nccl.md section 2) says which (algorithm,
protocol) pairs NCCL's tuner considers for each collective at all; :data:`CONDITIONS` lists
what each algorithm further needs (version, architecture, fabric, ranks per node), which the
cost model (:mod:`costmodel.collectives`) evaluates per communicator and the search space's
rules read as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from costmodel.errors import InputError, did_you_mean

__all__ = [
    "ALGORITHMS", "CAPABILITIES", "COLLECTIVES", "CONDITIONS", "PROTOCOLS",
    "AlgorithmConditions", "NcclEntry", "NcclSetting",
    "candidate_pairs", "parse_nccl_setting",
]

#: NCCL's algorithm and protocol names in its index order (the order breaks ties).
ALGORITHMS: tuple[str, ...] = ("tree", "ring", "collnetdirect", "collnetchain", "nvls",
                               "nvlstree", "pat")
PROTOCOLS: tuple[str, ...] = ("ll", "ll128", "simple")
#: The collectives NCCL's tuner models (``ncclFuncStr``; send/recv is outside the model).
COLLECTIVES: tuple[str, ...] = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")

_ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "collnet": ("collnetdirect", "collnetchain")})
_COLLECTIVE_ALIASES: Mapping[str, str] = MappingProxyType({c: c for c in COLLECTIVES})

_SIMPLE = ("simple",)
_ALL_PROTOCOLS = PROTOCOLS
_ALLGATHER_LIKE = MappingProxyType({"ring": _ALL_PROTOCOLS, "collnetdirect": _SIMPLE,
                                    "nvls": _SIMPLE, "pat": _SIMPLE})
_RING_ONLY = MappingProxyType({"ring": _ALL_PROTOCOLS})
#: ``CAPABILITIES[collective][algorithm]`` = the protocols NCCL's tuner considers for it
#: (nccl.md section 2); an algorithm missing from a collective's mapping cannot run it.
CAPABILITIES: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "broadcast": _RING_ONLY,
    "reduce": _RING_ONLY,
    "allgather": _ALLGATHER_LIKE,
    "reducescatter": _ALLGATHER_LIKE,
    "allreduce": MappingProxyType({
        "tree": _ALL_PROTOCOLS, "ring": _ALL_PROTOCOLS, "collnetdirect": _SIMPLE,
        "collnetchain": _SIMPLE, "nvls": _SIMPLE, "nvlstree": _SIMPLE}),
})


@dataclass(frozen=True)
class AlgorithmConditions:
    """What an algorithm needs beyond the capability table (nccl.md sections 5.1, 5.2;
    version gates from NCCL's ``docs/userguide/source/env.rst``).

    ``min_nccl``: first NCCL release with it. ``min_sm``: lowest compute capability (x10).
    ``needs_nvswitch``: NVSwitch inside the node (NVLS: gen 3+). ``multi_node_only``: never on
    one node. ``one_rank_per_node``: only when every node has exactly one rank (PAT's
    default). ``collnet_across_nodes``: across nodes it needs CollNet (IB SHARP) enabled.
    ``min_channels``: channels its graph needs.
    """

    min_nccl: tuple[int, int]
    min_sm: int = 0
    needs_nvswitch: bool = False
    multi_node_only: bool = False
    one_rank_per_node: bool = False
    collnet_across_nodes: bool = False
    min_channels: int = 1


CONDITIONS: Mapping[str, AlgorithmConditions] = MappingProxyType({
    "tree": AlgorithmConditions(min_nccl=(2, 5)),
    "ring": AlgorithmConditions(min_nccl=(2, 5)),
    "collnetdirect": AlgorithmConditions(min_nccl=(2, 14), needs_nvswitch=True,
                                         multi_node_only=True, collnet_across_nodes=True),
    "collnetchain": AlgorithmConditions(min_nccl=(2, 14), multi_node_only=True,
                                        collnet_across_nodes=True),
    "nvls": AlgorithmConditions(min_nccl=(2, 17), min_sm=90, needs_nvswitch=True,
                                collnet_across_nodes=True, min_channels=2),
    "nvlstree": AlgorithmConditions(min_nccl=(2, 18), min_sm=90, needs_nvswitch=True,
                                    multi_node_only=True, min_channels=2),
    "pat": AlgorithmConditions(min_nccl=(2, 23), min_sm=60, one_rank_per_node=True),
})


def candidate_pairs(collective: str) -> tuple[tuple[str, str], ...]:
    """The (algorithm, protocol) pairs NCCL considers for ``collective``, in its iteration
    order (algorithm index, then protocol index)."""
    table = CAPABILITIES[_collective("collective", collective, collective)]
    return tuple((a, p) for a in ALGORITHMS if a in table for p in PROTOCOLS if p in table[a])


# ============================================================================================
# The parser
# ============================================================================================
@dataclass(frozen=True)
class NcclEntry:
    """One entry of a value: ``collective`` None for the leading entry that applies to all
    collectives; ``names`` canonical (aliases expanded); ``exclude`` for ``^`` (``exclude``
    with no names: ``collective:auto``). ``written``: the names as the value spells them
    (lower case, aliases kept: ``collnet``), for renderers such as the launch flags; not
    part of equality."""

    collective: str | None
    exclude: bool
    names: tuple[str, ...]
    written: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class NcclSetting:
    """A parsed ``NCCL_ALGO`` (``kind='algo'``) or ``NCCL_PROTO`` (``kind='proto'``) value.

    ``entries`` is empty for ``auto``. :meth:`enabled` gives the names NCCL keeps for a
    collective, :meth:`named` those listed positively (an explicit ``LL128`` bypasses NCCL's
    platform check, nccl.md section 4.2).
    """

    kind: str
    entries: tuple[NcclEntry, ...]

    @property
    def universe(self) -> tuple[str, ...]:
        return ALGORITHMS if self.kind == "algo" else PROTOCOLS

    @property
    def forced(self) -> bool:
        """Whether the value restricts anything (it is not ``auto``)."""
        return bool(self.entries)

    def entry_for(self, collective: str) -> NcclEntry | None:
        """The entry that decides ``collective``: its own, else the leading one."""
        coll = _collective("collective", collective, collective)
        own = next((e for e in self.entries if e.collective == coll), None)
        return own or next((e for e in self.entries if e.collective is None), None)

    def enabled(self, collective: str) -> tuple[str, ...]:
        """Names enabled for ``collective``, in NCCL's index order."""
        e = self.entry_for(collective)
        if e is None:
            return self.universe
        keep = set(e.names)
        return tuple(n for n in self.universe if (n in keep) != e.exclude)

    def named(self, collective: str) -> tuple[str, ...]:
        """Names listed positively for ``collective`` (none for ``^`` lists and ``auto``)."""
        e = self.entry_for(collective)
        if e is None or e.exclude:
            return ()
        return tuple(n for n in self.universe if n in e.names)

    def as_dict(self) -> dict[str, tuple[str, ...]]:
        """``{collective or '*': enabled names}`` for the entries given ('*' = leading)."""
        if not self.entries:
            return {"*": self.universe}
        out = {}
        for e in self.entries:
            keep = set(e.names)
            out["*" if e.collective is None else e.collective] = tuple(
                n for n in self.universe if (n in keep) != e.exclude)
        return out


def _collective(field: str, text: str, value: str) -> str:
    key = "".join(ch for ch in str(text).lower() if ch.isalnum())
    if key not in _COLLECTIVE_ALIASES:
        raise InputError(field, f"unknown collective {str(text).strip()!r} in {value!r}",
                         did_you_mean(key, COLLECTIVES))
    return _COLLECTIVE_ALIASES[key]


def _names(field: str, body: str, universe: tuple[str, ...], value: str,
           where: str) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(exclude, canonical names, names as written) of one entry's list."""
    if body.lower() == "auto" and where:  # collective:auto: that collective is NCCL's choice
        return True, (), ()
    exclude = body.startswith("^")
    items = [s.strip().lower() for s in (body[1:] if exclude else body).split(",")]
    if items == [""]:
        raise InputError(field, f"empty list {where}in {value!r}",
                         f"name one of {', '.join(universe)}"
                         + (f", or '{where[4:-1]}:auto' to leave it to NCCL" if where else
                            ", or 'auto' for NCCL's own choice"))
    if "" in items:
        raise InputError(field, f"empty list item {where}in {value!r}",
                         "separate names with single commas")
    out: list[str] = []
    for name in items:
        expanded = _ALIASES.get(name, (name,)) if universe is ALGORITHMS else (name,)
        for n in expanded:
            if n not in universe:
                hint = did_you_mean(name, (*universe, *(_ALIASES if universe is ALGORITHMS
                                                        else ())))
                if name == "auto":
                    hint = "'auto' stands alone, or as 'collective:auto' for one collective"
                raise InputError(field, f"unknown token {name!r} in {value!r}", hint)
            if n not in out:
                out.append(n)
    return exclude, tuple(out), tuple(dict.fromkeys(items))


def parse_nccl_setting(value: str, kind: str, field: str | None = None) -> NcclSetting:
    """Parse an ``NCCL_ALGO`` (``kind='algo'``) or ``NCCL_PROTO`` (``kind='proto'``) value
    with the grammar of the module docstring. ``field`` names the input in errors (default
    ``nccl_algo`` / ``nccl_proto``). The argument types are checked here, before the cache
    (an unhashable ``value`` is an InputError, not a TypeError).

    >>> s = parse_nccl_setting("ring,tree;allreduce:^tree;broadcast:ring", "algo")
    >>> s.enabled("allgather"), s.enabled("broadcast")
    (('tree', 'ring'), ('ring',))
    >>> parse_nccl_setting("^LL128;allreduce:LL128", "proto").as_dict()
    {'*': ('ll', 'simple'), 'allreduce': ('ll128',)}
    """
    if kind not in ("algo", "proto"):
        raise InputError("kind", f"must be 'algo' or 'proto', got {kind!r}")
    fld = field if isinstance(field, str) and field else f"nccl_{kind}"
    if not isinstance(value, str) or not value.strip():
        raise InputError(fld, f"must be a non-empty string, got {value!r}",
                         "use 'auto' for NCCL's own choice")
    return _parse_cached(value, kind, fld)


@lru_cache(maxsize=1024)
def _parse_cached(value: str, kind: str, fld: str) -> NcclSetting:
    universe = ALGORITHMS if kind == "algo" else PROTOCOLS
    if value.strip().lower() == "auto":
        return NcclSetting(kind, ())
    if not value.replace(";", "").strip():
        raise InputError(fld, f"empty value {value!r}", "use 'auto' for NCCL's own choice")
    entries: list[NcclEntry] = []
    for i, raw in enumerate(value.split(";")):
        if not raw.strip():
            raise InputError(fld, f"empty entry in {value!r}",
                             "separate entries with single ';', none at the end")
        coll: str | None = None
        body = raw
        if ":" in raw:
            head, body = raw.split(":", 1)
            coll = _collective(fld, head, value)
        elif i:  # NCCL: "All substrings except the first must contain a prefix"
            raise InputError(fld, f"entry {raw.strip()!r} of {value!r} names no collective, "
                                  "so the list for all collectives would be given twice",
                             "only the first entry may omit 'collective:'")
        if any(e.collective == coll for e in entries):
            raise InputError(fld, f"{coll or 'the list for all collectives'} is given twice "
                                  f"in {value!r}")
        exclude, names, written = _names(fld, body.strip(), universe, value,
                                         f"for {coll} " if coll else "")
        entries.append(NcclEntry(coll, exclude, names, written))
    return NcclSetting(kind, tuple(entries))
