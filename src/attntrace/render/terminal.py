"""Text for any terminal: no trailing spaces, ASCII when stdout cannot take Unicode, quiet pipes.

:class:`PlainStream` wraps stdout. Every complete line loses its trailing spaces (Rich pads table
cells); when the stream cannot encode the characters we print (``PYTHONIOENCODING=ascii``),
``→ ─ ·`` become ``-> - .`` (others ``?``). ``TERM=dumb`` (Emacs' shell, CI logs) means no cursor
control and no colour, not no Unicode: with a UTF-8 stream it keeps every character, Chinese
included. Once the reader
has gone (``attntrace run | head -1``) the rest of the output is dropped without a traceback.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from typing import TYPE_CHECKING, TextIO

from attntrace.errors import AttntraceError

if TYPE_CHECKING:
    from rich.box import Box

#: Replacements when the output must be ASCII (Rich draws its own boxes in ASCII then).
ASCII_FALLBACK = str.maketrans(
    {
        "→": "->",
        "←": "<-",
        "─": "-",
        "━": "-",
        "│": "|",
        "·": ".",
        "…": "...",
        "×": "x",
        "√": "sqrt",
        "ᵀ": "^T",
        "≤": "<=",
        "≥": ">=",
        "≈": "~",
        "–": "-",
        "—": "-",
        "\u00a0": " ",
    }
)
_CODES_AT_END = re.compile(r"(?:\x1b\[[0-9;]*m)+$")
#: Characters attntrace prints that a stream must encode to be given them unchanged.
_PROBE = "→─·"


def __getattr__(name: str) -> Box:
    """``RULE_BOX``: Rich's SIMPLE_HEAD (one rule under the header) declared ASCII-safe, so that
    on an ASCII stream Rich keeps this layout instead of a full ASCII grid; PlainStream writes
    ─ as -. Made on first use: ``attntrace --help`` wraps stdout here without importing Rich."""
    if name != "RULE_BOX":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.box import Box

    globals()[name] = box = Box("    \n    \n ── \n    \n    \n    \n    \n    \n", ascii=True)
    return box


class StdoutError(AttntraceError):
    """stdout refused the output (a full disk, a closed descriptor): the document on it is
    incomplete, which the CLI reports in one line with exit code 2."""


def stdout_error(exc: OSError) -> StdoutError:
    """The one-line error for a failed write to stdout.

    >>> print(stdout_error(OSError(errno.ENOSPC, "No space left on device")))
    cannot write to stdout (No space left on device): the output is incomplete; free some \
space or write it to a file with --output FILE
    """
    why = "it is closed" if exc.errno == errno.EBADF else exc.strerror or str(exc)
    fix = "free some space or " if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return StdoutError(
        f"cannot write to stdout ({why}): the output is incomplete; {fix}write it to a file "
        "with --output FILE"
    )


def needs_ascii(stream: TextIO) -> bool:
    """Whether ``stream`` should get ASCII only: an encoding that cannot write ``→─·``
    (``TERM=dumb`` alone is no reason: it says nothing of the encoding).

    >>> import io
    >>> needs_ascii(io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    True
    >>> needs_ascii(io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    False
    """
    try:
        _PROBE.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def to_ascii(text: str) -> str:
    """``text`` with the fallbacks of :data:`ASCII_FALLBACK`, anything else non-ASCII as ``?``.

    >>> to_ascii("(3, 768) → (3, 12, 64)  2·S·H  ─────")
    '(3, 768) -> (3, 12, 64)  2.S.H  -----'
    """
    return text.translate(ASCII_FALLBACK).encode("ascii", "replace").decode("ascii")


def strip_line(line: str) -> str:
    """One line without its trailing spaces (escape codes at its end are kept).

    >>> strip_line("axes   \\x1b[0m"), strip_line("(S, H)  ")
    ('axes\\x1b[0m', '(S, H)')
    """
    if "\x1b" not in line:  # the common case
        return line.rstrip(" \t")
    codes = _CODES_AT_END.search(line)  # linear: only an escape can start a match
    cut = codes.start() if codes else len(line)
    return line[:cut].rstrip(" \t") + line[cut:]


class PlainStream(io.TextIOBase):
    """A text stream over ``stream`` that strips trailing spaces, falls back to ASCII when
    needed, and goes quiet when the reader closes the pipe.

    >>> out = io.StringIO()
    >>> s = PlainStream(out, ascii_only=True)
    >>> s.write("x → y   \\nrest"), s.flush(), out.getvalue()
    (13, None, 'x -> y\\nrest')
    """

    def __init__(self, stream: TextIO, ascii_only: bool | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.ascii_only = needs_ascii(stream) if ascii_only is None else ascii_only
        self.broken = False
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """``ascii`` when falling back, so Rich draws its boxes in ASCII too."""
        return "ascii" if self.ascii_only else (getattr(self.stream, "encoding", None) or "utf-8")

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        if lines:
            self._emit("".join(strip_line(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._close_quietly()
            except OSError as exc:
                self._close_quietly()
                raise stdout_error(exc) from None

    def _emit(self, text: str) -> None:
        if self.broken:
            return
        try:
            self.stream.write(to_ascii(text) if self.ascii_only else text)
        except BrokenPipeError:
            self._close_quietly()
        except OSError as exc:  # a full disk, a closed descriptor: reported once, the rest dropped
            self._close_quietly()
            raise stdout_error(exc) from None

    def _close_quietly(self) -> None:
        """The reader has gone (or the file cannot take more): drop the rest, and point the
        descriptor at /dev/null so that Python's own flush at exit does not print a traceback
        (or exit 120) either."""
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass


def plain(stream: TextIO) -> TextIO:
    """``stream`` wrapped in a :class:`PlainStream` (once: an already wrapped one is returned)."""
    if isinstance(stream, PlainStream):
        return stream
    return PlainStream(stream)  # type: ignore[return-value]


def complete_writes(stream: TextIO) -> TextIO:
    """``stream`` over a buffered writer: with ``PYTHONUNBUFFERED=1`` stdout writes straight to
    the raw file, where Python drops the rest of a short write (a file reaching its size limit)
    without a word; a buffered writer writes the rest, and that write's failure is raised."""
    raw = getattr(stream, "buffer", None)
    if not isinstance(raw, io.FileIO):
        return stream
    try:
        writer = io.BufferedWriter(io.FileIO(stream.fileno(), "w", closefd=False))
    except (OSError, ValueError):
        return stream
    return io.TextIOWrapper(
        writer, encoding=stream.encoding, errors=stream.errors, line_buffering=True
    )


def reopen_closed_std_streams() -> None:
    """``attntrace run >&-``: a closed descriptor 0, 1 or 2 is reopened on /dev/null, so that no
    file attntrace opens (a temporary file, a child's pipe) takes its number. stdout is opened
    read-only there: a write to it fails, and is reported as one line (exit code 2) instead of
    a document silently lost."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, flags)
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
            if fd == 1:
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            elif fd == 2:
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
