"""Values: numpy and torch agree, and both equal torch's own nn.MultiheadAttention."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from attntrace import AttentionConfig, get_backend, trace_attention
from attntrace.backends import Source

torch = pytest.importorskip("torch")

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
CONFIGS = [
    AttentionConfig(seq=3, hidden=768, heads=12),
    AttentionConfig(batch=2, seq=5, hidden=64, heads=8, seed=7),
    AttentionConfig(batch=1, seq=1, hidden=6, heads=3),
    AttentionConfig(seq=17, hidden=32, heads=1, seed=3),
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "base", CONFIGS, ids=lambda c: f"B{c.batch}-S{c.seq}-H{c.hidden}-h{c.heads}"
)
def test_numpy_and_torch_agree_on_every_step(base: AttentionConfig, dtype: str) -> None:
    cfg = AttentionConfig(**{**base.__dict__, "dtype": dtype})
    np_trace, torch_trace = trace_attention(cfg, "numpy"), trace_attention(cfg, "torch")
    assert np_trace.names == torch_trace.names
    for a, b in zip(np_trace.steps, torch_trace.steps, strict=True):
        assert a.shape == b.shape, a.name
        assert a.dtype == b.dtype == dtype, a.name
        assert_allclose(
            a.value, b.value, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], err_msg=a.name
        )
    for name, value in np_trace.params.items():
        assert_allclose(
            value, torch_trace.params[name], rtol=0, atol=0, err_msg=name
        )  # same seed, same numbers


def _torch_mha(
    cfg: AttentionConfig, params: dict[str, np.ndarray], x: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Output and per-head weights of torch.nn.MultiheadAttention with our weights."""
    dtype = getattr(torch, cfg.dtype)
    mha = torch.nn.MultiheadAttention(cfg.hidden, cfg.heads, batch_first=True, dtype=dtype)
    t = {name: torch.from_numpy(v) for name, v in params.items()}
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([t["w_q"], t["w_k"], t["w_v"]]))
        mha.in_proj_bias.copy_(torch.cat([t["b_q"], t["b_k"], t["b_v"]]))
        mha.out_proj.weight.copy_(t["w_o"])
        mha.out_proj.bias.copy_(t["b_o"])
        xt = torch.from_numpy(x)
        out, weights = mha(xt, xt, xt, need_weights=True, average_attn_weights=False)
    return out.numpy(), weights.numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "base", CONFIGS, ids=lambda c: f"B{c.batch}-S{c.seq}-H{c.hidden}-h{c.heads}"
)
def test_output_and_weights_equal_torch_multihead_attention(
    base: AttentionConfig, dtype: str, compute_backend: str
) -> None:
    cfg = AttentionConfig(**{**base.__dict__, "dtype": dtype})
    trace = trace_attention(cfg, compute_backend)
    out, weights = _torch_mha(cfg, dict(trace.params), trace["x"].value)
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert_allclose(trace["output"].value, out, rtol=tol, atol=tol)
    assert_allclose(trace["weights"].value, weights, rtol=tol, atol=tol)


def test_weights_equal_scaled_dot_product_attention() -> None:
    cfg = AttentionConfig(batch=2, seq=6, hidden=24, heads=4, dtype="float64")
    trace = trace_attention(cfg, "numpy")
    q, k, v = (torch.from_numpy(np.ascontiguousarray(trace[n].value)) for n in "qkv")
    context = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert_allclose(trace["context"].value, context.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax_is_stable_for_huge_logits(backend: str, dtype: str) -> None:
    be = get_backend(backend)
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1000.0, 999.0, 998.0]])

    x = be.tensor(Source(logits.shape, dtype, lambda: logits))
    result = be.to_numpy(be.softmax(x))
    assert result is not None
    assert np.isfinite(result).all()
    assert_allclose(result.sum(axis=-1), 1.0, rtol=1e-3)
    assert_allclose(result[0], [1.0, 0.0, 0.0], atol=1e-6)
    assert_allclose(result[1], [1 / 3] * 3, rtol=1e-3)
    expected = np.exp([0.0, -1.0, -2.0]) / np.exp([0.0, -1.0, -2.0]).sum()
    assert_allclose(result[2], expected, rtol=1e-3)


def test_the_notes_softmax_would_overflow_where_ours_does_not() -> None:
    logits = np.array([[1000.0, 999.0, 998.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(logits) / np.exp(logits).sum(
            axis=-1, keepdims=True
        )  # the study notes' soft_max
    assert np.isnan(naive).all()
    ours = get_backend("numpy").softmax(logits)
    assert np.isfinite(ours).all()


def test_attention_rows_sum_to_one() -> None:
    trace = trace_attention(AttentionConfig(batch=3, seq=9, hidden=48, heads=6))
    assert_allclose(trace["weights"].value.sum(axis=-1), 1.0, rtol=1e-6)
    assert (trace["weights"].value >= 0).all()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.lists(
            st.one_of(
                st.floats(-80, 80, width=32), st.floats(-1e4, 1e4, width=32), st.just(-np.inf)
            ),
            min_size=1,
            max_size=12,
        ),
        min_size=1,
        max_size=6,
    ),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_the_softmax_equals_float64_and_its_in_range_form_keeps_the_bits(
    rows: list[list[float]], dtype: str
) -> None:
    width = max(map(len, rows))
    x = np.array([r + [-np.inf] * (width - len(r)) for r in rows], dtype=dtype)  # (R, N)
    be = get_backend("numpy")
    got = be.softmax(x)
    wide = x.astype(np.float64)
    top = wide.max(-1, keepdims=True)
    alive = np.isfinite(top[:, 0])  # rows with a key; the others give zeros
    e = np.exp(wide - np.where(np.isfinite(top), top, 0))
    want = e / np.where(e.sum(-1, keepdims=True) == 0, 1, e.sum(-1, keepdims=True))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[~alive], 0)
    np.testing.assert_allclose(
        got[alive], want[alive], rtol=2e-5 if dtype == "float32" else 1e-12, atol=1e-30
    )
    reach = be.unshifted_range(dtype, width)
    if (np.abs(x[np.isfinite(x)]) <= reach).all():  # what eager's bounds would prove
        into = np.empty_like(x)
        be.softmax_into(x.copy(), into, in_range=True)  # the row max left out
        np.testing.assert_array_equal(into, got)
