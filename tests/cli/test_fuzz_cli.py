"""Fuzz every command and option with hostile values, in process: whatever the values, the
command ends in a result (exit 0/1) or one line on stderr (exit 2), never a traceback, never
an escape code on the terminal. Commands and options are read from the app itself, so a new
command is fuzzed without touching this file."""

from __future__ import annotations

import dataclasses
import enum
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attntrace.cli import app
from hostile import ESC, HOSTILE_NAMES, hostile_files, invoke

# Typer >= 0.27 vendors click, so options are read by duck typing, not by click's classes.
COMMANDS: dict[str, Any] = dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]

NUMBERS = [
    "0",
    "-1",
    "1",
    "2",
    "3",
    "4",
    "8",
    "64",
    "100003",
    "2147483648",
    "9223372036854775808",
    "1" + "0" * 30,
    "1" + "0" * 5000,
    "1e309",
    "nan",
    "inf",
    "-inf",
    "0.5",
    "1e-320",
    "-0",
]
WORDS = [
    "",
    " ",
    "é",
    "注意",
    ESC,
    "[bold]x[/bold]",
    "\\",
    "3,2",
    "0,0",
    "1,,2",
    "9" * 400 + ",1",
    "llama-3-8b",
    "gpt2",
    "sqrt",
    "none",
    "8GiB",
    "1B",
    "1e400GiB",
    "scores=h,S,S",
    "x=1e999",
    "scores=" + "9" * 50,
    "eager,flash",
    "flash",
    "x" * 10_000,
    "-",
    "--help",
]
_ROOT = Path(tempfile.gettempdir()) / f"attntrace-fuzz-{os.getpid()}"
PATHS = [str(_ROOT / name) for name in HOSTILE_NAMES] + [
    "/dev/zero",
    "/dev/null",
    str(_ROOT),
    ESC,
    "",
    "-",
]
#: User code that misbehaves, for the TARGET of trace and diff (written into _ROOT / "py").
HOSTILE_CODE = {
    "syntax.py": "def attention(x:\n",
    "exits.py": "import sys\n\ndef attention(x, params=None):\n    sys.exit(7)\n",
    "exits_on_import.py": "raise SystemExit('\\x1b[2J bye')\n",
    "raises.py": "def attention(x, params=None):\n    raise ValueError('\\x1b]8;;https://evil\\x07[red]boom[/red]')\n",
    "recurses.py": "def attention(x, params=None):\n    return attention(x)\n",
    "returns.py": "def attention(x, params=None):\n    return 'not a tensor'\n",
    "nothing.py": "attention = 3\n",
    "init.py": (
        "import torch\n\nclass Attention(torch.nn.Module):\n"
        "    def __init__(self, heads):\n        raise RuntimeError('\\x1b[2J')\n"
    ),
    "\x1b[2Jesc.py": "def attention(x, params=None):\n    return x\n",
}
USER_TRACEBACK = "Traceback (your code only):"
TARGETS = [
    *(
        f"{_ROOT / 'py' / name}:{obj}"
        for name in HOSTILE_CODE
        for obj in ("attention", "Attention", "missing")
    ),
    *(str(_ROOT / "py" / name) for name in HOSTILE_CODE),
    *(f"{path}:f" for path in PATHS),
    "json:dumps",
    "math:sqrt",
    "no_such_module_x:f",
    "json:",
    ":",
    "::",
    "json:loads:x",
    "x.py",
    ESC + ":f",
    "",
    "-",
    "--",
    "json:" + ESC,
]


@pytest.fixture(autouse=True)
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command line runs in a folder of its own: an output named by a relative path (a
    hostile name) lands there, not in the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def ctrl_c_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that serves until Ctrl-C (explore) gets it as soon as it serves, and opens no
    browser: its options are fuzzed, its page is tests/explore's."""
    from attntrace.explore.server import ExploreServer

    def interrupted(self: object, poll_interval: float = 0.5) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ExploreServer, "serve_forever", interrupted)
    monkeypatch.setattr("webbrowser.open", lambda *args, **kwargs: True)


@pytest.fixture(scope="module", autouse=True)
def corpus() -> Iterator[dict[str, Path]]:
    """The hostile files the paths above name, made for this module and removed after it."""
    files = hostile_files(_ROOT)
    assert {p.name for p in files.values() if p.parent == _ROOT} <= set(HOSTILE_NAMES)
    (_ROOT / "py").mkdir()
    for name, code in HOSTILE_CODE.items():
        (_ROOT / "py" / name).write_text(code)
    yield files
    shutil.rmtree(_ROOT, ignore_errors=True)


def _kind(param: Any) -> tuple[str, list[object] | None]:
    """ "path", "number" or "other", and the choices if the option has them: from click's
    ParamType (Typer < 0.29) or from the annotation (Typer >= 0.29 keeps no ``type``)."""
    if hasattr(param, "type"):
        name = type(param.type).__name__
        kind = "path" if "Path" in name else "other"
        kind = "number" if name in ("IntParamType", "FloatParamType") else kind
        return kind, getattr(param.type, "choices", None)
    annotation = param.type_descriptor.annotation
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "other", [member.value for member in annotation]
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path", None
    return ("number" if annotation in (int, float) else "other"), None


def _values(param: Any) -> st.SearchStrategy[list[str]]:
    """Argument lists for one option: its name(s) and a hostile value."""
    names = st.sampled_from([*param.opts, *param.secondary_opts])
    if param.is_flag:
        return names.map(lambda n: [n])
    kind, choices = _kind(param)
    if choices is not None:
        pool = [*map(str, choices), *WORDS[:6]]
    elif kind == "path":
        pool = PATHS
    elif kind == "number":
        pool = NUMBERS + WORDS[:5]
    else:
        pool = NUMBERS + WORDS + PATHS[:3]
    return st.tuples(names, st.sampled_from(pool)).map(list)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    name = draw(st.sampled_from(sorted(COMMANDS)))
    params = [
        p for p in COMMANDS[name].params if p.param_type_name == "option" and p.name != "help"
    ]
    chosen = (
        draw(st.lists(st.sampled_from(params), max_size=6, unique_by=lambda p: p.name))
        if params
        else []
    )
    args = [name]
    for param in COMMANDS[name].params:
        if param.param_type_name == "argument" and (param.required or draw(st.booleans())):
            args.append(draw(st.sampled_from(TARGETS if name in ("trace", "diff") else PATHS)))
    for param in chosen:
        args += draw(_values(param))
    if draw(st.booleans()) and name in ("run", "check", "verify"):
        args += ["--backend", "shape"] if name != "verify" else []
    return args


class HangError(Exception):
    """A command line that ran past its time (an internal error line would report it)."""


def _hang(signum: int, frame: object) -> None:
    raise HangError("ran for more than 20 s")


@pytest.mark.slow
@pytest.mark.e2e  # 200 command lines, some through the sandbox child: the e2e tier (.ci/run)
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
@given(command_lines())
def test_any_command_line_is_contained(args: list[str]) -> None:
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    try:
        outcome = invoke(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    # trace shows the user's own traceback for their exception (exit 1), never attntrace's
    dataclasses.replace(outcome, out=outcome.out.replace(USER_TRACEBACK, "")).assert_contained()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_fuzzed(name: str) -> None:
    """The commands the fuzz draws from are the app's own (new commands join automatically)."""
    assert invoke(name, "--help").code == 0


def _arguments(name: str) -> list[Any]:
    return [p for p in COMMANDS[name].params if p.param_type_name == "argument"]


# ids without the folder, which is this process's own: xdist's workers must collect the same ids
@pytest.mark.slow
@pytest.mark.e2e  # every hostile target through the sandbox child: the e2e tier (.ci/run)
@pytest.mark.parametrize("target", TARGETS, ids=[t.replace(str(_ROOT), "ROOT") for t in TARGETS])
@pytest.mark.parametrize("name", [n for n in ("trace", "diff") if n in COMMANDS])
def test_any_target_is_contained(name: str, target: str) -> None:
    """Each hostile TARGET (misbehaving user code, hostile paths and names) on its own."""
    assert _arguments(name), f"{name} takes a TARGET"
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    try:
        sizes = ["--seq", "3", "--hidden", "8"] + (["--heads", "2"] if name == "diff" else [])
        outcome = invoke(name, target, *sizes)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    # trace shows the user's own traceback for their exception (exit 1), never attntrace's
    dataclasses.replace(outcome, out=outcome.out.replace(USER_TRACEBACK, "")).assert_contained()
    if not target.startswith("-"):  # else click reads it as an option, rightly
        assert "No such option" not in outcome.err  # the target itself was tried
