"""paraplan's own version, importable without the cost model (``optimize --version``)."""

from __future__ import annotations


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("paraplan")
    except Exception:  # pragma: no cover - not installed
        return "0+unknown"
