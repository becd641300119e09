"""The records in a notebook and from Python: the HTML that Jupyter shows for a trace (steps
table, the explanations when asked, a heat map per head as inline SVG, the flow diagram) and
for a capture, a diff, verify's report and a sweep (their terminal view drawn as HTML with the
styles inline). Never an ANSI escape, never a script, nothing fetched.

:func:`show` prints the terminal view (or, inside a notebook, displays the HTML).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, cast

from attntrace.errors import AttntraceError
from attntrace.learn import Lang, check_lang, explain_trace, message
from attntrace.learn.lang import translate
from attntrace.render.flow import render_flow_svg
from attntrace.render.heatmap_svg import head_svg
from attntrace.render.table import describe_in, flow_line
from attntrace.trace import Trace
from attntrace.units import format_axes, format_bytes, format_count, format_shape

if TYPE_CHECKING:
    from rich.console import Console

    from attntrace.tools.sweep import SweepPoint

#: Heads drawn in a notebook view; a trace with more shows the first ones and says so.
MAX_HEADS = 8
#: Scoped to the view's own ``div``: the notebook's page keeps its styles.
STYLE = """<style>
.attntrace { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b2a3a;
  background: #ffffff; padding: 8px; }
.attntrace table { border-collapse: collapse; font-size: 12px;
  font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
.attntrace th, .attntrace td { padding: 1px 8px; text-align: left; vertical-align: top;
  white-space: nowrap; }
.attntrace th { border-bottom: 1px solid #99a; } .attntrace td.num { text-align: right; }
.attntrace td.words { font-family: system-ui, sans-serif; min-width: 24em;
  white-space: normal; }
.attntrace .heads { display: flex; flex-wrap: wrap; gap: 14px; }
.attntrace figure { margin: 0; } .attntrace figcaption { font-size: 12px; text-align: center; }
.attntrace .note { color: #556; font-size: 12px; } .attntrace h4 { margin: 10px 0 4px 0; }
.attntrace details summary { cursor: pointer; font-size: 13px; }
</style>"""


def to_html(obj: object, *, explain: bool = False, lang: str | None = None) -> str:
    """The HTML view of a Trace, a capture, a DiffReport, a verify report or a sweep."""
    words = check_lang(lang)
    if isinstance(obj, Trace):
        return trace_html(obj, explain=explain, lang=words)
    check_shown(obj)
    return _wrap(rich_html(lambda console: draw(obj, console, explain=explain, lang=words)))


def show(obj: object, *, explain: bool = False, lang: str | None = None) -> None:
    """Display the HTML view in a notebook; elsewhere print the terminal view on stdout."""
    words = check_lang(lang)
    check_shown(obj)
    if _in_notebook():
        from IPython.display import HTML, display

        display(HTML(to_html(obj, explain=explain, lang=words)))  # type: ignore[no-untyped-call]
        return
    from rich.console import Console

    draw(obj, Console(file=sys.stdout), explain=explain, lang=words)


def rich_html(draw_on: Callable[[Console], None], width: int = 110) -> str:
    """What ``draw_on`` prints on a console, as a ``<pre>`` with the colours inline."""
    from attntrace.render.export import record

    console = record(draw_on, width)
    return console.export_html(inline_styles=True, code_format=PRE)


#: The frame of :func:`rich_html`'s text.
PRE = (
    '<pre style="font-family: ui-monospace, Menlo, monospace; font-size: 12px; '
    'line-height: 1.3; background: #ffffff; color: #1b2a3a">{code}</pre>'
)


def draw(obj: object, console: Console, *, explain: bool = False, lang: Lang = "en") -> None:
    """Print the terminal view of ``obj`` on ``console`` (see :func:`check_shown`)."""
    from attntrace.capturing.record import Capture
    from attntrace.diffing.diff_report import DiffReport
    from attntrace.render.speaking import in_words
    from attntrace.tools.verify import VerifyReport

    console = in_words(console, lang)  # the verdicts' and headers' words in lang
    if isinstance(obj, Trace):
        from attntrace.render.table import render_trace

        render_trace(obj, console, explain=explain, lang=lang)
    elif isinstance(obj, Capture):
        from attntrace.render.capture_view import render_capture

        render_capture(obj, console)
    elif isinstance(obj, DiffReport):
        from attntrace.render.diff_view import render_diff

        render_diff(obj, console)
    elif isinstance(obj, VerifyReport):
        from attntrace.render.verify_view import render_verify

        render_verify(obj, console)
    else:
        from attntrace.render.sweep_view import sweep_view

        points = cast("list[SweepPoint]", list(obj))  # type: ignore[call-overload]
        console.print(sweep_view(points))


def check_shown(obj: object) -> None:
    """Refuse what attntrace does not show, naming what it does."""
    from attntrace.capturing.record import Capture
    from attntrace.diffing.diff_report import DiffReport
    from attntrace.tools.sweep import SweepPoint
    from attntrace.tools.verify import VerifyReport

    if isinstance(obj, Trace | Capture | DiffReport | VerifyReport):
        return
    if isinstance(obj, list | tuple) and obj and all(isinstance(p, SweepPoint) for p in obj):
        return
    raise AttntraceError(
        "attntrace shows a Trace, a capture, a DiffReport, a verify report or a sweep's "
        f"points, not {type(obj).__name__}"
    )


def _in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell), where HTML is displayed."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython

    return type(get_ipython()).__name__ == "ZMQInteractiveShell"


def trace_html(
    trace: Trace, *, explain: bool = False, lang: Lang = "en", batch_item: int = 0
) -> str:
    """A trace: its title, the chain of shapes, the steps (and what each does), the heat maps
    of the attention weights (when it has values) and the flow diagram (folded)."""
    cfg = trace.config
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    parts = [
        f"<h4>attntrace: {escape(describe_in(cfg, lang))}</h4>",
        f'<p class="note">{escape(sizes)}; {escape(trace.backend)} {escape(cfg.dtype)}; '
        + escape(
            message(
                "notebook.totals",
                lang,
                steps=len(trace.steps),
                flops=format_count(trace.total_flops),
                params=format_bytes(trace.param_bytes),
            )
        )
        + "</p>",
        f"<p><code>{escape(flow_line(trace).plain)}</code></p>",
        _steps(trace, explain, lang),
        *_heads(trace, batch_item, lang),
        *(
            f'<p class="note">{escape(message("word.warning", lang, note=translate(n, lang)))}</p>'
            for n in trace.notes
        ),
        f"<details><summary>{escape(message('notebook.flow', lang))}</summary>"
        f"{render_flow_svg(trace, lang)}</details>",
    ]
    return _wrap("\n".join(parts))


def _wrap(body: str) -> str:
    return f'<div class="attntrace">{STYLE}\n{body}\n</div>'


def _steps(trace: Trace, explain: bool, lang: Lang) -> str:
    words = explain_trace(trace, lang) if explain else {}
    keys = ("step", "op", "shape", "axes", "dtype")
    head = "<th>#</th>" + "".join(f"<th>{escape(message(f'ui.{k}', lang))}</th>" for k in keys)
    if explain:
        head += f"<th>{escape(message('ui.explanation', lang))}</th>"
    rows = []
    for s in trace.steps:
        cells = [
            f'<td class="num">{s.index}</td>',
            f"<td><b>{escape(s.name)}</b></td>",
            f"<td><code>{escape(s.op)}</code></td>",
            f'<td class="num">{escape(format_shape(s.shape))}</td>',
            f"<td>{escape(format_axes(s.axes))}</td>",
            f"<td>{escape(s.dtype)}</td>",
        ]
        if explain:
            cells.append(f'<td class="words">{escape(words[s.name])}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _heads(trace: Trace, batch_item: int, lang: Lang) -> list[str]:
    """The heat map of every head (the first :data:`MAX_HEADS`), or a line saying why none."""
    title = f"<h4>{escape(message('ui.attention_weights', lang))}</h4>"
    if "weights" not in trace or not trace["weights"].has_values:
        why = (
            message("report.no_weights_flash", lang)
            if "weights" not in trace
            else message("report.no_weights_backend", lang, backend=trace.backend)
        )
        return [title, f'<p class="note">{escape(why)}</p>']
    from attntrace.render.plot import head_weights

    weights, hidden = head_weights(trace, batch_item)  # (h, S, N), (h, S, N) or None
    shown = min(weights.shape[0], MAX_HEADS)
    figures = [
        head_svg(
            weights[h],
            None if hidden is None else hidden[h],
            message("ui.where_head", lang, head=h),
            trace.tokens,
        )
        for h in range(shown)
    ]
    more = (
        f'<p class="note">{escape(_first(shown, weights.shape[0], lang))}</p>'
        if shown < weights.shape[0]
        else ""
    )
    return [title, f'<div class="heads">{"".join(figures)}</div>{more}']


def _first(shown: int, heads: int, lang: Lang) -> str:
    """``the first 8 of 12 heads``."""
    return message("notebook.first_heads", lang, shown=shown, h=heads)
