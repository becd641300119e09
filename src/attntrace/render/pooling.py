"""Blocks of a long attention matrix for the terminal heat map (display only, no attention maths).

A block of queries i0..i1 and keys j0..j1 shows the **mean over its queries of the sum over its
keys**: the weight a query of that block gives to that group of keys. Each pooled row therefore
still sums to 1 (0 for rows whose every key is masked), as a row of the full matrix does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: How a block's value is made, for titles and docs.
POOLING = "each block: mean over its queries of the sum over its keys, so rows sum to 1"


@dataclass(frozen=True)
class Pooled:
    """A pooled matrix with the first index of every row block and column block.

    ``hidden`` marks blocks whose every cell is masked (None when nothing is masked).
    """

    values: np.ndarray  # (R, C): R row blocks, C column blocks
    row_starts: tuple[int, ...]
    col_starts: tuple[int, ...]
    rows: int  # S, queries of the full matrix
    cols: int  # N, keys of the full matrix
    hidden: np.ndarray | None = None  # (R, C) bool
    names: tuple[str, ...] | None = None  # --prompt: each position's token (S = N)

    def row_label(self, r: int) -> str:
        """``q16-31``: the queries of row block ``r`` (``q5`` for a block of one; its token
        with ``names``)."""
        span = _span("q", self.row_starts, self.rows, r)
        return span if self.names is None or "-" in span else self.names[self.row_starts[r]]

    def col_label(self, c: int) -> str:
        """``k16``: the first key of column block ``c`` (its token with ``names``)."""
        start = self.col_starts[c]
        end = self.col_starts[c + 1] if c + 1 < len(self.col_starts) else self.cols
        single = end == start + 1
        return self.names[start] if self.names is not None and single else f"k{start}"


def _span(prefix: str, starts: tuple[int, ...], total: int, i: int) -> str:
    last = (starts[i + 1] if i + 1 < len(starts) else total) - 1
    return f"{prefix}{starts[i]}" + (f"-{last}" if last > starts[i] else "")


def span_labels(prefix: str, size: int, blocks: int) -> list[str]:
    """The labels of ``size`` rows pooled into at most ``blocks`` blocks, as
    :meth:`Pooled.row_label` writes them (known before pooling).

    >>> span_labels("q", 5, 2)
    ['q0-2', 'q3-4']
    """
    starts = block_starts(size, blocks)
    return [_span(prefix, starts, size, i) for i in range(len(starts))]


def block_starts(size: int, blocks: int) -> tuple[int, ...]:
    """First index of each of at most ``blocks`` equal blocks (the last may be shorter).

    >>> block_starts(20, 8), block_starts(5, 8)
    ((0, 3, 6, 9, 12, 15, 18), (0, 1, 2, 3, 4))
    """
    step = math.ceil(size / max(1, min(blocks, size)))
    return tuple(range(0, size, step))


def pool(
    matrix: np.ndarray,
    row_blocks: int,
    col_blocks: int,
    hidden: np.ndarray | None = None,
    names: tuple[str, ...] | None = None,
) -> Pooled:
    """``matrix`` (S, N) pooled into at most ``row_blocks`` x ``col_blocks`` blocks; a block of
    one position is labelled with its token of ``names`` (--prompt) when given.

    >>> import numpy as np
    >>> p = pool(np.full((4, 4), 0.25), 2, 2)
    >>> p.values.tolist(), p.row_label(1), p.col_label(1)
    ([[0.5, 0.5], [0.5, 0.5]], 'q2-3', 'k2')
    >>> p = pool(np.full((3, 3), 1 / 3), 2, 3, names=("The", "cat", "sat"))
    >>> p.row_label(0), p.row_label(1), p.col_label(1)
    ('q0-1', 'sat', 'cat')
    """
    import numpy as np

    rows, cols = matrix.shape
    r0, c0 = block_starts(rows, row_blocks), block_starts(cols, col_blocks)
    keys = np.add.reduceat(matrix, c0, axis=1)  # (S, C): summed over each key block
    values = np.add.reduceat(keys, r0, axis=0) / np.diff([*r0, rows])[:, None]  # (R, C)
    blocked = None
    if hidden is not None:
        counts = np.add.reduceat(
            np.add.reduceat(hidden.astype(np.int64), c0, axis=1), r0, axis=0
        )  # (R, C)
        sizes = np.outer(np.diff([*r0, rows]), np.diff([*c0, cols]))  # (R, C)
        blocked = counts == sizes
    named = names if names is not None and len(names) == rows == cols else None
    return Pooled(values, r0, c0, rows, cols, blocked, named)
