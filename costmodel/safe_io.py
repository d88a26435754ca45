"""Guards for reading untrusted input files and the values in them (issue 26).

Every input document (model, cluster, graph, run and study files, nccl-tests logs) is read
through :func:`read_input_bytes`, which opens the path without blocking (a FIFO with no
writer does not hang), refuses anything but a regular file (``/dev/zero``, FIFOs, sockets,
terminals are never read), and refuses files larger than a bound *before* reading them
(and stops reading at the bound for files whose size the kernel does not know, e.g.
``/proc``). Parsed documents then pass :func:`check_document`: the top level must be a
mapping (its text is never echoed back, so a ``.env`` file given by mistake does not leak
into an error message), the number of values is bounded (a YAML alias "billion laughs"
document is refused without being expanded), and no key or string value holds a control
character (C0, DEL, C1, Unicode line/paragraph separators): names are written into
generated scripts, comments and terminal output, where a newline or an escape sequence
would be a command or a screen rewrite.

Limits (documented in docs/limits.md): input files 16 MiB (nccl-tests logs 4 MiB), 200,000
values per document, 4,096 characters per string.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from costmodel.errors import InputError

__all__ = ["MAX_DOCUMENT_BYTES", "MAX_LOG_BYTES", "MAX_DOCUMENT_VALUES", "MAX_STRING_CHARS",
           "check_document", "check_text", "control_character", "printable",
           "read_input_bytes", "strict_yaml_loader"]

MAX_DOCUMENT_BYTES = 16 * 2**20
MAX_LOG_BYTES = 4 * 2**20
MAX_DOCUMENT_VALUES = 200_000
MAX_STRING_CHARS = 4096
#: Keys whose values are prose (never written into a script or a name): line breaks allowed.
FREE_TEXT_KEYS = ("description",)

_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def read_input_bytes(path: str | os.PathLike[str], field: str, *,
                     max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``), else InputError(field).

    Opened with ``O_NONBLOCK`` (so a FIFO without a writer cannot block the open) and checked
    with ``fstat`` on the open descriptor (no race between the check and the read)."""
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise InputError(field, f"file not found: {p}") from None
    except IsADirectoryError:
        raise InputError(field, f"{p} is a directory", "expected a YAML or JSON file") from None
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket or a device without a reader/writer
            raise InputError(field, f"{p} is not a regular file",
                             "give the path of a regular file") from None
        raise InputError(field, f"cannot read {p}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        kind = stat.S_IFMT(st.st_mode)
        if kind == stat.S_IFDIR:
            raise InputError(field, f"{p} is a directory", "expected a YAML or JSON file")
        if kind != stat.S_IFREG:
            raise InputError(field, f"{p} is not a regular file (it is "
                             f"{_KINDS.get(kind, 'a special file')})",
                             "give the path of a regular file")
        if st.st_size > max_bytes:
            raise InputError(field, f"{p} is {_mib(st.st_size)}; input files are limited to "
                             f"{_mib(max_bytes)}", "is this the right file?")
        with contextlib.suppress(OSError):  # back to blocking reads for a regular file
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise InputError(field, f"{p} is larger than {_mib(max_bytes)}, the limit for "
                                 "input files", "is this the right file?")
        return b"".join(chunks)
    except OSError as e:
        raise InputError(field, f"cannot read {p}: {e.strerror or e}") from None
    finally:
        os.close(fd)


# ---- text ----------------------------------------------------------------------------------
def control_character(text: str) -> str | None:
    """The first control character of ``text`` (C0 incl. TAB/CR/LF, DEL, C1, U+2028/U+2029,
    other Unicode 'Cc'/'Zl'/'Zp' code points), or None."""
    for ch in text:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F or o in (0x2028, 0x2029):
            return ch
        if o > 0x7F and unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return ch
    return None


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe to print on a terminal: control characters as ``\\xNN`` escapes,
    at most ``limit`` characters."""
    out = text.encode("unicode_escape").decode("ascii") if control_character(text) else text
    return out if len(out) <= limit else out[:limit - 3] + "..."


def check_text(field: str, value: str, *, max_chars: int = MAX_STRING_CHARS) -> str:
    """``value`` if it holds no control character and is at most ``max_chars`` long."""
    bad = control_character(value)
    if bad is not None:
        raise InputError(field, f"contains the control character {bad!r} "
                         f"(U+{ord(bad):04X}) in {printable(value, 60)!r}",
                         "names and values must be one printable line")
    if len(value) > max_chars:
        raise InputError(field, f"is {len(value)} characters long; at most {max_chars}")
    return value


def check_document(doc: Any, field: str, source: str) -> dict[str, Any]:
    """The parsed document ``doc`` when it is a mapping of bounded size whose keys and strings
    pass :func:`check_text`; else InputError naming ``field.<path>``. Shared (aliased) YAML
    nodes are visited once, so an alias bomb costs its real size, not its expansion."""
    if not isinstance(doc, Mapping):
        kind = "a list" if isinstance(doc, list) else \
            "a single value" if not isinstance(doc, dict) else type(doc).__name__
        raise InputError(field, f"{source} must be a mapping (a YAML/JSON document of "
                         f"'key: value' lines); its top level is {kind}")
    expanded = _expanded_size(doc)
    if expanded > MAX_DOCUMENT_VALUES:
        raise InputError(field, f"{source} holds more than {MAX_DOCUMENT_VALUES:,} values",
                         "is this the right file? (YAML aliases count once per use)")
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(field, doc)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if where.rsplit(".", 1)[-1] in FREE_TEXT_KEYS:  # prose: line breaks allowed
                check_text(where, value.replace("\n", " ").replace("\t", " "),
                           max_chars=8 * MAX_STRING_CHARS)
            else:
                check_text(where, value)
        elif isinstance(value, Mapping | list | tuple):
            if id(value) in seen:  # an alias: checked once
                continue
            seen.add(id(value))
            if isinstance(value, Mapping):
                for k, v in value.items():
                    key = str(k)
                    check_text(f"{where}.{printable(key, 40)}" if where else key, key)
                    stack.append((f"{where}.{key}", v))
            else:
                for i, v in enumerate(value):
                    stack.append((f"{where}[{i}]", v))
    check_synonyms(doc, field)
    return dict(doc)


def _expanded_size(doc: Any) -> int:
    """The number of values ``doc`` has once every alias is expanded (each shared node is
    sized once, so this costs the document's real size)."""
    memo: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, Mapping | list | tuple) or id(node) in memo:
            continue
        kids = list(node.values()) if isinstance(node, Mapping) else list(node)
        if done:
            memo[id(node)] = 1 + sum(memo.get(id(k), 1) if isinstance(k, Mapping | list | tuple)
                                     else 1 for k in kids)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if isinstance(k, Mapping | list | tuple))
    return memo.get(id(doc), 1)


#: Spellings of one model quantity (contract keys and Hugging Face keys): a document that
#: gives two of them with different values is ambiguous (which one would be used?).
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("num_layers", "num_hidden_layers", "n_layer", "n_layers", "num_layer"),
    ("hidden_size", "n_embd", "d_model"),
    ("num_attention_heads", "n_head", "num_heads"),
    ("ffn_hidden_size", "intermediate_size", "n_inner"),
    ("num_kv_heads", "num_key_value_heads"),
)


def check_synonyms(doc: Mapping[str, Any], field: str) -> None:
    """Refuse a top-level mapping that gives one quantity under two names with two values."""
    for names in SYNONYMS:
        given = [(n, doc[n]) for n in names if doc.get(n) is not None]
        if len({repr(v) for _, v in given}) > 1:
            shown = ", ".join(f"{n}={printable(repr(v), 30)}" for n, v in given)
            raise InputError(f"{field}.{given[1][0]}", f"conflicts with {given[0][0]} "
                             f"({shown})", "give the value once")


@contextlib.contextmanager
def parse_errors(field: str, source: str):
    """Any ValueError/OverflowError a parser raises on hostile text (e.g. a 5,000-digit
    integer beyond Python's int-conversion limit) becomes InputError(field)."""
    try:
        yield
    except InputError:
        raise
    except (ValueError, OverflowError, RecursionError, MemoryError) as e:
        raise InputError(field, f"{source}: cannot be read ({type(e).__name__}: "
                         f"{printable(str(e), 120)})") from None


# ---- YAML ----------------------------------------------------------------------------------
def strict_yaml_loader(loader: type) -> type:
    """A subclass of the YAML loader class ``loader`` that refuses YAML 1.1's base-60 numbers
    (``1:30`` read as 90, ``1:30.5`` as 90.5): a time-like value for a count is a mistake."""
    import yaml

    class _Strict(loader):  # type: ignore[misc, valid-type]
        pass

    def _int(self, node):
        if ":" in str(node.value):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is a YAML 1.1 base-60 number; write the value "
                "in decimal (or quote it)", node.start_mark)
        return yaml.constructor.SafeConstructor.construct_yaml_int(self, node)

    def _float(self, node):
        if ":" in str(node.value):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is a YAML 1.1 base-60 number; write the value "
                "in decimal (or quote it)", node.start_mark)
        return yaml.constructor.SafeConstructor.construct_yaml_float(self, node)

    _Strict.add_constructor("tag:yaml.org,2002:int", _int)
    _Strict.add_constructor("tag:yaml.org,2002:float", _float)
    return _Strict
