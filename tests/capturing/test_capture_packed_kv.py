"""``attntrace trace`` of q alone and k, v from one packed projection (x-transformers'
``to_kv(x).chunk(2, dim=-1)``, slices or split, with fewer key/value heads too): the packed
projection is ``2·H`` (``2·g·d``), its halves play k_proj and v_proj, and every later step
gets the reference's axes and role."""

from __future__ import annotations

import pytest

import attntrace
from attntrace import AttentionConfig, trace_attention

torch = pytest.importorskip("torch")

B, S, H, HEADS = 3, 5, 96, 8
D = H // HEADS


class PackedKV(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, how: str, kv_heads: int = HEADS) -> None:
        super().__init__()
        self.how, self.g = how, kv_heads
        self.to_q = torch.nn.Linear(H, H, bias=False)
        self.to_kv = torch.nn.Linear(H, 2 * kv_heads * D, bias=False)
        self.to_out = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.to_q(x)
        kv = self.to_kv(x)
        width = self.g * D
        if self.how == "chunk":
            k, v = kv.chunk(2, dim=-1)
        elif self.how == "split":
            k, v = torch.split(kv, width, dim=-1)
        else:
            k, v = kv[..., :width], kv[..., width:]
        q = q.view(B, S, HEADS, D).transpose(1, 2)
        k = k.view(B, S, self.g, D).transpose(1, 2)
        v = v.view(B, S, self.g, D).transpose(1, 2)
        if self.g != HEADS:
            k = k.repeat_interleave(HEADS // self.g, dim=1)
            v = v.repeat_interleave(HEADS // self.g, dim=1)
        w = (q @ k.transpose(-2, -1) / D**0.5).softmax(dim=-1)
        return self.to_out((w @ v).transpose(1, 2).reshape(B, S, H))


@pytest.mark.parametrize("kv_heads", [HEADS, 2])
@pytest.mark.parametrize("how", ["chunk", "split", "slice"])
def test_the_halves_of_a_packed_kv_play_k_and_v(how: str, kv_heads: int) -> None:
    module = PackedKV(how, kv_heads)
    with attntrace.capture(keep_values=False) as t:
        module(torch.randn(B, S, H))
    gqa = kv_heads != HEADS
    reference = trace_attention(
        AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS, kv_heads=kv_heads if gqa else None),
        "shape",
    )
    packed = next(s for s in t.steps if s.shape == (B, S, 2 * kv_heads * D))
    assert packed.axes == ("B", "S", "2·g·d" if gqa else "2·H")
    assert packed.role == ""
    names = [
        "x",
        "q_proj",
        "k_proj",
        "v_proj",
        "q_heads",
        "k_heads",
        "v_heads",
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
    ]
    names += ["k_rep", "v_rep"] if gqa else []
    for name in names:
        assert t[name].axes == reference[name].axes, (name, t[name])
    assert t["k_proj"].location == t["v_proj"].location  # both halves: the cut's line


def test_two_halves_before_any_q_projection_are_not_taken_for_k_and_v() -> None:
    """A packed (S, 2H) that comes first may hold q and k: its halves play nothing."""

    class QK(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.to_qk = torch.nn.Linear(H, 2 * H, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k = self.to_qk(x).chunk(2, dim=-1)
            return (q @ k.transpose(-2, -1)).softmax(dim=-1) @ x

    with attntrace.capture(keep_values=False) as t:
        QK()(torch.randn(S, H))
    assert "k_proj" not in t
    assert "v_proj" not in t


def test_a_packed_kv_viewed_to_two_heads_axes_and_unbound_plays_the_heads() -> None:
    """``kv(x).view(B, S, 2, g, d).unbind(2)`` (its width 2·g·d may equal H): the axis of
    two is ``2``, its parts k_heads and v_heads, then k and v, SDPA's GQA the context."""

    class Unbound(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.wq = torch.nn.Linear(H, H, bias=False)
            self.wkv = torch.nn.Linear(H, 2 * 4 * D, bias=False)  # 96: as wide as x

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.wq(x).view(B, S, HEADS, D).transpose(1, 2)
            k, v = self.wkv(x).view(B, S, 2, 4, D).unbind(2)
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            return o.transpose(1, 2).reshape(B, S, H)

    with attntrace.capture(keep_values=False) as t:
        Unbound()(torch.randn(B, S, H))
    assert [s.axes for s in t.steps if s.op == "view"][1] == ("B", "S", "2", "g", "d")
    reference = trace_attention(
        AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS, kv_heads=4), "shape"
    )
    for name in ("k_heads", "v_heads", "k", "v", "context", "context_heads", "merged"):
        assert t[name].axes == reference[name].axes, (name, t[name])
    assert t.axis_sizes()["g"] == 4


class MultiQueryUnsqueezed(torch.nn.Module):  # type: ignore[misc]
    """GPTBigCode's multi-query layout written out: ``c_attn(x).unsqueeze(1).split((H, d, d),
    dim=3)``: q of every head, one head of k and one of v, the heads axis added before."""

    def __init__(self) -> None:
        super().__init__()
        self.c_attn = torch.nn.Linear(H, H + 2 * D)
        self.c_proj = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).unsqueeze(1).split((H, D, D), dim=3)  # (B, 1, S, ·)
        q = q.view(B, S, HEADS, D).transpose(1, 2)  # (B, h, S, d)
        k = k[:, :, None].expand(B, 1, HEADS, S, D).reshape(B, HEADS, S, D)  # (B, h, S, d)
        v = v[:, :, None].expand(B, 1, HEADS, S, D).reshape(B, HEADS, S, D)  # (B, h, S, d)
        w = (q @ k.transpose(-2, -1) / D**0.5).softmax(dim=-1)  # (B, h, S, S)
        return self.c_proj((w @ v).transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


def test_a_multi_query_split_after_unsqueeze_plays_one_kv_head() -> None:
    with attntrace.capture(keep_values=False) as t:
        MultiQueryUnsqueezed()(torch.randn(B, S, H))
    fused = next(s for s in t.steps if s.shape == (B, S, H + 2 * D))
    assert fused.axes == ("B", "S", "(h+2g)·d")
    by_role = {s.role: s for s in t.steps if s.role}
    assert by_role["q_proj"].shape == (B, 1, S, H)
    assert by_role["k"].axes == ("B", "g", "S", "d")  # its one kv head, not a (g·d) of 6
    assert by_role["v"].axes == ("B", "g", "S", "d")
    assert {"scores", "weights", "context", "merged", "output"} <= set(by_role)
    assert by_role["scores"].axes == ("B", "h", "S", "S")
