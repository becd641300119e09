"""Where a layer's settings come from, each checked against transformers itself: θ and scaling kept
in transformers 5's rope_parameters, --weights with --hf-config / --preset, sizes from the files
before validation, a Llama layer from weights alone (rope and causal must be said), and sliding
windows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.config.presets import read_hf_config
from attntrace.errors import ConfigError
from hf_models import build, capture

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY = {
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def run_layer(folder: Path, x: np.ndarray, *args: object) -> dict[str, np.ndarray]:
    """attntrace run on the folder's weights and config with x, every tensor saved."""
    np.save(folder / "x.npy", x.astype(np.float32))
    result = invoke(
        "run",
        "--weights",
        folder / "model.safetensors",
        "--hf-config",
        folder / "config.json",
        "--input",
        folder / "x.npy",
        "--save",
        folder / "o.npz",
        *args,
    )
    assert result.exit_code == 0, result.output
    with np.load(folder / "o.npz", allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def write_config(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_theta_is_read_from_transformers_5_rope_parameters(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    }
    assert read_hf_config(write_config(tmp_path, cfg))["rope_base"] == 500000.0
    cfg["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    cfg |= {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}
    path = write_config(tmp_path, cfg)
    assert read_hf_config(path, layer=1)["rope_base"] == 1e6
    assert read_hf_config(path, layer=0)["rope_base"] == 1e4
    assert read_hf_config(path, layer=0)["window"] == 8
    with pytest.raises(ConfigError, match="its layers differ"):
        read_hf_config(path)


def test_theta_of_a_saved_transformers_5_llama_gives_its_forward(tmp_path: Path) -> None:
    model = build(
        "Llama", tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 50.0}, **TINY
    )
    assert "rope_theta" not in json.loads(
        (tmp_path / "config.json").read_text()
    )  # only in rope_parameters
    got = capture(model, model.model.layers[1].self_attn, np.array([[3, 1, 4, 1, 5, 9]]))
    out = run_layer(tmp_path, got.x, "--layer-prefix", "model.layers.1.self_attn.")
    np.testing.assert_allclose(out["output"], got.output, atol=1e-5)
    np.testing.assert_allclose(out["weights"], got.weights, atol=1e-5)


def test_rope_scaling_in_rope_parameters_is_read_or_refused_never_ignored(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
    }
    assert read_hf_config(write_config(tmp_path, cfg))["rope_scaling"] == "linear:factor=4.0"
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e4, "factor": 4.0}
    result = invoke("run", "--hf-config", write_config(tmp_path, cfg))
    assert result.exit_code == 2
    assert "rope scaling 'longrope' is not modelled" in result.stderr


def test_weights_with_hf_config_take_its_heads_and_variants(tmp_path: Path) -> None:
    """No --heads, no --rope, no --causal: the config says them all (28 heads of d = 2)."""
    sizes = {**TINY, "hidden_size": 56, "num_attention_heads": 28, "num_key_value_heads": 4}
    model = build("Qwen2", tmp_path, **sizes)
    got = capture(
        model, model.model.layers[0].self_attn, np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])
    )
    out = run_layer(tmp_path, got.x, "--layer-prefix", "model.layers.0.self_attn.")
    np.testing.assert_allclose(out["output"], got.output, atol=1e-5)
    assert out["k"].shape == (2, 4, 5, 2)


def test_hidden_comes_from_the_weights_before_the_default_is_checked(tmp_path: Path) -> None:
    """--heads 28 with the default --hidden 768 would not divide; the weights' 56 does."""
    build(
        "Qwen2",
        tmp_path,
        **{**TINY, "hidden_size": 56, "num_attention_heads": 28, "num_key_value_heads": 4},
    )
    result = invoke(
        "run",
        "--weights",
        tmp_path / "model.safetensors",
        "--heads",
        28,
        "--no-rope",
        "--causal",
        "--layer-prefix",
        "model.layers.0.self_attn.",
        "--backend",
        "shape",
    )
    assert result.exit_code == 0, result.output
    assert "H=56  h=28  g=4  d=2" in result.stdout


def test_input_with_batch_and_key_lengths_needs_no_batch_option(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((2, 5, 8), np.float32))
    result = invoke("run", "--input", tmp_path / "x.npy", "--heads", 2, "--key-lengths", "5,3")
    assert result.exit_code == 0, result.output
    assert "key_lengths" in result.stdout


def test_llama_layer_from_weights_alone_must_say_rope_and_causal(tmp_path: Path) -> None:
    build("Llama", tmp_path, **TINY)
    args = (
        "run",
        "--weights",
        tmp_path / "model.safetensors",
        "--layer-prefix",
        "model.layers.0.self_attn.",
        "--heads",
        4,
    )
    result = invoke(*args)
    assert result.exit_code == 2
    assert "Llama-family layer" in result.stderr
    assert "--rope/--no-rope and --causal/--no-causal" in result.stderr
    assert invoke(*args, "--rope", "--causal").exit_code == 0


def test_preset_heads_apply_to_weights_and_disagreement_is_an_error(tmp_path: Path) -> None:
    build("Llama", tmp_path, **TINY)
    result = invoke(
        "run",
        "--weights",
        tmp_path / "model.safetensors",
        "--layer-prefix",
        "model.layers.0.self_attn.",
        "--preset",
        "llama-3-8b",
    )
    assert result.exit_code == 2
    assert "--preset llama-3-8b gives hidden 4096, but the weights" in result.stderr


@pytest.mark.parametrize("window", [2, 3])
def test_sliding_window_shorter_than_the_sequence_gives_mistral_forward(
    tmp_path: Path, window: int
) -> None:
    model = build("Mistral", tmp_path, sliding_window=window, **TINY)
    ids, pad = (
        np.array([[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]]),
        np.array([[1] * 7, [1] * 5 + [0] * 2]),
    )
    got = capture(model, model.model.layers[0].self_attn, ids, pad)
    out = run_layer(
        tmp_path, got.x, "--layer-prefix", "model.layers.0.self_attn.", "--key-lengths", "7,5"
    )
    # rows of real tokens (a padded query that sees only padding: transformers spreads it
    # evenly, SDPA zeros)
    for b, real in ((0, 7), (1, 5)):
        np.testing.assert_allclose(out["weights"][b, :, :real], got.weights[b, :, :real], atol=1e-5)
        np.testing.assert_allclose(out["output"][b, :real], got.output[b, :real], atol=1e-5)
    assert (
        out["weights"][..., 6, : 7 - window] == 0
    ).all()  # the last query sees the last W keys only
