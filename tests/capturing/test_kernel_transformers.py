"""SDPA reached inside a followed library: transformers' ``sdpa_attention_forward`` (a Llama
attention built with ``attn_implementation="sdpa"``, held by the user's module with its own
causal mask, traced with ``--into transformers``) is opened at its line, and its weights equal
those the same module computes with ``attn_implementation="eager"``. (Without a mask the two
differ in transformers itself: sdpa is then causal, eager is not.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import attntrace

torch = pytest.importorskip("torch")
llama = pytest.importorskip("transformers.models.llama.modeling_llama")
pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # loads transformers


def _held(implementation: str) -> Any:
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=8,
        num_key_value_heads=2,
        attn_implementation=implementation,
    )

    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.attn = llama.LlamaAttention(config, layer_idx=0)
            self.rope = llama.LlamaRotaryEmbedding(config)

        def forward(self, x: Any) -> Any:
            S = x.shape[1]
            tables = self.rope(x, torch.arange(S)[None])  # (1, S, d) each
            mask = torch.full((S, S), float("-inf")).triu(1)[None, None]  # (1, 1, S, S)
            return self.attn(x, tables, mask)[0]  # (B, S, H)

    return Attn().eval()


def _roles(implementation: str) -> dict[str, Any]:
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1))  # (B, S, H)
    with torch.no_grad(), attntrace.capture(into=["transformers"]) as t:
        _held(implementation)(x)
    return {s.role: s for s in t.steps if s.role} | {"": t}


def test_sdpa_inside_transformers_is_opened_and_equals_eager() -> None:
    sdpa, eager = _roles("sdpa"), _roles("eager")
    inside = ("k_rep", "k_t", "scores", "scaled", "mask", "masked", "weights", "context")
    assert {sdpa[r].location.split(":")[0] for r in inside} == {"sdpa_attention.py"}
    assert sdpa["weights"].shape == eager["weights"].shape == (2, 8, 5, 5)
    np.testing.assert_allclose(sdpa["weights"].value, eager["weights"].value, atol=1e-6)
    np.testing.assert_allclose(sdpa["output"].value, eager["output"].value, atol=1e-5)
    (call,) = sdpa[""].kernels()
    assert call.agrees, call.verdict
    assert not call.enable_gqa  # with a mask, transformers repeats k and v itself (repeat_kv)
    assert call.mask is not None
    assert (call.mask["kind"], call.mask["shape"]) == ("additive", (1, 1, 5, 5))
