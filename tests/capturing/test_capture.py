"""attntrace.capture() on the user's own attention code: steps, names, roles, values, and
axis propagation that agrees with the reference trace on every variant."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attntrace
from attntrace import AttentionConfig, trace_attention
from attntrace.tools.check import check_expectations, parse_expectation

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


class UserAttention(nn.Module):
    """Attention as a user writes it: GQA, RoPE (rotate_half), causal mask and cross optional."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int | None = None,
        rope: bool = False,
        causal: bool = False,
        kv_hidden: int | None = None,
    ) -> None:
        super().__init__()
        self.h, self.g = heads, kv_heads or heads
        self.d = hidden // heads
        self.rope, self.causal = rope, causal
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(kv_hidden or hidden, self.g * self.d)
        self.v_proj = nn.Linear(kv_hidden or hidden, self.g * self.d)
        self.o_proj = nn.Linear(hidden, hidden)

    def rotate(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = t.shape[-1] // 2
        rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * cos + rotated * sin

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        kv = x if context is None else context
        B, S, _ = x.shape
        N = kv.shape[1]
        q = self.q_proj(x)
        k = self.k_proj(kv)
        v = self.v_proj(kv)
        q = q.view(B, S, self.h, self.d).transpose(1, 2)
        k = k.view(B, N, self.g, self.d).transpose(1, 2)
        v = v.view(B, N, self.g, self.d).transpose(1, 2)
        if self.rope:
            inv = 1.0 / 10000 ** (torch.arange(0, self.d, 2).float() / self.d)
            angles = torch.outer(torch.arange(S).float(), inv)
            emb = torch.cat((angles, angles), dim=-1)
            q = self.rotate(q, emb.cos(), emb.sin())
            k = self.rotate(k, emb.cos(), emb.sin())
        if self.g != self.h:
            k = k.repeat_interleave(self.h // self.g, dim=1)
            v = v.repeat_interleave(self.h // self.g, dim=1)
        scores = q @ k.transpose(-2, -1)
        scores = scores / math.sqrt(self.d)
        if self.causal:
            mask = torch.ones(S, N, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        context_ = weights @ v
        merged = context_.transpose(1, 2).reshape(B, S, self.h * self.d)
        return self.o_proj(merged)


def _capture(
    model: nn.Module, *inputs: torch.Tensor, axes: dict[str, int] | None = None
) -> attntrace.Capture:
    with attntrace.capture(axes=axes) as t:
        model(*inputs)
    return t


def test_module_forward_gives_one_row_per_user_op_and_modules_are_one_row() -> None:
    torch.manual_seed(0)
    model = UserAttention(32, 4)
    x = torch.randn(2, 5, 32)
    t = _capture(model, x)
    names = [s.name for s in t.steps]
    assert names[:4] == ["x", "q", "k", "v"]  # x: forward's argument; nn.Linear calls are one row
    assert [s.op for s in t.steps[1:4]] == ["linear"] * 3
    assert t["x"].axes == ("B", "S", "H")
    assert t["x"].role == "x"
    assert t["scores"].shape == (2, 4, 5, 5)
    assert t["scores"].location.startswith("test_capture.py:")
    assert t["scores"].source == "q @ k.transpose(-2, -1)"
    assert t["weights"].name == "weights"
    assert t["weights"].axes == ("B", "h", "S", "S")
    assert [s.role for s in t.steps if s.role][:5] == ["x", "q_proj", "k_proj", "v_proj", "q_heads"]


def test_values_are_numpy_copies_equal_to_the_module_output() -> None:
    torch.manual_seed(0)
    model = UserAttention(32, 4)
    x = torch.randn(2, 5, 32)
    t = _capture(model, x)
    expected = model(x).detach().numpy()
    out = t.steps[-1]
    assert isinstance(out.value, np.ndarray)
    np.testing.assert_allclose(out.value, expected, rtol=1e-6)
    role = {s.role: s for s in t.steps if s.role}
    q, k, v = (torch.tensor(role[r].value) for r in ("q", "k", "v"))  # values are read-only
    sdpa = F.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(t["context"].value, sdpa.numpy(), rtol=1e-5, atol=1e-6)


def test_keep_values_false_keeps_shapes_only() -> None:
    with attntrace.capture(keep_values=False) as t:
        UserAttention(16, 2)(torch.randn(1, 3, 16))
    assert all(s.value is None for s in t.steps)
    assert t["scores"].shape == (1, 2, 3, 3)


def test_in_place_changes_after_recording_do_not_reach_kept_values() -> None:
    with attntrace.capture() as t:
        a = torch.zeros(2, 3)
        b = a + 1
        b.mul_(10)
    assert t["b"].value.tolist() == [[1.0] * 3] * 2
    assert t["mul__1"].value.tolist() == [[10.0] * 3] * 2


def test_check_expectations_read_a_capture_by_role() -> None:
    t = _capture(UserAttention(32, 4), torch.randn(2, 5, 32))
    assert (
        check_expectations(
            t, [parse_expectation("weights=B,h,S,S"), parse_expectation("q_proj=B,S,H")]
        )
        == ()
    )
    failed = check_expectations(t, [parse_expectation("scores=B,h,S,d")])
    assert failed[0].actual == "(2, 4, 5, 5) (B, h, S, S)"


def test_to_dict_has_location_source_role() -> None:
    t = _capture(UserAttention(16, 2), torch.randn(1, 3, 16))
    doc = t.to_dict()
    assert doc["schema"] == "attntrace.capture/2"
    step = next(s for s in doc["steps"] if s["role"] == "scores")
    assert step["shape"] == [1, 2, 3, 3]
    assert step["axes"] == ["B", "h", "S", "S"]
    assert step["source"] == "q @ k.transpose(-2, -1)"
    assert step["location"].startswith("test_capture.py:")


def test_numpy_function_with_tracked_input() -> None:
    def attend(x: np.ndarray, heads: int) -> np.ndarray:
        S, H = x.shape
        q = x.reshape(S, heads, H // heads).transpose(1, 0, 2)
        scores = q @ q.swapaxes(-1, -2) / np.sqrt(H // heads)
        weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        return (weights @ q).transpose(1, 0, 2).reshape(S, H)

    x = np.random.default_rng(0).standard_normal((3, 768))
    with attntrace.capture() as t:
        out = attend(t.track(x), 12)
    assert type(out).__name__ == "TracedArray"
    assert out.shape == (3, 768)
    assert t["scores"].shape == (12, 3, 3)
    assert t["scores"].axes == ("h", "S", "S")
    assert t["weights"].name == "weights"
    assert t.steps[-1].axes == ("S", "H")
    np.testing.assert_allclose(t.steps[-1].value, np.asarray(out))
    assert "torch" not in {s.op for s in t.steps}


VARIANTS = st.sampled_from(["plain", "gqa", "mqa", "rope", "causal", "cross"])


def _kv_heads(variant: str, heads: int) -> int | None:
    """The kv-heads of a variant: half the heads (gqa), one (mqa: multi-query), else None."""
    return {"gqa": heads // 2, "mqa": 1}.get(variant)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(
    VARIANTS,
    st.sampled_from([None, 2]),
    st.sampled_from([(4, 8), (6, 4), (8, 4)]),
    st.integers(3, 6),
)
def test_axes_agree_with_the_reference_trace(
    variant: str, batch: int | None, hd: tuple[int, int], seq: int
) -> None:
    heads, head_dim = hd
    hidden = heads * head_dim
    kv_heads = _kv_heads(variant, heads)
    cross = variant == "cross"
    config = AttentionConfig(
        batch=batch or 1,
        seq=seq,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        rope=variant == "rope",
        causal=variant == "causal",
        kv_seq=seq + 2 if cross else None,
        kv_hidden=hidden + 8 if cross else None,
    )
    reference = trace_attention(config, "shape")
    model = UserAttention(
        hidden,
        heads,
        kv_heads,
        rope=variant == "rope",
        causal=variant == "causal",
        kv_hidden=hidden + 8 if cross else None,
    )
    x = torch.randn(batch or 1, seq, hidden)
    inputs = (x, torch.randn(batch or 1, seq + 2, hidden + 8)) if cross else (x,)
    t = _capture(model, *inputs)
    roles = {s.role: s for s in t.steps if s.role}
    assert {
        "q_proj",
        "k_proj",
        "v_proj",
        "q_heads",
        "q",
        "k",
        "scores",
        "weights",
        "context",
        "merged",
        "output",
    } <= set(roles)
    for name, step in roles.items():
        if name in reference and name not in ("x", "x_kv"):
            assert step.axes == reference[name].axes, (name, step.axes, reference[name].axes)
    assert t.notes == ()  # no reshape of correct code mixes axes


def numpy_attention(
    x: np.ndarray, heads: int, kv_heads: int, causal: bool, context: np.ndarray | None = None
) -> np.ndarray:
    """The same variants written in numpy, weights (in, out) as x @ W."""
    rng = np.random.default_rng(0)
    kv = x if context is None else context
    S, H = x.shape[-2:]
    N, M = kv.shape[-2:]
    d = H // heads
    w_q, w_o = rng.standard_normal((H, H)), rng.standard_normal((H, H))
    w_k, w_v = rng.standard_normal((M, kv_heads * d)), rng.standard_normal((M, kv_heads * d))
    q_proj = x @ w_q
    k_proj = kv @ w_k
    v_proj = kv @ w_v
    q_heads = q_proj.reshape(*x.shape[:-1], heads, d)
    q = np.swapaxes(q_heads, -3, -2)
    k = np.swapaxes(k_proj.reshape(*kv.shape[:-1], kv_heads, d), -3, -2)
    v = np.swapaxes(v_proj.reshape(*kv.shape[:-1], kv_heads, d), -3, -2)
    if kv_heads != heads:
        k = np.repeat(k, heads // kv_heads, axis=-3)
        v = np.repeat(v, heads // kv_heads, axis=-3)
    k_t = np.swapaxes(k, -1, -2)
    scores = q @ k_t
    scaled = scores / np.sqrt(d)
    if causal:
        allowed = np.tril(np.ones((S, N), dtype=bool))
        scaled = np.where(allowed, scaled, -np.inf)
    e = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    context_ = weights @ v
    merged = np.swapaxes(context_, -3, -2).reshape(*x.shape[:-1], H)
    return merged @ w_o


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    VARIANTS.filter(lambda v: v != "rope"),
    st.sampled_from([None, 2]),
    st.sampled_from([(4, 8), (6, 4), (8, 4)]),
    st.integers(3, 6),
)
def test_numpy_axes_agree_with_the_reference_trace(
    variant: str, batch: int | None, hd: tuple[int, int], seq: int
) -> None:
    heads, head_dim = hd
    hidden = heads * head_dim
    kv_heads = _kv_heads(variant, heads) or heads
    cross = variant == "cross"
    config = AttentionConfig(
        batch=batch,
        seq=seq,
        hidden=hidden,
        heads=heads,
        kv_heads=_kv_heads(variant, heads),
        causal=variant == "causal",
        kv_seq=seq + 2 if cross else None,
        kv_hidden=hidden + 8 if cross else None,
    )
    reference = trace_attention(config, "shape")
    rng = np.random.default_rng(1)
    lead = (batch,) if batch else ()
    x = rng.standard_normal((*lead, seq, hidden))
    ctx = rng.standard_normal((*lead, seq + 2, hidden + 8)) if cross else None
    with attntrace.capture() as t:
        numpy_attention(
            t.track(x), heads, kv_heads, variant == "causal", t.track(ctx) if cross else None
        )
    roles = {s.role: s for s in t.steps if s.role}
    assert {
        "x",
        "q_proj",
        "k_proj",
        "q_heads",
        "q",
        "k",
        "k_t",
        "scores",
        "weights",
        "context",
        "merged",
        "output",
    } <= set(roles)
    for name, step in roles.items():
        if name in reference:
            assert step.axes == reference[name].axes, (name, step.axes, reference[name].axes)
    assert t.notes == ()


def test_two_files_with_the_same_code_keep_their_own_locations(tmp_path: Path) -> None:
    import runpy

    code = "import numpy as np\nx = np.ones((3, 4))\ny = x.T\n"
    for name in ("first.py", "second.py"):
        (tmp_path / name).write_text(code)
    seen = []
    for name in ("first.py", "second.py"):
        with attntrace.capture() as t:
            runpy.run_path(str(tmp_path / name))
        seen.append(t["y"].location)
    assert seen == ["first.py:3", "second.py:3"]


def one_head_numpy(x: np.ndarray) -> np.ndarray:
    """The study notes' single head with a projection on each side: nothing is split."""
    rng = np.random.default_rng(0)
    wq, wk, wv, wo = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(4))
    q = x @ wq
    k = x @ wk
    v = x @ wv
    kt = k.T
    s = q @ kt / np.sqrt(8)
    e = np.exp(s - s.max(-1, keepdims=True))
    w = e / e.sum(-1, keepdims=True)
    ctx = w @ v
    return ctx @ wo


def test_one_head_without_a_split_gets_every_role() -> None:
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    with attntrace.capture() as t:
        one_head_numpy(t.track(x))
    roles = {s.role: s.name for s in t.steps if s.role}
    assert roles == {
        "x": "input_1",
        "q_proj": "q",
        "k_proj": "k",
        "v_proj": "v",
        "k_t": "kt",
        "scores": "matmul_1",
        "scaled": "s",
        "weights": "w",
        "context": "ctx",
        "output": "matmul_2",
    }
    reference = trace_attention(AttentionConfig(seq=3, hidden=8, heads=1), "shape")
    for role in ("scores", "weights"):
        step = next(s for s in t.steps if s.role == role)
        assert (1, *step.shape) == reference[role].shape  # the reference keeps its head axis


class FusedAttention(nn.Module):
    """q, k and v from one projection, split (nanoGPT's ``c_attn``): by hand, or by SDPA."""

    def __init__(self, hidden: int, heads: int, how: str = "split") -> None:
        super().__init__()
        self.h, self.how = heads, how
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, H = x.shape
        qkv = self.c_attn(x)
        if self.how in ("unbind", "index"):  # timm's ViT: heads first at once, then 3 parts
            qkv = qkv.reshape(B, S, 3, self.h, H // self.h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0) if self.how == "unbind" else (qkv[0], qkv[1], qkv[2])
        else:
            if self.how == "slice":  # the last axis cut by hand
                q, k, v = qkv[:, :, :H], qkv[..., H : 2 * H], qkv[..., 2 * H :]
            else:
                q, k, v = qkv.chunk(3, dim=-1) if self.how == "chunk" else qkv.split(H, dim=2)
            q, k, v = (t.view(B, S, self.h, H // self.h).transpose(1, 2) for t in (q, k, v))
        if self.how == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            y = att.softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, S, H))


@pytest.mark.parametrize("how", ["split", "chunk", "sdpa", "unbind", "index", "slice"])
def test_a_fused_qkv_projection_is_split_into_q_k_and_v(how: str) -> None:
    t = _capture(FusedAttention(32, 4, how), torch.randn(2, 5, 32))
    reference = trace_attention(AttentionConfig(batch=2, seq=5, hidden=32, heads=4), "shape")
    fused = next(s for s in t.steps if s.shape == (2, 5, 96))
    assert (fused.role, fused.axes) == ("", ("B", "S", "3·H"))  # no reference step: q, k, v at once
    roles = {s.role: s for s in t.steps if s.role}
    heads_first = how in ("unbind", "index")
    parts = ("q", "k", "v") if heads_first else ("q_proj", "k_proj", "v_proj")
    want = {"q", "k", "v", "context", "merged", "output", *parts}
    want |= set() if heads_first else {"q_heads", "k_heads", "v_heads"}
    want |= set() if how == "sdpa" else {"k_t", "scores", "scaled", "weights"}
    assert want <= set(roles), sorted(want - set(roles))
    split = [t.steps.index(roles[n]) for n in parts]  # the parts in order, each the split's
    assert split == list(range(split[0], split[0] + 3))
    ops = {"chunk": "chunk", "unbind": "unbind", "index": "getitem", "slice": "getitem"}
    assert {roles[n].op for n in parts} == {ops.get(how, "split")}
    for name, step in roles.items():
        if name in reference and name != "x":
            assert step.axes == reference[name].axes, (name, step.axes)
    assert "g" not in t.axis_sizes()  # 3·H is not mistaken for g·d, g = 3H / d = 12 kv-heads


class FusedGQAAttention(nn.Module):
    """Phi-3's attention: one qkv_proj, (h + 2g)·d wide, cut by slices of its last axis (or by
    one split with the three widths), then repeat_interleave for the kv-heads."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, how: str = "slice") -> None:
        super().__init__()
        self.h, self.g, self.d, self.how = heads, kv_heads, hidden // heads, how
        self.qkv_proj = nn.Linear(hidden, (heads + 2 * kv_heads) * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        qkv = self.qkv_proj(x)
        q_pos, kv_width = self.h * self.d, self.g * self.d
        if self.how == "slice":
            q = qkv[..., :q_pos]
            k = qkv[..., q_pos : q_pos + kv_width]
            v = qkv[..., q_pos + kv_width :]
        else:
            q, k, v = qkv.split([q_pos, kv_width, kv_width], dim=-1)
        q, k, v = (t.view(B, S, -1, self.d).transpose(1, 2) for t in (q, k, v))
        k = k.repeat_interleave(self.h // self.g, dim=1)
        v = v.repeat_interleave(self.h // self.g, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        y = att.softmax(dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, S, -1))


@pytest.mark.parametrize("how", ["slice", "split"])
def test_a_fused_projection_with_fewer_kv_heads_is_cut_into_q_k_and_v(how: str) -> None:
    model = FusedGQAAttention(64, 8, 2, how)
    x = torch.randn(2, 5, 64)
    t = _capture(model, x)
    fused = next(s for s in t.steps if s.shape == (2, 5, 96))  # (h + 2g)·d = (8 + 4)·8
    assert (fused.role, fused.axes) == ("", ("B", "S", "(h+2g)·d"))
    assert t.axis_sizes()["g"] == 2  # not 96 / d = 12 kv-heads
    reference = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=64, heads=8, kv_heads=2), "shape"
    )
    roles = {s.role: s for s in t.steps if s.role}
    want = {
        "q_proj",
        "k_proj",
        "v_proj",
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
        "merged",
        "output",
    }
    assert want <= set(roles), sorted(want - set(roles))
    for name in want & set(reference.names):
        assert roles[name].axes == reference[name].axes, name
    assert roles["k_proj"].axes == ("B", "S", "g·d")
    assert np.array_equal(np.asarray(roles["output"].value), model(x).detach().numpy())


def test_slices_of_the_last_axis_that_do_not_cut_it_in_three_play_no_part() -> None:
    def attention(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        qk = x @ w  # (S, 2H): q and k only, halves; v is x itself
        q, k = qk[:, :8], qk[:, 8:]
        e = np.exp(q @ k.T - (q @ k.T).max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True) @ x

    x = np.random.default_rng(0).standard_normal((5, 8))
    with attntrace.capture() as t:
        attention(t.track(x), np.random.default_rng(1).standard_normal((8, 16)))
    assert all("(h+2g)" not in "".join(s.axes) for s in t.steps)
    halves = [s for s in t.steps if s.op == "getitem"]
    assert len(halves) == 2
    assert not any(s.role for s in halves)  # no k_proj, v_proj by slices


@pytest.mark.parametrize("how", ["split", "index", "slice", "gqa"])
def test_numpy_split_of_a_fused_projection_gives_q_k_and_v(how: str) -> None:
    w = np.random.default_rng(1).standard_normal((32, 96)) / 32  # (H, 3H), made outside

    def attention(x: np.ndarray, heads: int = 4) -> np.ndarray:
        S, H = x.shape
        if how == "index":  # (3, h, S, d), then qkv[0], qkv[1], qkv[2]
            qkv = (x @ w).reshape(S, 3, heads, -1).transpose(1, 2, 0, 3)
            q, k, v = qkv[0], qkv[1], qkv[2]
        elif how == "gqa":  # (h + 2g)·d = (4 + 4)·8: np.split at the two widths, repeated kv
            parts = np.split(x @ w[:, :64], [H, H + 16], axis=-1)
            q, k, v = (p.reshape(S, -1, 8).transpose(1, 0, 2) for p in parts)
            k, v = np.repeat(k, 2, axis=0), np.repeat(v, 2, axis=0)
        else:
            qkv = x @ w
            parts = (
                [qkv[:, :H], qkv[:, H : 2 * H], qkv[..., 2 * H :]]
                if how == "slice"
                else np.split(qkv, 3, axis=-1)
            )
            q, k, v = (p.reshape(S, heads, -1).transpose(1, 0, 2) for p in parts)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(S, H)

    with attntrace.capture() as t:
        attention(t.track(np.random.default_rng(0).standard_normal((5, 32))))
    roles = {s.role: s for s in t.steps if s.role}
    parts = set() if how == "index" else {"q_proj", "k_proj", "v_proj"}
    assert {"q", "k", "v", "scores", "weights", "context", "merged", *parts} <= set(roles)
    assert roles["k"].axes == (("g",) if how == "gqa" else ("h",)) + ("S", "d")
    assert roles["weights"].axes == ("h", "S", "S")
    if how == "gqa":
        assert roles["k_proj"].axes == ("S", "g·d")
        assert (t.axis_sizes()["g"], t.axis_sizes()["h"]) == (2, 4)


@pytest.mark.parametrize("fused", [True, False])
def test_numpy_weights_made_inside_the_function_are_weights_not_a_second_input(fused: bool) -> None:
    def attention(x: np.ndarray, heads: int = 4) -> np.ndarray:
        S, H = x.shape
        if fused:  # (H, 3H): was taken for a cross-attention input (N, M)
            q, k, v = np.split(x @ np.random.randn(H, 3 * H), 3, axis=-1)
        else:  # torch's (out, in) layout, used as x @ w.T
            q, k, v = (x @ np.random.randn(H, H).T for _ in range(3))
        q, k, v = (p.reshape(S, heads, -1).transpose(1, 0, 2) for p in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        e = np.exp(s - s.max(-1, keepdims=True))
        merged = (e / e.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(S, H)
        return merged @ np.random.randn(H, H)

    with attntrace.capture() as t:
        attention(t.track(np.random.default_rng(0).standard_normal((5, 32))))
    roles = {s.role: s for s in t.steps if s.role}
    assert "x_kv" not in roles
    assert {
        "q_proj",
        "k_proj",
        "v_proj",
        "q",
        "k",
        "v",
        "k_t",
        "scores",
        "weights",
        "context",
        "merged",
        "output",
    } <= set(roles)
    assert roles["output"].axes == ("S", "H")
    assert roles["weights"].axes == ("h", "S", "S")


@pytest.mark.parametrize("width", [80, 100])
def test_the_steps_table_fits_the_console_and_squeezes_only_the_code(width: int) -> None:
    from rich.console import Console

    from attntrace.render.capture_view import captured_table

    t = _capture(FusedGQAAttention(64, 8, 2), torch.randn(2, 5, 64))
    console = Console(width=width, record=True, color_system=None)
    console.print(captured_table(t.steps, width))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert max(map(len, lines)) <= width
    assert lines[1].split()[:4] == ["#", "step", "role", "line"]  # none squeezed away
    rows = [line.split() for line in lines[3:]]
    assert [r[0] for r in rows] == [str(i) for i in range(len(t.steps))]
    assert "context_heads" in {r[2] for r in rows if len(r) > 2}  # the longest role, whole
    assert any(line.endswith("(B, S, (h+2g)·d)") for line in lines)


def test_reshapes_that_mix_axes_are_unnamed_and_told_with_the_transpose_they_lack() -> None:
    """The silent bugs: the heads split from H across S, and merged back across S. The shapes
    fit, so nothing raises; the axes must not be guessed from the sizes."""

    def attention(x: np.ndarray) -> np.ndarray:
        q = x.reshape(2, 4, 5, 16)  # (B, S, H) read as (B, h, S, d): no transpose
        k = x.reshape(2, 5, 4, 16).transpose(0, 2, 1, 3)
        w = np.exp(q @ k.transpose(0, 1, 3, 2))
        return (w @ k).reshape(2, 5, 64)  # (B, h, S, d) read as (B, S, H)

    with attntrace.capture() as t:
        attention(t.track(np.random.default_rng(0).standard_normal((2, 5, 64))))
    by_name = {s.name: s for s in t.steps}
    assert by_name["q"].axes == ("B", "?", "?", "?")
    assert t.steps[-1].axes == ("B", "?", "?")
    assert "merged" not in {s.role for s in t.steps}
    split, merge = t.notes
    assert split.endswith(
        "x.reshape(2, 4, 5, 16) reshapes (S, h, d) (5, 4, 16) to (4, 5, 16), "
        "mixing the axes: reshape to (5, 4, 16), then transpose to (h, S, d)"
    )
    assert merge.endswith(
        "(w @ k).reshape(2, 5, 64) reshapes (h, S, d) (4, 5, 16) to (5, 64), "
        "mixing the axes: transpose to (S, h, d) first, then reshape"
    )
    assert t.to_dict()["notes"] == [split, merge]


def test_a_torch_view_of_the_projection_straight_into_heads_first_is_told() -> None:
    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, S, _ = x.shape
            q = self.q_proj(x).view(B, 4, S, 16)  # bug: heads first without a transpose
            k = self.k_proj(x).view(B, S, 4, 16).transpose(1, 2)
            return torch.softmax(q @ k.transpose(2, 3), dim=-1)

    t = _capture(Attn(), torch.randn(2, 5, 64))
    (note,) = t.notes
    assert "view(B, 4, S, 16) reshapes (S, h, d) (5, 4, 16) to (4, 5, 16)" in note
    assert note.endswith("then transpose to (h, S, d)")
    assert "q_heads" not in {s.role for s in t.steps}


@pytest.mark.parametrize("layout", ["numpy shd", "torch bhsd"])
def test_einsum_attention_gets_scores_weights_and_context(layout: str) -> None:
    """The subscripts do the transposes: einsum(q, k) is the scores, einsum(weights, v) the
    context (heads first, or (S, h, d): the reference's context_heads)."""
    rng = np.random.default_rng(0)
    w_q, w_k, w_v = (rng.standard_normal((32, 32)) for _ in range(3))
    if layout == "numpy shd":

        def attention(x: np.ndarray) -> np.ndarray:
            q, k, v = ((x @ w).reshape(5, 4, 8) for w in (w_q, w_k, w_v))
            s = np.einsum("shd,thd->hst", q, k) / np.sqrt(8)
            e = np.exp(s - s.max(-1, keepdims=True))
            return np.einsum("hst,thd->shd", e / e.sum(-1, keepdims=True), v).reshape(5, 32)

        with attntrace.capture() as t:
            attention(t.track(rng.standard_normal((5, 32))))
        context = ("context_heads", ("S", "h", "d"))
    else:

        class Attn(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                q, k, v = (
                    (x @ torch.as_tensor(w, dtype=x.dtype)).view(2, 5, 4, 8).transpose(1, 2)
                    for w in (w_q, w_k, w_v)
                )
                s = torch.einsum("bhqd,bhkd->bhqk", q, k) / 8**0.5
                ctx = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)
                return ctx.transpose(1, 2).reshape(2, 5, 32)

        t = _capture(Attn(), torch.randn(2, 5, 32))
        context = ("context", ("B", "h", "S", "d"))
    roles = {s.role: s for s in t.steps if s.role}
    lead = ("B",) if layout.startswith("torch") else ()
    assert roles["scores"].op == "einsum"
    assert roles["scores"].axes == roles["weights"].axes == (*lead, "h", "S", "S")
    assert (roles[context[0]].op, roles[context[0]].axes) == ("einsum", context[1])
    assert roles["merged"].axes == (*lead, "S", "H")


@pytest.mark.slow
def test_a_reference_name_means_the_role_and_var_means_the_variable_as_check_reads_them() -> None:
    """``t["scaled"]`` is the step playing scaled even when a variable of the code is called
    ``scaled`` (here the unscaled scores); ``t["var:scaled"]`` is that variable; a role no step
    plays and an unknown name are KeyErrors that say what there is."""

    def attend(x: np.ndarray) -> np.ndarray:
        q = x.reshape(3, 4, 8).transpose(1, 0, 2)
        scaled = q @ q.swapaxes(-1, -2)
        divided = scaled / np.sqrt(8)
        return np.exp(divided) / np.exp(divided).sum(axis=-1, keepdims=True)

    with attntrace.capture() as t:
        attend(t.track(np.random.default_rng(0).standard_normal((3, 32))))
    assert t["scaled"].name == "divided"
    assert t["scaled"].role == "scaled"
    assert t["var:scaled"].role == "scores"
    assert t["scores"].name == "scaled"
    assert "scaled" in t
    assert "var:scaled" in t
    assert "k_rep" not in t
    with pytest.raises(KeyError, match="no step plays k_rep"):
        t["k_rep"]
    with pytest.raises(KeyError, match="unknown step 'nothing'; give a reference step"):
        t["nothing"]
