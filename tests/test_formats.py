"""`run --format json|csv|markdown|table`: documents for scripts, validated and parsed back."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, Trace, trace_attention
from attntrace.cli import app
from attntrace.render.csv_out import CSV_COLUMNS
from attntrace.render.markdown import render_markdown
from attntrace.schemas import TRACE_SCHEMA_FILE, trace_schema

SRC = Path(__file__).resolve().parents[1] / "src"
ANSI = re.compile(r"\x1b\[")
runner = CliRunner()

CONFIGS = [
    AttentionConfig(seq=3, hidden=768, heads=12),
    AttentionConfig(batch=2, seq=5, hidden=16, heads=4),
    AttentionConfig(batch=1, seq=1, hidden=1, heads=1),
    AttentionConfig(seq=7, hidden=12, heads=3, dtype="float64", seed=4),
    AttentionConfig(seq=4, hidden=8, heads=2, dtype="float16"),
]


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


def validate(doc: Any) -> None:
    jsonschema.Draft202012Validator(trace_schema(), format_checker=jsonschema.FormatChecker()).validate(doc)


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_in_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(trace_schema())
    assert (SRC / "attntrace" / "schemas" / TRACE_SCHEMA_FILE).is_file()
    assert trace_schema()["properties"]["schema"]["const"] == "attntrace.trace/1"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"B{c.batch}-S{c.seq}-H{c.hidden}-h{c.heads}-{c.dtype}")
@pytest.mark.parametrize("backend", ["numpy", "shape"])
def test_to_dict_of_many_configs_validates_against_the_schema(config: AttentionConfig, backend: str) -> None:
    doc = trace_attention(config, backend).to_dict()
    validate(doc)
    assert json.loads(json.dumps(doc)) == doc  # plain JSON types only
    assert doc["config"]["backend"] == backend
    assert doc["config"]["axis_sizes"] == config.axis_sizes()


def test_json_steps_and_params_mirror_the_trace() -> None:
    trace = trace_attention(AttentionConfig(batch=2, seq=3, hidden=8, heads=2), "numpy")
    doc = trace.to_dict()
    assert [s["name"] for s in doc["steps"]] == list(trace.names)
    assert [s["index"] for s in doc["steps"]] == list(range(len(trace)))
    scores = doc["steps"][trace.names.index("scores")]
    assert scores == {"index": 11, "name": "scores", "op": "q @ k_t", "shape": [2, 2, 3, 3],
                      "axes": ["B", "h", "S", "S"], "dtype": "float32", "bytes": 2 * 2 * 3 * 3 * 4, "view": False}
    assert doc["params"][0] == {"name": "w_q", "shape": [8, 8], "axes": ["H", "H"], "dtype": "float32",
                                "count": 64, "bytes": 256}
    for step in doc["steps"]:  # axes spell the shape
        assert [doc["config"]["axis_sizes"][a] for a in step["axes"]] == step["shape"]


def test_json_totals_equal_the_sums_of_the_rows() -> None:
    doc = trace_attention(AttentionConfig(batch=3, seq=4, hidden=16, heads=4), "shape").to_dict()
    totals = doc["totals"]
    assert totals["steps"] == len(doc["steps"]) == 18
    assert totals["step_bytes"] == sum(s["bytes"] for s in doc["steps"] if not s["view"])
    assert totals["param_count"] == sum(p["count"] for p in doc["params"]) == 4 * 16 * 16 + 4 * 16
    assert totals["param_bytes"] == sum(p["bytes"] for p in doc["params"])


def test_run_format_json_prints_only_the_document() -> None:
    code, out, err = run_cli("run", "--format", "json", "--heads", "12", "--hidden", "768")
    assert code == 0, err
    assert err == ""
    doc = json.loads(out)  # fails on any banner or colour
    validate(doc)
    assert doc == trace_attention(AttentionConfig(seq=3, hidden=768, heads=12)).to_dict()
    # the README's: jq '.steps[] | select(.name=="scores") | .shape'
    assert [s["shape"] for s in doc["steps"] if s["name"] == "scores"] == [[12, 3, 3]]


def test_json_is_the_same_on_every_backend_but_the_backend_name(compute_backend: str) -> None:
    config = AttentionConfig(batch=2, seq=3, hidden=8, heads=2)
    doc = trace_attention(config, compute_backend).to_dict()
    shapes_only = trace_attention(config, "shape").to_dict()
    validate(doc)
    assert doc["config"].pop("backend") == compute_backend
    shapes_only["config"].pop("backend")
    assert doc == shapes_only


def test_csv_parses_with_the_csv_module() -> None:
    code, out, err = run_cli("run", "--format", "csv", "--batch", "2", "--seq", "3", "--hidden", "768", "--heads", "12")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 18
    by_name = {r["name"]: r for r in rows}
    assert by_name["scores"]["shape"] == "2x12x3x3"
    assert by_name["scores"]["axes"] == "B h S S"
    assert by_name["q_proj"]["op"] == "x @ w_q.T + b_q"
    assert by_name["k_t"]["view"] == "true"
    assert int(by_name["scores"]["bytes"]) == 2 * 12 * 3 * 3 * 4
    assert [int(r["index"]) for r in rows] == list(range(18))


def _cells(line: str) -> list[str]:
    assert re.fullmatch(r"\| .* \|", line), line
    return re.split(r"(?<!\\)\|", line[1:-1])


def test_markdown_is_well_formed_pipe_tables() -> None:
    code, out, err = run_cli("run", "--format", "markdown", "--batch", "2", "--seq", "3", "--hidden", "8", "--heads", "2")
    assert code == 0, err
    blocks = [b.splitlines() for b in out.strip().split("\n\n")]
    assert blocks[0][0].startswith("**attntrace**")
    tables = blocks[1:]
    assert len(tables) == 2
    for table in tables:
        width = len(_cells(table[0]))
        assert all(re.fullmatch(r"\s*-{3,}:?\s*", c) for c in _cells(table[1])), table[1]
        assert all(len(_cells(line)) == width for line in table), "rows with a different number of cells"
    steps, params = tables
    assert len(steps) == 2 + 18
    assert "| 11 | scores | `q @ k_t` | (2, 2, 3, 3) | (B, h, S, S) | float32 | 144 B |" in steps
    assert params[-1].startswith("| **total** |")


def test_markdown_matches_golden(golden: Callable[[str], None]) -> None:
    golden(render_markdown(trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")))


def test_markdown_escapes_pipes_in_cells() -> None:
    trace = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2), "shape")
    step = trace.steps[0]
    piped = Trace(trace.config, trace.backend, (type(step)(step.name, step.shape, step.dtype, op="a | b"),), ())
    assert "`a \\| b`" in render_markdown(piped)


def test_values_only_with_the_table() -> None:
    code, out, err = run_cli("run", "--format", "json", "--values")
    assert code == 2
    assert out == ""
    assert "--values only works with --format table" in err


def _run_process(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    return subprocess.run([sys.executable, "-m", "attntrace", *args], capture_output=True, text=True, check=False,
                          env={**clean, "PYTHONPATH": str(SRC), **env}, timeout=120)


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_piped_output_has_no_escape_codes(fmt: str) -> None:
    done = _run_process("run", "--format", fmt, "--seq", "4", "--hidden", "8", "--heads", "2")
    assert done.returncode == 0, done.stderr
    assert "scores" in done.stdout
    assert not ANSI.search(done.stdout)


COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-7]|38;|4[0-7]|48;)[0-9;]*m")


@pytest.mark.parametrize("how", [("--no-color",), ()], ids=["--no-color", "NO_COLOR"])
def test_no_color_and_NO_COLOR_turn_colours_off_on_a_terminal(how: tuple[str, ...]) -> None:
    env = {"FORCE_COLOR": "1", **({} if how else {"NO_COLOR": "1"})}
    forced = _run_process("run", "--seq", "4", "--hidden", "8", "--heads", "2", FORCE_COLOR="1")
    assert COLOUR.search(forced.stdout), "FORCE_COLOR should give colours (the test would prove nothing)"
    plain = _run_process("run", "--seq", "4", "--hidden", "8", "--heads", "2", *how, **env)
    assert plain.returncode == 0, plain.stderr
    assert not COLOUR.search(plain.stdout)


def test_the_documented_example_document_validates_and_matches_a_real_trace() -> None:
    text = (SRC.parent / "docs" / "scripting.md").read_text(encoding="utf-8")
    example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    validate(example)
    real = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "numpy").to_dict()
    assert example["config"] == real["config"]
    assert example["totals"] == real["totals"]
    assert example["steps"][0] == real["steps"][11]
    assert example["params"][0] == real["params"][0]
