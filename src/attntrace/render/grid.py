"""The run view's texts and tables laid out as Rich lays them out, without Rich's measuring passes.

``rich.table.Table`` measures every cell twice and renders each through a ``Padding`` and a
``Text`` (about 700 nested renders for ``attntrace run``); the tables here are simple (one line
per cell, or lines broken beforehand, and a table no wider than the console), so their columns
are as wide as their widest cell and each cell is one segment per line. :class:`Prose` is a
``rich.text.Text`` made of styled runs, wrapped with Rich's word wrap; :class:`Grid` a table
with Rich's ``Table`` options as attntrace uses them. Each yields the lines of segments
(text, style names) Rich would yield, boundaries included (a terminal gets one escape code
per segment), or ``None`` where it would not be exact: then :func:`show` lets Rich draw that
piece (a cell that must wrap, a table wider than the console, markup, wide characters).
tests/render/test_grid.py compares the two renderings.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from attntrace.render.styled import breaks

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.style import Style
    from rich.table import Table
    from rich.text import Text

__all__ = ["BLANK", "Grid", "Prose", "Segments", "show"]

#: A segment: its text and the names of the styles Rich adds up for it ("" for none).
Seg = tuple[str, tuple[str, ...]]
Line = list[Seg]
#: A table cell: a plain string (markup is read, as Rich reads it) or (text, style) for a Text.
Cell = str | tuple[str, str]

#: The non-ASCII characters attntrace prints; each takes one cell, as in Rich's own measure.
ONE_CELL = frozenset("·→…×√ᵀ≤≥≈–—─")
#: What Rich would read as an emoji code (``:smile:``) in a plain string.
_EMOJI = r":\S*?:"
#: What could start a markup tag (``rich.markup.RE_TAGS``: ``[`` then a letter, #, / or @).
_TAG = r"\[[a-z#/@]"


def one_cell_each(text: str) -> bool:
    """Whether every character of ``text`` is printable and one cell wide (line breaks
    allowed): then lengths are widths, and Rich prints the characters unchanged.

    >>> one_cell_each("2·S·H\\n(3, 768) → (3, 12, 64)")
    True
    >>> one_cell_each("注意"), one_cell_each("\\t")
    (False, False)
    """
    if text.isascii():
        return text.replace("\n", "").isprintable()
    return all(c in ONE_CELL or (c.isascii() and (c.isprintable() or c == "\n")) for c in text)


def plain_string(text: str) -> bool:
    """Whether Rich prints the string ``text`` (a cell, a title) as it is: no markup, no
    emoji code, one cell per character.

    >>> plain_string("q[..., i:i+Br, :]"), plain_string("w[bold]"), plain_string("a :smile: b")
    (True, False, False)
    """
    if "[" in text and (re.search(_TAG, text) or "\\[" in text):  # a tag, or an escape
        return False
    if ":" in text and re.search(_EMOJI, text):
        return False
    return one_cell_each(text)


class Prose:
    """A ``rich.text.Text`` of styled runs (``Text.assemble``) with a base ``style``, printed
    at a width: wrapped between words (or kept whole with ``no_wrap``), padded to the width
    when ``pad`` (left-justified, as a table title).

    >>> [[text for text, _ in line] for line in Prose([("attntrace", "bold"), "  S=3"]).lines(12)]
    [['attntrace', '  '], ['S=3']]
    """

    __slots__ = ("no_wrap", "pad", "runs", "style")

    def __init__(
        self,
        runs: Sequence[str | tuple[str, str]],
        style: str = "",
        *,
        no_wrap: bool = False,
        pad: bool = False,
    ) -> None:
        self.runs = [(run, "") if isinstance(run, str) else run for run in runs]
        self.style, self.no_wrap, self.pad = style, no_wrap, pad

    @property
    def plain(self) -> str:
        """The text without its styles."""
        return "".join(text for text, _ in self.runs)

    def lines(self, width: int) -> list[Line] | None:
        """The lines of segments Rich prints at ``width``, or None where they might differ."""
        plain = self.plain
        if width < 1 or not one_cell_each(plain):
            return None
        owners = list(
            itertools.chain.from_iterable(
                [k if style else -1] * len(text) for k, (text, style) in enumerate(self.runs)
            )
        )
        out, start = [], 0
        for raw in plain.split("\n"):
            end, offsets = start + len(raw), []
            if self.no_wrap and len(raw) > width:
                return None  # Rich would crop it
            if not self.no_wrap and len(raw.rstrip()) > width:
                offsets = breaks(raw, width)
            for a, z in itertools.pairwise([start, *(start + o for o in offsets), end]):
                b = z - min(len(plain[a:z]) - len(plain[a:z].rstrip()), max(z - a - width, 0))
                if b - a > width:
                    return None  # a word cropped: not drawn here
                out.append(self._segments(plain, owners, a, b, width))
            start = end + 1
        return out

    def _segments(self, plain: str, owners: list[int], a: int, b: int, width: int) -> Line:
        """Characters ``a`` to ``b`` of the text in one segment per run (Rich's span
        boundaries), and the padding to ``width`` in the base style."""
        keys = owners[a:b] + [-1] * (width - (b - a) if self.pad else 0)
        text = plain[a:b].ljust(width) if self.pad else plain[a:b]
        line, i = [], 0
        for key, group in itertools.groupby(keys):
            n = len(list(group))
            run_style = self.runs[key][1] if key >= 0 else ""
            line.append((text[i : i + n], tuple(s for s in (self.style, run_style) if s)))
            i += n
        return line

    def rich(self) -> Text:
        """The same text as a ``rich.text.Text``."""
        from rich.text import Text

        text = Text.assemble(*self.runs, style=self.style, no_wrap=self.no_wrap or None)
        text.justify = "left" if self.pad else None
        return text


class Column:
    """A column of a :class:`Grid`, with the options of ``Table.add_column`` used here."""

    __slots__ = (
        "footer",
        "header",
        "header_style",
        "justify",
        "min_width",
        "no_wrap",
        "overflow",
        "style",
    )

    def __init__(
        self,
        header: str = "",
        footer: str = "",
        *,
        justify: str = "left",
        style: str = "",
        header_style: str = "",
        no_wrap: bool = False,
        overflow: str = "ellipsis",
        min_width: int | None = None,
    ) -> None:
        self.header, self.footer, self.justify, self.style = header, footer, justify, style
        self.header_style, self.no_wrap, self.overflow = header_style, no_wrap, overflow
        self.min_width = min_width


class Grid:
    """A ``rich.table.Table`` as attntrace makes them: no outer edge, cells padded on the
    right only (``pad`` spaces; none after the last column unless ``pad_edge``), a rule under
    the header (``rule``, with one space between columns) or no box at all, an optional
    footer, a left-justified title and caption.

    >>> g = Grid("sizes", pad=1)
    >>> g.add_column(Column("axis")); g.add_column(Column("size", justify="right"))
    >>> g.add_row("S", "3")
    >>> print("\\n".join("".join(t for t, _ in line).rstrip() for line in g.lines(80)))
    sizes
    axis  size
    ───────────
    S        3
    """

    def __init__(
        self,
        title: str = "",
        *,
        caption: str = "",
        rule: bool = True,
        pad: int = 1,
        pad_edge: bool = True,
        footer: bool = False,
        title_style: str = "bold",
    ) -> None:
        self.title, self.caption, self.rule, self.pad = title, caption, rule, pad
        self.pad_edge, self.footer, self.title_style = pad_edge, footer, title_style
        self.columns: list[Column] = []
        self.rows: list[list[Cell]] = []

    def add_column(self, column: Column) -> None:
        """Append ``column``."""
        self.columns.append(column)

    def add_row(self, *cells: Cell) -> None:
        """Append a row of cells, one per column."""
        self.rows.append(list(cells))

    def _pads(self) -> list[int]:
        """The right padding of each column."""
        n = len(self.columns)
        return [0 if i == n - 1 and not self.pad_edge else self.pad for i in range(n)]

    def _sections(self) -> list[tuple[str, list[Cell], list[tuple[str, ...]]]]:
        """(kind, cells, cell styles) of the header, each body row and the footer: a header
        in the table's header style and the column's, body cells in the column's style."""
        cols = self.columns
        out: list[tuple[str, list[Cell], list[tuple[str, ...]]]] = [
            (
                "head",
                [c.header for c in cols],
                [_names("table.header", c.header_style) for c in cols],
            )
        ]
        body = [_names(c.style) for c in cols]
        out += [("body", row, body) for row in self.rows]
        if self.footer:
            out.append(("foot", [c.footer for c in cols], [("table.footer",)] * len(cols)))
        return out

    def widths(self, width: int) -> list[int] | None:
        """Each column's width with its padding, or None unless every cell is plain and the
        table fits ``width`` as Rich would lay it out with no column shrunk."""
        extra = len(self.columns) - 1 if self.rule else 0
        if width - extra < 1 or not all(map(plain_string, (self.title, self.caption))):
            return None
        widest = [0] * len(self.columns)
        for _, cells, _ in self._sections():
            for i, cell in enumerate(cells):
                text = cell if isinstance(cell, str) else cell[0]
                if not (plain_string(text) if isinstance(cell, str) else one_cell_each(text)):
                    return None
                widest[i] = max(widest[i], *map(len, text.split("\n")))
        out = []
        for pad, column, most in zip(self._pads(), self.columns, widest, strict=True):
            natural = most + pad
            if column.min_width is not None:
                natural = max(natural, column.min_width + pad)
            if natural - pad < 1:
                return None  # nothing but padding: Rich draws that as it likes
            out.append(natural)
        return out if sum(out) <= width - extra else None

    def lines(self, width: int) -> list[Line] | None:
        """The table's lines of segments at console ``width``, or None if Rich would shrink a
        column, wrap a cell or read markup."""
        widths = self.widths(width)
        if widths is None:
            return None
        total = sum(widths) + (len(widths) - 1 if self.rule else 0)
        out: list[Line] = []
        if self.title:
            title = Prose([self.title], self.title_style, pad=True).lines(total)
            if title is None:
                return None
            out += title
        for kind, cells, styles in self._sections():
            if kind == "foot" and self.rule:
                out.append([(" " * total, ())])
            out += self._row(kind, cells, styles, widths)
            if kind == "head" and self.rule:
                out.append([("─" * total, ())])
        if self.caption:
            caption = Prose([self.caption], "table.caption", pad=True).lines(total)
            if caption is None:
                return None
            out += caption
        return out

    def _row(
        self, kind: str, cells: list[Cell], styles: list[tuple[str, ...]], widths: list[int]
    ) -> list[Line]:
        """One row's lines: each cell justified, padded, in its style; shorter cells get
        blank lines (below, or above in the header), columns a one-space divider."""
        pads, columns = self._pads(), self.columns
        blocks = [
            _cell_lines(cell, column, width - pad, pad, style)
            for cell, column, width, pad, style in zip(
                cells, columns, widths, pads, styles, strict=True
            )
        ]
        height = max(map(len, blocks))
        lines: list[Line] = []
        for k in range(height):
            line: Line = []
            for i, (block, width, style) in enumerate(zip(blocks, widths, styles, strict=True)):
                if i and self.rule:
                    line.append((" ", ()))
                missing = height - len(block)
                k_in = k - missing if kind == "head" else k
                line += block[k_in] if 0 <= k_in < len(block) else [(" " * width, style)]
            lines.append(line)
        return lines

    def rich(self) -> Table:
        """The same table as a ``rich.table.Table``."""
        from rich.table import Table
        from rich.text import Text

        from attntrace.render.terminal import RULE_BOX

        table = Table(
            title=self.title or None,
            box=RULE_BOX if self.rule else None,
            show_edge=False,
            padding=(0, self.pad, 0, 0),
            pad_edge=self.pad_edge,
            title_justify="left",
            title_style=self.title_style,
            show_footer=self.footer,
            caption=self.caption or None,
            caption_justify="left",
        )
        for c in self.columns:
            table.add_column(
                c.header,
                c.footer,
                justify=c.justify,  # type: ignore[arg-type]
                style=c.style,
                header_style=c.header_style,
                no_wrap=c.no_wrap,
                overflow=c.overflow,  # type: ignore[arg-type]
                min_width=c.min_width,
            )
        for row in self.rows:
            table.add_row(
                *(cell if isinstance(cell, str) else Text(cell[0], style=cell[1]) for cell in row)
            )
        return table


def _names(*styles: str) -> tuple[str, ...]:
    """The styles that are set (a column's style may be empty)."""
    return tuple(s for s in styles if s)


def _cell_lines(
    cell: Cell, column: Column, inner: int, pad: int, style: tuple[str, ...]
) -> list[Line]:
    """A cell as Rich's ``Padding`` around its ``Text`` yields it: per line, the justified
    text in the cell's style (plus the Text's own), then the padding in the cell's style."""
    text, own = (cell, "") if isinstance(cell, str) else cell
    names = (*style, own) if own else style
    lines = []
    for line in text.split("\n"):
        body = line.rstrip().rjust(inner) if column.justify == "right" else line.ljust(inner)
        lines.append([(body, names), *([(" " * pad, style)] if pad else [])])
    return lines


class Segments:
    """Lines of segments as a Rich renderable, each style resolved on the console (its theme
    names, its colour system): what Rich would have yielded for the pieces they came from."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[object]:
        from rich.segment import Segment

        styles: dict[tuple[str, ...], Style | None] = {(): None}
        new_line = Segment.line()
        for line in self.lines:
            for text, names in line:
                if names not in styles:
                    styles[names] = _style(console, names)
                yield Segment(text, styles[names])
            yield new_line


def _style(console: Console, names: tuple[str, ...]) -> Style:
    """The styles called ``names`` added up, left to right, as Rich adds a cell's to a text's."""
    style = console.get_style(names[0])
    for name in names[1:]:
        style += console.get_style(name)
    return style


class Piece(Protocol):
    """Something :func:`show` prints: its lines where exact, else Rich's renderable."""

    def lines(self, width: int) -> list[Line] | None: ...

    def rich(self) -> RenderableType: ...


class _Blank:
    """An empty line: ``console.print()``."""

    def lines(self, width: int) -> list[Line] | None:
        return [[]]

    def rich(self) -> RenderableType:
        from rich.console import NewLine

        return NewLine()


BLANK = _Blank()


def show(console: Console, pieces: Sequence[Piece], fast: bool = True) -> None:
    """Print ``pieces`` on ``console`` as ``console.print(piece.rich())`` each would: those
    laid out here in one print, any other by Rich (all of them by Rich unless ``fast``, or on
    a recording console, whose SVG export names its styles after a hash of Rich's segments).

    >>> from rich.console import Console
    >>> show(Console(width=20), [Prose(["a short line, wrapped"]), BLANK, Prose(["end"])])
    ... # doctest: +NORMALIZE_WHITESPACE
    a short line,
    wrapped
    <BLANKLINE>
    end
    """
    pending: list[Line] = []
    fast = fast and not console.record  # an SVG's ids hash Rich's own segments: Rich draws
    for piece in pieces:
        lines = piece.lines(console.width) if fast else None
        if lines is not None:
            pending += lines
            continue
        if pending:
            console.print(Segments(pending))
            pending = []
        console.print(piece.rich())
    if pending:
        console.print(Segments(pending))
