"""Sentences that wrap by display width: between two Chinese characters as well as at spaces,
never inside a shape or axes tuple, never before a closing mark (，。）) or after an opening
one (（).

Rich wraps a line only at spaces, so that a Chinese sentence, one long "word" to it, broke at
its few ASCII spaces (``转换为 Q`` / ``向量（查询…``) or was cut with an ellipsis in a table.
:class:`Prose` is a Rich :class:`~rich.text.Text` that breaks where a Chinese reader (and an
English one) expects, measured in terminal cells (Rich's ``cell_len``: a CJK character is two).
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

from rich.cells import cell_len, chop_cells
from rich.containers import Lines
from rich.measure import Measurement
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

#: Marks a line must not start with (they close what comes before them).
NO_START = frozenset("，。、；：？！）」』》】〉”’…％,.;:?!)]}·")
#: Marks a line must not end with (they open what comes after them).
NO_END = frozenset("（「『《【〈“‘([{")
#: A tuple of figures or axis letters: ``(3, 12, 64)``, ``(B, h, S, d)``, ``(…, S, h·d)``.
TUPLE = re.compile(r"\((?:[^(),\s]{1,16}, ){0,8}[^(),\s]{1,16},?\)")


def wide(c: str) -> bool:
    """Whether ``c`` takes two cells and may break from its neighbours (CJK, full-width).

    >>> wide("注"), wide("："), wide("a")
    (True, True, False)
    """
    return unicodedata.east_asian_width(c) in ("W", "F")


def unit_starts(text: str) -> list[int]:
    """Where each unbreakable unit of ``text`` starts (a unit keeps its trailing spaces; an
    empty text is one empty unit).

    >>> unit_starts("转换为 Q 向量（查询）：(3, 768)")
    [0, 1, 2, 4, 6, 7, 8, 10, 13]
    """
    protected = [False] * (len(text) + 1)
    for m in TUPLE.finditer(text):
        for i in range(m.start() + 1, m.end()):
            protected[i] = True
    starts = [0]
    for i in range(1, len(text)):
        before, c = text[i - 1], text[i]
        if protected[i] or c.isspace() or c in NO_START:
            continue  # inside a tuple, a space, or a mark that closes what came before
        if before.isspace() or ((wide(before) or wide(c)) and before not in NO_END):
            starts.append(i)
    return starts


def units_of(text: str) -> list[str]:
    """The unbreakable units of ``text``, in order.

    >>> units_of("注意力 (3, 12, 64)")
    ['注', '意', '力 ', '(3, 12, 64)']
    """
    starts = unit_starts(text)
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def break_offsets(text: str, width: int) -> list[int]:
    """Where the lines of ``text`` start when it is wrapped to ``width`` cells (Rich's
    ``divide_line`` contract), a unit wider than a line folded by cells.

    >>> s = "通过线性层 w_q 把每个词的 768 维特征转换为 Q 向量：(3, 768) → (3, 12, 64)。"
    >>> lines = Text(s).divide(break_offsets(s, 24))
    >>> [str(line).rstrip() for line in lines]
    ['通过线性层 w_q 把每个词', '的 768 维特征转换为 Q 向', '量：(3, 768) →', '(3, 12, 64)。']
    """
    starts = unit_starts(text)
    offsets: list[int] = []
    used = 0
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        unit = text[start:end]
        needed = cell_len(unit.rstrip())
        if used and used + needed > width:
            offsets.append(start)
            used = 0
        if needed > width:  # longer than a line: folded
            pieces = chop_cells(unit, width)
            at = start
            for piece in pieces[:-1]:
                at += len(piece)
                offsets.append(at)
            unit = pieces[-1]
        used += cell_len(unit)
    return [o for o in offsets if o > 0]


class Prose:
    """A sentence (a :class:`~rich.text.Text`, its styles kept) that wraps by
    :func:`break_offsets` and measures its narrowest width as its widest unit, so that a table
    gives it a column that fits a tuple. A renderable of its own, not a Text: Rich joins the
    Texts it is given to print into a plain one.

    >>> from rich.console import Console
    >>> console = Console(width=20, no_color=True)
    >>> with console.capture() as cap:
    ...     console.print(Prose("softmax 归一化，得到注意力权重：(12, 3, 3)"))
    >>> print("\\n".join(line.rstrip() for line in cap.get().splitlines()))
    softmax 归一化，得到
    注意力权重：
    (12, 3, 3)
    """

    def __init__(self, text: Text | str, style: str = "") -> None:
        self.text = text if isinstance(text, Text) else Text(text, style=style)

    @property
    def plain(self) -> str:
        """The words, without styles (as :attr:`rich.text.Text.plain`)."""
        return self.text.plain

    def __str__(self) -> str:
        return self.text.plain

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.text.plain.splitlines() or [""]
        widest = max(cell_len(line) for line in lines)
        units = [cell_len(unit.rstrip()) for line in lines for unit in units_of(line)]
        return Measurement(max(units, default=widest), widest).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = self.text
        if text.no_wrap or options.no_wrap:
            yield text
            return
        width = options.max_width
        how = text.overflow or options.overflow or "fold"
        justify = text.justify or options.justify
        lines = Lines()
        for line in text.split(allow_blank=True):
            parts = line.divide(break_offsets(line.plain, width))
            for part in parts:
                part.rstrip_end(width)
            if justify:
                parts.justify(console, width, justify=justify, overflow=how)
            for part in parts:
                part.truncate(width, overflow=how)
            lines.extend(parts)
        yield from Text("\n").join(lines).render(console, end=text.end)
