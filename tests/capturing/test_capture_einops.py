"""``attntrace trace`` of attention written with einops (x-transformers, vit-pytorch): the
reshape and permute inside ``rearrange``/``repeat`` are recorded on the user's line and get
the reference's axes and roles, on torch and on numpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import attntrace
from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

pytest.importorskip("einops")

#: Attention in the einops manner (vit-pytorch, x-transformers): heads split and merged by
#: rearrange, the key/value heads of GQA repeated by repeat.
LUCID = """
import torch
from torch import nn
from einops import rearrange, repeat


class Attention(nn.Module):
    def __init__(self, dim=96, heads=8, kv_heads=8):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, dim // heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, kv_heads * self.d, bias=False)
        self.to_v = nn.Linear(dim, kv_heads * self.d, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        q = rearrange(self.to_q(x), "b n (h d) -> b h n d", h=self.heads)
        k = rearrange(self.to_k(x), "b n (g d) -> b g n d", g=self.kv_heads)
        v = rearrange(self.to_v(x), "b n (g d) -> b g n d", g=self.kv_heads)
        if self.kv_heads != self.heads:
            k = repeat(k, "b g n d -> b (g r) n d", r=self.heads // self.kv_heads)
            v = repeat(v, "b g n d -> b (g r) n d", r=self.heads // self.kv_heads)
        attn = (q @ k.transpose(-1, -2) * self.d ** -0.5).softmax(dim=-1)
        out = rearrange(attn @ v, "b h n d -> b n (h d)")
        return self.to_out(out)
"""


def _trace(path: Path, *args: str) -> dict[str, dict[str, object]]:
    result = CliRunner().invoke(
        app, ["trace", f"{path}:Attention", "--batch", "3", "--seq", "5", *args, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    steps = json.loads(result.stdout)["steps"]
    return {str(s["role"]): s for s in steps if s["role"]}


def test_rearrange_in_a_torch_module_plays_the_heads_with_the_users_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "lucid.py"
    path.write_text(LUCID)
    roles = _trace(path)
    reference = trace_attention(AttentionConfig(batch=3, seq=5, hidden=96, heads=8), "shape")
    for name in (
        "q_heads",
        "q",
        "k",
        "v",
        "k_t",
        "scores",
        "scaled",
        "weights",
        "context",
        "context_heads",
        "merged",
        "output",
    ):
        assert tuple(roles[name]["axes"]) == reference[name].axes, (name, roles[name])
    assert roles["q"]["location"] == "lucid.py:17"  # the rearrange line, not einops' own file
    assert str(roles["q"]["source"]).startswith('rearrange(self.to_q(x), "b n (h d)')
    assert roles["merged"]["location"] == "lucid.py:24"


def test_repeat_of_the_key_value_heads_plays_k_rep(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "lucid.py"
    path.write_text(LUCID)
    roles = _trace(path, "--init", "kv_heads=2")
    reference = trace_attention(
        AttentionConfig(batch=3, seq=5, hidden=96, heads=8, kv_heads=2), "shape"
    )
    for name in ("k", "v", "k_rep", "v_rep", "scores", "context", "output"):
        assert tuple(roles[name]["axes"]) == reference[name].axes, (name, roles[name])
    assert roles["k_rep"]["location"] == "lucid.py:21"


def test_rearrange_on_numpy_arrays_is_recorded_too() -> None:
    from einops import rearrange

    def attend(x: np.ndarray) -> np.ndarray:
        q = rearrange(x, "n (h d) -> h n d", h=4)
        w = np.exp(q @ rearrange(q, "h n d -> h d n"))
        return rearrange(w @ q, "h n d -> n (h d)")

    with attntrace.capture(keep_values=False) as t:
        attend(t.track(np.ones((5, 32))))
    assert [s.axes for s in t.steps if s.source.startswith("rearrange(x")] == [
        ("S", "h", "d"),
        ("h", "S", "d"),
    ]
    assert t.steps[-1].axes == ("S", "H")
    assert t.steps[-1].location.endswith(f":{attend.__code__.co_firstlineno + 3}")
