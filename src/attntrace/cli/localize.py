"""Every command's ``--help`` in the learner's language: under ``--lang zh`` or a zh_* locale
the help Typer draws is drawn from the Chinese side of :mod:`attntrace.learn.catalogue_help`.

The commands keep declaring their help in English (the code and the docs read it); the words
are swapped in only while a help is drawn, and put back afterwards, so that one process (a
test's CliRunner) can draw both languages. ``--help`` is eager, parsed before ``--lang``:
the language comes from the raw arguments (:func:`attntrace.learn.lang.requested_lang`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from typer import _click as click

from attntrace.learn.lang import Lang, message, requested_lang, translate

#: Where a command keeps the arguments it was given (ctx.meta), for its help to read.
ARGS = "attntrace.args"
#: Typer's own words in its Rich help, by their catalogue key.
TYPER_WORDS = {
    "ARGUMENTS_PANEL_TITLE": "help.panel.arguments",
    "OPTIONS_PANEL_TITLE": "help.panel.options",
    "COMMANDS_PANEL_TITLE": "help.panel.commands",
    "REQUIRED_LONG_STRING": "help.required",
}


def localized(command: click.Command) -> click.Command:
    """``command`` drawing its help in the language its command line asks for.

    >>> import contextlib, io, typer.main
    >>> from attntrace.cli import app
    >>> run = typer.main.get_command(app).get_command(None, "run")
    >>> ctx = run.make_context("run", ["--lang", "zh", "--heads", "2"])
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     _ = run.get_help(ctx)  # Typer's Rich help prints it
    >>> "显示本帮助并退出" in out.getvalue(), "Show this message" in out.getvalue()
    (True, False)
    """
    parse, draw = command.parse_args, command.format_help

    def parse_args(ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGS] = list(args)
        return parse(ctx, args)

    def format_help(ctx: click.Context, formatter: click.HelpFormatter) -> None:
        lang = help_lang(ctx)
        if lang == "en":
            draw(ctx, formatter)
            return
        with help_in(command, ctx, lang):
            draw(ctx, formatter)

    setattr(command, "parse_args", parse_args)  # noqa: B010 (an instance's own method)
    setattr(command, "format_help", format_help)  # noqa: B010
    return command


def help_lang(ctx: click.Context) -> Lang:
    """The language of ``ctx``'s help: its command line's ``--lang``, else the locale."""
    args = ctx.meta.get(ARGS)
    return requested_lang(args if isinstance(args, list) else sys.argv[1:])


def paragraphs(text: str | None, lang: Lang) -> str | None:
    """A help of several paragraphs in ``lang``, each looked up on its own.

    >>> paragraphs("Where to write the page.\\n\\nNo such paragraph.", "zh")
    '页面写到哪里。\\n\\nNo such paragraph.'
    """
    if text is None:
        return None
    return "\n\n".join(translate(p, lang) for p in text.split("\n\n"))


@contextlib.contextmanager
def help_in(command: click.Command, ctx: click.Context, lang: Lang) -> Iterator[None]:
    """While drawing: ``command``'s help, epilog, options, panels and subcommands' summaries
    and Typer's own words in ``lang``; everything as it was afterwards."""
    from typer import rich_utils

    saved: list[tuple[Any, str, Any]] = []

    def swap(obj: Any, attr: str, value: Any) -> None:
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    swap(command, "help", paragraphs(command.help, lang))
    swap(command, "format_usage", _usage(command, message("help.usage", lang)))
    swap(command, "epilog", paragraphs(command.epilog, lang))
    for param in command.get_params(ctx):
        help_text, panel = getattr(param, "help", None), getattr(param, "rich_help_panel", None)
        if help_text:
            swap(param, "help", translate(" ".join(help_text.split()), lang))
        if panel:
            swap(param, "rich_help_panel", translate(panel, lang))
    for name, key in TYPER_WORDS.items():
        swap(rich_utils, name, message(key, lang))
    swap(rich_utils, "DEFAULT_STRING", message("help.default", lang).replace("{value}", "{}"))
    swap(rich_utils, "_make_rich_text", _as_prose(rich_utils._make_rich_text))
    if hasattr(command, "list_commands"):  # the group: its commands' summaries
        _summaries(command, ctx, lang, swap)
    try:
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)


def _usage(command: click.Command, prefix: str) -> Any:
    """``command``'s usage line with ``prefix`` for click's ``Usage: ``."""

    def format_usage(ctx: click.Context, formatter: click.HelpFormatter) -> None:
        pieces = command.collect_usage_pieces(ctx)
        formatter.write_usage(ctx.command_path, " ".join(pieces), prefix=prefix)

    return format_usage


def _as_prose(make: Any) -> Any:
    """Typer's maker of a help's Text, its Texts wrapped as prose (Chinese breaks between
    characters instead of overflowing its column with an ellipsis)."""
    from rich.text import Text

    from attntrace.render.prose import Prose

    def made(*args: Any, **kwargs: Any) -> Any:
        text = make(*args, **kwargs)
        return Prose(text) if isinstance(text, Text) else text

    return made


def _summaries(group: Any, ctx: click.Context, lang: Lang, swap: Any) -> None:
    """The one-line summaries of a group's commands in ``lang`` (the group's help lists them)."""
    from attntrace.cli.root import SUMMARIES_ZH

    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        if sub is None:
            continue
        first = (sub.short_help or sub.help or "").split("\n\n")[0]
        said = SUMMARIES_ZH.get(name) if lang == "zh" else None
        swap(sub, "short_help", said or translate(first, lang))
