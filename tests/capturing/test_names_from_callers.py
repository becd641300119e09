"""Names and roles of the study notes' own code (issue 31): a helper's returned variable takes
the name its caller assigns (``Q = split_heads(Q, …)`` gives ``Q``, not ``output``), and the
numpy note's ``Query`` (a matrix given as the query itself) is not the input x."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from paths import REPO

pytestmark = pytest.mark.slow  # real processes or seconds per test

EXAMPLES = REPO / "examples"


def _steps(script: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(app, ["trace", str(EXAMPLES / script), "--format", "json"])
    assert result.exit_code == 0, result.output
    steps: list[dict[str, object]] = json.loads(result.stdout)["steps"]
    return steps


def test_the_torch_notes_q_k_v_are_named_after_the_callers_variables() -> None:
    pytest.importorskip("torch")
    roles = {s["role"]: s["name"] for s in _steps("seed_000_torch.py") if s["role"]}
    assert roles["q_proj"] == "Q"
    assert (roles["q"], roles["k"], roles["v"]) == ("Q_2", "K_2", "V_2")  # Q reassigned
    names = [s["name"] for s in _steps("seed_000_torch.py")]
    assert "output" not in names
    assert "output_2" not in names


def test_a_helper_called_without_an_assignment_keeps_its_own_name(tmp_path: object) -> None:
    from pathlib import Path

    script = Path(str(tmp_path)) / "helper.py"
    script.write_text(
        "import numpy as np\n"
        "def split(t):\n"
        "    out = t.reshape(3, 2, 4)\n"
        "    return out\n"
        "x = np.ones((3, 8))\n"
        "heads = split(x)\n"
        "print(split(x).shape)\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["trace", str(script), "--format", "json"])
    assert result.exit_code == 0, result.output
    names = [s["name"] for s in json.loads(result.stdout)["steps"]]
    assert "heads" in names  # assigned by the caller
    assert "out" in names  # the call inside print() assigns nothing: the helper's name stays


def test_the_numpy_notes_query_is_not_the_input_x() -> None:
    steps = _steps("seed_001_numpy.py")
    query = next(s for s in steps if s["name"] == "Query")
    assert query["role"] != "x"
    scores = next(s for s in steps if s["name"] == "scores")
    assert scores["role"] == "scores"
