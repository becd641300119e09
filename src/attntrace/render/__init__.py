"""Renderers: each reads a :class:`attntrace.Trace` and prints it; none computes attention."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attntrace.learn import Lang
    from attntrace.trace import Trace


def text_renderer(
    fmt: str, count: str = "flops", explain: Lang | None = None
) -> Callable[[Trace], str]:
    """The renderer of a text format (json, csv, markdown): a function Trace -> str.

    ``count`` (flops or macs) names the unit of the csv and markdown cost columns; the JSON
    always has both ``flops`` and ``macs``. ``explain`` (a language) adds what each step does
    in words to the json and markdown documents.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> text_renderer("csv")(trace_attention(AttentionConfig(), "shape")).splitlines()[1]
    '0,x,x,3x768,S H,float32,9216,false,0,0,0'
    """
    from functools import partial

    from attntrace.render.csv_out import render_csv
    from attntrace.render.json_out import render_json
    from attntrace.render.markdown import render_markdown

    renderers: dict[str, Callable[[Trace], str]] = {
        "json": partial(render_json, explain=explain),
        "csv": partial(render_csv, count=count),
        "markdown": partial(render_markdown, count=count, explain=explain),
    }
    return renderers[fmt]
