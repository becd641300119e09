"""``attntrace trace`` of Hugging Face attention classes (random init from config objects)
names the roles their code has, with shapes and axes: the RoPE tables and rotated q/k
(Llama), q_norm/k_norm (Qwen3's RMSNorm; a timm-style LayerNorm qk_norm), capped (Gemma 2's
soft-cap), position_bias/biased (T5) and masked (causal, sliding window)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import attntrace
from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

runner = CliRunner()


def _roles(target: str, *args: str) -> dict[str, tuple[tuple[int, ...], str, str]]:
    result = runner.invoke(
        app, ["trace", target, "--batch", "2", "--seq", "5", *args, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return {
        s["role"]: (tuple(s["shape"]), " ".join(s["axes"]), s["source"])
        for s in doc["steps"]
        if s["role"]
    }


def test_llama_names_its_rope_tables_and_rotated_q_and_k() -> None:
    roles = _roles("transformers:LlamaAttention")
    assert roles["rope_cos"][:2] == ((2, 5, 16), "B S d")
    assert roles["rope_sin"][:2] == ((2, 5, 16), "B S d")
    assert roles["q_rot"][:2] == ((2, 4, 5, 16), "B h S d")
    assert roles["k_rot"][:2] == ((2, 4, 5, 16), "B h S d")
    assert roles["masked"][:2] == ((2, 4, 5, 5), "B h S S")
    assert "q_norm" not in roles
    assert "capped" not in roles
    assert "biased" not in roles


def test_qwen3_names_its_q_and_k_rms_norms() -> None:
    roles = _roles("transformers:Qwen3Attention")
    assert roles["q_norm"][:2] == ((2, 5, 4, 16), "B S h d")
    assert roles["k_norm"][:2] == ((2, 5, 4, 16), "B S h d")
    assert roles["q_norm"][2].startswith("self.weight *")  # the last op of the RMSNorm
    assert roles["q_rot"][:2] == ((2, 4, 5, 16), "B h S d")


def test_gemma2_names_its_soft_cap() -> None:
    roles = _roles("transformers:Gemma2Attention", "--init", "attn_logit_softcapping=30.0")
    assert roles["capped"][:2] == ((2, 4, 5, 5), "B h S S")
    assert "* softcap" in roles["capped"][2]
    assert roles["masked"][:2] == ((2, 4, 5, 5), "B h S S")


def test_t5_names_its_relative_position_bias() -> None:
    roles = _roles("transformers:T5Attention")
    assert roles["position_bias"][:2] == ((1, 4, 5, 5), "1 h S S")
    assert roles["biased"][:2] == ((2, 4, 5, 5), "B h S S")
    assert "masked" not in roles  # the bias is not a mask


def test_mistral_with_a_sliding_window_names_masked() -> None:
    roles = _roles("transformers:MistralAttention", "--init", "sliding_window=2")
    assert roles["masked"][:2] == ((2, 4, 5, 5), "B h S S")


class TimmStyle(torch.nn.Module):
    """timm's Attention with qk_norm=True (LayerNorm over the head size), as timm writes it."""

    def __init__(self, dim: int = 32, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = torch.nn.Linear(dim, dim * 3)
        self.q_norm = torch.nn.LayerNorm(self.head_dim)
        self.k_norm = torch.nn.LayerNorm(self.head_dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)  # type: ignore[no-any-return]


def test_a_timm_style_layer_norm_qk_norm_is_named() -> None:
    attn = TimmStyle()
    x = torch.randn(2, 5, 32)
    with attntrace.capture() as t:
        attn(x)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["q_norm"].shape == (2, 4, 5, 8)
    assert roles["q_norm"].axes == ("B", "h", "S", "d")
    assert roles["q_norm"].source == "self.q_norm(q)"
    assert roles["k_norm"].source == "self.k_norm(k)"
    assert roles["weights"].shape == (2, 4, 5, 5)


def test_code_without_norms_tables_or_caps_gets_none_of_those_roles() -> None:
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 5, 32)
    with attntrace.capture(into=["torch.nn.MultiheadAttention"]) as t:
        mha(x, x, x)
    roles = {s.role for s in t.steps}
    assert not roles & {"q_norm", "k_norm", "rope_cos", "rope_sin", "capped", "biased"}
