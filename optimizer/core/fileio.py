"""Atomic file writes: a reader (or a crash) never sees a half-written file.

The data goes to a temporary file in the *same directory* as the target (so the final
``os.replace`` is a rename within one file system, atomic on POSIX and Windows), is flushed
and ``fsync``-ed, and only then replaces the target; the directory is fsync-ed afterwards so
the rename itself survives a power loss (POSIX ``rename(2)``; the ext4/XFS "write, fsync,
rename, fsync dir" recipe). If anything fails before the rename, the temporary file is removed
and the previous content of the target is untouched.

Only regular files are replaced: an existing target that is a device node, a FIFO or a socket
is refused (InputError), and a symbolic link is written through (its target is replaced, the
link kept).

Used by every writer of user-visible files (plots, JSON reports, study summaries, emitted
launch files); bad destinations raise :class:`costmodel.errors.InputError` naming ``field``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from costmodel.errors import InputError
from costmodel.loaders import expand_user

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def _fsync_dir(directory: Path) -> None:
    """Persist a rename in ``directory`` (best effort: not every platform can open a dir)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, field: str = "output",
                       mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically; returns the resolved target path.

    The target's permission bits are kept when it exists (else ``mode``, else 0o644 minus the
    umask, like ``open(path, "w")``). The parent directory must exist: nothing is created
    outside the chosen location. Raises InputError(field, ...) for a destination that is a
    directory, a missing directory or an unwritable one.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    target = expand_user(path, field)
    if target.is_symlink():  # write through the link: the link stays, its target is replaced
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise InputError(field, f"{target} is a directory", "give a file path")
    try:
        kind = stat.S_IFMT(os.stat(target).st_mode)
    except OSError:
        kind = None  # a new file
    if kind is not None and kind != stat.S_IFREG:
        # a rename would replace the node itself (as root: /dev/full becomes a PNG; a FIFO a
        # reader waits on becomes a plain file): only regular files are ever replaced
        raise InputError(field, f"{target} exists and is not a regular file (a device, FIFO "
                         "or socket)", "give the path of a regular file or of a new one")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(field, f"directory {directory} does not exist",
                         "create it first or choose another output path")
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=directory)
    except OSError as e:
        raise InputError(field, f"cannot write to {directory}: {e.strerror or e}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):
            raise InputError(field, f"cannot write {target}: {e.strerror or e}") from None
        raise
    _fsync_dir(directory)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, field: str = "output",
                      encoding: str = "utf-8", mode: int | None = None) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding), field=field, mode=mode)
