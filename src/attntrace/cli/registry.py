"""Commands imported only when used: ``attntrace run`` imports run's module and no other.

Each command's module registers it with ``@app.command`` as before; :data:`COMMANDS` names the
module and the one-line summary that ``attntrace --help`` shows, so that the top-level help
(drawn by :mod:`attntrace.cli.fast_help`) and the dispatch to one command import nothing else.
tests/cli/test_help.py checks that every summary is the first paragraph of its command's help.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from typer import _click as click
from typer.core import TyperGroup

from attntrace.cli.root import COMMANDS, CommandSpec, command_summary

if TYPE_CHECKING:
    import typer

__all__ = [
    "COMMANDS",
    "AttntraceGroup",
    "CommandSpec",
    "LazyCommands",
    "bound_group",
    "flow",
    "load_command",
]


def load_command(name: str, group: AttntraceGroup) -> click.Command | None:
    """Import ``name``'s module (it registers the command on the group's app) and build its
    click command the way Typer builds every command of a group."""
    import typer.main

    app = group.typer_app()
    spec = COMMANDS.get(name)
    if spec is None:
        return None
    importlib.import_module(spec.module)
    for info in app.registered_commands:
        if info.callback is None:
            continue
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return flowed(
                typer.main.get_command_from_info(
                    info,
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=group.rich_markup_mode,
                )
            )
    return None


def flowed(command: click.Command) -> click.Command:
    """``command`` with its help made by :func:`flow` (a command Typer has just built, once),
    drawn in the language its command line asks for (:mod:`attntrace.cli.localize`)."""
    from attntrace.cli.localize import localized

    command.help = flow(command.help)
    return localized(command)


#: click's mark of a paragraph whose line breaks are kept (a block of examples).
KEEP_BREAKS = "\b"


def flow(text: str | None) -> str | None:
    r"""A command's help as Typer's Rich help should print it: the lines of each paragraph
    joined into one, which Rich wraps to the terminal's width, except in a paragraph that
    starts with click's ``\b`` line (examples, one to a line: the mark itself is dropped).
    Typer keeps every line break of a docstring, so that lines written to fit the source
    broke again at 80 columns, half-empty.

    >>> flow("Summary.\n\n    Two lines\n    of prose.\n\n    \b\n    cmd one\n    cmd two\n")
    'Summary.\n\nTwo lines of prose.\n\ncmd one\ncmd two'
    """
    if text is None:
        return None
    import inspect

    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p.partition("\n")[2] if p.startswith(KEEP_BREAKS + "\n") else " ".join(p.split("\n"))
        for p in paragraphs
    )


class LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands: every name known at once, each command built on first access."""

    def __init__(self, group: AttntraceGroup, built: MutableMapping[str, click.Command]) -> None:
        self.group = group
        # commands whose module was imported before the group was made come built by Typer
        self.built = {name: flowed(command) for name, command in built.items()}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.built:
            command = load_command(name, self.group)
            if command is None:
                raise KeyError(name)
            self.built[name] = command
        return self.built[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self.built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self.built)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self.built


class AttntraceGroup(TyperGroup):
    """Typer's group with lazy commands and a top-level help drawn without Rich (where
    :func:`attntrace.cli.fast_help.verified`); the app whose commands it builds comes from
    :func:`bound_group` (the registry never imports the app).

    >>> import typer.main
    >>> from attntrace.cli import app
    >>> group = typer.main.get_command(app)
    >>> group.list_commands(None)[:3], group.get_command(None, "presets").name
    (['run', 'trace', 'check'], 'presets')
    """

    @staticmethod
    def typer_app() -> typer.Typer:
        """The Typer application the commands register on (given by :func:`bound_group`)."""
        raise NotImplementedError("make the group class with bound_group(lambda: app)")

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self, self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from attntrace.cli.localize import ARGS

        ctx.meta[ARGS] = list(args)  # for the help's language (--lang before --help)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from attntrace.cli.fast_help import root_help, verified
        from attntrace.cli.localize import help_in, help_lang

        lang = help_lang(ctx)
        if lang != "en":  # Typer draws it, in the learner's words
            with help_in(self, ctx, lang):
                super().format_help(ctx, formatter)
            return
        if not verified():  # a Typer or Rich it was not verified against: Typer draws
            super().format_help(ctx, formatter)
            return
        assert isinstance(self.commands, LazyCommands)
        built = self.commands.built
        summaries = [
            (
                name,
                command_summary(name, COMMANDS[name].summary)
                if name in COMMANDS
                else (built[name].short_help or built[name].help or "").split("\n\n")[0],
            )
            for name in self.commands
        ]
        sys.stdout.write(root_help(self, ctx, summaries))


def bound_group(application: Callable[[], typer.Typer]) -> type[AttntraceGroup]:
    """The group class of the app that ``application()`` returns, read when a command is first
    built (after the app exists): ``typer.Typer(cls=bound_group(lambda: app))``.

    >>> bound_group(lambda: None).typer_app() is None
    True
    """

    class Bound(AttntraceGroup):
        typer_app = staticmethod(application)

    return Bound
