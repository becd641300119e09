"""An optimisation of ``attntrace --help``: exactly what Typer draws, drawn without Typer or Rich.

This module is an optimisation and nothing else. Typer draws the top-level help with Rich
(``typer.rich_utils``), importing Typer, Rich's console, tables, Markdown and tracebacks: about
0.3 s before it prints one line. The top-level help is small (the usage line, the description,
four options, one line per command), so this module draws the same page from
:mod:`attntrace.cli.root` alone, with Rich's rules as Typer applies them (column widths, word
wrap, rounded or ASCII boxes, highlighting on a terminal), without importing any command.

Its output must be byte for byte what Typer draws, and that is verified for one Typer and one
Rich version only (:data:`VERIFIED`, the versions pinned in pyproject's ``test`` extra;
tests/cli/test_help.py compares the two). :func:`verified` checks the installed versions at
first use, from their ``.dist-info`` folders (neither Typer nor Rich is imported): with any
other version, Typer draws the help. Nothing else in attntrace lays out text by hand; every
other view is drawn by Rich.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Sequence
from math import ceil
from typing import TYPE_CHECKING

from attntrace.cli.root import COMMANDS, PAGE, Option, Page, command_summary

if TYPE_CHECKING:
    import typer._click as click

__all__ = [
    "VERIFIED",
    "Styled",
    "cell_len",
    "draw_page",
    "from_markup",
    "installed_version",
    "page_of",
    "print_root_help",
    "root_help",
    "verified",
    "wrap",
]

#: The Typer and Rich versions this module was verified against, byte for byte with what Typer
#: draws (tests/cli/test_help.py; the ``test`` extra of pyproject.toml pins the same versions).
VERIFIED = {"typer": "0.28.0", "rich": "15.0.0"}
_checked: dict[str, bool] = {}


def verified() -> bool:
    """Whether the installed Typer and Rich are the :data:`VERIFIED` versions (looked up once):
    only then is the help drawn here; otherwise Typer draws it."""
    if "ok" not in _checked:
        _checked["ok"] = all(installed_version(n) == v for n, v in VERIFIED.items())
    return _checked["ok"]


def installed_version(name: str) -> str | None:
    """The version ``importlib.metadata.version(name)`` gives (the ``Version`` field of the
    first ``<name>-<version>.dist-info`` folder on ``sys.path``), or None where there is none
    or it is not a plain ``.dist-info``. Read here: importing ``importlib.metadata`` (email,
    zipfile, csv...) costs about as much as drawing the whole help.

    >>> import importlib.metadata
    >>> installed_version("rich") == importlib.metadata.version("rich")
    True
    >>> installed_version("no-such-distribution") is None
    True
    """
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    for folder in sys.path:
        try:
            children = os.listdir(folder or ".")
        except OSError:
            continue
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            stem = low.rpartition(".")[0].partition("-")[0]
            if re.sub(r"[-_.]+", "_", stem) == wanted:
                return _metadata_version(os.path.join(folder or ".", child))
    return None


def _metadata_version(folder: str) -> str | None:
    """The ``Version:`` header of ``folder``'s METADATA (None for an egg or a broken folder)."""
    try:
        with open(os.path.join(folder, "METADATA"), encoding="utf-8") as metadata:
            for line in metadata:
                if not line.strip():
                    break  # the headers end at the first empty line
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


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


class Column:
    """One column of a help table: its content's width, a fixed ``width`` (no wrapping), a
    ``ratio`` of what is left, or ``fill``: as wide as allowed (Typer's option help is a
    ``rich.columns.Columns``, which measures as the whole width). Plain classes here: a
    NamedTuple or dataclass is built with ``exec`` at import, which ``--help`` would pay for."""

    __slots__ = ("fill", "ratio", "width")

    def __init__(
        self, width: int | None = None, ratio: int | None = None, fill: bool = False
    ) -> None:
        self.width, self.ratio, self.fill = width, ratio, fill


def _ratio_reduce(
    total: int, ratios: list[int], maximums: list[int], values: list[int]
) -> list[int]:
    """``rich._ratio.ratio_reduce``: take ``total`` off ``values`` in proportion to ``ratios``."""
    ratios = [r if m else 0 for r, m in zip(ratios, maximums, strict=True)]
    total_ratio, remaining, out = sum(ratios), total, []
    if not total_ratio:
        return values[:]
    for ratio, maximum, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            cut = min(maximum, round(ratio * remaining / total_ratio))
            out.append(value - cut)
            remaining, total_ratio = remaining - cut, total_ratio - ratio
        else:
            out.append(value)
    return out


def _ratio_distribute(
    total: int, ratios: list[int], minimums: list[int] | None = None
) -> list[int]:
    """``rich._ratio.ratio_distribute``: split ``total`` in proportion to ``ratios``."""
    if minimums:
        ratios = [r if m else 0 for r, m in zip(ratios, minimums, strict=True)]
    total_ratio, remaining, out = sum(ratios), total, []
    for ratio, minimum in zip(ratios, minimums or [0] * len(ratios), strict=True):
        share = (
            max(minimum, ceil(ratio * remaining / total_ratio)) if total_ratio > 0 else remaining
        )
        out.append(share)
        total_ratio, remaining = total_ratio - ratio, remaining - share
    return out


def _collapse(widths: list[int], wrapable: list[bool], max_width: int) -> list[int]:
    """``rich.table.Table._collapse_widths``: shrink the widest wrapable columns first."""
    excess = sum(widths) - max_width
    while excess > 0 and any(wrapable) and sum(widths) > 0:
        widest = max(w for w, ok in zip(widths, wrapable, strict=True) if ok)
        second = max(w if ok and w != widest else 0 for w, ok in zip(widths, wrapable, strict=True))
        ratios = [1 if w == widest and ok else 0 for w, ok in zip(widths, wrapable, strict=True)]
        if not any(ratios) or widest == second:
            break
        widths = _ratio_reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        excess = sum(widths) - max_width
    return widths


def _column_widths(
    columns: Sequence[Column], rows: Sequence[Sequence[Styled]], max_width: int
) -> list[int]:
    """Each column's width with its padding, as ``rich.table.Table`` (expand=True,
    padding (0, 1), no edge padding) computes it."""
    n = len(columns)
    pads = [int(i > 0) + int(i < n - 1) for i in range(n)]
    natural = [_natural(i, column, rows, max_width) + pads[i] for i, column in enumerate(columns)]
    natural = [min(w, max_width) for w in natural]
    widths = [w or 1 for w in natural]
    flexible = [i for i, column in enumerate(columns) if column.ratio]
    if flexible:
        fixed = [0 if i in flexible else w for i, w in enumerate(natural)]
        ratios = [columns[i].ratio or 0 for i in flexible]
        shares = _ratio_distribute(
            max_width - sum(fixed), ratios, [(columns[i].width or 1) + pads[i] for i in flexible]
        )
        for i, share in zip(flexible, shares, strict=True):
            widths[i] = fixed[i] + share
    total = sum(widths)
    if total > max_width:
        widths = _collapse(widths, [column.width is None for column in columns], max_width)
        total = sum(widths)
        if total > max_width:
            widths = _ratio_reduce(total - max_width, [1] * n, widths, widths)
            total = sum(widths)
        widths = [min(w, nat) for w, nat in zip(widths, natural, strict=True)]
    if total < max_width:
        extra = _ratio_distribute(max_width - total, widths)
        widths = [w + more for w, more in zip(widths, extra, strict=True)]
    return widths


def _natural(i: int, column: Column, rows: Sequence[Sequence[Styled]], max_width: int) -> int:
    """The widest line of column ``i`` (without padding)."""
    if column.fill:
        return max_width
    if column.width is not None:
        return column.width
    return max((cell_len(line) for row in rows for line in row[i].text.split("\n")), default=0)


def _table(columns: Sequence[Column], rows: Sequence[Sequence[Styled]], width: int) -> list[Styled]:
    """The rows laid out in ``width`` cells, each cell wrapped to its column."""
    widths, n, out = _column_widths(columns, rows, width), len(columns), []
    inner = [w - (i > 0) - (i < n - 1) for i, w in enumerate(widths)]
    for row in rows:
        cells = [wrap(cell, w, fold=False) for cell, w in zip(row, inner, strict=True)]
        for k in range(max(len(cell) for cell in cells)):
            parts, styles = [], []
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True)):
                text = cell[k] if k < len(cell) else Styled()
                pad = w - (i > 0) - cell_len(text.text)
                parts.append(" " * (i > 0) + text.text + " " * pad)
                styles += [()] * (i > 0) + text.styles + [()] * pad
            out.append(Styled("".join(parts), styles))
    return out


class Look:
    """How the console looks: its width, ASCII boxes or not, escape codes (styles) or not, and
    colours among them or not (NO_COLOR keeps bold and dim)."""

    __slots__ = ("ascii", "colors", "styles", "width")

    def __init__(
        self, width: int = 80, ascii: bool = False, styles: bool = False, colors: bool = False
    ) -> None:
        self.width, self.ascii, self.styles, self.colors = width, ascii, styles, colors

    @classmethod
    def of(cls, stream: object) -> Look:
        """What Typer's Rich console would find for ``stream`` (COLUMNS, TERMINAL_WIDTH,
        the stream's encoding, a terminal or not, FORCE_COLOR, NO_COLOR, TERM=dumb)."""
        env = os.environ
        terminal = _is_terminal(stream, env)
        dumb = terminal and env.get("TERM", "").lower() in ("dumb", "unknown")
        width = _width(env, dumb)
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower()
        return cls(
            width=width,
            ascii=not encoding.startswith("utf"),
            styles=terminal and not dumb,
            colors=terminal and not dumb and not env.get("NO_COLOR"),
        )


def _is_terminal(stream: object, env: os._Environ[str]) -> bool:
    if env.get("_TYPER_FORCE_DISABLE_TERMINAL"):
        return False
    if env.get("GITHUB_ACTIONS") or env.get("FORCE_COLOR") or env.get("PY_COLORS"):
        return True
    if env.get("TTY_COMPATIBLE") in ("0", "1"):
        return env["TTY_COMPATIBLE"] == "1"
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except ValueError:
        return False


def _width(env: os._Environ[str], dumb: bool) -> int:
    for name in ("TERMINAL_WIDTH", "COLUMNS"):
        if env.get(name, "").isdigit() and (name == "TERMINAL_WIDTH" or not dumb):
            return int(env[name])
    if dumb:
        return 80
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or 80
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def _panel(title: str, body: list[Styled], look: Look) -> list[Styled]:
    """``rich.panel.Panel`` with a left-aligned title: rounded corners, or ASCII."""
    tl, h, tr, v, bl, br = "+-+|++" if look.ascii else "╭─╮│╰╯"
    dim, width = ("dim",), look.width
    top = Styled().add(tl + h, dim).add(f" {title} ", dim)
    top.add(h * (width - 6 - len(title)) + h + tr, dim)
    rows = [Styled().add(v, dim).add(" ").extend(line).add(" ").add(v, dim) for line in body]
    return [top, *rows, Styled().add(bl + h * (width - 2) + br, dim)]


def _paragraphs(text: Styled, look: Look, bottom: bool = True) -> list[Styled]:
    """Text wrapped one cell in from each side, with a blank line after it."""
    lines = [Styled().add(" ").extend(line) for line in wrap(text, look.width - 2)]
    return lines + [Styled()] * bottom


def _render(lines: list[Styled], look: Look) -> str:
    """The lines as text, with escape codes when the console has styles."""
    if not look.styles:
        return "".join(line.text.rstrip() + "\n" for line in lines)
    out = []
    for line in lines:
        runs, start = [], 0
        for i in range(1, len(line.text) + 1):
            if i == len(line.text) or line.styles[i] != line.styles[start]:
                runs.append(_sgr(line.text[start:i], line.styles[start], look))
                start = i
        out.append("".join(runs) + "\n")
    return "".join(out)


def _sgr(text: str, style: tuple[str, ...], look: Look) -> str:
    codes = [
        SGR[word]
        for word in dict.fromkeys(style)
        if word in SGR and (look.colors or int(SGR[word]) < 30)
    ]
    return f"\x1b[{';'.join(codes)}m{text}\x1b[0m" if codes else text


def page_of(group: click.Command, ctx: click.Context) -> Page:
    """The help page of a click group as Typer builds it (its root options among them)."""
    import inspect

    return Page(
        _usage_text(group, ctx),
        inspect.cleandoc(group.help or ""),
        inspect.cleandoc(group.epilog or ""),
        _options(group, ctx),
    )


def _options(group: click.Command, ctx: click.Context) -> tuple[Option, ...]:
    """Typer's option rows: long names, short names, negative long and short, type, help."""
    rows = []
    for param in group.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        names = [
            ",".join(o for o in opts if ("--" in o) == long)
            for opts in (param.opts, param.secondary_opts)
            for long in (True, False)
        ]
        metavar = param.make_metavar(ctx=ctx) if not getattr(param, "is_flag", False) else ""
        help_text = "\n".join(
            p.replace("\n", " ").strip() for p in (getattr(param, "help", None) or "").split("\n\n")
        )
        long, short, negative, negative_short = names
        rows.append(
            Option(
                long,
                help_text.strip(),
                short,
                negative,
                negative_short,
                metavar if "bool" not in metavar.lower() else "",
                param.required,
            )
        )
    return tuple(rows)


def _option_rows(options: Sequence[Option], hl: Callable[[Styled], Styled]) -> list[list[Styled]]:
    rows = []
    for option in options:
        help_cell = hl(from_markup(option.help))
        if option.required:
            help_cell.add(" [required]", ("dim", "red"))
        kind = Styled().add(option.metavar, ("bold", "yellow"))
        rows.append([*(hl(Styled().add(n)) for n in option.names), kind, help_cell])
    return rows


def _unstyled(text: Styled) -> Styled:
    return text


def _usage_text(group: click.Command, ctx: click.Context) -> str:
    """``Usage: attntrace [OPTIONS] COMMAND [ARGS]...``, made here unless click would wrap it
    (its help formatter imports textwrap, a cost at start-up)."""
    text = f"Usage: {ctx.command_path} {' '.join(group.collect_usage_pieces(ctx))}"
    return text if len(text) <= 45 else group.get_usage(ctx)


def _usage(text: str) -> Styled:
    """The usage line in bold, ``Usage:`` yellow."""
    usage = Styled().add(text, ("bold",))
    usage.styles[:7] = [("bold", "yellow")] * 7
    return usage


def root_help(group: click.Command, ctx: click.Context, commands: Sequence[tuple[str, str]]) -> str:
    """The whole ``attntrace --help`` of ``group``: usage, description, options and commands
    panels, epilog. ``commands`` are (name, first paragraph of its help) pairs, in the order to
    show.

    >>> import typer.main
    >>> from attntrace.cli import app
    >>> group = typer.main.get_command(app)
    >>> text = root_help(group, typer.Context(group, info_name="attntrace"), [("run", "Run it.")])
    >>> print(text.splitlines()[1])
     Usage: attntrace [OPTIONS] COMMAND [ARGS]...
    """
    return draw_page(page_of(group, ctx), commands)


def draw_page(page: Page, commands: Sequence[tuple[str, str]]) -> str:
    """``page`` laid out as Typer's Rich help lays it out, for the console stdout is.

    >>> print(draw_page(PAGE, [("run", "Run it.")]).splitlines()[1])
     Usage: attntrace [OPTIONS] COMMAND [ARGS]...
    """
    look = Look.of(sys.stdout)
    hl = Styled.highlight if look.styles else _unstyled  # no colours to compute when piped
    lines = [Styled(), *_paragraphs(_usage(page.usage), look)]
    first, _, rest = page.help.partition("\n\n")
    description = hl(from_markup(first.replace("\n", " ").strip()))
    if rest:
        description.add("\n\n").extend(hl(from_markup(rest.strip(), ("dim",))))
    lines += _paragraphs(description, look)
    columns = [Column()] * 5 + [Column(fill=True)]
    options = _table(columns, _option_rows(page.options, hl), look.width - 4)
    lines += _panel("Options", options, look)
    name_width = max((len(name) for name, _ in commands), default=0)
    rows = [
        [Styled().add(name, ("bold", "cyan")), hl(from_markup(summary.strip()))]
        for name, summary in commands
    ]
    if rows:
        lines += _panel(
            "Commands",
            _table([Column(width=name_width), Column(ratio=10)], rows, look.width - 4),
            look,
        )
    if page.epilog:
        lines += [Styled(), *_paragraphs(hl(from_markup(page.epilog)), look)]
    return _render(lines, look)


def print_root_help() -> None:
    """Write ``attntrace --help`` to stdout from :mod:`attntrace.cli.root` alone: no Typer."""
    summaries = [(name, command_summary(name, spec.summary)) for name, spec in COMMANDS.items()]
    sys.stdout.write(draw_page(PAGE, summaries))
    sys.stdout.write("\n")  # where click echoes its (empty) help formatter after format_help
