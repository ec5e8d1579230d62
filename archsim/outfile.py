"""Every file archsim writes is written atomically: a temporary file beside it, then a rename.

:func:`write_file` writes text or bytes (or lets a library write to the temporary path), fsyncs it,
gives it the mode ``open()`` would have and renames it over the target. A write that fails -- a full
disk, a read-only folder -- leaves neither a partial file nor the temporary one behind, and is raised
as one :class:`~archsim.errors.UsageError` naming the path and the option that chose it, so the CLI
prints one line (``FILE: --out: cannot write: No space left on device``) and exits with status 2.
A target that exists and is neither a regular file nor a folder (``/dev/null``, a FIFO) is written
in place: a rename would replace the device with a regular file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from archsim.errors import UsageError

__all__ = ["cannot_write", "write_file"]


def cannot_write(path: str | os.PathLike[str], field: str, err: OSError) -> UsageError:
    """The one-line error of a failed write to ``path``."""
    return UsageError(os.fspath(path), field, f"cannot write: {err.strerror or err}")


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not a failure)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _mode() -> int:
    """The mode a new file gets from ``open()`` under the current umask (mkstemp creates 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _is_special(target: Path) -> bool:
    """True for an existing target that is not a regular file or a folder (``/dev/null``, a FIFO)."""
    try:
        mode = target.stat().st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_in_place(target: Path, content: str | bytes | Callable[[Path], None], field: str) -> None:
    """Write to a device or FIFO itself: renaming a file over it would replace the device."""
    try:
        if callable(content):
            content(target)
            return
        fd = os.open(target, os.O_WRONLY)
        try:
            _write_all(fd, content.encode("utf-8") if isinstance(content, str) else content)
        finally:
            os.close(fd)
    except OSError as err:
        raise cannot_write(target, field, err) from None


def write_file(
    path: str | os.PathLike[str],
    content: str | bytes | Callable[[Path], None],
    field: str = "--out",
    durable: bool = True,
) -> None:
    """Write ``content`` to ``path`` atomically.

    ``content`` is text (written as UTF-8), bytes, or a function that writes the file at the path it
    is given (a library's own writer: plotly, pandas). Raises UsageError naming ``path`` and
    ``field`` when the file cannot be written; nothing is left behind then. ``durable=False`` skips
    the fsync (milliseconds on a disk): for a cache, which a crash may leave empty but never partial
    to a reader that checks it.
    """
    target = Path(path)
    if _is_special(target):
        _write_in_place(target, content, field)
        return
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise cannot_write(path, field, err) from None
    temporary = Path(name)
    try:
        try:
            if callable(content):
                os.close(fd)
                fd = -1
                content(temporary)
            else:
                _write_all(fd, content.encode("utf-8") if isinstance(content, str) else content)
                if durable:
                    os.fsync(fd)
        finally:
            if fd >= 0:
                os.close(fd)
        os.chmod(temporary, _mode())
        os.replace(temporary, target)
    except BaseException as err:
        temporary.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise cannot_write(path, field, err) from None
        raise
