"""Shapes, names and axes of every attention variant and of their combinations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import STEP_NAMES, AttentionConfig, trace_attention
from attntrace.engine.attention import step_names
from attntrace.engine.inputs import param_axes


@pytest.fixture(params=["numpy", "torch", "shape"])
def any_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "torch":
        pytest.importorskip("torch")
    return str(request.param)


def shapes(trace: object) -> dict[str, tuple[int, ...]]:
    return {s.name: s.shape for s in trace}  # type: ignore[attr-defined]


def test_causal_adds_mask_and_masked(any_backend: str) -> None:
    t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2, causal=True), any_backend)
    assert t.names == (*STEP_NAMES[:13], "mask", "masked", *STEP_NAMES[13:])
    assert (t["mask"].shape, t["mask"].axes, t["mask"].dtype) == ((4, 4), ("S", "S"), "bool")
    assert t["masked"].shape == t["weights"].shape == (2, 4, 4)
    assert t["weights"].op == "softmax(masked, dim=-1)"


def test_key_padding_mask_is_b_1_1_n(any_backend: str) -> None:
    t = trace_attention(
        AttentionConfig(batch=2, seq=3, hidden=8, heads=2, key_lengths=(3, 1)), any_backend
    )
    assert (t["mask"].shape, t["mask"].axes, t["mask"].op) == (
        (2, 1, 1, 3),
        ("B", "1", "1", "S"),
        "key_lengths",
    )


def test_cross_attention_scores_are_h_s_n(any_backend: str) -> None:
    t = trace_attention(
        AttentionConfig(batch=2, seq=3, hidden=8, heads=2, kv_seq=5, kv_hidden=6), any_backend
    )
    assert t.names[:3] == ("x", "x_kv", "q_proj")
    s = shapes(t)
    assert s["x_kv"] == (2, 5, 6)
    assert t["x_kv"].axes == ("B", "N", "M")
    assert s["k_proj"] == s["v_proj"] == (2, 5, 8)
    assert s["k"] == (2, 2, 5, 4)
    assert t["k"].axes == ("B", "h", "N", "d")
    assert s["k_t"] == (2, 2, 4, 5)
    assert s["scores"] == s["weights"] == (2, 2, 3, 5)
    assert t["scores"].axes == ("B", "h", "S", "N")
    assert s["output"] == (2, 3, 8)
    assert t.param("w_k").shape == (8, 6)
    assert t.param("w_k").axes == ("H", "M")
    assert t["k_proj"].op == "x_kv @ w_k.T + b_k"


def test_grouped_query_attention_repeats_k_and_v(any_backend: str) -> None:
    t = trace_attention(AttentionConfig(seq=3, hidden=32, heads=8, kv_heads=2), any_backend)
    s = shapes(t)
    assert s["k_proj"] == s["v_proj"] == (3, 8)
    assert t["k_proj"].axes == ("S", "g·d")
    assert s["k_heads"] == (3, 2, 4)
    assert s["k"] == s["v"] == (2, 3, 4)
    assert t["k"].axes == ("g", "S", "d")
    assert s["k_rep"] == s["v_rep"] == (8, 3, 4)
    assert t["k_rep"].axes == ("h", "S", "d")
    assert t["k_rep"].op == "k.repeat_interleave(4, dim=0)"
    assert t.names.index("v_rep") + 1 == t.names.index("k_t")
    assert t["context"].op == "weights @ v_rep"
    assert t.param("w_k").shape == (8, 32)
    assert t.config.kv_cache_bytes_per_token == 2 * 2 * 4 * 4


def test_multi_query_attention_has_one_kv_head() -> None:
    t = trace_attention(AttentionConfig(batch=2, seq=3, hidden=32, heads=8, kv_heads=1), "shape")
    assert t.shape("k") == (2, 1, 3, 4)
    assert t.shape("k_rep") == (2, 8, 3, 4)
    assert t["k_rep"].op == "k.repeat_interleave(8, dim=1)"


def test_kv_heads_equal_to_heads_is_plain_multi_head() -> None:
    assert (
        trace_attention(AttentionConfig(hidden=64, heads=4, kv_heads=4), "shape").names
        == STEP_NAMES
    )


def test_head_dim_decoupled_from_hidden(any_backend: str) -> None:
    t = trace_attention(
        AttentionConfig(seq=3, hidden=12, heads=4, head_dim_override=5), any_backend
    )
    s = shapes(t)
    assert s["q_proj"] == (3, 20)
    assert t["q_proj"].axes == ("S", "h·d")
    assert s["q"] == (4, 3, 5)
    assert s["merged"] == (3, 20)
    assert s["output"] == (3, 12)
    assert {p.name: p.shape for p in t.parameters} == {
        "w_q": (20, 12),
        "b_q": (20,),
        "w_k": (20, 12),
        "b_k": (20,),
        "w_v": (20, 12),
        "b_v": (20,),
        "w_o": (12, 20),
        "b_o": (12,),
    }
    assert t["scaled"].op == "scores / sqrt(5)"


def test_no_bias_drops_every_bias(any_backend: str) -> None:
    t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2, bias=False), any_backend)
    assert [p.name for p in t.parameters] == ["w_q", "w_k", "w_v", "w_o"]
    assert t["q_proj"].op == "x @ w_q.T"
    assert t["output"].op == "merged @ w_o.T"
    assert t.names == STEP_NAMES


def test_rope_adds_the_table_and_rotated_q_k(any_backend: str) -> None:
    t = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=16, heads=2, kv_heads=1, rope=True), any_backend
    )
    i = t.names.index("v")
    assert t.names[i + 1 : i + 7] == ("rope_cos", "rope_sin", "q_rot", "k_rot", "k_rep", "v_rep")
    assert t.shape("rope_cos") == t.shape("rope_sin") == (5, 8)
    assert t.shape("q_rot") == (2, 2, 5, 8)
    assert t.shape("k_rot") == (2, 1, 5, 8)
    assert t["scores"].op == "q_rot @ k_t"
    assert t["k_rep"].op == "k_rot.repeat_interleave(2, dim=1)"


def test_every_variant_at_once_matches_step_names(any_backend: str) -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=4,
        hidden=12,
        heads=4,
        kv_heads=2,
        head_dim_override=6,
        kv_hidden=10,
        bias=False,
        causal=True,
        key_lengths=(4, 2),
        rope=True,
    )
    t = trace_attention(cfg, any_backend)
    assert t.names == step_names(cfg)
    assert t["mask"].shape == (2, 1, 4, 4)
    assert [s.index for s in t.steps] == list(range(len(t)))


def test_default_steps_are_unchanged() -> None:
    assert step_names(AttentionConfig()) == STEP_NAMES
    assert step_names(AttentionConfig(), mask=True) == (
        *STEP_NAMES[:13],
        "mask",
        "masked",
        *STEP_NAMES[13:],
    )


@st.composite
def variant_configs(draw: st.DrawFn) -> AttentionConfig:
    """Random valid combinations of every variant, at small sizes."""
    batch = draw(st.none() | st.integers(1, 3))
    seq, groups = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    heads = groups * draw(st.integers(1, 3))
    rope = draw(st.booleans())
    head_dim = draw(st.integers(1, 4)) * 2 if rope else draw(st.integers(1, 7))
    decoupled = draw(st.booleans())
    hidden = draw(st.integers(1, 24)) if decoupled else heads * head_dim
    kv_seq = None if rope else draw(st.none() | st.integers(1, 6))
    keys = kv_seq if kv_seq is not None else seq
    lengths = (
        None
        if batch is None or not draw(st.booleans())
        else tuple(draw(st.integers(1, keys)) for _ in range(batch))
    )
    return AttentionConfig(
        batch=batch,
        seq=seq,
        hidden=hidden,
        heads=heads,
        kv_heads=groups if draw(st.booleans()) else None,
        head_dim_override=head_dim if decoupled else None,
        kv_seq=kv_seq,
        kv_hidden=draw(st.none() | st.integers(1, 9)),
        bias=draw(st.booleans()),
        causal=draw(st.booleans()),
        key_lengths=lengths,
        rope=rope,
        rope_base=draw(st.sampled_from([10000.0, 500000.0])),
    )


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(cfg=variant_configs())
def test_shape_backend_agrees_with_numpy_on_every_combination(cfg: AttentionConfig) -> None:
    computed, traced = trace_attention(cfg, "numpy"), trace_attention(cfg, "shape")
    assert computed.names == traced.names == step_names(cfg)
    assert [(s.shape, s.axes, s.dtype, s.op) for s in computed] == [
        (s.shape, s.axes, s.dtype, s.op) for s in traced
    ]
    assert [(p.name, p.shape) for p in computed.parameters] == [
        (p.name, p.shape) for p in traced.parameters
    ]
    for step in traced:  # the axis labels spell every shape
        assert tuple(cfg.size(a) for a in step.axes) == step.shape, step.name
    assert computed["output"].value is not None
    assert not math.isnan(float(computed["output"].value.sum()))


@settings(max_examples=60, deadline=None)
@given(cfg=variant_configs())
def test_closed_form_shapes_of_every_combination(cfg: AttentionConfig) -> None:
    t = trace_attention(cfg, "shape")
    lead = (cfg.batch,) if cfg.batch is not None else ()
    S, N, H, M, h, g, d = (
        cfg.seq,
        cfg.keys,
        cfg.hidden,
        cfg.kv_width,
        cfg.heads,
        cfg.groups,
        cfg.head_dim,
    )
    assert t.shape("x") == t.shape("output") == (*lead, S, H)
    assert t.shape("q_proj") == t.shape("merged") == (*lead, S, h * d)
    assert t.shape("k_proj") == t.shape("v_proj") == (*lead, N, g * d)
    assert t.shape("k") == t.shape("v") == (*lead, g, N, d)
    assert t.shape("k_t") == (*lead, h, d, N)
    assert t.shape("scores") == t.shape("weights") == (*lead, h, S, N)
    assert ("x_kv" in t) == cfg.cross
    assert ("k_rep" in t) == (g != h)
    assert ("q_rot" in t) == cfg.rope
    assert ("mask" in t) == (cfg.causal or cfg.key_lengths is not None)
    axes = param_axes(cfg)
    assert {p.name: p.shape for p in t.parameters} == {
        n: tuple(cfg.size(a) for a in axes[n]) for n in axes
    }
    assert t.param("w_k").shape == (g * d, M)
