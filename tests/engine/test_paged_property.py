"""Property: for any N, S, P, window and ragged lengths, the paged gather rebuilds exactly the
keys and values the step's k_all and v_all hold for each sequence (zeros beyond), the table
lists ⌈L_b/P⌉ distinct blocks then -1, and the pool holds every token once plus the waste."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.masks import MaskWarning
from attntrace.engine.paged import paged_steps
from attntrace.engine.serving import held_lengths, paged_figures


@st.composite
def paged_configs(draw: st.DrawFn) -> tuple[AttentionConfig, int]:
    batch = draw(st.integers(1, 3))
    seq, past = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    window = draw(st.none() | st.integers(2, 8))
    ragged = draw(st.booleans())
    lengths = tuple(draw(st.integers(1, past + seq)) for _ in range(batch)) if ragged else None
    config = AttentionConfig(
        batch=batch,
        seq=seq,
        past=past,
        hidden=8,
        heads=2,
        kv_heads=draw(st.sampled_from([1, 2])),
        causal=True,
        window=window,
        key_lengths=lengths,
    )
    return config, draw(st.integers(1, 7))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(paged_configs())
def test_the_gather_is_a_copy_of_what_the_step_holds(case: tuple[AttentionConfig, int]) -> None:
    config, page = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)  # a short sequence outside a window
        t = paged_steps(trace_attention(config), page)
    p = paged_figures(config, page)
    table = t["block_table"].value.reshape(config.batch, -1)  # (B, blocks)
    k, paged = t["k_all"].value, t["k_paged"].value  # (B, g, keys, d)
    used = []
    for b, length in enumerate(held_lengths(config)):
        n = -(-length // page)
        assert (table[b, n:] == -1).all()
        used += table[b, :n].tolist()
        np.testing.assert_array_equal(paged[b, :, :length], k[b, :, :length])
        assert not paged[b, :, length:].any()
    assert sorted(used) == list(range(p.pool_shape[0]))  # every block once
    assert p.pool_shape[0] * page == sum(held_lengths(config)) + p.waste_tokens
    assert all(
        0 <= w < page for w in (n * page - L for n, L in zip(p.blocks, p.lengths, strict=True))
    )
