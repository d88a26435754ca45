"""GPU counts for planning: ``--gpus 64``, ``--gpus 64,128,256``, ``--gpus 64-1024`` or
``--gpus 64-1024:64``.

The rule for a range ``A-B`` (documented in ``optimize --help``): the counts in ``[A, B]``
the default cluster shape allows and that double from one to the next, i.e. a power-of-two
number of full nodes (``gpus_per_node x 2^k``), and below one node the powers of two. With a
step, ``A-B:S`` means every multiple of ``S`` in ``[A, B]`` that is a whole number of nodes (or
fits in one node). Lists are taken as given (each count is checked by the cluster builder).
"""

from __future__ import annotations

from costmodel.errors import InputError

MAX_COUNTS = 64  # a plan scores one search per count: keep it to a readable table

RANGE_RULE = ("a range A-B means the counts in [A, B] that are a power-of-two number of "
              "full nodes (gpus-per-node x 2^k; below one node, powers of two); A-B:S means "
              "every multiple of S in [A, B] that is whole nodes")


def _int(text: str, field: str) -> int:
    t = text.strip()
    try:
        v = float(t) if ("e" in t.lower() or "." in t) else int(t)
    except ValueError:
        raise InputError(field, f"expected a GPU count, got {text!r}",
                         "e.g. --gpus 64, --gpus 64,128,256 or --gpus 64-1024") from None
    if isinstance(v, float):
        if not v.is_integer():
            raise InputError(field, f"expected a whole GPU count, got {text!r}")
        v = int(v)
    if v < 1:
        raise InputError(field, f"must be a positive integer, got {text!r}")
    return v


def _allowed(n: int, gpus_per_node: int) -> bool:
    return n <= gpus_per_node or n % gpus_per_node == 0


def parse_gpu_counts(text: str | int, gpus_per_node: int = 8, *,
                     field: str = "--gpus") -> tuple[int, ...]:
    """The GPU counts ``text`` names, ascending and unique (raises InputError)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return (_int(str(text), field),)
    text = str(text).strip()
    if not text:
        raise InputError(field, "empty", "e.g. --gpus 64 or --gpus 64-1024")
    counts: set[int] = set()
    for part in (p for p in text.split(",") if p.strip()):
        if "-" in part.strip().lstrip("-"):
            lo_t, _, rest = part.partition("-")
            hi_t, _, step_t = rest.partition(":")
            lo, hi = _int(lo_t, field), _int(hi_t, field)
            if hi < lo:
                raise InputError(field, f"range {part.strip()!r} runs backwards",
                                 f"write {hi}-{lo}")
            if step_t:
                step = _int(step_t, field)
                found = [n for n in range(-(-lo // step) * step, hi + 1, step)
                         if _allowed(n, gpus_per_node)]
            else:
                found = []
                n = 1
                while n <= hi:
                    if n >= lo and _allowed(n, gpus_per_node):
                        found.append(n)
                    n *= 2
                # a node size that is not a power of two (e.g. 6 per node): whole nodes x 2^k
                if gpus_per_node & (gpus_per_node - 1):
                    n = gpus_per_node
                    while n <= hi:
                        if n >= lo:
                            found.append(n)
                        n *= 2
            if not found:
                raise InputError(field, f"range {part.strip()!r} holds no GPU count the "
                                 f"cluster shape allows ({gpus_per_node} per node)", RANGE_RULE)
            counts.update(found)
        else:
            counts.add(_int(part, field))
    if len(counts) > MAX_COUNTS:
        raise InputError(field, f"{len(counts)} GPU counts; at most {MAX_COUNTS} per plan",
                         "use a coarser step or a shorter range")
    return tuple(sorted(counts))
