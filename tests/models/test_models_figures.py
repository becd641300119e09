"""Whole-model figures: ``run --layers L`` (or the layer count of --model, --hf-config or a
preset) shows the attention of L layers like the traced one: parameters, the KV cache of every
layer at the given batch and sequence in the run's dtype, and the FLOPs of one forward. The
presets' figures come from the same function (one code path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.config.presets import PRESETS


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def run_json(*args: object) -> dict[str, Any]:
    result = invoke("run", "-f", "json", *args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_layers_multiplies_one_layer_and_counts_every_cached_key() -> None:
    doc = run_json(
        "--hidden",
        64,
        "--heads",
        4,
        "--kv-heads",
        2,
        "--batch",
        3,
        "--seq",
        5,
        "--dtype",
        "float64",
        "--layers",
        7,
        "--backend",
        "shape",
    )
    totals, whole = doc["totals"], doc["whole_model"]
    assert whole == {
        "layers": 7,
        "batch": 3,
        "keys": 5,
        "dtype": "float64",
        "params": 7 * totals["param_count"],
        "kv_cache_bytes": 7 * 3 * 5 * 2 * 2 * 16 * 8,  # L·B·N·2·g·d·8 B
        "flops": 7 * totals["flops"],
        "macs": 7 * totals["flops"] / 2,
    }
    assert totals["param_count"] == 2 * 64 * 64 + 2 * 32 * 64 + 64 + 2 * 32 + 64
    assert "whole_model" not in run_json("--hidden", 8, "--heads", 2)  # additive: off by default


def test_whole_model_document_follows_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from importlib.resources import files

    schema = json.loads(files("attntrace.schemas").joinpath("trace-1.schema.json").read_text())
    doc = run_json("--preset", "llama-3.1-8b", "--seq", 4, "--backend", "shape")
    jsonschema.validate(doc, schema)
    assert doc["whole_model"]["layers"] == 32  # the preset's layer count, without --layers


def test_preset_figures_are_the_run_figures() -> None:
    """One code path: Preset.model_figures traces one layer on the shape backend and multiplies
    it as run --layers does."""
    figures = PRESETS["qwen2.5-7b"].model_figures(seq=10, batch=2, dtype="float32")
    assert figures is not None
    doc = run_json("--preset", "qwen2.5-7b", "--seq", 10, "--batch", 2, "--backend", "shape")
    assert doc["whole_model"] == figures.to_dict()
    assert doc["whole_model"] == {
        **{k: v for k, v in figures.__dict__.items() if v is not None},  # --backward's: None
        "macs": figures.flops / 2,
    }
    assert figures.kv_cache_bytes == 28 * 2 * 10 * 2 * 4 * 128 * 4
    assert (
        run_json(
            "--preset", "qwen2.5-7b", "--seq", 10, "--batch", 2, "--backend", "shape", "--layers", 1
        )["whole_model"]["flops"]
        == figures.flops // 28
    )


@pytest.mark.slow
def test_hf_config_and_model_folder_give_their_layer_count(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 16,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 6,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    doc = run_json("--hf-config", tmp_path / "config.json", "--backend", "shape", "--seq", 4)
    assert doc["whole_model"]["layers"] == 6
    assert doc["whole_model"]["kv_cache_bytes"] == 6 * 4 * 2 * 2 * 4 * 4
    assert (
        run_json("--hf-config", tmp_path / "config.json", "--backend", "shape", "--layers", 2)[
            "whole_model"
        ]["layers"]
        == 2
    )  # typed over the config
    pytest.importorskip("transformers")
    from hf_models import build

    build(
        "Llama",
        tmp_path / "m",
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    doc = run_json("--model", tmp_path / "m", "--layer", 2, "--seq", 4)
    assert doc["whole_model"]["layers"] == 3
    assert doc["whole_model"]["params"] == 3 * (2 * 16 * 16 + 2 * 8 * 16)


def test_table_and_markdown_show_the_figures_and_bad_layers_is_one_line() -> None:
    result = invoke("run", "--hidden", 8, "--heads", 2, "--layers", 12, "--no-color")
    assert result.exit_code == 0, result.output
    assert "whole model: L=12 layers like this one, B=1, S=3" in result.stdout
    assert "KV cache (float32)" in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 80
    result = invoke(
        "run", "--hidden", 8, "--heads", 2, "--layers", 12, "-f", "markdown", "--count", "macs"
    )
    assert result.stdout.splitlines()[-1].startswith("whole model, L=12 layers at B=1, S=3: ")
    assert result.stdout.rstrip().endswith("MACs per forward")
    result = invoke("run", "--layers", 0)
    assert result.exit_code == 2
    assert result.stderr == (
        "attntrace: error: --layers must be a whole number >= 1 (the model's layers), got 0\n"
    )


@pytest.mark.slow
def test_sweep_layers_adds_the_whole_model_to_every_point() -> None:
    """sweep --layers L (or a preset's layer count): JSON whole_model per point, three CSV
    columns after the point's own, two table columns; without it the output is unchanged."""
    result = invoke(
        "sweep", "--seq", "16,32", "--hidden", 64, "--heads", 4, "--layers", 3, "--format", "json"
    )
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)
    for p in points:
        assert p["whole_model"]["flops"] == 3 * p["flops"]
        assert p["whole_model"]["kv_cache_bytes"] == 3 * p["seq"] * p["kv_cache_bytes_per_token"]
    plain = invoke("sweep", "--seq", 16, "--hidden", 64, "--heads", 4, "--format", "csv")
    assert plain.stdout.splitlines()[0].endswith(",kv_cache_bytes_per_token")
    result = invoke(
        "sweep", "--seq", 16, "--hidden", 64, "--heads", 4, "--layers", 3, "--format", "csv"
    )
    header, row = result.stdout.splitlines()[:2]
    assert header == plain.stdout.splitlines()[0] + ",model_layers,model_kv_cache_bytes,model_flops"
    assert row.startswith(plain.stdout.splitlines()[1] + ",3,")
    result = invoke("sweep", "--seq", 128, "--preset", "llama-3.2-1b")
    assert result.exit_code == 0, result.output
    assert "KV x16" in result.stdout
    assert invoke("sweep", "--layers", -1).exit_code == 2
