"""``attntrace trace --into transformers`` of Hugging Face Falcon's attention in its three
fused layouts: one ``query_key_value`` (``x @ self.weight.T``) viewed to heads, then cut by
slices or indices of an axis of the view (``FalconAttention._split_heads``):

- multi-query: (h+2)·d viewed to (B, S, h+2, d), ``[..., :-2, :]``, ``[..., [-2], :]``,
  ``[..., [-1], :]``;
- multi-head: 3·H viewed to (B, S, h, 3, d), ``[..., 0, :]``, ``[..., 1, :]``, ``[..., 2, :]``;
- new decoder architecture: (h+2g)·d viewed to (B, S, g, h/g+2, d), cut the same way, k and v
  broadcast to the h/g query heads of their group and flattened with them.

q, k and v are never cut as (B, S, ·) projections, so q_proj, k_proj and v_proj have no step
(as in timm's ViT); the parts play the heads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attntrace
from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: One FalconAttention layer (hidden 64, 4 heads of 16), called as its decoder layer calls it:
#: RoPE (alibi=False), eager attention, an additive zero mask (1, 1, S, S).
WRAPPER = """
import torch
from transformers import FalconConfig
from transformers.models.falcon.modeling_falcon import FalconAttention, FalconRotaryEmbedding

config = FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                      {layout}, alibi=False,
                      attn_implementation="eager")


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = FalconAttention(config, layer_idx=0)
        self.rope = FalconRotaryEmbedding(config)

    def forward(self, x):
        pos = torch.arange(x.shape[1])[None]
        mask = torch.zeros(1, 1, x.shape[1], x.shape[1])
        return self.attn(x, None, mask, position_embeddings=self.rope(x, pos))[0]
"""

#: Per layout: the config's arguments, the reference's kv_heads, the fused projection's width
#: and axes, and the axes of its view to heads.
LAYOUTS = {
    "multi_query": (
        "multi_query=True, new_decoder_architecture=False",
        1,
        96,
        "(h+2g)·d",
        ("B", "S", "h+2g", "d"),
    ),
    "multi_head": (
        "multi_query=False, new_decoder_architecture=False",
        None,
        192,
        "3·H",
        ("B", "S", "h", "3", "d"),
    ),
    "new_decoder": (
        "new_decoder_architecture=True, num_kv_heads=2",
        2,
        128,
        "(h+2g)·d",
        ("B", "S", "g", "h/g+2", "d"),
    ),
}

#: The roles every layout plays; masked: the mask added to the scaled scores.
COMMON = {
    "x",
    "q_heads",
    "q",
    "k_t",
    "scores",
    "scaled",
    "masked",
    "weights",
    "context",
    "context_heads",
    "merged",
    "output",
}
#: The roles of the heads of k and v: cut as (B, S, g, d), or, in the new architecture,
#: repeated to h heads before their heads move first (k_rep and v_rep; no (B, g, S, d) k).
KV = {
    "multi_query": {"k_heads", "v_heads", "k", "v"},
    "multi_head": {"k_heads", "v_heads", "k", "v"},
    "new_decoder": {"k_rep", "v_rep"},
}

runner = CliRunner()


def _steps(tmp_path: Path, layout: str) -> tuple[list[dict[str, object]], dict[str, int]]:
    path = tmp_path / f"falcon_{layout}.py"
    path.write_text(WRAPPER.format(layout=LAYOUTS[layout][0]))
    result = runner.invoke(
        app,
        [
            "trace",
            f"{path}:Attn",
            "--batch",
            "2",
            "--seq",
            "5",
            "--into",
            "transformers",
            "--format",
            "json",
        ],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    return doc["steps"], doc["config"]["axis_sizes"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_falcon_attention_gets_the_reference_axes_and_roles(tmp_path: Path, layout: str) -> None:
    steps, sizes = _steps(tmp_path, layout)
    _, kv_heads, width, fused_axis, view = LAYOUTS[layout]
    fused = next(s for s in steps if s["shape"] == [2, 5, width])
    assert (fused["op"], fused["axes"], fused["role"]) == ("matmul", ["B", "S", fused_axis], "")
    assert steps[steps.index(fused) + 1]["axes"] == list(view)
    roles = {str(s["role"]): tuple(s["axes"]) for s in steps if s["role"]}  # type: ignore[arg-type]
    rotated = {"q_rot", "k_rot"}  # Falcon rotates q and k; its causal mask is handed in
    assert set(roles) == COMMON | KV[layout] | rotated | {"mask"}
    reference = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=64, heads=4, kv_heads=kv_heads, rope=True), "shape"
    )
    want = {name: reference[name].axes for name in roles if name in reference.names}
    want["masked"] = ("B", "h", "S", "S")
    assert roles["mask"][1:] == ("1", "S", "S")  # a 4-D mask handed in, not the (S, S) one
    want["mask"] = roles["mask"]
    if layout == "new_decoder":  # its k heads repeated to h before they are rotated
        want["k_rot"] = ("B", "h", "S", "d")
    if layout == "multi_query":  # its one k head broadcast by the matmul, not repeated first
        want["k_t"] = ("B", "g", "d", "S")
    assert roles == want
    assert sizes == {
        "B": 2,
        "S": 5,
        "H": 64,
        "h": 4,
        "d": 16,
        **({} if kv_heads is None else {"g": kv_heads}),
    }


def test_multi_query_k_and_v_are_the_one_key_value_head(tmp_path: Path) -> None:
    steps, _ = _steps(tmp_path, "multi_query")
    by_role = {s["role"]: s for s in steps if s["role"]}
    for name, source in (("k_heads", "[..., [-2], :]"), ("v_heads", "[..., [-1], :]")):
        assert str(by_role[name]["source"]).endswith(source)
        assert (by_role[name]["shape"], by_role[name]["axes"]) == (
            [2, 5, 1, 16],
            ["B", "S", "g", "d"],
        )
    assert by_role["k"]["axes"] == by_role["v"]["axes"] == ["B", "g", "S", "d"]


def test_new_decoder_k_is_broadcast_to_its_group_and_flattened_with_it(tmp_path: Path) -> None:
    steps, _ = _steps(tmp_path, "new_decoder")
    view = next(k for k, s in enumerate(steps) if s["axes"] == list(LAYOUTS["new_decoder"][4]))
    split = steps[view + 1 : view + 9]  # _split_heads after its view
    assert [(s["op"], s["axes"], s["role"]) for s in split] == [
        ("getitem", ["B", "S", "g", "h/g", "d"], ""),
        ("getitem", ["B", "S", "g", "1", "d"], ""),
        ("getitem", ["B", "S", "g", "1", "d"], ""),
        ("broadcast_to", ["B", "S", "g", "h/g", "d"], ""),
        ("broadcast_to", ["B", "S", "g", "h/g", "d"], ""),
        ("flatten", ["B", "S", "h", "d"], "q_heads"),
        ("flatten", ["B", "S", "h", "d"], ""),
        ("flatten", ["B", "S", "h", "d"], ""),
    ]
    moved = [s for s in steps if s["op"] == "transpose"][:3]
    assert [s["role"] for s in moved] == ["q", "k_rep", "v_rep"]


class HeadsSideBySide(torch.nn.Module):  # type: ignore[misc]
    """Not Falcon: a (h+2g)·d projection viewed to (B, S, h+2g, d) and cut by slices of its
    heads (h = 4, g = 2), then repeat_interleave; or a plain q projection cut the same way."""

    def __init__(self, fused: bool = True) -> None:
        super().__init__()
        self.fused = fused
        self.qkv = torch.nn.Linear(64, (4 + 4) * 16 if fused else 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        heads = self.qkv(x).view(B, S, -1, 16)
        if not self.fused:  # three slices of q's 4 heads: not q, k and v
            return heads[:, :, :1] + heads[:, :, 1:2] + heads[:, :, 2:3]
        q, k, v = (t.transpose(1, 2) for t in (heads[:, :, :4], heads[:, :, 4:6], heads[:, :, 6:]))
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        w = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        return (w @ v).transpose(1, 2).reshape(B, S, 64)


def test_heads_side_by_side_cut_by_slices_play_q_k_and_v_with_more_kv_heads() -> None:
    with attntrace.capture(keep_values=False) as t:
        HeadsSideBySide()(torch.randn(2, 5, 64))
    assert [s.axes for s in t.steps[1:3]] == [("B", "S", "(h+2g)·d"), ("B", "S", "h+2g", "d")]
    reference = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=64, heads=4, kv_heads=2), "shape"
    )
    names = [
        "q_heads",
        "k_heads",
        "v_heads",
        "q",
        "k",
        "v",
        "k_rep",
        "v_rep",
        "k_t",
        "scores",
        "scaled",
        "weights",
        "context",
        "context_heads",
        "merged",
    ]
    assert {n: t[n].axes for n in names} == {n: reference[n].axes for n in names}
    assert t.axis_sizes()["g"] == 2


def test_slices_of_the_heads_of_a_plain_projection_are_not_q_k_and_v() -> None:
    with attntrace.capture(keep_values=False) as t:
        HeadsSideBySide(fused=False)(torch.randn(2, 5, 64))
    assert t.steps[1].axes == ("B", "S", "H")
    assert t.steps[2].axes == ("B", "S", "h", "d")
    assert not {"k_heads", "v_heads", "k", "v"} & {s.role for s in t.steps}
