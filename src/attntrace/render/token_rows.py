"""``--token I``: one query's attention row in every head, the question "what does this word
look at" answered head by head. Reads the weights of a :class:`Trace`; computes nothing but the
order in which the keys are listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from rich.console import RenderableType

    from attntrace.trace import Trace

#: Up to this many keys, every key is a column; beyond, each head lists its strongest keys.
ALL_KEYS_MAX = 12
#: How many keys each head lists when there are more than :data:`ALL_KEYS_MAX`.
TOP_KEYS = 5


@dataclass(frozen=True)
class TokenRows:
    """Query ``token``'s row of the attention weights in every head of one batch item."""

    token: int
    query: str  # the query's label: its word with --prompt, else q{token}
    keys: tuple[str, ...]  # N labels: the prompt's tokens, else k0, k1 …
    weights: np.ndarray  # (h, N)
    masked: np.ndarray | None  # (h, N) bool: True where the key is masked

    def top(self, head: int, most: int = TOP_KEYS) -> list[tuple[str, float]]:
        """The ``most`` keys head ``head`` weighs most, strongest first (masked ones left out).

        >>> import numpy as np
        >>> r = TokenRows(1, "cat", ("the", "cat"), np.array([[0.3, 0.7]]), None)
        >>> r.top(0)
        [('cat', 0.7), ('the', 0.3)]
        """
        row = self.weights[head]  # (N,)
        order = sorted(range(row.shape[0]), key=lambda j: -float(row[j]))
        kept = [j for j in order if self.masked is None or not self.masked[head, j]]
        return [(self.keys[j], float(row[j])) for j in kept[:most]]


def token_rows(trace: Trace, token: int, batch_item: int = 0) -> TokenRows:
    """Query ``token``'s rows of ``trace`` (its weights must hold values)."""
    from attntrace.errors import ConfigError
    from attntrace.render.plot import head_weights

    if "weights" not in trace:
        raise ConfigError(
            "--token reads the attention weights, which --algorithm flash never forms whole; "
            "drop --algorithm flash"
        )
    if not trace["weights"].has_values:
        raise ConfigError(
            f"--token reads the attention weights; the {trace.backend} backend computes none: "
            "use --backend numpy or torch"
        )

    weights, hidden = head_weights(trace, batch_item)  # (h, S, N), (h, S, N) or None
    n = weights.shape[-1]
    tokens = trace.tokens
    named = tokens is not None and len(tokens) == n
    keys = tuple(tokens) if tokens is not None and named else tuple(f"k{j}" for j in range(n))
    query = tokens[token] if tokens is not None and named else f"q{token}"
    rows = weights[:, token, :]  # (h, N)
    return TokenRows(token, query, keys, rows, None if hidden is None else hidden[:, token, :])


def token_table(trace: Trace, token: int, batch_item: int = 0) -> RenderableType:
    """The rows as a Rich table: a column per key (shaded as the heat map) when there are few,
    else each head's strongest keys."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from attntrace.render.table import _heat_cell, _label
    from attntrace.text import inert

    rows = token_rows(trace, token, batch_item)
    few = len(rows.keys) <= ALL_KEYS_MAX
    title = Text(
        f"query {token} ({rows.query}): its attention row in every head"
        + ("" if few else f", the {TOP_KEYS} keys each weighs most"),
        "italic",
    )
    table = Table(box=None, show_edge=False, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("head", style="dim", justify="right")
    if few:
        for key in rows.keys:
            table.add_column(_label(key), justify="right", header_style="dim")
    else:
        table.add_column("keys (weight)")
    for h in range(rows.weights.shape[0]):
        if few:
            cells: list[RenderableType] = [
                Text("·", "dim")
                if rows.masked is not None and rows.masked[h, j]
                else _heat_cell(float(v), True)
                for j, v in enumerate(rows.weights[h].tolist())
            ]
        else:
            cells = [inert("  ".join(f"{key} {w:.2f}" for key, w in rows.top(h)))]
        table.add_row(str(h), *cells)
    return Group(title, table)


def token_rows_html(trace: Trace, token: int, batch_item: int = 0) -> str:
    """The rows as an HTML table: each key a column, each cell shaded as the heat maps are.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2, causal=True))
    >>> html = token_rows_html(t, 0)
    >>> html.count("<tr>"), "masked" in html
    (3, True)
    """
    from attntrace.render.heatmap_svg import ink, shade

    rows = token_rows(trace, token, batch_item)
    head = "".join(f"<th>{escape(k)}</th>" for k in rows.keys)
    body = []
    for h in range(rows.weights.shape[0]):
        cells = []
        for j, v in enumerate(rows.weights[h].tolist()):
            if rows.masked is not None and rows.masked[h, j]:
                cells.append('<td class="num" style="background:#b8b8b8">masked</td>')
            else:
                style = f"background:{shade(v)};color:{ink(v)}"
                cells.append(f'<td class="num" style="{style}">{v:.2f}</td>')
        body.append(f"<tr><th>head {h}</th>{''.join(cells)}</tr>")
    caption = f"query {token} ({rows.query}): its attention row in every head"
    return (
        f'<table class="token-rows"><caption>{escape(caption)}</caption>'
        f"<tr><th></th>{head}</tr>{''.join(body)}</table>"
    )
