"""A console that prints the words of a view in the learner's language.

The views (trace, diff, check, verify, sweep, compare, presets) are written in English, and
their sentences are the templates of :mod:`attntrace.learn.catalogue_cli`. :func:`in_words`
wraps the console a view prints on: every line of a Text, a table's title, caption, headers
and status words go through :func:`attntrace.learn.lang.translate` on the way out, and a
translated line wraps as :class:`~attntrace.render.prose.Prose` (between Chinese characters,
never inside a shape). Step names, shapes, figures and code are left as they are: what no
template fits stays English, so a view changed without its template stays readable (and the
test of every verdict in Chinese names it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from attntrace.learn.lang import Lang, translate
from attntrace.render.prose import Prose

if TYPE_CHECKING:
    from rich.console import Console


class Speaking:
    """A console's stand-in whose ``print`` translates (everything else is the console's).

    >>> from rich.console import Console
    >>> out = in_words(Console(width=60, no_color=True), "zh")
    >>> with out.capture() as cap:
    ...     out.print(Text("  fix: apply the mask to the scaled scores before the softmax"))
    >>> cap.get()
    '  改法：在 softmax 之前把掩码加到缩放后的分数上\\n'
    """

    def __init__(self, console: Console, lang: Lang) -> None:
        self.console, self.lang = console, lang

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*(said(o, self.lang) for o in objects), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


def in_words(console: Console, lang: Lang) -> Console:
    """``console`` printing in ``lang`` (itself in English)."""
    if lang == "en":
        return console
    return Speaking(console, lang)  # type: ignore[return-value]


def said(renderable: Any, lang: Lang) -> Any:
    """``renderable`` with its words in ``lang``: a Text line by line, a string, a table's
    title, caption, headers and status cells, the parts of a Group; anything else as it is."""
    if isinstance(renderable, Text):
        return said_text(renderable, lang)
    if isinstance(renderable, str):
        return "\n".join(_line(line, lang) for line in renderable.split("\n"))
    if isinstance(renderable, Table):
        return said_table(renderable, lang)
    if isinstance(renderable, Group):
        return Group(*(said(r, lang) for r in renderable.renderables))
    return renderable


def _line(line: str, lang: Lang) -> str:
    """One line translated, its indentation kept."""
    body = line.strip(" ")
    if not body:
        return line
    indent = line[: len(line) - len(line.lstrip(" "))]
    return indent + translate(body, lang)


def said_text(text: Text, lang: Lang) -> Text | Prose:
    """A Text translated line by line; a styled word of a translated line (``DIFFERS``,
    ``fix:``) keeps its style where its translation is found.

    >>> said_text(Text.assemble(("MATCH", "bold green"), ": all 12 steps the code makes "
    ...     "agree with the reference within the float32 tolerance"), "zh").text.plain
    '一致（MATCH）：代码的全部 12 步都在 float32 的容差内与参考实现一致'
    """
    lines = text.split("\n", allow_blank=True)
    out, changed = [], False
    for line in lines:
        new = _line(line.plain, lang)
        if new == line.plain:
            out.append(line)
            continue
        changed = True
        said_line = Text(new, style=line.style)
        for span in line.spans:
            piece = line.plain[span.start : span.end].strip(" :")
            word = translate(piece, lang) if piece else ""
            at = new.find(word) if word else -1
            if at >= 0:
                said_line.stylize(span.style, at, at + len(word))
        out.append(said_line)
    if not changed:
        return text
    joined = Text("\n", style=text.style).join(out)
    joined.end, joined.justify, joined.overflow = text.end, text.justify, text.overflow
    return Prose(joined)


def said_table(table: Table, lang: Lang) -> Table:
    """``table`` (changed in place) with its title, caption, headers and status words in
    ``lang``; its figures, names and shapes as they are."""
    for attr in ("title", "caption"):
        value = getattr(table, attr)
        if isinstance(value, str | Text):
            setattr(table, attr, _said_cell(value, lang, whole=True))
    for column in table.columns:
        if isinstance(column.header, str | Text):
            column.header = _said_cell(column.header, lang, whole=True)
        if isinstance(column.footer, str | Text):
            column.footer = _said_cell(column.footer, lang, whole=True)
        column._cells = [_said_cell(c, lang) for c in column._cells]
    return table


def _said_cell(cell: Any, lang: Lang, *, whole: bool = False) -> Any:
    """A title or header (``whole``: any sentence of the catalogue), or a cell: only a status
    word (``cell.*``: ``(missing)``, ``not seen``), never a name that happens to be a word
    (the step ``scores``)."""
    if isinstance(cell, str):  # a table's strings are Rich markup (escaped brackets)
        cell = Text.from_markup(cell)
    plain = cell.plain if isinstance(cell, Text) else None
    if plain is None or not plain.strip():
        return cell
    new = translate(plain, lang) if whole else _status(plain, lang)
    if new == plain:
        return cell
    said_cell = Text(new, style=cell.style)
    return said_cell if whole else Prose(said_cell)  # a cell wraps between characters


def _status(text: str, lang: Lang) -> str:
    """A cell's words in ``lang``, only from the ``cell.`` keys (its indentation kept)."""
    body = " ".join(text.split())  # a cell wrapped by its view (an op) is one sentence
    indent = text[: len(text) - len(text.lstrip(" "))]
    said = translate(body, lang, "cell.") if body else body
    return indent + said if said != body else text
