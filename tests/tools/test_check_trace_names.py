"""``check --trace``: a reference step name checks the step playing that role, ``var:NAME``
the user's variable; a golden of the user's code needs --trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app

# the sandbox child several times per test: seconds each
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

pytest.importorskip("torch")
runner = CliRunner()

NANO = """
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
"""


def _check(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "nano.py").write_text(NANO)
    result = runner.invoke(
        app,
        ["check", "--trace", f"{tmp_path / 'nano.py'}:Attn", "--batch", "2", "--seq", "5", *args],
        env={"COLUMNS": "120"},
    )
    return result.exit_code, result.stdout, result.stderr


def test_a_reference_name_checks_the_role_not_the_variable_of_that_name(tmp_path: Path) -> None:
    assert _check(tmp_path, "--expect", "q=B,h,S,d")[0] == 0  # the variable q is (B, S, H)
    assert _check(tmp_path, "--expect", "q=B,S,H")[0] == 1
    assert _check(tmp_path, "--expect", "var:q=B,S,H")[0] == 0  # the variable itself


def test_a_golden_of_the_users_code_without_trace_is_refused(tmp_path: Path) -> None:
    golden = tmp_path / "golden.json"
    golden.write_text(
        json.dumps(
            {"schema": "attntrace.capture/1", "steps": [], "params": [], "config": {}, "notes": []}
        )
    )
    result = runner.invoke(app, ["check", "--golden", str(golden)])
    assert result.exit_code == 2
    assert result.stderr == (
        "attntrace: error: this golden is a trace of your code "
        "(attntrace.capture/1); add --trace TARGET\n"
    )


def test_every_check_says_which_step_of_the_code_it_read(tmp_path: Path) -> None:
    code, out, _ = _check(tmp_path, "--expect", "q=B,h,S,d", "--expect", "var:q=B,S,H")
    assert code == 0
    assert "passed  expect q=B,h,S,d  q_2 (nano.py:13)" in out  # the role q: line 13
    assert "passed  expect var:q=B,S,H  q (nano.py:12)" in out  # the variable q: the split
    code, out, _ = _check(tmp_path, "--expect", "q=B,S,H")
    assert code == 1
    assert "q_2 (nano.py:13)" in out.split("failed checks")[1]  # the 'checked' column


def test_json_report_names_the_variable_and_its_line(tmp_path: Path) -> None:
    code, out, _ = _check(tmp_path, "--expect", "scores=B,h,S,d", "--format", "json")
    assert code == 1
    check = json.loads(out)["checks"][0]
    assert (check["step"], check["location"], check["status"]) == (
        "matmul_1",
        "nano.py:16",
        "failed",
    )
    assert check["message"].endswith("(checked matmul_1 at nano.py:16)")


def test_a_role_no_step_plays_fails_and_points_at_the_variable(tmp_path: Path) -> None:
    code, out, _ = _check(tmp_path, "--expect", "k_rep=B,h,S,d")
    assert code == 1
    assert "no step plays k_rep" in " ".join(out.split())


def test_an_unknown_name_is_one_line_listing_roles_and_variables(tmp_path: Path) -> None:
    code, _, err = _check(tmp_path, "--expect", "qq=B,S,H")
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("attntrace: error: unknown step 'qq'; give a reference step")
    assert "matmul_1" in err  # a variable of the code


def test_var_needs_trace() -> None:
    result = runner.invoke(app, ["check", "--expect", "var:q=h,S,d"])
    assert result.exit_code == 2
    assert "var: needs --trace" in result.stderr


def _run_golden(tmp_path: Path, *sizes: str) -> Path:
    result = runner.invoke(
        app, ["run", "--batch", "2", "--hidden", "64", "--heads", "4", *sizes, "--format", "json"]
    )
    assert result.exit_code == 0
    golden = tmp_path / "ref.json"
    golden.write_text(result.stdout)
    return golden


def test_a_reference_golden_is_compared_role_by_role(tmp_path: Path) -> None:
    golden = _run_golden(tmp_path, "--seq", "5")
    code, out, _ = _check(tmp_path, "--golden", str(golden))
    assert code == 0, out
    assert "ok: 18 passed, 0 failed" in out  # the 18 reference steps, no parameters
    golden = _run_golden(tmp_path, "--seq", "7")
    code, out, _ = _check(tmp_path, "--golden", str(golden), "-v")
    assert code == 1
    assert "note: the golden was made with seq=7 (your code S=5)" in out
    row = next(line for line in out.splitlines() if line.startswith("step scores shape"))
    assert row.split()[3:] == [
        "(2,",
        "4,",
        "7,",
        "7)",
        "(2,",
        "4,",
        "5,",
        "5)",
        "(B,",
        "h,",
        "S,",
        "S)",
        "matmul_1",
        "(nano.py:16)",
    ]


def test_a_reference_golden_with_steps_the_code_lacks_notes_them(tmp_path: Path) -> None:
    golden = _run_golden(tmp_path, "--seq", "5", "--kv-heads", "2")
    code, out, _ = _check(tmp_path, "--golden", str(golden))
    assert code == 1  # 2 kv-heads in the golden, 4 in the code
    assert "not compared, no step of your code plays them: k_rep, v_rep" in out
    row = next(line for line in out.splitlines() if line.startswith("step k_proj shape"))
    assert "(2, 5, 32)" in row


def test_a_spec_refuses_a_golden_of_the_users_code(tmp_path: Path) -> None:
    (tmp_path / "mine.json").write_text(
        json.dumps(
            {"schema": "attntrace.capture/1", "steps": [], "params": [], "config": {}, "notes": []}
        )
    )
    (tmp_path / "s.toml").write_text('[config.a]\ngolden = "mine.json"\n')
    result = runner.invoke(app, ["check", "--spec", str(tmp_path / "s.toml")])
    assert result.exit_code == 2
    assert "is a trace of your code; a spec's golden is saved by: attntrace run" in result.stderr
