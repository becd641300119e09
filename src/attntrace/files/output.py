"""Files attntrace writes (pictures, reports): complete or absent, errors as one line."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from attntrace.errors import InputFileError


def write_output(path: Path, content: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``content`` (bytes, or a function writing into a binary file) to ``path`` through a
    temporary file in the same folder and a rename.

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
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            else:
                content(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputFileError(f"{path}: could not be written ({exc.strerror or exc})") from None
        raise
