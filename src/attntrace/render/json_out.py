"""``--format json``: the trace as one JSON document (schema ``attntrace.trace/1``)."""

from __future__ import annotations

import json

from attntrace import __version__
from attntrace.trace import Trace


def render_json(trace: Trace, preset: str | None = None) -> str:
    """The document of :meth:`Trace.to_dict` as indented JSON, ending in a newline, with the
    version of attntrace that wrote it and (optional keys) the preset the sizes came from.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> doc = json.loads(render_json(trace_attention(AttentionConfig(), "shape"), preset="gpt2"))
    >>> doc["steps"][0]["shape"], doc["attntrace_version"] == __version__, doc["preset"]
    ([3, 768], True, 'gpt2')
    """
    doc = {
        **trace.to_dict(),
        "attntrace_version": __version__,
        **({"preset": preset} if preset else {}),
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"  # strict JSON, always
