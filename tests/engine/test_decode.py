"""--past N: S new tokens at positions N..N+S-1 against a KV cache of N earlier tokens. The step
equals the last S rows of a prefill of N + S tokens whose first N keys and values are the cache
(every variant, numpy and torch, eager and flash); shapes, names and the bottom-right mask."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.attention import step_names
from attntrace.errors import ConfigError
from attntrace.trace import Trace


def cache_source(config: AttentionConfig) -> str:
    """The prefill step whose first N keys a cache holds: after the norm and RoPE."""
    return "k_rot" if config.rope else "k_norm" if config.qk_norm == "head" else "k"


def prefill_and_step(config: AttentionConfig, backend: str = "numpy") -> tuple[Trace, Trace]:
    """A prefill of N + S tokens, and the --past step made from its first N keys and values."""
    n, s = config.past, config.seq
    full = dataclasses.replace(config, seq=n + s, past=0)
    prefill = trace_attention(full, "numpy")
    first = n - config.cached  # a sliding cache keeps the last W-1 keys
    k = prefill[cache_source(config)].value[..., first:n, :]  # (B, g, N, d)
    v = prefill["v"].value[..., first:n, :]  # (B, g, N, d)
    tensors: dict[str, Any] = {**prefill.params, "k_cache": k, "v_cache": v}
    tensors["x"] = prefill["x"].value[..., n:, :]  # (B, S, H)
    step = trace_attention(config, backend, tensors=tensors)
    return prefill, step


def assert_step_is_prefill_tail(config: AttentionConfig, backend: str = "numpy") -> None:
    prefill, step = prefill_and_step(config, backend)
    n = config.past
    tol = {"rtol": 1e-10, "atol": 1e-12} if config.dtype == "float64" else {"rtol": 2e-5}
    assert_allclose(step["output"].value, prefill["output"].value[..., n:, :], **tol)
    if config.algorithm == "eager":
        assert_allclose(step["weights"].value.sum(-1), 1.0, rtol=1e-6)
    # the keys attention reads are the prefill's, from the sliding cache's first on
    first = n - config.cached
    assert_allclose(step["k_all"].value, prefill[cache_source(config)].value[..., first:, :], **tol)


BASE = {"hidden": 16, "heads": 4, "dtype": "float64", "bias": False}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"causal": True},
        {"causal": True, "rope": True},
        {"causal": True, "rope": True, "kv_heads": 2},
        {"causal": True, "kv_heads": 1, "rope": True, "rope_style": "interleaved"},
        {
            "causal": True,
            "rope": True,
            "rope_scaling": "llama3:factor=8,low_freq_factor=1,"
            "high_freq_factor=4,original_max_position_embeddings=8",
        },
        {"causal": True, "rope": True, "rotary_dims": 2},
        {"causal": True, "window": 3},
        {"causal": True, "window": 3, "rope": True, "kv_heads": 2},
        {"window": 2},
        {"causal": True, "softcap": 5.0},
        {"causal": True, "qk_norm": "head", "rope": True},
        {"causal": True, "qk_norm": "full"},
        {"causal": True, "relative_bias": "8,16,causal"},
        {"causal": True, "algorithm": "flash", "block_size": 2},
        {"causal": True, "window": 3, "algorithm": "flash", "block_size": 2},
        {"batch": 2, "causal": True, "key_lengths": (5, 7)},
        {"batch": 2, "causal": True, "rope": True, "kv_heads": 2, "bias": True},
        {"causal": True, "scale": 1.0},
    ],
    ids=repr,
)
def test_the_step_is_the_tail_of_the_prefill(variant: dict[str, Any], backend: str) -> None:
    if backend == "torch":
        pytest.importorskip("torch")
    config = AttentionConfig(**{**BASE, "seq": 2, "past": 5, **variant})
    assert_step_is_prefill_tail(config, backend)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    past=st.integers(1, 12),
    seq=st.integers(1, 4),
    causal=st.booleans(),
    rope=st.booleans(),
    kv_heads=st.sampled_from([1, 2, 4]),
    window=st.one_of(st.none(), st.integers(1, 6)),
    softcap=st.one_of(st.none(), st.just(3.0)),
    algorithm=st.sampled_from(["eager", "flash"]),
    backend=st.sampled_from(["numpy", "torch"]),
)
def test_any_step_is_the_tail_of_its_prefill(backend: str, **drawn: Any) -> None:
    if backend == "torch":
        pytest.importorskip("torch")
    block = {"block_size": 2} if drawn["algorithm"] == "flash" else {}
    config = AttentionConfig(**BASE, **drawn, **block)
    assert_step_is_prefill_tail(config, backend)
    # the shape backend makes the same steps, shapes and FLOPs without arrays
    shapes, values = trace_attention(config, "shape"), trace_attention(config, backend)
    assert [(s.name, s.shape, s.axes) for s in shapes.steps] == [
        (s.name, s.shape, s.axes) for s in values.steps
    ]
    assert shapes.total_flops == values.total_flops


def test_float32_agrees_too() -> None:
    config = AttentionConfig(
        batch=1, seq=1, past=30, hidden=32, heads=4, kv_heads=2, causal=True, rope=True
    )
    assert_step_is_prefill_tail(config)


def test_shapes_names_and_axes_of_a_decode_step() -> None:
    config = AttentionConfig(
        batch=2, seq=1, past=9, hidden=64, heads=8, kv_heads=2, causal=True, rope=True
    )
    t = trace_attention(config, "shape")
    assert [s.name for s in t.steps] == list(step_names(config))
    shapes = {s.name: (s.shape, s.axes) for s in t.steps}
    assert shapes["k_rot"] == ((2, 2, 1, 8), ("B", "g", "S", "d"))
    assert shapes["k_cache"] == ((2, 2, 9, 8), ("B", "g", "N", "d"))
    assert shapes["v_cache"] == ((2, 2, 9, 8), ("B", "g", "N", "d"))
    assert shapes["k_all"] == ((2, 2, 10, 8), ("B", "g", "N+S", "d"))
    assert shapes["k_rep"] == ((2, 8, 10, 8), ("B", "h", "N+S", "d"))
    assert shapes["scores"] == ((2, 8, 1, 10), ("B", "h", "S", "N+S"))
    assert shapes["rope_cos"] == ((1, 8), ("S", "d"))
    assert t["k_all"].op == "cat(k_cache, k_rot, dim=2)"
    assert t["k_all"].inputs == ("k_cache", "k_rot")
    assert t["mask"].op == "causal(bottom-right)"
    assert t.axis_sizes()["N"] == 9


def test_a_sliding_cache_keeps_w_minus_1_keys() -> None:
    config = AttentionConfig(seq=2, past=100, hidden=16, heads=4, causal=True, window=8)
    t = trace_attention(config, "shape")
    assert t["k_cache"].shape == (4, 7, 4)
    assert t["k_cache"].axes == ("h", "W-1", "d")
    assert t["scores"].shape == (4, 2, 9)
    assert t["scores"].axes == ("h", "S", "W-1+S")


def test_the_mask_is_aligned_bottom_right() -> None:
    config = AttentionConfig(seq=3, past=2, hidden=8, heads=2, causal=True)
    mask = trace_attention(config)["mask"].value.astype(int).tolist()
    assert mask == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    windowed = dataclasses.replace(config, window=2)  # cache: the last key only
    mask = trace_attention(windowed)["mask"].value.astype(int).tolist()
    assert mask == [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


def test_rope_rotates_the_new_tokens_at_their_positions() -> None:
    config = AttentionConfig(seq=2, past=7, hidden=8, heads=1, rope=True)
    t = trace_attention(config)
    inv = 10000.0 ** (-np.arange(0, 8, 2) / 8)  # (d/2,)
    angles = np.outer([7, 8], inv)  # positions N, N + 1
    assert_allclose(t["rope_cos"].value, np.cos(np.concatenate([angles, angles], -1)), rtol=1e-6)


def test_the_cache_is_drawn_from_the_seed() -> None:
    config = AttentionConfig(batch=1, seq=1, past=4, hidden=8, heads=2)
    a, b = trace_attention(config), trace_attention(config)
    assert (a["k_cache"].value == b["k_cache"].value).all()
    other = trace_attention(dataclasses.replace(config, seed=1))
    assert not np.allclose(a["k_cache"].value, other["k_cache"].value)
    assert not np.allclose(a["k_cache"].value, a["v_cache"].value)


def test_past_zero_is_a_plain_prefill() -> None:
    plain = AttentionConfig(seq=3, hidden=8, heads=2, causal=True)
    assert dataclasses.replace(plain, past=0) == plain
    assert "past" not in plain.to_dict()
    assert AttentionConfig(seq=1, past=4).to_dict()["past"] == 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"past": -1}, "--past must be a whole number from 0"),
        ({"past": 1.5}, "--past must be a whole number from 0"),
        ({"past": True}, "--past must be a whole number from 0"),
        ({"past": 3, "kv_seq": 4}, "--past caches the keys of self-attention"),
        ({"past": 3, "batch": 1, "key_lengths": (9,)}, "--key-lengths 9 does not fit the 6"),
    ],
)
def test_bad_past_is_one_line_naming_the_fix(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        AttentionConfig(**fields)
    assert "\n" not in str(info.value)


def test_cache_tensors_of_the_wrong_shape_are_refused() -> None:
    config = AttentionConfig(seq=1, past=4, hidden=8, heads=2)
    with pytest.raises(ConfigError, match=r"k_cache has shape \(2, 3, 4\), but the sizes give"):
        trace_attention(config, tensors={"k_cache": np.zeros((2, 3, 4))})


def test_a_decode_step_in_markdown_matches_golden(golden: Callable[[str], None]) -> None:
    from attntrace.render import text_renderer

    config = AttentionConfig(
        batch=2,
        seq=1,
        past=4096,
        hidden=4096,
        heads=32,
        kv_heads=8,
        causal=True,
        rope=True,
        bias=False,
        dtype="bfloat16",
    )
    golden(text_renderer("markdown")(trace_attention(config, "shape")))
