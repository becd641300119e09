"""The backward steps (attntrace.engine.backward) against torch autograd: every gradient, the
saved bytes, the FLOPs by hand, the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, trace_attention

torch = pytest.importorskip("torch")

from attntrace.tools.gradients import eager_autograd as autograd_of  # noqa: E402


def _grads(trace):  # type: ignore[no-untyped-def]
    names = ["d_x", "d_x_kv", *(f"d_{p.name}" for p in trace.parameters)]
    return {n: trace[n].value for n in names if n in trace}


VARIANTS = {
    "plain": {},
    "batched": {"batch": 2},
    "causal": {"batch": 2, "causal": True},
    "window": {"causal": True, "window": 2},
    "gqa": {"batch": 2, "kv_heads": 2},
    "mqa": {"kv_heads": 1, "causal": True},
    "rope": {"rope": True},
    "rope_gqa": {"batch": 2, "rope": True, "kv_heads": 2, "causal": True},
    "rope_pairs": {"rope": True, "rope_style": "interleaved"},
    "rope_partial": {"rope": True, "rotary_dims": 2},
    "cross": {"batch": 2, "kv_seq": 7, "kv_hidden": 12},
    "softcap": {"softcap": 2.0, "causal": True},
    "no_bias": {"bias": False, "kv_heads": 2},
    "t5": {"relative_bias": "8,16", "batch": 2},
    "t5_causal": {"relative_bias": "8,16", "causal": True, "scale": 1.0},
    "qk_norm": {"qk_norm": "head", "batch": 2},
    "qk_norm_rope_gqa": {"qk_norm": "head", "rope": True, "kv_heads": 2, "causal": True},
    "qk_norm_full": {"qk_norm": "full", "batch": 2, "qk_norm_eps": 1e-5},
    "qk_norm_full_gqa": {"qk_norm": "full", "kv_heads": 2, "rope": True},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gradients_equal_autograd_float64(variant: str) -> None:
    config = AttentionConfig(
        seq=5, hidden=16, heads=4, dtype="float64", seed=3, **VARIANTS[variant]
    )
    trace = trace_attention(config, backward=True)
    want, saved = autograd_of(trace)
    got = _grads(trace)
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-10, atol=1e-12, err_msg=name)
    assert trace.training is not None
    assert trace.training.saved_bytes == saved  # what autograd keeps, one count per storage


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    batch=st.sampled_from([None, 1, 2]),
    seq=st.integers(1, 6),
    heads=st.sampled_from([1, 2, 4]),
    d=st.sampled_from([2, 4]),
    groups=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    rope=st.booleans(),
    kv_seq=st.sampled_from([None, 3]),
    seed=st.integers(0, 9),
)
def test_gradients_equal_autograd_over_configs(
    batch: int | None,
    seq: int,
    heads: int,
    d: int,
    groups: int,
    causal: bool,
    rope: bool,
    kv_seq: int | None,
    seed: int,
) -> None:
    groups = min(groups, heads)
    config = AttentionConfig(
        batch=batch,
        seq=seq,
        hidden=heads * d,
        heads=heads,
        kv_heads=groups if groups != heads else None,
        causal=causal and kv_seq is None,
        rope=rope and kv_seq is None,
        kv_seq=kv_seq,
        dtype="float64",
        seed=seed,
    )
    trace = trace_attention(config, backward=True)
    want, saved = autograd_of(trace)
    for name, value in want.items():
        np.testing.assert_allclose(trace[name].value, value, rtol=1e-10, atol=1e-12, err_msg=name)
    assert trace.training is not None
    assert trace.training.saved_bytes == saved


def test_float32_gradients_within_verify_tolerance(compute_backend: str) -> None:
    from attntrace.tools.verify import tolerance

    config = AttentionConfig(batch=2, seq=8, hidden=32, heads=4, kv_heads=2, rope=True, causal=True)
    trace = trace_attention(config, compute_backend, backward=True)
    want, _ = autograd_of(trace, wide=True)  # float64 autograd on the same float32 numbers
    tol = tolerance(config)
    for name, value in want.items():
        scale = max(1.0, float(np.abs(value).max()))  # verify's atol is relative to the largest
        np.testing.assert_allclose(
            trace[name].value, value, rtol=tol.rtol, atol=tol.atol * scale, err_msg=name
        )


def test_torch_backend_float64_equals_autograd() -> None:
    config = AttentionConfig(
        batch=2, seq=5, hidden=16, heads=4, kv_heads=2, softcap=3.0, causal=True, dtype="float64"
    )
    trace = trace_attention(config, "torch", backward=True)
    want, _ = autograd_of(trace)
    for name, value in want.items():
        np.testing.assert_allclose(trace[name].value, value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_keeping_one_gradient_gives_the_same_values() -> None:
    config = AttentionConfig(batch=2, seq=6, hidden=16, heads=4, causal=True, dtype="float64")
    whole = trace_attention(config, backward=True)
    one = trace_attention(config, backward=True, keep_values={"d_x", "d_w_q"})
    np.testing.assert_allclose(one["d_x"].value, whole["d_x"].value, rtol=1e-12, atol=0)
    np.testing.assert_allclose(one["d_w_q"].value, whole["d_w_q"].value, rtol=1e-12, atol=0)
    assert one["d_weights"].value is None
    assert one["weights"].value is None  # read by the backward, then dropped


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(
    batch=st.sampled_from([None, 2]),
    seq=st.integers(1, 5),
    groups=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    rope=st.booleans(),
    softcap=st.sampled_from([None, 3.0]),
    relative=st.booleans(),
    qk_norm=st.sampled_from([None, "head", "full"]),
)
def test_torch_backend_gradients_over_configs(
    batch: int | None,
    seq: int,
    groups: int,
    causal: bool,
    rope: bool,
    softcap: float | None,
    relative: bool,
    qk_norm: str | None,
) -> None:
    config = AttentionConfig(
        batch=batch,
        seq=seq,
        hidden=16,
        heads=4,
        kv_heads=groups if groups != 4 else None,
        causal=causal,
        rope=rope,
        softcap=softcap,
        relative_bias="8,16" if relative else None,
        qk_norm=qk_norm,
        dtype="float64",
    )
    trace = trace_attention(config, "torch", backward=True)
    want, saved = autograd_of(trace)
    for name, value in want.items():
        np.testing.assert_allclose(trace[name].value, value, rtol=1e-10, atol=1e-12, err_msg=name)
    assert trace.training is not None
    assert trace.training.saved_bytes == saved


@pytest.mark.parametrize("kind", ["additive", "bool"])
def test_a_user_mask_file_against_autograd(kind: str) -> None:
    config = AttentionConfig(batch=2, seq=5, hidden=16, heads=4, dtype="float64")
    rng = np.random.default_rng(1)
    keep = rng.random((2, 1, 5, 5)) > 0.3
    keep[..., 0] = True  # every query row keeps a key
    mask = (
        np.where(keep, 0.0, -np.inf) + rng.normal(size=keep.shape) if kind == "additive" else keep
    )
    trace = trace_attention(config, mask=mask, backward=True)
    want, saved = autograd_of(trace)
    for name, value in want.items():
        np.testing.assert_allclose(trace[name].value, value, rtol=1e-10, atol=1e-12, err_msg=name)
    assert trace.training is not None
    assert trace.training.saved_bytes == saved  # a bool mask is kept, an added one is not
    assert trace["mask"].saved is (kind == "bool")
