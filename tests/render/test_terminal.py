"""Narrow and plain terminals: 60/80/200 columns, ASCII fallback, pipes, bare `attntrace`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.render.table import wrap_op
from attntrace.units import format_axes, format_shape
from paths import SRC

runner = CliRunner()
#: A variant with the longest ops and axis labels (RoPE, GQA, a batch).
VARIANT = (
    "--batch",
    "2",
    "--seq",
    "4",
    "--hidden",
    "16",
    "--heads",
    "8",
    "--kv-heads",
    "4",
    "--rope",
    "--causal",
)


def run_cli(*args: str, columns: int = 80) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    return result.exit_code, result.stdout


def header(out: str, title: str) -> list[str]:
    """The column names of the table titled ``title``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    return lines[start + 1].split()


def cli(
    *args: str, env: dict[str, str] | None = None, shell: str | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "80", **(env or {})}
    environ.pop("FORCE_COLOR", None)
    command: str | list[str] = (
        shell if shell is not None else [sys.executable, "-m", "attntrace", *args]
    )
    return subprocess.run(
        command,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        shell=shell is not None,
        executable="/bin/bash" if shell is not None else None,
    )


@pytest.mark.parametrize("columns", [40, 60, 80, 200])
def test_same_columns_at_every_width_and_no_line_too_wide(columns: int) -> None:
    """Below MIN_WIDTH (60) the tables are drawn 60 wide: the terminal wraps whole lines
    rather than the tables cutting names ("q_…") and shapes."""
    _, out = run_cli("run", *VARIANT, columns=columns)
    columns = max(columns, 60)
    assert header(out, "steps") == ["#", "step", "op", "shape", "axes", "dtype"]  # mask is bool
    assert header(out, "costs") == ["#", "step", "FLOPs", "formula", "bytes", "tiles"]
    assert header(out, "parameters") == ["name", "shape", "axes", "count", "bytes"]
    assert max(len(line) for line in out.splitlines()) <= columns
    assert not [line for line in out.splitlines() if line != line.rstrip()]  # no trailing spaces


@pytest.mark.slow
@pytest.mark.parametrize(
    ("columns", "config"),
    [
        (30, AttentionConfig(kv_heads=4, rope=True)),  # drawn 60 wide (MIN_WIDTH): nothing cut
        (60, AttentionConfig(kv_heads=4, rope=True)),
        (
            80,
            AttentionConfig(batch=2, seq=4, hidden=16, heads=8, kv_heads=4, rope=True, causal=True),
        ),
    ],
)
def test_names_shapes_and_axes_are_never_cut(columns: int, config: AttentionConfig) -> None:
    args = ["--batch", str(config.batch)] if config.batch else []
    args += [
        "--seq",
        str(config.seq),
        "--hidden",
        str(config.hidden),
        "--heads",
        str(config.heads),
        "--kv-heads",
        "4",
        "--rope",
    ]
    _, out = run_cli("run", *args, *(["--causal"] if config.causal else []), columns=columns)
    trace = trace_attention(config)
    rows = {
        line.split()[1]: line
        for line in out.split("steps (")[1].split("costs")[0].splitlines()
        if re.match(r"\s*\d+ +[a-z_]+\s", line)
    }
    for step in trace.steps:
        assert step.name in rows, step.name
        assert re.search(
            rf"{re.escape(format_shape(step.shape))} +{re.escape(format_axes(step.axes))}",
            rows[step.name],
        )
        assert rows[step.name].endswith("bool") == (step.dtype == "bool")
    chain = [
        line for line in out.split("\n\n")[0].splitlines() if line.startswith(("(", "→"))
    ]  # the flow line
    assert len(chain) >= 2
    for line in chain:
        assert re.fullmatch(r"(→ )?\(\d+(, \d+)*\)( → \(\d+(, \d+)*\))*( →)?", line), line


@given(
    st.lists(
        st.sampled_from(
            [
                "q_proj",
                "k.repeat_interleave(2, dim=0)",
                "+",
                "*",
                "rotate_half(q)",
                "w_q.T",
                "softmax(scaled, dim=-1)",
                "0.125",
                "sqrt(64)",
                "(S, h, d)",
            ]
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(8, 40),
)
def test_wrap_op_only_breaks_between_names(words: list[str], width: int) -> None:
    op = " ".join(words)
    lines = wrap_op(op, width).split("\n")
    assert "".join(lines).replace(" ", "") == op.replace(" ", "")  # nothing lost or added
    tokens = re.findall(r"[A-Za-z_][\w]*|\d+\.\d+|\d+", op)
    for token in tokens:  # every name and number whole on some line
        assert any(token in line for line in lines), (token, lines)
    assert all(line == line.strip() for line in lines)


@pytest.mark.slow
def test_ascii_stdout_falls_back_to_ascii() -> None:
    result = cli("run", "--kv-heads", "4", "--causal", env={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()
    assert "(3, 768) -> (3, 12, 64)" in result.stdout
    assert "(S, g.d)" in result.stdout
    assert "-----" in result.stdout
    assert result.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["run", "--help"], ["check", "--help"], ["run", "-f", "markdown", "--kv-heads", "4"]]
)
def test_dumb_terminal_with_ascii_encoding_gets_ascii(args: list[str]) -> None:
    result = cli(*args, env={"TERM": "dumb", "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()


@pytest.mark.slow
@pytest.mark.parametrize("lang", [["--lang", "zh"], []])
def test_dumb_terminal_with_utf8_keeps_chinese(lang: list[str]) -> None:
    """TERM=dumb means no cursor control, not no Unicode: Emacs' shell shows Chinese."""
    env = {"TERM": "dumb", "PYTHONIOENCODING": "utf-8", "LANG": "zh_CN.UTF-8"}
    result = cli("run", "--explain", *lang, env=env)
    assert result.returncode == 0, result.stderr
    assert "拼接多头" in result.stdout
    assert "(3, 768) → (3, 12, 64)" in result.stdout
    assert "?" not in result.stdout
    assert "\x1b[" not in result.stdout  # still no colour or cursor codes


@pytest.mark.slow
def test_piped_into_head_exits_0_quietly() -> None:
    run = f"{sys.executable} -m attntrace run --seq 200 --values --values-limit 100000"
    result = cli(shell=f"set -o pipefail; {run} | head -1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("attntrace  multi-head self-attention")
    assert result.stderr == ""


def test_bare_attntrace_prints_its_help_once() -> None:
    result = cli()
    assert result.returncode == 0
    assert result.stdout.count("Usage:") == 1
    assert "run" in result.stdout
    assert result.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("columns", [60, 80])
def test_help_wraps_within_the_width(columns: int) -> None:
    result = cli("run", "--help", env={"COLUMNS": str(columns)})
    assert result.returncode == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= columns
