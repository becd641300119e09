"""One head's attention weights as an inline SVG a person reads: token labels on both axes
(q0, q1 ... down, k0, k1 ... across; the prompt's tokens with --prompt), a colour scale from 0
to 1, and the number in every cell when the matrix is small (S and N at most
:data:`NUMBERS_MAX_CELLS`). Larger matrices are pooled into blocks as in the terminal. No id, no
script, no font fetched: several maps share one page (the report, a notebook) without clashing.
"""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

from attntrace.render.pooling import Pooled, pool

if TYPE_CHECKING:
    import numpy as np

#: Heat maps larger than this many cells a side are pooled into blocks (as in the terminal).
MAX_CELLS = 48
#: Up to this many cells a side, every cell holds its number.
NUMBERS_MAX_CELLS = 16
BIG_CELL = 34  # pixels of a cell that holds its number
SMALL_CELL = 12  # pixels of a cell of a large (pooled) map
LABEL = 44  # pixels left of and above the cells, for the token labels
SCALE_STEPS = 10  # blocks of the colour scale under the map
#: The colour of a cell whose value is NaN or ±inf, and of a masked one.
NONFINITE_FILL = "#d62728"
MASKED_FILL = "#b8b8b8"


def shade(value: float) -> str:
    """White (0) to dark blue (1); red for NaN and ±inf.

    >>> shade(0.0), shade(1.0), shade(float("nan"))
    ('#ffffff', '#103478', '#d62728')
    """
    if not math.isfinite(value):
        return NONFINITE_FILL
    v = min(max(value, 0.0), 1.0)
    r, g, b = (int(255 + (t - 255) * v) for t in (16, 52, 120))
    return f"#{r:02x}{g:02x}{b:02x}"


def ink(value: float) -> str:
    """The colour of a number written on the cell of ``value``: white on dark cells.

    >>> ink(0.1), ink(0.9)
    ('#1b2a3a', '#ffffff')
    """
    return "#ffffff" if math.isfinite(value) and value >= 0.45 else "#1b2a3a"


def head_svg(
    matrix: np.ndarray,
    hidden: np.ndarray | None,
    caption: str,
    tokens: tuple[str, ...] | None = None,
) -> str:
    """A ``<figure>``: the map of ``matrix`` (S, N) (``hidden``: True where masked), its labels
    (``tokens``, the prompt's, when given), its colour scale and ``caption``.

    >>> import numpy as np
    >>> svg = head_svg(np.array([[1.0, 0.0], [0.25, 0.75]]), None, "head 0")
    >>> svg.count("<rect"), ">0.75</text>" in svg, ">q1</text>" in svg, ">k0</text>" in svg
    (14, True, True, True)
    >>> ">cat</text>" in head_svg(np.eye(2), None, "head 0", ("the", "cat"))
    True
    """
    pooled = pool(matrix, MAX_CELLS, MAX_CELLS, hidden, tokens)
    rows, cols = pooled.values.shape
    numbers = max(rows, cols) <= NUMBERS_MAX_CELLS
    cell = BIG_CELL if numbers else SMALL_CELL
    parts = [*_labels(pooled, cell, numbers), *_cells(pooled, cell, numbers)]
    top = LABEL + rows * cell + 10
    parts += _scale(top, max(cols * cell, 10 * SCALE_STEPS))
    width = LABEL + max(cols * cell, 10 * SCALE_STEPS) + 6
    height = top + 34
    blocks = "" if pooled.values.shape == matrix.shape else f", {rows}x{cols} blocks"
    return (
        f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="ui-monospace, Menlo, monospace" role="img">'
        + "".join(parts)
        + f"</svg><figcaption>{escape(caption)}{blocks}</figcaption></figure>"
    )


def _labels(pooled: Pooled, cell: int, numbers: bool) -> list[str]:
    """q0, q1 ... left of the rows; k0, k1 ... above the columns (every one when they fit)."""
    rows, cols = pooled.values.shape
    every = 1 if numbers else max(1, math.ceil(12 / cell) * 2)
    size = 11 if numbers else 8
    out = []
    for i in range(0, rows, every):
        y = LABEL + i * cell + cell / 2 + size / 3
        label = escape(short(pooled.row_label(i)))
        out.append(
            f'<text x="{LABEL - 4}" y="{y:g}" font-size="{size}" text-anchor="end" '
            f'fill="#445">{label}</text>'
        )
    for j in range(0, cols, every):
        x = LABEL + j * cell + cell / 2
        label = escape(short(pooled.col_label(j)))
        out.append(
            f'<text x="{x:g}" y="{LABEL - 6}" font-size="{size}" text-anchor="middle" '
            f'fill="#445">{label}</text>'
        )
    out.append(
        f'<text x="{LABEL}" y="12" font-size="10" fill="#667">keys →</text>'
        f'<text x="2" y="26" font-size="10" fill="#667">queries ↓</text>'
    )
    return out


def short(label: str, most: int = 6) -> str:
    """A label cut to ``most`` characters (a token's full text is in each cell's title).

    >>> short("q12"), short("international")
    ('q12', 'inter…')
    """
    return label if len(label) <= most else label[: most - 1] + "…"


def _cells(pooled: Pooled, cell: int, numbers: bool) -> list[str]:
    """Each cell shaded by its value (its value on hover), with its number when ``numbers``."""
    rows, cols = pooled.values.shape
    out = []
    for i in range(rows):
        for j in range(cols):
            masked = pooled.hidden is not None and bool(pooled.hidden[i, j])
            value = float(pooled.values[i, j])
            text = "masked" if masked else f"{value:.4f}" if math.isfinite(value) else str(value)
            label = f"{pooled.row_label(i)} -> {pooled.col_label(j)}: {text}"
            x, y = LABEL + j * cell, LABEL + i * cell
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                f'fill="{MASKED_FILL if masked else shade(value)}" stroke="#ffffff" '
                f'stroke-width="0.5"><title>{escape(label)}</title></rect>'
            )
            if numbers:
                shown = "·" if masked else f"{value:.2f}" if math.isfinite(value) else "nan"
                out.append(
                    f'<text x="{x + cell / 2:g}" y="{y + cell / 2 + 4:g}" font-size="10" '
                    f'text-anchor="middle" fill="{ink(value) if not masked else "#333"}">'
                    f"{shown}</text>"
                )
    return out


def _scale(top: int, width: int) -> list[str]:
    """The colour scale: :data:`SCALE_STEPS` blocks from 0 to 1, labelled at both ends."""
    step = width / SCALE_STEPS
    out = [
        f'<rect x="{LABEL + k * step:g}" y="{top}" width="{step:g}" height="10" '
        f'fill="{shade((k + 0.5) / SCALE_STEPS)}"/>'
        for k in range(SCALE_STEPS)
    ]
    out.append(
        f'<text x="{LABEL}" y="{top + 22}" font-size="10" fill="#445">0</text>'
        f'<text x="{LABEL + width}" y="{top + 22}" font-size="10" text-anchor="end" '
        f'fill="#445">1</text>'
        f'<text x="{LABEL + width / 2:g}" y="{top + 22}" font-size="10" text-anchor="middle" '
        f'fill="#445">weight</text>'
    )
    return out
