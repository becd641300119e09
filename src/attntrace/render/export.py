"""``--format svg|html``: the exact table view, recorded by Rich and exported as one file."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console

from attntrace.trace import Trace

#: Export width in columns: fixed, so a picture in the docs or a CI artifact is reproducible.
EXPORT_WIDTH = 100
EXPORT_FORMATS = ("svg", "html")
#: Rich's SVG loads a web font as a fallback; dropped, so the file makes no network request.
_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}\s*")


def record(draw: Callable[[Console], None], width: int = EXPORT_WIDTH) -> Console:
    """A recording console of ``width`` columns on which ``draw`` has printed (truecolor).

    >>> record(lambda c: c.print("hi"), width=20).export_text()
    'hi\\n'
    """
    console = Console(
        record=True,
        file=io.StringIO(),
        width=width,
        color_system="truecolor",
        force_terminal=True,
        legacy_windows=False,
        emoji=False,
        force_jupyter=False,  # in a notebook too: record the text, display nothing
    )
    draw(console)
    return console


def export(
    draw: Callable[[Console], None], fmt: str, title: str = "attntrace", width: int = EXPORT_WIDTH
) -> str:
    """What ``draw`` prints, as one SVG or self-contained HTML document (``fmt``: svg or html).

    >>> export(lambda c: c.print("(3, 768)"), "html").startswith("<!DOCTYPE html>")
    True
    """
    console = record(draw, width)
    if fmt == "svg":
        return _FONT_FACE.sub("", console.export_svg(title=title))
    if fmt == "html":
        return console.export_html(inline_styles=True)
    raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")


def export_trace(trace: Trace, fmt: str, **view: Any) -> str:
    """The table view of ``trace`` (as ``attntrace run`` prints it) as an SVG or HTML document;
    ``view`` takes the keyword options of :func:`attntrace.render.table.render_trace`.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> svg = export_trace(trace_attention(AttentionConfig(), "shape"), "svg")
    >>> svg.startswith("<svg") and "q_heads" in svg and "@font-face" not in svg
    True
    """
    from attntrace.render.table import render_trace, title_line

    def draw(console: Console) -> None:
        render_trace(trace, console, **view)

    return export(draw, fmt, title=title_line(trace).plain)
