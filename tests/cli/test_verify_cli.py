"""``attntrace verify`` on the command line: its --dtype help, its JSON document (strict JSON even
for a failure), its one-line refusal of bfloat16, and a pass for every variant option."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.cli.commands.cmd_verify import verify_document
from attntrace.config.attention_config import AttentionConfig
from attntrace.tools.verify import Comparison, Tolerance, VerifyReport

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def invoke(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args])


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


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("--window", 2, "--causal"),
        ("--window", 2, "--causal", "--algorithm", "flash", "--block-size", 2),
        ("--softcap", 0.5, "--causal", "--batch", 2, "--key-lengths", "5,3"),
        ("--softcap", 0.5, "--causal", "--window", 3, "--algorithm", "flash", "--block-size", 2),
        ("--relative-bias", "8,16", "--scale", "none", "--algorithm", "flash", "--block-size", 2),
        ("--softcap", 2, "--relative-bias", "8,16", "--causal"),  # capped, then bias, then mask
        ("--softcap", 2, "--relative-bias", "8,16", "--algorithm", "flash", "--block-size", 2),
        ("--qk-norm", "head", "--rope"),
        ("--qk-norm", "full", "--kv-heads", 1),
        ("--rope", "--rotary-dims", 2),
        ("--rope", "--rope-scaling", "linear:factor=2"),
        ("--rope", "--rope-scaling", "dynamic:factor=2,max_position_embeddings=2"),
        (
            "--rope",
            "--rope-scaling",
            "yarn:factor=4,original_max_position_embeddings=2",
            "--kv-heads",
            1,
        ),
        ("--rope", "--rope-scaling", "llama3:factor=8,original_max_position_embeddings=4"),
    ],
    ids=lambda a: " ".join(map(str, a)),
)
def test_verify_passes_for_every_variant(args: tuple[object, ...]) -> None:
    pytest.importorskip("torch")
    result = invoke("verify", "--hidden", 8, "--heads", 2, "--seq", 5, *args)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout
