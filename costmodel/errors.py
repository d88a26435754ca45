"""Error types shared by every layer.

``InputError`` is bad input: the CLI prints its one-line message and exits 2.
``InfeasibleError`` means the search ran but nothing fits the memory limit: exit 3.
Anything else escaping to the CLI is a bug: exit 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


class ParaplanError(Exception):
    """Base class of the errors paraplan raises on purpose."""

    exit_code = 1


class InputError(ParaplanError, ValueError):
    """Bad input: names the field, the bad value and what would be valid."""

    exit_code = 2

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        text = f"{field}: {message}" if field else message
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class InfeasibleError(ParaplanError):
    """The search ran but no configuration fits the memory limit."""

    exit_code = 3

    def __init__(self, message: str, *, payload: object | None = None) -> None:
        self.payload = payload
        super().__init__(message)


def did_you_mean(value: str, valid: Iterable[str]) -> str:
    """A hint naming the closest valid spelling, or the full list when nothing is close."""
    valid = sorted(set(valid))
    close = difflib.get_close_matches(str(value), valid, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(valid[:20]) + (", ..." if len(valid) > 20 else "")
    return f"valid: {shown}"


def check_keys(section: str, data: dict, allowed: Iterable[str]) -> None:
    """Unknown keys are errors, never silently ignored."""
    allowed = set(allowed)
    for key in data:
        if key not in allowed:
            raise InputError(f"{section}.{key}" if section else str(key), "unknown key",
                             did_you_mean(str(key), allowed))


#: Deepest nesting of lists and mappings an input document may have. paraplan's own formats
#: need fewer than ten levels (a cluster graph: document -> nodes -> node -> id array); the
#: bound keeps ``repr``, ``hash`` and the recursive validators far from Python's recursion
#: limit (about 1,000 frames), which a hostile or broken document would otherwise reach.
MAX_NESTING_DEPTH = 100


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _child_name(path: str, key: object) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def check_nesting(field: str, value: object, limit: int = MAX_NESTING_DEPTH) -> None:
    """Raise :class:`InputError` when lists/tuples/mappings in ``value`` nest deeper than
    ``limit`` levels (a scalar is depth 0, ``[1]`` depth 1).

    Iterative (an explicit stack), so it is safe on any depth; a container shared by YAML
    aliases is walked once per depth it is reached at. The error names the path to the first
    container beyond the limit, shortened to its first four steps.
    """
    containers = (Mapping, list, tuple)
    if not isinstance(value, containers):
        return
    # (container, depth, first steps of its path)
    stack: list[tuple[object, int, tuple[object, ...]]] = [(value, 0, ())]
    seen: dict[int, int] = {}  # id -> deepest level visited
    while stack:
        node, depth, trail = stack.pop()
        if seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        if depth >= limit:
            path = field
            for key in trail:
                path = _child_name(path, key)
            raise InputError(path, f"is nested more than {limit} levels deep",
                             "paraplan's documents need a few levels; is the file generated "
                             "by mistake?")
        items = node.items() if isinstance(node, Mapping) else enumerate(node)
        short = len(trail) < 4
        for key, child in items:
            kind = type(child)
            if kind in _SCALARS:  # fast path: most values of a document are scalars
                continue
            if kind is dict or kind is list or isinstance(child, containers):
                stack.append((child, depth + 1, trail + (key,) if short else trail))
