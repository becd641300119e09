"""Files attntrace writes (saved traces, pictures, reports): complete or absent, errors as one
line, the mode the umask gives, no temporary file left on SIGTERM or SIGHUP."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
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
    refuse_replacing(path)
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
            refuse_replacing(path)  # again: nothing took the name meanwhile
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


def refuse_replacing(path: Path, option: str | None = None) -> None:
    """Refuse an output ``path`` that is not a regular file or nothing: a symbolic link (never
    written through, nor replaced), a directory, a FIFO, a device or a socket.

    >>> refuse_replacing(Path("/dev/null"), "--out")
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: --out /dev/null: is a device, not a regular file; ...
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputFileError(
            f"{_named(path, option)}: cannot be written ({exc.strerror or exc}); write elsewhere"
        ) from None
    kind = _kind(st.st_mode)
    if kind is None:
        return
    raise InputFileError(
        f"{_named(path, option)}: is {kind}, not a regular file; attntrace replaces only "
        "regular files (and writes through no link): remove it or write elsewhere"
    )


def refuse_inputs(outputs: Mapping[str, Path], inputs: Mapping[str, Iterable[Path]]) -> None:
    """Refuse, before any work, an output that would replace one of the command's inputs (the
    same file, by device and inode: a link or another spelling of it too), that is not a regular
    file (:func:`refuse_replacing`), or that another output of the command names as well.
    ``outputs`` and ``inputs`` are keyed by the option that names them; an input may be several
    files (the files of a model folder).

    >>> import tempfile
    >>> w = Path(tempfile.mkdtemp()) / "w.npz"
    >>> _ = w.write_bytes(b"PK")
    >>> refuse_inputs({"--save": w}, {"--weights": [w]})
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: --save ...w.npz: is the --weights input; ...
    """
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        refuse_replacing(path, option)
        key = os.path.normcase(os.path.abspath(path))
        if key in seen:
            raise InputFileError(
                f"{option} {path}: {seen[key]} names the same file; give each output its own name"
            )
        seen[key] = option
    ids = {option: _identity(path) for option, path in outputs.items()}
    if not any(ids.values()):
        return  # outputs that do not exist yet replace nothing
    for source, files in inputs.items():
        for file in files:
            found = _identity(file)
            for option, identity in ids.items():
                if identity is not None and identity == found:
                    raise InputFileError(
                        f"{option} {outputs[option]}: is the {source} input; writing it would "
                        "replace what the command reads: write the output elsewhere"
                    )


def _identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file ``path`` names (links followed), None if none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None: a regular file)."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    )
    if stat.S_ISREG(mode):
        return None
    return next((word for test, word in kinds if test(mode)), "not a file")


def _named(path: Path, option: str | None) -> str:
    return f"{option} {path}" if option else str(path)
