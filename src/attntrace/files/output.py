"""Files attntrace writes (saved traces, pictures, reports): complete or absent, errors as one
line, the mode the umask gives, no temporary file left on SIGTERM or SIGHUP."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from attntrace.errors import InputFileError


def write_output(
    path: Path, content: bytes | Callable[[BinaryIO], None], *, what: str = "written"
) -> None:
    """Write ``content`` (bytes, or a function writing into a binary file) to ``path`` through a
    temporary file in the same folder and a rename: ``path`` is then complete, or as it was.
    ``what`` names the result in errors (``nothing was saved``).

    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "flow.svg"
    >>> write_output(f, b"<svg/>")
    >>> f.read_bytes()
    b'<svg/>'
    """
    if not path.parent.is_dir():
        raise InputFileError(
            f"{path}: the folder {path.parent} does not exist; create it or write elsewhere"
        )
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputFileError(
            f"{path}: cannot write in {path.parent} ({exc.strerror or exc})"
        ) from None
    try:
        with _signals_raise(), os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # as open() would create it, not 0600
            if isinstance(content, bytes):
                f.write(content)
            else:
                content(f)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            why = exc.strerror or exc
            raise InputFileError(
                f"{path}: could not be written ({why}); nothing was {what}"
            ) from None
        raise


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While the file is written, SIGTERM (and SIGHUP) raise SystemExit like Ctrl-C raises
    KeyboardInterrupt, so the temporary file is removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous = {n: signal.signal(getattr(signal, n), stop) for n in names}
    try:
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(getattr(signal, n), handler)
