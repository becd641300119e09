"""``check --trace``: a reference step name checks the step playing that role, ``var:NAME``
the user's variable; a golden of the user's code needs --trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app

pytest.importorskip("torch")
runner = CliRunner()

NANO = '''
import math, torch
from torch import nn

class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(64, 192), nn.Linear(64, 64)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.c_attn(x).split(H, dim=2)
        q = q.view(B, S, 4, 16).transpose(1, 2)
        k = k.view(B, S, 4, 16).transpose(1, 2)
        v = v.view(B, S, 4, 16).transpose(1, 2)
        y = ((q @ k.transpose(-2, -1)) / math.sqrt(16)).softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, S, H))
'''


def _check(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "nano.py").write_text(NANO)
    result = runner.invoke(app, ["check", "--trace", f"{tmp_path / 'nano.py'}:Attn", "--batch", "2",
                                 "--seq", "5", *args], env={"COLUMNS": "120"})
    return result.exit_code, result.stdout, result.stderr


def test_a_reference_name_checks_the_role_not_the_variable_of_that_name(tmp_path: Path) -> None:
    assert _check(tmp_path, "--expect", "q=B,h,S,d")[0] == 0  # the variable q is (B, S, H)
    assert _check(tmp_path, "--expect", "q=B,S,H")[0] == 1
    assert _check(tmp_path, "--expect", "var:q=B,S,H")[0] == 0  # the variable itself


def test_a_golden_of_the_users_code_without_trace_is_refused(tmp_path: Path) -> None:
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"schema": "attntrace.capture/1", "steps": [], "params": [],
                                  "config": {}, "notes": []}))
    result = runner.invoke(app, ["check", "--golden", str(golden)])
    assert result.exit_code == 2
    assert result.stderr == ("attntrace: error: this golden is a trace of your code "
                             "(attntrace.capture/1); add --trace TARGET\n")
