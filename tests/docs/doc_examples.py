"""The examples of the README and the site: every ``$ attntrace …`` line of a ```console block,
run as a user runs it, and its output compared with the lines under it.

The rules a page follows (docs/development.md says them to writers):

- A ```console block holds commands (``$ attntrace …``; a ``# comment`` after them is allowed)
  each followed by its output, stdout and stderr as a terminal shows them, at ``COLUMNS=100``.
  A command that is only illustrated (a model folder the reader has, a file not in the
  repository) goes in a ```bash block, which is not run.
- A last output line ``[exit N]`` says the command exits N (else it must exit 0).
- ``…`` on a line of its own stands for any number of lines; ``…`` inside a line for any text
  in that line: figures that vary from machine to machine (free memory, timings, paths).
- Compared after normalising widths and rounding noise: runs of spaces count as one space, a
  run of box-drawing rule characters as one, trailing spaces are ignored, and a difference of
  1e-5 or less written in e-notation (``4.8e-07``, ``0.00e+00``: what ``verify`` and ``diff``
  print for two sums taken in another order, which depends on the BLAS) reads as ``ε``.

``pytest tests/docs --update-golden`` writes the real output under each command that differs
(put back any ``…`` it replaced).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from paths import REPO, SRC

#: The pages whose console blocks are run: the README and every page of the site.
PAGES = (REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")))
WIDTH = 100
PROMPT = "$ "
#: A console block, at the start of a line or indented (inside a list item).
_FENCE = re.compile(r"^([ \t]*)```console[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
_EXIT = re.compile(r"^\[exit (\d+)\]$")
_RULE = re.compile(r"[─━═-]{3,}")
#: Rounding noise: a number in e-notation of at most 1e-5 (or exactly zero).
_NOISE = re.compile(r"(?<![\w.])(?:\d\.\d+e-(?:0[5-9]|[1-9]\d)|0\.0+e[+-]00)(?![\w.])")
ELLIPSIS = "…"


@dataclass(frozen=True)
class Example:
    """One ``$ attntrace …`` line of a page and the output written under it."""

    page: Path
    line: int  # 1-based line of the command in the page
    command: str
    expected: tuple[str, ...]
    indent: str = ""  # of the block (inside a list item)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def exit_code(self) -> int:
        last = _EXIT.match(self.expected[-1]) if self.expected else None
        return int(last.group(1)) if last else 0

    @property
    def output(self) -> tuple[str, ...]:
        """The expected output without its ``[exit N]`` line."""
        last = _EXIT.match(self.expected[-1]) if self.expected else None
        return self.expected[:-1] if last else self.expected

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command, comments=True)


def examples(page: Path, text: str | None = None) -> list[Example]:
    """Every example of ``page`` (or of ``text``, read as that page), in order."""
    text = page.read_text(encoding="utf-8") if text is None else text
    found = []
    for block in _FENCE.finditer(text):
        first = text.count("\n", 0, block.start(2)) + 1
        indent = block.group(1)
        lines = [line.removeprefix(indent) for line in block.group(2).rstrip("\n").split("\n")]
        starts = [i for i, line in enumerate(lines) if line.startswith(PROMPT)]
        for at, end in zip(starts, [*starts[1:], len(lines)], strict=True):
            command, expected = lines[at][len(PROMPT) :], tuple(lines[at + 1 : end])
            found.append(Example(page, first + at, command, expected, indent))
    return found


def all_examples() -> list[Example]:
    return [example for page in PAGES for example in examples(page)]


def run(example: Example, cwd: Path) -> tuple[int, list[str]]:
    """Run the example's command as a user would (``attntrace`` is ``python -m attntrace`` of
    this tree), in ``cwd``; its exit code and its output lines (stderr after stdout)."""
    argv = example.argv
    assert argv[0] == "attntrace", f"{example.id}: a console block runs attntrace only"
    env = {
        **os.environ,
        "COLUMNS": str(WIDTH),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    }
    for name in ("FORCE_COLOR", "TERM", "GITHUB_ACTIONS", "LINES"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = (result.stdout + result.stderr).rstrip("\n").split("\n")
    return result.returncode, [line.rstrip() for line in lines]


def normalise(line: str) -> str:
    """A line with widths and rounding noise taken out: rules shortened, runs of spaces made
    one, no trailing spaces, differences of 1e-5 or less made ``ε``."""
    return " ".join(_NOISE.sub("ε", _RULE.sub("─", line)).split())


def _line_matches(expected: str, actual: str) -> bool:
    expected, actual = normalise(expected), normalise(actual)
    if ELLIPSIS not in expected:
        return expected == actual
    parts = [re.escape(part) for part in expected.split(ELLIPSIS)]
    return re.fullmatch(".*".join(parts), actual) is not None


def matches(expected: tuple[str, ...] | list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is what ``expected`` describes (``…`` lines match any lines)."""
    if not expected:
        return not actual or actual == [""]
    head, rest = expected[0], expected[1:]
    if normalise(head) == ELLIPSIS:
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and _line_matches(head, actual[0]) and matches(rest, actual[1:])


def needs_torch(example: Example) -> bool:
    """Whether the command needs PyTorch: verify, the torch backend, or a target (a file of the
    repository) that imports torch."""
    argv = example.argv
    if "verify" in argv or "torch" in argv:
        return True
    for arg in argv[2:]:
        path = REPO / arg.partition(":")[0]
        if arg.partition(":")[0].endswith(".py") and path.is_file():
            return re.search(r"^\s*(import|from) torch", path.read_text("utf-8"), re.M) is not None
    return False


def update(example: Example, actual: list[str], code: int) -> None:
    """Write ``actual`` (and the exit code) under the example's command in its page."""
    text = example.page.read_text(encoding="utf-8")
    now = [e for e in examples(example.page, text) if e.command == example.command]
    at = next(e for e in now if e.expected == example.expected).line  # earlier updates moved it
    lines = text.split("\n")
    new = [example.indent + line for line in [*actual, *([f"[exit {code}]"] if code else [])]]
    lines[at : at + len(example.expected)] = new
    example.page.write_text("\n".join(lines), encoding="utf-8")
