"""How attntrace's records show themselves: in Jupyter (``_repr_html_``) and from Python
(:func:`show`).

A :class:`attntrace.Trace`, a capture, a ``DiffReport``, verify's report and a sweep call
:func:`html` from their ``_repr_html_``. The drawing itself is :mod:`attntrace.render.notebook`'s,
imported by its name on first use (as :mod:`attntrace.lazy` imports the public names): the
records (stages 3 and 4) never import the renderers above them, and ``import attntrace`` stays
as fast as it was.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The module that draws every record, imported when a record is first shown.
VIEWS = "attntrace.render.notebook"


def html(obj: object, *, explain: bool = False, lang: str | None = None) -> str:
    """The HTML view of ``obj`` (a Trace, capture, DiffReport, verify report or sweep): what
    Jupyter shows; ``explain`` adds what each step does, in ``lang`` (en, zh; default from the
    locale).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> page = html(trace_attention(AttentionConfig(seq=3, hidden=8, heads=2)))
    >>> page.startswith('<div class="attntrace">'), "<svg" in page, "\\x1b[" in page
    (True, True, False)
    """
    views: Any = importlib.import_module(VIEWS)
    return str(views.to_html(obj, explain=explain, lang=lang))


def show(obj: object, *, explain: bool = False, lang: str | None = None) -> None:
    """Show ``obj`` (a Trace, capture, DiffReport, verify report or sweep): in a notebook as
    its HTML view, elsewhere as the terminal view ``attntrace`` prints; ``explain`` adds what
    each step does, in ``lang`` (en or zh; default from LC_ALL, LC_MESSAGES, LANG).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> show(trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), "shape"), explain=True,
    ...      lang="zh")  # doctest: +ELLIPSIS
    attntrace  多头自注意力  S=3  H=8  h=2  d=4  shape float32
    ...每一步做什么...
    """
    views: Any = importlib.import_module(VIEWS)
    views.show(obj, explain=explain, lang=lang)
