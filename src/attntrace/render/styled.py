"""Styled text measured in terminal cells, and Rich's word wrap, without importing Rich.

Shared by the top-level help (:mod:`attntrace.cli.fast_help`, which draws Typer's Rich panels) and
the table view (:mod:`attntrace.render.grid`, which draws the run's tables): both lay text out
exactly as Rich would, for a fraction of Rich's import and layout time.
"""

from __future__ import annotations

import itertools
import re

__all__ = ["SGR", "Styled", "breaks", "cell_len", "from_markup", "wrap"]

#: SGR codes of the style words used in help texts (``[bold]``, ``[dim]``, colours).
SGR = {
    "bold": "1",
    "dim": "2",
    "italic": "3",
    "underline": "4",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "white": "37",
}
# Patterns as strings: ``re`` compiles each on first use only (compiling costs start-up time).
_TAG = r"(\\*)\[([a-z#/@][^[]*?)]"
_WORD = r"\s*\S+\s*"
#: Typer's highlighter: -x switches green, --options cyan (later patterns win).
_HIGHLIGHTS = (
    (r"(^|\W)(\-\w+)(?![a-zA-Z0-9])", ("bold", "green")),
    (r"(^|\W)(\-\-[\w\-]+)(?![a-zA-Z0-9])", ("bold", "cyan")),
)


class Styled:
    """Text with one tuple of style words per character (a plain class: no dataclass machinery
    to import or build on the way to the help).

    >>> Styled("try --heads 12").highlight().styles[4:6]
    [('bold', 'cyan'), ('bold', 'cyan')]
    """

    __slots__ = ("styles", "text")

    def __init__(self, text: str = "", styles: list[tuple[str, ...]] | None = None) -> None:
        self.text = text
        self.styles: list[tuple[str, ...]] = styles if styles is not None else [()] * len(text)

    def add(self, text: str, style: tuple[str, ...] = ()) -> Styled:
        self.text += text
        self.styles += [style] * len(text)
        return self

    def extend(self, other: Styled) -> Styled:
        self.text += other.text
        self.styles += other.styles
        return self

    def __getitem__(self, span: slice) -> Styled:
        return Styled(self.text[span], self.styles[span])

    def highlight(self) -> Styled:
        """Options and switches styled as Typer's ``OptionHighlighter`` does."""
        if "-" not in self.text:
            return self
        for pattern, style in _HIGHLIGHTS:
            recolour: dict[tuple[str, ...], tuple[str, ...]] = {}
            for match in re.finditer(pattern, self.text):
                for i in range(*match.span(2)):  # the later colour replaces the earlier
                    old = self.styles[i]
                    if old not in recolour:
                        kept = (w for w in old if w not in SGR or int(SGR[w]) < 30)
                        recolour[old] = tuple(dict.fromkeys((*kept, *style)))
                    self.styles[i] = recolour[old]
        return self


def from_markup(markup: str, style: tuple[str, ...] = ()) -> Styled:
    """Rich console markup (``[bold]…[/]``, ``\\[`` for a bracket) as styled text.

    >>> from_markup("run [bold]--heads 12[/] \\\\[default: 1]").text
    'run --heads 12 [default: 1]'
    """
    out, stack, pos = Styled(), [style], 0
    if "[" not in markup:
        return Styled(markup, [style] * len(markup))
    for match in re.finditer(_TAG, markup):
        out.add(markup[pos : match.start()], stack[-1])
        pos = match.end()
        slashes, tag = match.groups()
        backslashes, escaped = divmod(len(slashes), 2)
        out.add("\\" * backslashes, stack[-1])
        if escaped:
            out.add(f"[{tag}]", stack[-1])
        elif tag.startswith("/"):
            stack = stack[:-1] if len(stack) > 1 else stack
        else:
            stack.append((*stack[-1], *tag.split()))
    return out.add(markup[pos:], stack[-1])


def cell_len(text: str) -> int:
    """Terminal cells: East Asian wide characters take two.

    >>> cell_len("3×3"), cell_len("注意")
    (3, 4)
    """
    if text.isascii():
        return len(text)
    wide = [c for c in text if c >= "\u1100"]  # no wide character comes earlier
    if not wide:
        return len(text)
    import unicodedata

    return len(text) + sum(unicodedata.east_asian_width(c) in "WF" for c in wide)


def wrap(text: Styled, width: int, fold: bool = True) -> list[Styled]:
    """Rich's word wrap (``rich._wrap.divide_line``), trailing spaces off; a word longer than
    the width is folded over lines, or (in table cells) cut with an ellipsis.

    >>> [line.text for line in wrap(Styled("Show completion for the shell"), 12)]
    ['Show', 'completion', 'for the', 'shell']
    >>> [line.text for line in wrap(Styled("--install-completion"), 8, fold=False)]
    ['--insta…']
    """
    width = max(width, 1)
    if "\n" not in text.text and cell_len(text.text.rstrip()) <= width:  # most table cells
        return [_fit(text, width)]
    lines: list[Styled] = []
    start_of_line = 0
    for line in text.text.split("\n"):
        piece = text[start_of_line : start_of_line + len(line)]
        start_of_line += len(line) + 1
        fits = cell_len(line.rstrip()) <= width
        bounds = [0, *([] if fits else breaks(line, width, fold)), len(line)]
        lines += [_fit(piece[a:b], width) for a, b in itertools.pairwise(bounds)]
    return lines


def breaks(line: str, width: int, fold: bool = True) -> list[int]:
    """Where ``rich._wrap.divide_line`` breaks ``line`` (offsets into it); a word longer than
    ``width`` is folded over lines (``fold``) or left whole to be cut.

    >>> breaks("Show completion for the shell", 12)
    [5, 16, 24]
    """
    breaks, offset = [], 0
    for match in re.finditer(_WORD, line):
        start, word = match.start(), match.group()
        length = cell_len(word.rstrip())
        if width - offset >= length:
            offset += cell_len(word)
        elif length > width and not fold:
            breaks += [start] if start else []
            offset = cell_len(word)
        elif length > width:  # fold the word over several lines
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for chunk in chunks[:-1]:
                breaks += [start] if start else []
                start += len(chunk)
            breaks += [start] if start else []
            offset = cell_len(chunks[-1])
        elif offset and start:
            breaks.append(start)
            offset = cell_len(word)
    return breaks


def _fit(text: Styled, width: int) -> Styled:
    """The line without trailing spaces, cut to ``width`` cells with an ellipsis if longer."""
    text = text[: len(text.text.rstrip())]
    if cell_len(text.text) <= width:
        return text
    style = text.styles[-1]
    while text.text and cell_len(text.text) > width - 1:
        text = text[:-1]
    return text.add("…", style)
