"""mkdocs hook: the command reference (``reference/commands.md``), generated from the Typer app,
so it cannot drift from ``attntrace --help``: the build fails when the page differs from a fresh
generation (as does tests/docs/test_command_reference.py; ``pytest tests/docs --update-golden`` or
``python docs/hooks/commands.py`` writes it again).

Every command with its help (examples included), usage, and every option with its names,
default, choices or type, and help, grouped by the panels ``--help`` shows.
tests/docs/test_command_reference.py checks the page against the app; ``mkdocs build --strict``
(in .ci/run) builds it.
"""

from __future__ import annotations

import enum
from typing import Any

# Typer 0.28 carries its own copy of click: its commands and parameters are read by duck typing
# (``param_type_name``, ``choices``) and contexts made with the command's own ``context_class``.
Param = Any
Command = Any

PAGE = "reference/commands.md"
INTRO = """# Command reference

Generated from the program itself (`docs/hooks/commands.py`; the site's build and the tests
fail when this page differs from what the program says), so it says what
`attntrace COMMAND --help` says. Exit codes of every command: **0** success, **1** a
check failed, **2** bad input or usage (one line on stderr naming the fix), **3** an internal
error (a bug: one line asking for a report). See also [Steps, axes and variants](steps.md).
"""


def _plain(text: str) -> str:
    """Help text as it reads in a terminal: Rich markup dropped, escapes resolved."""
    from rich.text import Text

    return Text.from_markup(text).plain


def _help_blocks(text: str) -> list[str]:
    """A command's help as markdown: one-line paragraphs as prose, aligned ones as code."""
    blocks = []
    for paragraph in _plain(text).replace("\b\n", "").replace("\b", "").split("\n\n"):
        lines = [line.rstrip() for line in paragraph.strip("\n").split("\n")]
        if len(lines) > 1 and any(line.startswith(" ") or "  " in line for line in lines):
            blocks.append("```text\n" + "\n".join(lines) + "\n```")
        elif lines != [""]:
            blocks.append(" ".join(line.strip() for line in lines))
    return blocks


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Param) -> str:
    default = param.default
    if getattr(param, "is_flag", False) and not getattr(param, "secondary_opts", None):
        return "off" if not default else "on"
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, bool) and getattr(param, "secondary_opts", None):
        return param.opts[0] if default else param.secondary_opts[0]
    if default is None or default == () or callable(default):
        return "—"
    return f"`{default}`"


def _kind(param: Param) -> str:
    if hasattr(param.type, "choices"):
        return " \\| ".join(f"`{choice}`" for choice in param.type.choices)
    if getattr(param, "is_flag", False):
        return "flag"
    metavar = getattr(param, "metavar", None)
    return (metavar or param.type.name.upper()).replace("|", "\\|")


def _names(param: Param) -> str:
    names = [*param.opts, *getattr(param, "secondary_opts", [])]
    return ", ".join(f"`{name}`" for name in names)


def command_page(name: str, command: Command, context: Any) -> list[str]:
    """The section of one command."""
    usage = " ".join(command.collect_usage_pieces(context))
    blocks = [f"## attntrace {name}", *_help_blocks(command.help or "")]
    blocks += ["Usage:", f"```text\nattntrace {name} {usage}\n```"]
    lines = [line for block in blocks for line in (block, "")]
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    for argument in arguments:
        help_text = _plain(getattr(argument, "help", None) or "")
        lines += [f"- `{argument.human_readable_name}`: {_cell(help_text)}", ""]
    panels: dict[str, list[Param]] = {}
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(
                param
            )
    for panel, params in panels.items():
        lines += [f"### {panel}", "", "| option | default | value | meaning |", "|---|---|---|---|"]
        for param in params:
            help_text = _plain(param.help or "")
            lines.append(
                f"| {_names(param)} | {_default(param)} | {_kind(param)} | {_cell(help_text)} |"
            )
        lines.append("")
    return lines


def reference() -> str:
    """The whole reference page, from the Typer application."""
    import typer.main

    from attntrace.cli import app

    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="attntrace")
    lines = [INTRO]
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        assert command is not None
        context = command.context_class(command, parent=root, info_name=name)
        lines += command_page(name, command, context)
    return "\n".join(lines).rstrip("\n") + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Refuse a reference page that differs from the program."""
    from mkdocs.exceptions import PluginError

    page = files.get_file_from_path(PAGE)
    if page is None or page.content_string != reference():
        raise PluginError(f"docs/{PAGE} differs from the program: python docs/hooks/commands.py")
    return files


if __name__ == "__main__":
    from pathlib import Path

    (Path(__file__).parents[1] / PAGE).write_text(reference(), encoding="utf-8")
