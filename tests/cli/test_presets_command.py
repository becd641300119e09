"""``attntrace presets``: the table lists every preset with its repository and θ; the JSON
document gives each preset's sizes, KV-cache bytes and whole-model figures."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from attntrace.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_presets_command_lists_every_preset() -> None:
    result = runner.invoke(app, ["presets"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for name in (
        "bert-base",
        "gpt2-xl",
        "t5-base",
        "llama-3-70b",
        "mistral-7b",
        "qwen2-7b",
        "gemma-7b",
    ):
        assert name in result.stdout
    assert "500000" in result.stdout
    assert "meta-llama/Meta-Llama-3-70B" in result.stdout


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
