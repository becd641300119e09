"""Renderers: each reads a :class:`attntrace.Trace` and prints it; none computes attention."""

from __future__ import annotations

from collections.abc import Callable

from attntrace.trace import Trace


def text_renderer(fmt: str) -> Callable[[Trace], str]:
    """The renderer of a text format (json, csv, markdown): a function Trace -> str.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> text_renderer("csv")(trace_attention(AttentionConfig(), "shape")).splitlines()[1]
    '0,x,x,3x768,S H,float32,9216,false'
    """
    from attntrace.render.csv_out import render_csv
    from attntrace.render.json_out import render_json
    from attntrace.render.markdown import render_markdown

    renderers: dict[str, Callable[[Trace], str]] = {"json": render_json, "csv": render_csv, "markdown": render_markdown}
    return renderers[fmt]
