"""--algorithm flash on real layers with the variants it applies tile by tile: Gemma 2's soft-cap
and sliding window, T5's relative position bias (encoder: both directions; decoder: one way and
causal), against transformers' own forward. flash has no attention weights: the output is
compared, on every real query row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hf_models import build, capture

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_models import FAMILIES, IDS, PAD, trace_folder  # noqa: E402  (after the skips)
from test_models_t5_falcon import run_saved, t5_capture, t5_model  # noqa: E402


def assert_output(out: dict[str, np.ndarray], want: np.ndarray, rows: tuple[int, ...]) -> None:
    assert "weights" not in out  # flash: never the (S, N) matrix
    for b, n in enumerate(rows):
        np.testing.assert_allclose(out["output"][b, :n], want[b, :n], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("block", [None, "2", "4"])
def test_gemma2_soft_cap_and_window_in_flash_tiles(tmp_path: Path, block: str | None) -> None:
    kind, sizes, module = FAMILIES["gemma2-softcap-window"]
    model = build(kind, tmp_path, **sizes)
    got = capture(model, module(model, 0), IDS, PAD)  # layer 0 slides (window 3)
    tiles = ("--block-size", block) if block else ()
    out = trace_folder(
        tmp_path, got.x, "--layer", 0, "--key-lengths", "6,4", "--algorithm", "flash", *tiles
    )
    assert "s_capped" in out
    assert_output(out, got.output, (6, 4))


@pytest.mark.parametrize("layer", [0, 1])
def test_t5_encoder_relative_bias_in_flash_tiles(tmp_path: Path, layer: int) -> None:
    model = build(
        "T5",
        tmp_path,
        vocab_size=32,
        d_model=16,
        d_kv=4,
        num_heads=4,
        num_layers=2,
        d_ff=32,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    module = model.encoder.block[layer].layer[0].SelfAttention
    seen: dict[str, Any] = {}

    def hook(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        seen["x"], seen["out"] = kwargs.get("hidden_states", args[0] if args else None), out[0]

    handle = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(input_ids=torch.from_numpy(IDS), attention_mask=torch.from_numpy(PAD))
    handle.remove()
    x, want = seen["x"].double().numpy(), seen["out"].double().numpy()
    out = trace_folder(
        tmp_path,
        x,
        "--layer",
        layer,
        "--key-lengths",
        "6,4",
        "--algorithm",
        "flash",
        "--block-size",
        "4",
    )
    assert out["bias_tile"].shape == (4, 4, 4)  # (h, Br, Bc): the whole (h, S, N) bias never exists
    assert "position_bias" not in out
    assert_output(out, want, (6, 6))  # T5's padding mask leaves each query some key


def test_t5_decoder_causal_one_way_bias_in_flash_tiles(tmp_path: Path) -> None:
    model = t5_model(tmp_path)
    got = t5_capture(model, model.decoder.block[1].layer[0].SelfAttention)
    out = run_saved(
        tmp_path,
        got["x"],
        "--layer",
        1,
        "--layer-prefix",
        "decoder.block.1.layer.0.",
        "--key-lengths",
        "5,3",
        "--algorithm",
        "flash",
        "--block-size",
        "2",
    )
    assert_output(out, got["output"], (5, 3))
