"""``attntrace report --out report.html``: one self-contained HTML page of a trace.

The steps table, the flow diagram (:mod:`attntrace.render.flow`), a heat map per head (each cell
says its value on hover), the costs and the config, with the style inline: no script, no font,
no image and no link is fetched, so the file opens anywhere, offline, and can be attached to a
CI run as it is.
"""

from __future__ import annotations

import re
from html import escape
from typing import TYPE_CHECKING

from attntrace.learn.lang import message, translate
from attntrace.render.flow import render_flow_svg
from attntrace.render.heatmap_svg import head_svg
from attntrace.render.speaking import said_table
from attntrace.render.table import describe_in, whole_model_rows, whole_model_title
from attntrace.trace import Trace
from attntrace.units import (
    format_axes,
    format_bytes,
    format_count,
    format_shape,
    format_terms,
    in_unit,
)

if TYPE_CHECKING:
    from rich.table import Table

    from attntrace.learn import Lang

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px;
       color: #1b2a3a; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ccd; }
table { border-collapse: collapse; font-size: 13px;
        font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
th, td { padding: 2px 10px; text-align: left; } th { border-bottom: 1px solid #99a; }
td.num { text-align: right; } tr:nth-child(even) td { background: #f4f6fa; }
.heads { display: flex; flex-wrap: wrap; gap: 18px; } figure { margin: 0; }
figcaption { font-size: 12px; text-align: center; } .note { color: #666; font-size: 13px; }
td.t, .t { white-space: nowrap; }
"""


def render_report(
    trace: Trace,
    *,
    batch_item: int = 0,
    count: str = "flops",
    explain: Lang | None = None,
    lang: Lang = "en",
    token: int | None = None,
) -> str:
    """The whole page as one HTML document; ``explain`` (a language) adds what each step does
    to the steps table; ``lang`` writes the page's headings in that language; ``token`` adds
    that query's attention row in every head (``--token``).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> page = render_report(trace_attention(AttentionConfig(seq=4, hidden=8, heads=2)))
    >>> page.startswith("<!DOCTYPE html>") and "<script" not in page and page.count("<figure") == 2
    True
    """
    from attntrace import __version__

    title = f"attntrace: {describe_in(trace.config, lang)}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{escape(_sizes(trace))}; '
        f"{escape(trace.backend)} {escape(trace.config.dtype)}; "
        f"attntrace {escape(__version__)}</p>",
        *_origin(trace),
        f"<h2>{message('ui.report_flow', lang)}</h2>",
        render_flow_svg(trace, lang),
        f"<h2>{message('ui.report_steps', lang)}</h2>",
        _steps(trace, explain, lang),
        f"<h2>{message('ui.report_weights', lang)}</h2>",
        _heads(trace, batch_item, lang),
        *_token(trace, token, batch_item),
        f"<h2>{message('ui.report_costs', lang)}</h2>",
        _costs(trace, count, lang),
        *_whole_model(trace, count, lang),
        *_training(trace, lang),
        *_serving(trace, count, lang),
        *_parallel(trace, count, lang),
        f"<h2>{message('ui.report_config', lang)}</h2>",
        _config(trace, lang),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _origin(trace: Trace) -> list[str]:
    """Where the settings and the input come from (--model, --prompt) and the prompt's tokens."""
    out = [f'<p class="note">{escape(trace.origin)}</p>'] if trace.origin else []
    if trace.tokens is not None:
        words = "".join(f"<code>{escape(t)}</code> " for t in trace.tokens)
        out.append(f'<p class="tokens">tokens: {words}</p>')
    return out


def _token(trace: Trace, token: int | None, batch_item: int) -> list[str]:
    if token is None or "weights" not in trace or not trace["weights"].has_values:
        return []
    from attntrace.render.token_rows import token_rows_html

    return [token_rows_html(trace, token, batch_item)]


def _sizes(trace: Trace) -> str:
    return "  ".join(f"{axis}={size}" for axis, size in trace.config.axis_sizes().items())


def _table(
    headers: list[str],
    rows: list[list[str]],
    numeric: set[int] | None = None,
    tuples: set[int] | None = None,
) -> str:
    """An HTML table; the ``numeric`` columns right-aligned, the ``tuples`` columns (shapes,
    axes) never broken across lines, and no shape inside a sentence broken either."""
    numeric, tuples = numeric or set(), tuples or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td{_classes(i, numeric, tuples)}>{_cell(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _classes(i: int, numeric: set[int], tuples: set[int]) -> str:
    names = [*(["num"] if i in numeric else []), *(["t"] if i in tuples else [])]
    return f' class="{" ".join(names)}"' if names else ""


#: A shape or axes tuple inside a cell's text: ``(3, 12, 64)``, ``(B, h, S, d)``.
_TUPLE = re.compile(r"\((?:[^()<>&,]{1,16}, ){1,8}[^()<>&,]{1,16}\)|\([A-Za-z]\)")


def _cell(text: str) -> str:
    """A cell's text escaped, each tuple in it kept on one line.

    >>> _cell("(3, 768) → (3, 12, 64) <b>")
    '<span class="t">(3, 768)</span> → <span class="t">(3, 12, 64)</span> &lt;b&gt;'
    """
    parts, at = [], 0
    for m in _TUPLE.finditer(text):
        parts += [escape(text[at : m.start()]), f'<span class="t">{escape(m.group())}</span>']
        at = m.end()
    return "".join([*parts, escape(text[at:])])


def _steps(trace: Trace, explain: Lang | None = None, lang: Lang = "en") -> str:
    """The steps; with a column of their NaN and ±inf counts when any step holds some (as the
    CSV's ``nonfinite`` and run's warning count them), and of what they do with ``explain``.
    The headers in ``lang``; step names, ops, shapes and axes as they are."""
    from attntrace.learn import explain_trace, message

    rows = [
        [
            str(s.index),
            s.name,
            translate(s.op, lang, "cell."),  # code as it is; an op's few words in lang
            format_shape(s.shape),
            format_axes(s.axes),
            s.dtype,
        ]
        for s in trace.steps
    ]
    headers = ["#", *(message(f"ui.{w}", lang) for w in ("step", "op", "shape", "axes", "dtype"))]
    numeric = {0, 3}
    if any(s.nonfinite for s in trace.steps):
        rows = [[*row, str(s.nonfinite)] for row, s in zip(rows, trace.steps, strict=True)]
        headers, numeric = [*headers, message("report.nonfinite", lang)], {0, 3, 6}
    if explain is not None:
        words = explain_trace(trace, explain)
        rows = [[*row, words[s.name]] for row, s in zip(rows, trace.steps, strict=True)]
        headers = [*headers, message("ui.explanation", explain)]
    return _table(headers, rows, numeric, tuples={3, 4})


def _costs(trace: Trace, count: str, lang: Lang = "en") -> str:
    unit = "MACs" if count == "macs" else "FLOPs"
    rows = [
        [
            str(s.index),
            s.name,
            format_count(in_unit(s.flops, count)),
            format_terms(s.terms, count),
            format_bytes(s.nbytes),
            str(s.repeat) if s.repeat > 1 else "",
        ]
        for s in trace.steps
        if not s.view
    ]
    rows.append(
        [
            "",
            message("ui.total", lang),
            format_count(in_unit(trace.total_flops, count)),
            "",
            message("ui.peak", lang, bytes=format_bytes(trace.peak_bytes)),
            "",
        ]
    )
    note = message(
        "report.costs_note",
        lang,
        params=format_bytes(trace.param_bytes),
        kv=format_bytes(trace.kv_cache_bytes_per_token),
        dtype=trace.config.dtype,
    )
    headers = ["#", *(message(f"ui.{w}", lang) for w in ("step", "formula", "bytes", "tiles"))]
    headers.insert(2, unit)
    return _table(headers, rows, {0, 2, 4, 5}) + f'<p class="note">{escape(note)}</p>'


def _whole_model(trace: Trace, count: str, lang: Lang = "en") -> list[str]:
    """The heading and table of the whole model's figures (--layers, --model, --preset), or
    nothing without them."""
    title = whole_model_title(trace)
    if title is None:
        return []
    rows = [[translate(c, lang) for c in row] for row in whole_model_rows(trace, count)]
    title = translate(title, lang)
    headers = [message(f"report.{w}", lang) for w in ("all_layers", "value", "how_counted")]
    return [f"<h2>{escape(title[0].upper() + title[1:])}</h2>", _table(headers, rows, {1})]


def _training(trace: Trace, lang: Lang = "en") -> list[str]:
    """The backward's figures (--backward): what the forward keeps, eager against flash."""
    from attntrace.render.training import training_rows

    rows = [[translate(c, lang) for c in row] for row in training_rows(trace)]
    if not rows:
        return []
    headers = [message(f"report.{w}", lang) for w in ("backward", "value", "what")]
    return [f"<h2>{message('report.training', lang)}</h2>", _table(headers, rows, {1})]


def _serving(trace: Trace, count: str, lang: Lang = "en") -> list[str]:
    """--past: the serving figures as run shows them (render/serving_view.py): the roofline of
    this decode step beside the prefill of the same tokens, each step's traffic, the KV cache
    (and the paged layout): one HTML table each, under a heading."""
    from rich.table import Table

    from attntrace.render.serving_view import serving_pieces

    tables = [p for p in serving_pieces(trace, count) if isinstance(p, Table)]
    return _rich_tables(message("report.serving", lang), tables, lang)


def _parallel(trace: Trace, count: str, lang: Lang = "en") -> list[str]:
    """--tp, --cp: the rank's cost beside one device's and its collectives, as run shows them
    (render/parallel_view.py)."""
    from rich.table import Table

    from attntrace.render.parallel_view import parallel_pieces

    tables = [p for p in parallel_pieces(trace, count) if isinstance(p, Table)]
    return _rich_tables("Across devices: this rank and its collectives", tables, lang)


def _rich_tables(heading: str, tables: list[Table], lang: Lang = "en") -> list[str]:
    """Rich tables as HTML tables under ``heading`` (none: nothing)."""
    if not tables:
        return []
    out = [f"<h2>{escape(heading)}</h2>"]
    for table in tables:
        said_table(table, lang)
        if table.title:
            out.append(f'<p class="note">{escape(_plain(table.title))}</p>')
        headers = [_plain(c.header) for c in table.columns]
        cells = [[_plain(c) for c in column._cells] for column in table.columns]
        rows = [list(row) for row in zip(*cells, strict=True)]
        numeric = {i for i, c in enumerate(table.columns) if c.justify == "right"}
        out.append(_table(headers, rows, numeric))
        if table.caption:
            out.append(f'<p class="note">{escape(_plain(table.caption))}</p>')
    return out


def _plain(cell: object) -> str:
    """A rich cell (markup text, a Text or Prose) as plain text."""
    from rich.text import Text

    from attntrace.render.prose import Prose

    if isinstance(cell, Text | Prose):
        return cell.plain
    return Text.from_markup(str(cell)).plain


def _config(trace: Trace, lang: Lang = "en") -> str:
    """The config in words: each setting named with its axis letter, its value with what it
    means (``head_dim (d)``: ``64 (H / h)``), never a bare None or True."""
    from attntrace.render.config_words import config_rows

    rows = [[name, value] for name, value in config_rows(trace.config, lang)]
    rows.append([message("report.cfg.backend", lang), trace.backend])
    headers = [message("report.setting", lang), message("report.value", lang)]
    return _table(headers, rows)


def _heads(trace: Trace, batch_item: int, lang: Lang = "en") -> str:
    """One SVG heat map per head; every cell has a <title> with its value (shown on hover)."""
    if "weights" not in trace or not trace["weights"].has_values:
        why = (
            message("report.no_weights_flash", lang)
            if "weights" not in trace
            else message("report.no_weights_backend", lang, backend=trace.backend)
        )
        return f'<p class="note">{escape(message("report.no_weights", lang, why=why))}</p>'
    import numpy as np

    from attntrace.render.plot import head_weights

    weights, hidden = head_weights(trace, batch_item)  # (h, S, N), (h, S, N) or None
    figures = [
        head_svg(weights[h], None if hidden is None else hidden[h], _caption(h, lang), trace.tokens)
        for h in range(weights.shape[0])
    ]
    where = message("report.of_item", lang, item=batch_item) if trace.config.batched else ""
    red = message("report.red", lang) if not np.isfinite(weights).all() else ""
    note = message("report.weights_note", lang, where=where, red=red)
    return f'<p class="note">{escape(note)}</p>\n<div class="heads">{"".join(figures)}</div>'


def _caption(head: int, lang: Lang) -> str:
    """A heat map's caption: ``head 0`` (``第 0 个头``)."""
    return message("ui.where_head", lang, head=head)
