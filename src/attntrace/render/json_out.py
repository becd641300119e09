"""``--format json``: the trace as one JSON document (schema ``attntrace.trace/1``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from attntrace import __version__
from attntrace.trace import Trace

if TYPE_CHECKING:
    from attntrace.learn import Lang


def render_json(trace: Trace, preset: str | None = None, explain: Lang | None = None) -> str:
    """The document of :meth:`Trace.to_dict` as indented JSON, ending in a newline, with the
    version of attntrace that wrote it and (optional keys) the preset the sizes came from and,
    with ``explain`` (a language), each step's ``explanation`` in words.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> doc = json.loads(render_json(trace_attention(AttentionConfig(), "shape"), preset="gpt2"))
    >>> doc["steps"][0]["shape"], doc["attntrace_version"] == __version__, doc["preset"]
    ([3, 768], True, 'gpt2')
    >>> doc = json.loads(render_json(trace_attention(AttentionConfig(), "shape"), explain="en"))
    >>> doc["steps"][13]["name"], doc["steps"][13]["explanation"][:40]
    ('weights', 'Softmax along each row (normalisation): ')
    """
    body = trace.to_dict()
    if explain is not None:
        from attntrace.learn import explain_trace

        words = explain_trace(trace, explain)
        body["steps"] = [{**step, "explanation": words[step["name"]]} for step in body["steps"]]
    doc = {
        **body,
        "attntrace_version": __version__,
        **({"preset": preset} if preset else {}),
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"  # strict JSON, always
