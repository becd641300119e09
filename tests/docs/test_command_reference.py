"""The command reference is generated from the Typer app (docs/hooks/commands.py): every command,
option, default, choice and example of ``--help`` is on the page."""

from __future__ import annotations

import enum
import importlib.util
from types import ModuleType

import pytest
import typer.main

from attntrace.cli import app
from paths import REPO

PAGE = REPO / "docs" / "reference" / "commands.md"


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("commands_hook", REPO / "docs/hooks/commands.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_option_default_and_choice_is_on_the_page() -> None:
    page = hook().reference()
    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="attntrace")
    names = group.list_commands(root)
    assert names == [
        "run",
        "trace",
        "check",
        "report",
        "presets",
        "sweep",
        "compare",
        "verify",
        "diff",
        "demo",
        "explore",
    ]
    sections = page.split("\n## attntrace ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == names
    for name, section in zip(names, sections, strict=True):
        command = group.get_command(root, name)
        assert "Example" in (command.help or "") or "attntrace " + name in section
        for param in command.params:
            if param.param_type_name != "option" or param.hidden:
                continue
            row = next(line for line in section.splitlines() if f"| `{param.opts[0]}`" in line)
            if hasattr(param.type, "choices"):
                assert all(f"`{choice}`" in row for choice in param.type.choices), row
            default = param.default
            if isinstance(default, enum.Enum):
                default = default.value
            if isinstance(default, int | float | str) and not isinstance(default, bool):
                assert f"`{default}`" in row, row


def test_the_examples_of_help_are_on_the_page() -> None:
    page = hook().reference()
    assert "attntrace run --format json | jq -c '.steps[] | [.name, .shape]'" in page
    assert "attntrace check --spec shapes.toml --format junit > report.xml" in page
    assert "[bold]" not in page  # Rich markup dropped, as a terminal shows it


def test_the_committed_page_is_a_fresh_generation(request: pytest.FixtureRequest) -> None:
    fresh = hook().reference()
    if request.config.getoption("--update-golden"):
        PAGE.write_text(fresh, encoding="utf-8")
    assert PAGE.read_text(encoding="utf-8") == fresh, (
        "docs/reference/commands.md differs from the program: python docs/hooks/commands.py"
    )
