"""Terminal-safe text: every string that came from a file or the command line goes through here
before it reaches the terminal.

Two rules make a string inert:

* every character Python does not call printable (C0 and C1 controls, DEL, ESC, CR, BEL, tabs
  and newlines, bidi overrides and other format characters, lone surrogates, line and
  paragraph separators, unassigned code points) is shown as its escape, e.g. ESC as the four
  characters ``\\x1b`` -- the way ``repr`` shows it, so nothing can move the cursor, change
  colours, open a hyperlink, reorder text or break a one-line message;
* Rich markup is escaped, so ``[bold]`` or ``[link=...]`` is shown literally instead of styled.

Use :func:`inert` for text printed through a Rich console with markup (tables, reports,
warnings) and :func:`plain` for everything else (the one-line error on stderr, JSON, CSV).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: The environment variables that name the locale, strongest first (as POSIX reads them).
LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG")


def locale_is_chinese(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the locale is Chinese (``zh_CN.UTF-8``, ``zh_TW``…): the first of LC_ALL,
    LC_MESSAGES, LANG that is set and not empty decides.

    >>> locale_is_chinese({"LANG": "zh_CN.UTF-8"}), locale_is_chinese({"LC_ALL": "C", "LANG": "zh"})
    (True, False)
    """
    env = os.environ if environ is None else environ
    for name in LOCALE_VARIABLES:
        if value := env.get(name, ""):
            return value.lower().startswith("zh")
    return False


def plain(s: object) -> str:
    """``s`` as a string with every non-printable character escaped (no markup escaping).

    >>> plain("ok\\x1b[31mred\\x07\\r\\n")
    'ok\\\\x1b[31mred\\\\x07\\\\r\\\\n'
    >>> plain("A\\u202eB"), plain("tab\\there"), plain("ünïcödé 注意")
    ('A\\\\u202eB', 'tab\\\\there', 'ünïcödé 注意')
    """
    text = s if isinstance(s, str) else str(s)
    if text.isprintable():  # the fast path: nearly every string
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def inert(s: object) -> str:
    """``s`` made safe for a Rich console: non-printable characters escaped, markup escaped.

    >>> inert("[link=https://evil.example]click[/link]\\x1b]8;;x\\x07")
    '\\\\[link=https://evil.example]click\\\\[/link]\\\\x1b]8;;x\\\\x07'
    >>> from rich.console import Console
    >>> console = Console(width=80, no_color=True)
    >>> with console.capture() as cap:
    ...     console.print(inert("[bold]w_q[/bold]\\x1b[2J"))
    >>> cap.get()
    '[bold]w_q[/bold]\\\\x1b[2J\\n'
    """
    from rich.markup import escape

    return escape(plain(s))


def _escape(c: str) -> str:
    """One character as its Python escape: ``\\n``, ``\\x1b``, ``\\u202e`` or ``\\U000e0001``."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if c in named:
        return named[c]
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
