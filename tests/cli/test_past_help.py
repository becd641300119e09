"""--past in --help: an integer N (metavar N) on run, report, check, verify, diff and trace;
sweep's takes a list (N,N,…) and still parses one."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from attntrace.cli import app


@pytest.mark.parametrize(
    ("command", "metavar"),
    [(c, "N") for c in ("run", "report", "check", "verify", "diff", "trace")]
    + [("sweep", "N,N,…")],
)
def test_past_metavar(command: str, metavar: str) -> None:
    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "160"})
    assert out.exit_code == 0
    line = next(line for line in out.output.splitlines() if line.startswith("│ --past"))
    assert re.search(rf"--past\s+{re.escape(metavar)}\s", line), line
    assert "TEXT" not in line
    assert "<str>" not in line


def test_sweep_past_list_still_parses() -> None:
    args = ["sweep", "--seq", "1", "--past", "16,64", "--backend", "shape", "-f", "json"]
    out = CliRunner().invoke(
        app, [*args, "--hidden", "32", "--heads", "4", "--algorithms", "eager"]
    )
    assert out.exit_code == 0, out.output
    assert out.output.count('"past"') >= 2
