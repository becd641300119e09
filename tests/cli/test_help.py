"""``attntrace --help`` is drawn without Rich and without importing any command: it must stay what
Typer's own Rich help prints, and each command must still be found (and only that one loaded).

The byte-for-byte comparisons with Typer's drawing (``@pinned_versions``) hold for the Typer and
Rich versions fast_help was verified against, the test extra's pins; with any other version
they skip, and Typer draws the help (checked here too, with any version, as are the commands,
options and summaries the help shows)."""

from __future__ import annotations

import inspect
import io
import itertools
import os
import re
import subprocess
import sys
import tomllib
from typing import TypeVar

import pytest
import typer
import typer.main
import typer.rich_utils

from attntrace.cli import app, fast_help
from attntrace.cli.registry import COMMANDS, AttntraceGroup
from attntrace.render.terminal import PlainStream
from paths import REPO

T = TypeVar("T")
INSTALLED = {name: fast_help.installed_version(name) for name in fast_help.VERIFIED}
#: Why a @pinned_versions test skips, in one line.
OTHER_VERSIONS = (
    "byte for byte against Typer {typer} and Rich {rich} only (the test extra's pins); "
    "installed: Typer {installed[typer]}, Rich {installed[rich]}"
).format(**fast_help.VERIFIED, installed=INSTALLED)


def pinned_versions(test: T) -> T:
    """Mark ``test`` as a byte-for-byte comparison with what Typer and Rich draw: it runs with
    the versions fast_help was verified against, and skips with any other."""
    skip = pytest.mark.skipif(INSTALLED != fast_help.VERIFIED, reason=OTHER_VERSIONS)
    return pytest.mark.pinned_versions(skip(test))  # type: ignore[no-any-return]


def _both(monkeypatch: pytest.MonkeyPatch, ascii_only: bool | None, **env: str) -> tuple[str, str]:
    """(Typer's Rich help, ours) of the top-level group, printed to a PlainStream (ASCII or
    not), as ``attntrace`` does, or (``ascii_only`` None) straight to a StringIO."""
    for name in (
        "COLUMNS",
        "TERMINAL_WIDTH",
        "FORCE_COLOR",
        "NO_COLOR",
        "TERM",
        "TTY_COMPATIBLE",
        "GITHUB_ACTIONS",
        "PY_COLORS",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    group = typer.main.get_command(app)
    assert isinstance(group, AttntraceGroup)
    texts = []
    for draw in (
        lambda ctx: typer.rich_utils.rich_format_help(obj=group, ctx=ctx, markup_mode="rich"),
        lambda ctx: group.format_help(ctx, group.context_class(group).make_formatter()),
    ):
        out = io.StringIO()
        monkeypatch.setattr(
            sys, "stdout", out if ascii_only is None else PlainStream(out, ascii_only=ascii_only)
        )
        draw(typer.Context(group, info_name="attntrace"))
        sys.stdout.flush()
        texts.append(out.getvalue())
    monkeypatch.undo()
    return texts[0], texts[1]


@pinned_versions
@pytest.mark.parametrize("columns", [30, 40, 60, 80, 100, 120, 200])
def test_top_level_help_is_what_typers_rich_help_prints(
    monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    rich, ours = _both(monkeypatch, False, COLUMNS=str(columns))
    assert ours == rich
    assert "╭─ Commands" in ours
    assert all(len(line) <= columns for line in ours.splitlines())


@pinned_versions
def test_ascii_stdout_gets_the_same_ascii_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    rich, ours = _both(monkeypatch, True, COLUMNS="90")
    assert ours == rich
    assert ours.isascii()
    assert "+- Options -" in ours


@pinned_versions
def test_colours_on_a_terminal_style_the_same_text(monkeypatch: pytest.MonkeyPatch) -> None:
    rich, ours = _both(monkeypatch, None, COLUMNS="100", FORCE_COLOR="1")
    plain, _ = _both(monkeypatch, None, COLUMNS="100")
    assert "\x1b[" in ours
    strip = re.compile(r"\x1b\[[0-9;]*m")
    assert (
        [line.rstrip() for line in strip.sub("", ours).splitlines()]
        == [line.rstrip() for line in strip.sub("", rich).splitlines()]
        == [line.rstrip() for line in plain.splitlines()]
    )
    assert re.search(r"\x1b\[[0-9;]*36m--heads\x1b\[0m", ours)  # options cyan, as Typer's


@pytest.mark.parametrize("columns", ["1", "7", "12"])
def test_absurdly_narrow_terminals_still_get_a_help(
    monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    """The fast path's own drawing (used whatever the versions here), where Rich's has no room."""
    monkeypatch.setattr(fast_help, "_checked", {"ok": True})
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
    names = {
        info.name or typer.main.get_command_name(info.callback.__name__)  # type: ignore[union-attr]
        for info in app.registered_commands
    }
    assert names == set(COMMANDS)


PROBE = """
import sys
sys.argv = ["attntrace", *{args!r}]
from attntrace.cli import main
{setup}
try:
    main()
except SystemExit as exc:
    print("EXIT:", exc.code, file=sys.stderr)
watched = ("attntrace.cli.", "rich", "numpy", "typer")
loaded = sorted(m for m in sys.modules if m.startswith(watched))
print("LOADED:", " ".join(loaded), file=sys.stderr)
"""
#: The probe's setup for a Typer that fast_help was not verified against.
UNVERIFIED = "import attntrace.cli.fast_help as f; f.VERIFIED = {'typer': '0.0.1', 'rich': '0.0.1'}"


def _probe(*args: str, setup: str = "", columns: int = 100) -> tuple[set[str], str]:
    """(the modules loaded, stdout) of ``attntrace ARGS`` run by :func:`attntrace.cli.main`."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": str(columns)}
    for name in ("TERMINAL_WIDTH", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "PY_COLORS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args), setup=setup)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert "EXIT: 0" in done.stderr, done.stderr
    return set(done.stderr.strip().splitlines()[-1].split()[1:]), done.stdout


def _loaded(*args: str) -> set[str]:
    return _probe(*args)[0]


@pinned_versions
def test_top_level_help_imports_no_command_no_rich_and_no_typer() -> None:
    assert _loaded("--help") == {"attntrace.cli.fast_help", "attntrace.cli.root"}
    assert _loaded("-h") == {"attntrace.cli.fast_help", "attntrace.cli.root"}


@pinned_versions
def test_the_static_page_is_the_one_typers_group_gives() -> None:
    from attntrace.cli.fast_help import page_of
    from attntrace.cli.root import PAGE

    group = typer.main.get_command(app)
    ctx = group.make_context("attntrace", ["--help"], resilient_parsing=True)  # with -h, as run
    assert page_of(group, ctx) == PAGE
    assert PAGE.options[-1].names[:2] == ("--help", "-h")


HELP_BY = {
    "fast path": "from attntrace.cli import main",
    "typer": "from attntrace.cli.typer_app import main",
}


@pinned_versions
@pytest.mark.parametrize(
    "env",
    [
        {"COLUMNS": "80"},
        {"COLUMNS": "33"},
        {"COLUMNS": "140", "FORCE_COLOR": "1"},
        {"FORCE_COLOR": "1", "NO_COLOR": "1"},
        {"TERM": "dumb"},
        {"COLUMNS": "100", "PYTHONIOENCODING": "ascii"},
    ],
)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_without_typer_prints_what_typer_prints(env: dict[str, str], flag: str) -> None:
    base = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "COLUMNS",
            "TERMINAL_WIDTH",
            "FORCE_COLOR",
            "NO_COLOR",
            "TERM",
            "TTY_COMPATIBLE",
            "GITHUB_ACTIONS",
            "PY_COLORS",
            "PYTHONIOENCODING",
        )
    }
    outs = {}
    for name, code in HELP_BY.items():
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; sys.argv = ['attntrace', {flag!r}]; {code}; main()",
            ],
            capture_output=True,
            timeout=120,
            env={**base, "PYTHONPATH": str(REPO / "src"), **env},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outs[name] = done.stdout
    assert outs["fast path"] == outs["typer"]
    assert b"Commands" in outs["fast path"]


def test_the_fast_path_knows_the_installed_versions_as_importlib_metadata_does() -> None:
    import importlib.metadata

    for name in ("typer", "rich", "numpy", "pytest", "hypothesis"):
        assert fast_help.installed_version(name) == importlib.metadata.version(name), name
    assert fast_help.installed_version("attntrace-no-such-thing") is None


def test_the_verified_versions_are_the_test_extras_pins() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(pin.split("==") for pin in extra["test"] if "==" in pin)
    assert {name: pins[name] for name in fast_help.VERIFIED} == fast_help.VERIFIED


@pytest.mark.slow
def test_with_any_other_typer_or_rich_typer_draws_the_help(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_used(*args: object) -> str:
        raise AssertionError("the fast path drew the help for versions it does not know")

    monkeypatch.setattr(fast_help, "VERIFIED", {"typer": "0.0.1", "rich": "0.0.1"})
    monkeypatch.setattr(fast_help, "_checked", {})
    monkeypatch.setattr(fast_help, "root_help", not_used)
    assert not fast_help.verified()
    rich, through_the_group = _both(monkeypatch, False, COLUMNS="100")
    assert through_the_group == rich
    assert "Commands" in rich
    loaded, out = _probe("--help", setup=UNVERIFIED)
    assert "typer.rich_utils" in loaded  # Typer drew it
    assert "Usage: attntrace [OPTIONS] COMMAND [ARGS]..." in out


@pytest.mark.parametrize("setup", ["", UNVERIFIED], ids=["as installed", "other versions"])
def test_the_top_level_help_shows_every_command_and_option(setup: str) -> None:
    """With any Typer and Rich, drawn here or by Typer: usage, description, the root options,
    each command with its summary, the exit codes."""
    from attntrace.cli.root import ABOUT, EPILOG, PAGE

    _, out = _probe("--help", setup=setup, columns=200)
    lines = [" ".join(line.strip(" │|").split()) for line in out.splitlines()]
    assert "Usage: attntrace [OPTIONS] COMMAND [ARGS]..." in lines
    assert ABOUT in lines
    assert "Start with: attntrace run --heads 12 --hidden 768" in lines
    for option in PAGE.options:
        assert any(line.startswith(option.names[0]) and option.help in line for line in lines)
    for name, spec in COMMANDS.items():
        assert f"{name} {spec.summary}" in lines, name
    assert EPILOG in lines


def test_python_dash_m_and_other_arguments_still_go_through_typer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from attntrace.cli import _is_root_help

    script = types.ModuleType("__main__")  # a console script: __package__ is None
    monkeypatch.setitem(sys.modules, "__main__", script)
    monkeypatch.delenv("_ATTNTRACE_COMPLETE", raising=False)
    assert _is_root_help(["/usr/bin/attntrace", "--help"])
    assert _is_root_help(["attntrace", "-h"])
    assert not _is_root_help(["attntrace", "--help", "run"])
    assert not _is_root_help(["attntrace", "run", "--help"])
    assert not _is_root_help(["attntrace"])
    assert not _is_root_help(["attntrace-dev", "--help"])  # Typer would print that name
    monkeypatch.setenv("_ATTNTRACE_COMPLETE", "complete_bash")
    assert not _is_root_help(["attntrace", "--help"])
    monkeypatch.delenv("_ATTNTRACE_COMPLETE")
    script.__package__ = "attntrace"  # python -m attntrace: Typer says "python -m attntrace"
    assert not _is_root_help(["/x/attntrace/__main__.py", "--help"])


#: The commands that take each option group, declared once in OPTION_GROUPS.
GROUP_USERS = {
    "sizes": ("run", "report", "verify", "check", "diff"),
    "numbers": ("run", "report", "verify", "check", "diff"),
    "computation": ("run", "report", "verify", "check"),
    "files": ("run", "report", "verify"),
    "model": ("run", "report", "verify", "check", "diff", "sweep"),
}


@pytest.mark.parametrize("group", sorted(GROUP_USERS))
def test_each_option_group_gives_its_commands_the_same_options_and_defaults(group: str) -> None:
    from attntrace.cli.configure import OPTION_GROUPS

    root = typer.main.get_command(app)
    ctx = root.context_class(root)
    for name in GROUP_USERS[group]:
        command = root.get_command(ctx, name)  # type: ignore[attr-defined]
        params = {p.name: p for p in command.params}
        for option, (_, default) in OPTION_GROUPS[group].items():
            assert option in params, f"{name} lacks --{option.replace('_', '-')}"
            got = params[option].default
            assert got == (default.value if hasattr(default, "value") else default), (name, option)
        names = [p.name for p in command.params]  # in the order --help lists them
        at = names.index(next(iter(OPTION_GROUPS[group])))
        assert names[at : at + len(OPTION_GROUPS[group])] == list(OPTION_GROUPS[group]), name


def test_an_option_group_must_be_keyword_only() -> None:
    from attntrace.cli.configure import with_option_groups

    def command(sizes: dict[str, object]) -> None: ...

    with pytest.raises(TypeError, match="option group 'sizes' must be keyword-only"):
        with_option_groups(command)


def _every_command() -> list[tuple[str, object]]:
    root = typer.main.get_command(app)
    ctx = root.context_class(root)
    return [(name, root.get_command(ctx, name)) for name in COMMANDS]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "command"), _every_command(), ids=[n for n, _ in _every_command()]
)
def test_no_help_text_is_eaten_as_rich_markup(name: str, command: typer.core.TyperCommand) -> None:
    """Typer renders help as Rich markup: an unescaped ``[default: …]`` is taken for a style
    tag and vanishes, leaving "a torch tensor ." on the page."""
    from rich.markup import render

    for param in command.params:
        text = getattr(param, "help", None) or ""
        shown = render(text).plain
        assert shown.count("[") == text.replace("\\[", "[").count("["), (name, param.name, text)
        assert not re.search(r"\s\.(\s|$)", shown), (name, param.name, shown)  # "tensor ."


def _help_at(name: str, columns: int, monkeypatch: pytest.MonkeyPatch) -> str:
    from typer.testing import CliRunner

    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.delenv("NO_COLOR", raising=False)
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _example_lines(name: str) -> list[str]:
    """The lines of the command's ``\\b`` blocks as the help prints them (markup dropped)."""
    from rich.markup import render

    _, command = next(c for c in _every_command() if c[0] == name)
    doc = inspect.cleandoc(command.callback.__doc__ or "")  # type: ignore[attr-defined]
    blocks = [p.split("\n")[1:] for p in doc.split("\n\n") if p.startswith("\b\n")]
    return [render(line).plain.strip() for block in blocks for line in block]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_prose_flows_to_the_width_and_its_examples_stay_whole(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Typer keeps a docstring's line breaks: lines written to fit the source broke again at
    80 columns, half-empty. The prose is joined (Rich wraps it), the examples (click's ``\\b``
    blocks) keep one to a line and fit 80 columns."""
    page = [line.rstrip() for line in _help_at(name, 80, monkeypatch).split("\n")]
    text = "\n".join(page).split("╭")[0]
    examples = _example_lines(name)
    for paragraph in text.split("\n\n")[2:]:  # after the usage line and the summary
        lines = [line for line in paragraph.split("\n") if line.strip() not in examples]
        for line, after in itertools.pairwise(lines):
            # a line broken early: the next line's first word would have fitted on it
            assert len(line) + 1 + len(after.split()[0]) > 80 - 2, (name, line, after)
    narrow = [line.strip() for line in page]
    for example in _example_lines(name):
        assert example in narrow, (name, example)  # not broken across two lines


@pinned_versions  # other versions: Typer draws the help, in English
def test_a_chinese_locale_gets_the_summaries_in_the_notes_chinese() -> None:
    """Issue 31: the first line of every command in ``attntrace --help`` follows the locale
    (the help attntrace draws itself, with the Typer and Rich it was verified against)."""
    from attntrace.cli.root import SUMMARIES_ZH

    assert list(SUMMARIES_ZH) == list(COMMANDS)
    for lang, expected, absent in (
        ("zh_CN.UTF-8", SUMMARIES_ZH, COMMANDS["run"].summary),
        ("C.UTF-8", {name: spec.summary for name, spec in COMMANDS.items()}, SUMMARIES_ZH["run"]),
    ):
        env = {**os.environ, "LANG": lang, "LC_ALL": "", "LC_MESSAGES": "", "COLUMNS": "200"}
        out = subprocess.run(
            [sys.executable, "-m", "attntrace", "--help"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        for summary in expected.values():
            assert summary in out, (lang, summary)
        assert absent not in out
