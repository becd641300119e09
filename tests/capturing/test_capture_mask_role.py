"""A 4-D mask handed to the code as an argument ((B, 1, S, S) or (1, 1, S, S) additive, a
boolean padding mask (B, 1, 1, S)) is recorded as an input step with role ``mask`` when it is
added to the scores, filled in with ``masked_fill``, or passed to SDPA as ``attn_mask``; the
op that applies it plays ``masked``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import attntrace
from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

torch = pytest.importorskip("torch")

runner = CliRunner()


class Padded(torch.nn.Module):
    """Multi-head attention given a boolean padding mask, applied with masked_fill."""

    def __init__(self, dim: int = 16, heads: int = 2, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        B, S, H = x.shape
        q, k, v = self.qkv(x).split(H, dim=2)  # (B, S, H) each
        q = q.view(B, S, self.heads, -1).transpose(1, 2)  # (B, h, S, d)
        k = k.view(B, S, self.heads, -1).transpose(1, 2)  # (B, h, S, d)
        v = v.view(B, S, self.heads, -1).transpose(1, 2)  # (B, h, S, d)
        if self.sdpa:
            ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=pad)
        else:
            scores = q @ k.transpose(-2, -1) / (H // self.heads) ** 0.5  # (B, h, S, S)
            scores = scores.masked_fill(pad, float("-inf"))  # (B, h, S, S)
            ctx = scores.softmax(-1) @ v  # (B, h, S, d)
        return self.out(ctx.transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


def test_a_boolean_padding_mask_applied_with_masked_fill_plays_mask() -> None:
    attn = Padded()
    x = torch.randn(3, 5, 16)  # (B, S, H)
    pad = torch.zeros(3, 1, 1, 5, dtype=torch.bool)  # (B, 1, 1, S)
    pad[1, ..., 3:] = True
    with attntrace.capture() as t:
        attn(x, pad)
    roles = {s.role: s for s in t.steps if s.role}
    mask = roles["mask"]
    assert (mask.name, mask.shape, mask.axes, mask.dtype) == (
        "pad",
        (3, 1, 1, 5),
        ("B", "1", "1", "S"),
        "bool",
    )
    np.testing.assert_array_equal(mask.value, pad.numpy())
    masked = roles["masked"]
    assert masked.shape == (3, 2, 5, 5)
    assert masked.axes == ("B", "h", "S", "S")
    assert np.isneginf(masked.value[1, :, :, 3:]).all()
    assert np.isfinite(masked.value[0]).all()


def test_a_broadcast_boolean_mask_given_to_sdpa_plays_mask() -> None:
    attn = Padded(sdpa=True)
    x = torch.randn(3, 5, 16)  # (B, S, H)
    keep = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]  # (1, 1, S, S): True = see
    with attntrace.capture() as t:
        out = attn(x, keep)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["mask"].shape == (1, 1, 5, 5)
    assert roles["mask"].axes == ("1", "1", "S", "S")
    assert roles["mask"].dtype == "bool"
    expected = attn.out(
        torch.nn.functional.scaled_dot_product_attention(
            *(p.view(3, 5, 2, 8).transpose(1, 2) for p in attn.qkv(x).split(16, dim=2)),
            is_causal=True,
        )
        .transpose(1, 2)
        .reshape(3, 5, 16)
    )  # (B, S, H)
    torch.testing.assert_close(out, expected)


def test_a_3d_input_without_heads_axis_is_no_mask() -> None:
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = torch.randn(2, 5, 16)  # (B, S, H)
    with attntrace.capture(into=["torch.nn.MultiheadAttention"]) as t:
        mha(x, x, x)
    assert "mask" not in {s.role for s in t.steps}


def test_llama_records_its_additive_causal_mask_argument() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    config = transformers.LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8
    )
    config._attn_implementation = "eager"
    attn = modeling_llama.LlamaAttention(config, layer_idx=0).eval()
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    x = torch.randn(2, 5, 32)  # (B, S, H)
    cos_sin = rotary(x, torch.arange(5)[None].expand(2, 5))  # (B, S, d) each
    hidden = torch.ones(5, 5, dtype=torch.bool).triu(1)  # (S, S)
    additive = torch.zeros(5, 5).masked_fill(hidden, torch.finfo(torch.float32).min)
    mask = additive[None, None].expand(2, 1, 5, 5)  # (B, 1, S, S)
    with attntrace.capture(into=["transformers"]) as t:
        attn(x, position_embeddings=cos_sin, attention_mask=mask)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["mask"].name == "attention_mask"
    assert (roles["mask"].shape, roles["mask"].axes) == ((2, 1, 5, 5), ("B", "1", "S", "S"))
    assert roles["mask"].dtype == "float32"
    np.testing.assert_array_equal(roles["mask"].value, mask.numpy())
    assert roles["masked"].axes == ("B", "h", "S", "S")
    names = [s.name for s in t.steps]
    assert names.index(roles["mask"].name) < names.index(roles["masked"].name)


def _roles(target: str, *args: str) -> dict[str, dict[str, Any]]:
    result = runner.invoke(
        app, ["trace", target, "--batch", "2", "--seq", "5", *args, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return {s["role"]: s for s in doc["steps"] if s["role"]}


@pytest.mark.parametrize(
    ("target", "args"),
    [
        ("transformers:LlamaAttention", ()),
        ("transformers:MistralAttention", ("--init", "sliding_window=2")),
    ],
)
def test_trace_of_a_causal_hf_class_names_its_mask(target: str, args: tuple[str, ...]) -> None:
    pytest.importorskip("transformers")
    roles = _roles(target, *args)
    assert tuple(roles["mask"]["shape"]) == (2, 1, 5, 5)
    assert roles["mask"]["axes"] == ["B", "1", "S", "S"]
    assert roles["mask"]["dtype"] == "float32"
    assert roles["masked"]["axes"] == ["B", "h", "S", "S"]
    assert roles["mask"]["index"] < roles["masked"]["index"]


def test_t5_encoder_has_no_mask() -> None:
    pytest.importorskip("transformers")
    roles = _roles("transformers:T5Attention")
    assert "mask" not in roles
    assert "position_bias" in roles
