"""Error types shared by every layer.

``InputError`` is bad input: the CLI prints its one-line message and exits 2.
``InfeasibleError`` means the search ran but nothing fits the memory limit: exit 3.
Anything else escaping to the CLI is a bug: exit 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
