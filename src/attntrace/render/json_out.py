"""``--format json``: the trace as one JSON document (schema ``attntrace.trace/1``)."""

from __future__ import annotations

import json

from attntrace.trace import Trace


def render_json(trace: Trace) -> str:
    """The document of :meth:`Trace.to_dict` as indented JSON, ending in a newline.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> text = render_json(trace_attention(AttentionConfig(), "shape"))
    >>> json.loads(text)["steps"][0]["shape"]
    [3, 768]
    """
    return json.dumps(trace.to_dict(), indent=2, allow_nan=False) + "\n"  # strict JSON, always
