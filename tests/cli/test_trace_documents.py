"""``attntrace trace``'s documents: JSON valid against the shipped ``attntrace.capture/2``
schema (with the failure of a shape error), CSV with empty cells for what a capture does not
know and a role column, and help that names the schema the output has."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.capturing.record import CAPTURE_SCHEMA_ID
from attntrace.cli import app
from attntrace.render.csv_out import CSV_COLUMNS
from attntrace.schemas import CAPTURE_SCHEMA_FILE, capture_schema
from paths import DATA, REPO, SRC

runner = CliRunner()

#: The QA's buggy.py: K transposed along (S, h) instead of its last two axes.
BUGGY = """\
import torch.nn as nn

class Attention(nn.Module):
    def __init__(self, hidden=64, num_heads=4):
        super().__init__()
        self.h = num_heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        B, S, H = x.shape
        h = self.h; d = H // h
        q = self.q_proj(x).view(B, S, h, d).transpose(1, 2)
        k = self.k_proj(x).view(B, S, h, d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, h, d).transpose(1, 2)
        scores = q @ k.transpose(1, 2) / d ** 0.5
        w = scores.softmax(-1)
        return self.o_proj((w @ v).transpose(1, 2).reshape(B, S, H))
"""


def _validate(doc: object) -> None:
    jsonschema.Draft202012Validator(capture_schema()).validate(doc)


def _trace(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["trace", *args], env={"COLUMNS": "160"})
    return result.exit_code, result.stdout, result.stderr


def test_the_capture_schema_is_a_valid_schema_shipped_in_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(capture_schema())
    assert (SRC / "attntrace" / "schemas" / CAPTURE_SCHEMA_FILE).is_file()
    assert capture_schema()["properties"]["schema"]["const"] == CAPTURE_SCHEMA_ID


@pytest.mark.slow
@pytest.mark.parametrize("script", ["seed_001_numpy.py", "seed_000_torch.py"])
def test_json_of_the_examples_validates_with_no_failure(script: str) -> None:
    if "torch" in script:
        pytest.importorskip("torch")
    code, out, _ = _trace(str(REPO / "examples" / script), "-f", "json")
    assert code == 0
    doc = json.loads(out)
    _validate(doc)
    assert doc["schema"] == "attntrace.capture/2"
    assert doc["failure"] is None
    assert doc["steps"]


@pytest.mark.slow
def test_json_of_a_shape_error_carries_the_failure(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "buggy.py").write_text(BUGGY)
    code, out, _ = _trace(
        f"{tmp_path / 'buggy.py'}:Attention", "--batch", "2", "--seq", "5", "-f", "json"
    )
    assert code == 1
    doc = json.loads(out)
    _validate(doc)
    failure = doc["failure"]
    assert failure["location"] == "buggy.py:18"
    assert failure["source"] == "q @ k.transpose(1, 2)"
    assert failure["op"] == "matmul"
    assert failure["shape_error"] is True
    assert failure["operands"] == [
        {"name": "q", "shape": [2, 4, 5, 16], "axes": ["B", "h", "S", "d"]},
        {"name": "transpose_1", "shape": [2, 5, 4, 16], "axes": ["B", "S", "h", "d"]},
    ]
    assert "16 ≠ 4" in failure["rule"]
    assert "transpose(-2, -1)" in failure["fix"]
    assert failure["error"]["type"] == "RuntimeError"
    assert "must match" in failure["error"]["message"]


def test_json_of_a_numpy_script_that_breaks_carries_the_failure() -> None:
    code, out, _ = _trace(str(DATA / "broken" / "n01_k_not_transposed.py"), "-f", "json")
    assert code == 1
    doc = json.loads(out)
    _validate(doc)
    assert doc["failure"]["location"] == "n01_k_not_transposed.py:7"
    assert [o["axes"] for o in doc["failure"]["operands"]] == [["h", "S", "d"]] * 2
    assert "K is not transposed" in doc["failure"]["fix"]
    assert doc["failure"]["error"]["type"] == "ValueError"


def test_json_of_an_error_outside_an_op_names_the_users_line(tmp_path: Path) -> None:
    script = tmp_path / "oops.py"
    script.write_text("import numpy as np\nx = np.ones((2, 3))\nraise KeyError('heads')\n")
    code, out, _ = _trace(str(script), "-f", "json")
    assert code == 1
    doc = json.loads(out)
    _validate(doc)
    assert doc["failure"]["location"] == "oops.py:3"
    assert doc["failure"]["op"] is None
    assert doc["failure"]["shape_error"] is False
    assert doc["failure"]["rule"] is None
    assert doc["failure"]["error"] == {"type": "KeyError", "message": "'heads'"}


@pytest.mark.slow
def test_csv_leaves_unknown_cells_empty_and_adds_the_role(tmp_path: Path) -> None:
    code, out, _ = _trace(str(REPO / "examples" / "seed_001_numpy.py"), "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == (*CSV_COLUMNS, "role")
    assert all(r["view"] == r["flops"] == r["formula"] == r["nonfinite"] == "" for r in rows)
    assert {r["role"] for r in rows} >= {"scores", "context_heads", "merged"}
    assert "x" not in {r["role"] for r in rows}  # the note's Query is the query, not x (issue 31)
    assert rows[-1]["shape"] == "3x768"
    assert int(rows[-1]["bytes"]) == 3 * 768 * 8


def test_trace_help_names_the_schema_the_json_has() -> None:
    result = runner.invoke(app, ["trace", "--help"], env={"COLUMNS": "200"})
    assert "attntrace.capture/2" in result.stdout
    assert "attntrace.trace/1" not in result.stdout
    assert "svg" not in result.stdout


def test_trace_refuses_picture_formats_it_cannot_write() -> None:
    code, out, _ = _trace(str(REPO / "examples" / "seed_001_numpy.py"), "-f", "svg")
    assert code == 2
    assert out == ""
