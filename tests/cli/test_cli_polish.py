"""Small consistencies between commands: verify's own --dtype help, --format/-f on sweep, verify
and presets, and the JSON documents of verify and presets."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.cli.commands.cmd_verify import verify_document
from attntrace.config.attention_config import AttentionConfig
from attntrace.tools.verify import Comparison, Tolerance, VerifyReport

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_verify_dtype_help_names_no_backend_and_says_bfloat16_is_refused() -> None:
    result = runner.invoke(app, ["verify", "--help"], env=WIDE)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    at = next(i for i, x in enumerate(lines) if x.lstrip("│ ").startswith("--dtype"))
    line = " ".join(" ".join(x.strip("│ ").split()) for x in lines[at : at + 2])  # it wraps once
    assert "--backend" not in line  # verify has none
    assert "has no bfloat16" in line
    assert (
        "bfloat16 needs --backend torch" in runner.invoke(app, ["run", "--help"], env=WIDE).output
    )  # run keeps its own


@pytest.mark.parametrize("command", ["sweep", "verify", "presets"])
def test_format_has_the_short_flag(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env=WIDE)
    assert result.exit_code == 0
    assert any("--format" in x and " -f " in x for x in result.output.splitlines())


def test_presets_json_lists_every_preset_with_its_sizes() -> None:
    result = runner.invoke(app, ["presets", "-f", "json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["schema"] == "attntrace.presets/1"
    by_name = {p["name"]: p for p in doc["presets"]}
    llama = by_name["llama-3.1-8b"]
    assert (llama["heads"], llama["kv_heads"], llama["hidden"], llama["head_dim"]) == (
        32,
        8,
        4096,
        128,
    )
    assert llama["kv_cache_bytes_per_token"] == 2 * 8 * 128 * 2  # k and v, g·d, float16
    assert llama["whole_model"]["layers"] == 32
    assert by_name["bert-base"]["whole_model"] is None  # no layer count known
    table = runner.invoke(app, ["presets"], env=WIDE).output
    assert all(name in table for name in by_name)  # the same presets as the table


def test_verify_json_document() -> None:
    pytest.importorskip("torch")
    result = runner.invoke(
        app,
        ["verify", "--seq", "3", "--hidden", "16", "--heads", "2", "--causal", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "attntrace.verify/1"
    assert (doc["ok"], doc["failed"], doc["config"]["causal"]) == (True, 0, True)
    assert doc["compared"] == len(doc["steps"]) + len(doc["references"])
    names = [c["name"] for c in doc["steps"]]
    assert names[0] == "x"
    assert "masked" in names
    assert {c["right"] for c in doc["references"]} == {"nn.MultiheadAttention", "SDPA"}
    assert all(c["ok"] and c["max_abs"] < doc["tolerance"]["atol"] * 10 for c in doc["steps"])


def test_verify_json_of_a_failure_is_valid_json() -> None:
    bad = Comparison("scores", "numpy", "torch", (2, 3, 3), math.inf, math.nan, False)
    skipped = Comparison("weights", "numpy", "SDPA", (2, 3, 3), 0.0, 0.0, True, skipped="n/a")
    doc = verify_document(
        VerifyReport(AttentionConfig(), Tolerance(1e-4, 1e-5), (bad,), (skipped,))
    )
    assert (doc["ok"], doc["failed"], doc["compared"]) == (False, 1, 1)
    assert (doc["steps"][0]["max_abs"], doc["steps"][0]["max_rel"]) == (None, None)
    assert doc["references"][0]["skipped"] == "n/a"
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc  # strict JSON: no NaN, Infinity


def test_verify_bfloat16_is_one_line_even_with_json() -> None:
    result = runner.invoke(app, ["verify", "--dtype", "bfloat16", "-f", "json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "attntrace: error: verify compares with numpy, which has no "
        "bfloat16; use --dtype float16, float32, float64\n"
    )
