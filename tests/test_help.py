"""``attntrace --help`` is drawn without Rich and without importing any command: it must stay what
Typer's own Rich help prints, and each command must still be found (and only that one loaded)."""

from __future__ import annotations

import inspect
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main
import typer.rich_utils

from attntrace.cli import app
from attntrace.cli.lazy import COMMANDS, AttntraceGroup
from attntrace.render.terminal import PlainStream

REPO = Path(__file__).resolve().parents[1]


def _both(monkeypatch: pytest.MonkeyPatch, ascii_only: bool | None, **env: str) -> tuple[str, str]:
    """(Typer's Rich help, ours) of the top-level group, printed to a PlainStream (ASCII or
    not), as ``attntrace`` does, or (``ascii_only`` None) straight to a StringIO."""
    for name in ("COLUMNS", "TERMINAL_WIDTH", "FORCE_COLOR", "NO_COLOR", "TERM", "TTY_COMPATIBLE",
                 "GITHUB_ACTIONS", "PY_COLORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    group = typer.main.get_command(app)
    assert isinstance(group, AttntraceGroup)
    texts = []
    for draw in (lambda ctx: typer.rich_utils.rich_format_help(obj=group, ctx=ctx, markup_mode="rich"),
                 lambda ctx: group.format_help(ctx, group.context_class(group).make_formatter())):
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out if ascii_only is None else PlainStream(out, ascii_only=ascii_only))
        draw(typer.Context(group, info_name="attntrace"))
        sys.stdout.flush()
        texts.append(out.getvalue())
    monkeypatch.undo()
    return texts[0], texts[1]


@pytest.mark.parametrize("columns", [30, 40, 60, 80, 100, 120, 200])
def test_top_level_help_is_what_typers_rich_help_prints(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    rich, ours = _both(monkeypatch, False, COLUMNS=str(columns))
    assert ours == rich
    assert "╭─ Commands" in ours
    assert all(len(line) <= columns for line in ours.splitlines())


def test_ascii_stdout_gets_the_same_ascii_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    rich, ours = _both(monkeypatch, True, COLUMNS="90")
    assert ours == rich
    assert ours.isascii()
    assert "+- Options -" in ours


def test_colours_on_a_terminal_style_the_same_text(monkeypatch: pytest.MonkeyPatch) -> None:
    rich, ours = _both(monkeypatch, None, COLUMNS="100", FORCE_COLOR="1")
    plain, _ = _both(monkeypatch, None, COLUMNS="100")
    assert "\x1b[" in ours
    strip = re.compile(r"\x1b\[[0-9;]*m")
    assert [line.rstrip() for line in strip.sub("", ours).splitlines()] == \
        [line.rstrip() for line in strip.sub("", rich).splitlines()] == \
        [line.rstrip() for line in plain.splitlines()]
    assert re.search(r"\x1b\[[0-9;]*36m--heads\x1b\[0m", ours)  # options cyan, as Typer's


@pytest.mark.parametrize("columns", ["1", "7", "12"])
def test_absurdly_narrow_terminals_still_get_a_help(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    _, ours = _both(monkeypatch, None, COLUMNS=columns)
    assert "Usage:" in ours.replace("\n", "").replace(" ", "") or "Usag" in ours


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_its_commands_help(name: str) -> None:
    group = typer.main.get_command(app)
    command = group.get_command(typer.Context(group), name)  # type: ignore[attr-defined]
    assert command is not None
    assert command.name == name
    assert inspect.cleandoc(command.help or "").split("\n\n")[0] == COMMANDS[name].summary


def test_every_registered_command_is_listed() -> None:
    import importlib

    for spec in COMMANDS.values():
        importlib.import_module(spec.module)
    names = {info.name or typer.main.get_command_name(info.callback.__name__)  # type: ignore[union-attr]
             for info in app.registered_commands}
    assert names == set(COMMANDS)


PROBE = """
import sys
sys.argv = ["attntrace", *{args!r}]
from attntrace.cli import main
try:
    main()
except SystemExit as exc:
    print("EXIT:", exc.code, file=sys.stderr)
loaded = sorted(m for m in sys.modules if m.startswith(("attntrace.cli.", "rich", "numpy")))
print("LOADED:", " ".join(loaded), file=sys.stderr)
"""


def _loaded(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(args=list(args))], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    return set(done.stderr.strip().splitlines()[-1].split()[1:])


def test_top_level_help_imports_no_command_and_no_rich() -> None:
    assert _loaded("--help") == {"attntrace.cli.app", "attntrace.cli.help", "attntrace.cli.lazy"}


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _loaded("presets")
    assert "attntrace.cli.presets" in loaded
    assert not loaded & {f"attntrace.cli.{name}" for name in ("run", "check", "trace", "diff", "sweep", "verify")}


def test_a_typo_still_suggests_the_command() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", PROBE.format(args=["presest"])], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.stderr.splitlines()[0] == ("attntrace: error: No such command 'presest'. Did you mean "
                                           "'presets'?; see 'attntrace --help'")
    assert "attntrace.cli.presets" not in done.stderr  # the suggestion imports no command


def test_completion_finds_commands_and_preset_names() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "_ATTNTRACE_COMPLETE": "complete_bash"}
    run = [sys.executable, "-c", "import sys; sys.argv[0] = 'attntrace'; from attntrace.cli import main; main()"]
    names = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False,
                           env={**env, "COMP_WORDS": "attntrace r", "COMP_CWORD": "1"}).stdout.split()
    assert names == ["run", "report"]
    presets = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False,
                             env={**env, "COMP_WORDS": "attntrace run --preset llama-3-", "COMP_CWORD": "3"})
    assert "llama-3-8b" in presets.stdout.split()
