"""A T5 decoder's self-attention (causal, one-directional relative bias) and cross-attention
(EncDecAttention: keys and values from the encoder's output) against transformers; Falcon's
query_key_value read from --weights without a config: the rows tell the layouts apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from hf_models import build, capture

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ENC = np.array([[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]])  # (B, N): encoder tokens
ENC_PAD = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # item 1: 4 real keys
DEC = np.array([[0, 5, 3, 2, 6], [0, 4, 4, 1, 3]])  # (B, S): decoder tokens
DEC_PAD = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def t5_model(folder: Path) -> Any:
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=32,
        d_model=16,
        d_kv=4,
        num_heads=4,
        num_layers=2,
        d_ff=32,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    config._attn_implementation = "eager"
    model = transformers.T5ForConditionalGeneration(config).eval()
    model.save_pretrained(folder)
    return model


def t5_capture(model: Any, module: Any) -> dict[str, np.ndarray]:
    """What ``module`` saw and gave in one forward of the encoder-decoder (float64 copies)."""
    seen: dict[str, Any] = {}

    def hook(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        seen["x"] = kwargs.get("hidden_states", args[0] if args else None)
        seen["x_kv"] = kwargs.get("key_value_states")
        seen["output"], seen["weights"] = out[0], out[-1]

    handle = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(
            input_ids=torch.from_numpy(ENC),
            attention_mask=torch.from_numpy(ENC_PAD),
            decoder_input_ids=torch.from_numpy(DEC),
            decoder_attention_mask=torch.from_numpy(DEC_PAD),
            output_attentions=True,
        )
    handle.remove()
    return {k: v.double().numpy() for k, v in seen.items() if v is not None}


def run_saved(folder: Path, x: np.ndarray, *args: object) -> dict[str, np.ndarray]:
    np.save(folder / "x.npy", x.astype(np.float32))
    result = invoke(
        "run", "--model", folder, "--input", folder / "x.npy", "--save", folder / "o.npz", *args
    )
    assert result.exit_code == 0, result.output
    with np.load(folder / "o.npz", allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 1])
def test_t5_decoder_self_attention_is_causal_with_a_one_way_relative_bias(
    tmp_path: Path, layer: int
) -> None:
    """The decoder's layers read the decoder's table (block 0), one-directional buckets, and a
    causal mask: as T5Attention(is_decoder=True) computes them."""
    model = t5_model(tmp_path)
    got = t5_capture(model, model.decoder.block[layer].layer[0].SelfAttention)
    prefix = f"decoder.block.{layer}.layer.0."
    out = run_saved(
        tmp_path, got["x"], "--layer", layer, "--layer-prefix", prefix, "--key-lengths", "5,3"
    )
    assert "mask" in out
    assert out["position_bias"].shape == (4, 5, 5)
    for b, n in enumerate((5, 3)):  # every real query row
        np.testing.assert_allclose(out["weights"][b, :, :n], got["weights"][b, :, :n], atol=1e-5)
        np.testing.assert_allclose(out["output"][b, :n], got["output"][b, :n], atol=1e-5)
    result = invoke("run", "--model", tmp_path, "--layer", layer, "--backend", "shape")
    assert result.exit_code == 2  # encoder and decoder both have a layer N: say which
    assert "--layer-prefix" in result.stderr


@pytest.mark.slow
def test_t5_cross_attention_from_the_folder_with_the_encoders_states(tmp_path: Path) -> None:
    """EncDecAttention: q from the decoder (S = 5), k and v from the encoder's output (N = 6),
    no position bias, the encoder's padding as key lengths. The CLI needs --kv-seq (x_kv is
    seeded there); the Python API takes the encoder's states."""
    from attntrace.models.load import load_model_layer, model_fields

    model = t5_model(tmp_path)
    got = t5_capture(model, model.decoder.block[1].layer[1].EncDecAttention)
    prefix = "decoder.block.1.layer.1."
    loaded = load_model_layer(tmp_path, 1, prefix)
    assert loaded.scheme == "T5 EncDecAttention (cross-attention)"
    fields = model_fields(tmp_path, 1, prefix)
    assert (fields["causal"], fields["relative_bias"], fields["scale"]) == (False, None, 1.0)
    config = AttentionConfig(**{**fields, "batch": 2, "seq": 5, "kv_seq": 6, "key_lengths": (6, 4)})
    weights = {k: v for k, v in loaded.params.items() if v is not None}  # no biases in T5
    inputs = {"x": got["x"].astype(np.float32), "x_kv": got["x_kv"].astype(np.float32)}
    trace = trace_attention(config, "numpy", tensors={**weights, **inputs})
    np.testing.assert_allclose(trace["weights"].value, got["weights"], atol=1e-5)
    np.testing.assert_allclose(trace["output"].value, got["output"], atol=1e-5)
    np.save(tmp_path / "x.npy", got["x"].astype(np.float32))
    result = invoke(
        "run", "--model", tmp_path, "--layer-prefix", prefix, "--input", tmp_path / "x.npy"
    )
    assert result.exit_code == 2
    assert "T5's cross-attention" in result.stderr
    assert "--input-kv FILE.npy" in result.stderr
    assert "--kv-seq N" in result.stderr
    result = invoke(
        "run",
        "--model",
        tmp_path,
        "--layer-prefix",
        prefix,
        "--input",
        tmp_path / "x.npy",
        "--kv-seq",
        6,
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert '"name": "x_kv"' in result.stdout
    np.save(tmp_path / "x_kv.npy", got["x_kv"].astype(np.float32))  # the encoder's states
    out = run_saved(
        tmp_path,
        got["x"],
        "--layer-prefix",
        prefix,
        "--input-kv",
        tmp_path / "x_kv.npy",
        "--key-lengths",
        "6,4",
    )
    np.testing.assert_allclose(out["weights"], got["weights"], atol=1e-5)
    np.testing.assert_allclose(out["output"], got["output"], atol=1e-5)


FALCON = {"vocab_size": 32, "hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 2}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sizes",
    [
        {"multi_query": True},  # rows (h + 2) d: one kv-head
        {"new_decoder_architecture": True, "num_kv_heads": 2},  # rows (g, h/g + 2, d)
        {"multi_query": False, "bias": True},  # rows (h, 3, d), as GPT-NeoX
    ],
    ids=["multi-query", "grouped", "per-head"],
)
def test_falcon_weights_without_a_config_are_split_by_their_rows(
    tmp_path: Path, sizes: dict[str, Any]
) -> None:
    """A Falcon attention's state dict alone: no model_type to say the layout; the rows of
    query_key_value (H + 2·g·d) give g and the split."""
    from safetensors.torch import save_file

    model = build("Falcon", tmp_path, **{**FALCON, **sizes})
    module = model.transformer.h[1].self_attention
    got = capture(model, module, ENC, ENC_PAD)
    save_file(
        {k: v.contiguous() for k, v in module.state_dict().items()},
        str(tmp_path / "attn.safetensors"),
    )
    np.save(tmp_path / "x.npy", got.x.astype(np.float32))
    result = invoke(
        "run",
        "--weights",
        tmp_path / "attn.safetensors",
        "--heads",
        4,
        "--rope",
        "--causal",
        "--input",
        tmp_path / "x.npy",
        "--key-lengths",
        "6,4",
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "o.npz") as out:
        g = 1 if sizes.get("multi_query") else sizes.get("num_kv_heads", 4)
        assert out["w_k"].shape == (g * 4, 16)
        for b, n in enumerate((6, 4)):
            np.testing.assert_allclose(out["weights"][b, :, :n], got.weights[b, :, :n], atol=1e-5)
            np.testing.assert_allclose(out["output"][b, :n], got.output[b, :n], atol=1e-5)


@pytest.mark.slow
def test_sweep_picks_a_t5_decoder_layer_with_layer_prefix(tmp_path: Path) -> None:
    """sweep reads the layer of --layer-prefix as run does (it asked for the option without
    taking it); a prefix without --model is refused, in sweep and check alike."""
    import json

    t5_model(tmp_path)
    for prefix in ("decoder.block.0.layer.0.", "encoder.block.0.layer.0."):
        swept = invoke(
            "sweep",
            "--model",
            tmp_path,
            "--seq",
            "4,8",
            "--layer-prefix",
            prefix,
            "--format",
            "json",
        )
        assert swept.exit_code == 0, swept.stderr
        points = {(p["seq"], p["algorithm"]): p for p in json.loads(swept.stdout)}
        ran = invoke(
            "run",
            "--model",
            tmp_path,
            "--seq",
            8,
            "--layer-prefix",
            prefix,
            "--backend",
            "shape",
            "--format",
            "json",
        )
        totals = json.loads(ran.stdout)["totals"]
        assert points[8, "eager"]["flops"] == totals["flops"]
        assert points[8, "eager"]["peak_bytes"] == totals["peak_bytes"]
    decoder, encoder = (
        json.loads(
            invoke(
                "sweep",
                "--model",
                tmp_path,
                "--seq",
                "8",
                "--layer-prefix",
                f"{part}.block.0.layer.0.",
                "--format",
                "json",
            ).stdout
        )[0]["flops"]
        for part in ("decoder", "encoder")
    )
    assert decoder > encoder  # the decoder's causal mask: steps the encoder has not
    asked = invoke("sweep", "--model", tmp_path, "--seq", "8")
    assert asked.exit_code == 2
    assert "pick one with --layer-prefix" in asked.stderr
    for command in ("sweep", "check"):
        alone = (
            invoke(
                command, "--layer-prefix", "decoder.block.0.layer.0.", "--expect", "scores=h,S,S"
            )
            if command == "check"
            else invoke(command, "--layer-prefix", "decoder.block.0.layer.0.")
        )
        assert alone.exit_code == 2
        assert "--layer-prefix picks a layer of --model DIR; add --model DIR" in alone.stderr


def test_fused_rows_that_fit_no_layout_are_refused(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "w.npz",
        **{
            "query_key_value.weight": np.zeros((20, 16), np.float32),
            "dense.weight": np.zeros((16, 16), np.float32),
        },
    )
    result = invoke("run", "--weights", tmp_path / "w.npz", "--heads", 4)
    assert result.exit_code == 2
    assert "neither GPT-NeoX's 3H = 48 rows nor Falcon's (h + 2g)·d rows" in result.stderr
    assert "--hf-config" in result.stderr


def test_check_picks_a_t5_decoder_layer_with_layer_prefix(tmp_path: Path) -> None:
    """check reads the layer's settings as run does: the decoder's self-attention is causal
    (a mask step), the encoder's is not; without a prefix the layer is ambiguous (exit 2)."""
    t5_model(tmp_path)
    decoder = invoke(
        "check",
        "--model",
        tmp_path,
        "--layer",
        1,
        "--layer-prefix",
        "decoder.block.1.layer.0.",
        "--seq",
        5,
        "--expect",
        "mask=S,S",
        "--expect",
        "weights=h,S,S",
    )
    assert decoder.exit_code == 0, decoder.output
    encoder = invoke(
        "check",
        "--model",
        tmp_path,
        "--layer",
        1,
        "--layer-prefix",
        "encoder.block.1.layer.0.",
        "--seq",
        5,
        "--expect",
        "mask=S,S",
    )
    assert encoder.exit_code == 2  # no mask step in the encoder: the step is unknown
    assert "unknown step 'mask'" in encoder.stderr
    ambiguous = invoke("check", "--model", tmp_path, "--layer", 1, "--expect", "weights=h,S,S")
    assert ambiguous.exit_code == 2
    assert "--layer-prefix" in ambiguous.stderr
