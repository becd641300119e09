"""The flash backward (FlashAttention-2's tiles, from the forward's lse) against the eager
backward and torch autograd: every gradient, its tile steps, its saved bytes, its refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, trace_attention
from attntrace.errors import ConfigError

torch = pytest.importorskip("torch")

from attntrace.tools.gradients import eager_autograd as autograd_of  # noqa: E402

VARIANTS = {
    "plain": {},
    "causal": {"batch": 2, "causal": True},
    "gqa": {"batch": 2, "kv_heads": 2},
    "gqa_causal_rope": {"kv_heads": 1, "causal": True, "rope": True},
    "cross": {"batch": 2, "kv_seq": 7, "kv_hidden": 12},
    "qk_norm": {"qk_norm": "head", "causal": True},
}


def _grads(trace):  # type: ignore[no-untyped-def]
    names = ["d_x", "d_x_kv", *(f"d_{p.name}" for p in trace.parameters)]
    return {n: trace[n].value for n in names if n in trace}


def _config(variant: str, **extra: object) -> AttentionConfig:
    return AttentionConfig(
        seq=7, hidden=16, heads=4, seed=5, block_size=3, **{**VARIANTS[variant], **extra}
    )


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_flash_gradients_equal_autograd_and_eager(variant: str, backend: str) -> None:
    config = _config(variant, dtype="float64", algorithm="flash")
    flash = trace_attention(config, backend, backward=True)
    want, _ = autograd_of(flash)
    got = _grads(flash)
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-10, atol=1e-12, err_msg=name)
    eager = trace_attention(_config(variant, dtype="float64"), backend, backward=True)
    for name, value in _grads(eager).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_flash_float32_close_to_eager() -> None:
    flash = trace_attention(_config("causal", algorithm="flash"), backward=True)
    eager = trace_attention(_config("causal"), backward=True)
    for name, value in _grads(eager).items():
        np.testing.assert_allclose(_grads(flash)[name], value, rtol=1e-4, atol=1e-5)


def test_lse_only_with_backward_and_equal_to_logsumexp() -> None:
    config = _config("causal", dtype="float64", algorithm="flash")
    assert "lse" not in trace_attention(config).names  # plain flash traces are unchanged
    t = trace_attention(config, backward=True)
    lse = t["lse"]
    assert lse.shape == (2, 4, 7)
    assert lse.axes == ("B", "h", "S")
    assert lse.saved
    q, k = torch.from_numpy(t["q"].value), torch.from_numpy(t["k"].value)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(4)
    scores = scores.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -math.inf)
    np.testing.assert_allclose(lse.value, torch.logsumexp(scores, -1).numpy(), rtol=1e-12)
    assert lse.flops == 2 * 2 * 4 * 7  # m + log(l)


def test_tile_steps_shapes_counts_and_flops() -> None:
    config = AttentionConfig(seq=6, hidden=16, heads=4, block_size=3, algorithm="flash")
    for backend in ("shape", "numpy"):
        t = trace_attention(config, backend, backward=True)
        h, S, d, n = 4, 6, 4, 4  # 2 x 2 tiles of 3 x 3
        assert t["delta"].shape == (h, S)
        assert t["delta"].flops == 2 * h * S * d
        assert t["p_again"].shape == (h, 3, 3)
        assert t["p_again"].repeat == n
        assert t["d_s_tile"].shape == (h, 3, 3)
        assert t["d_q_block"].shape == (h, 3, d)
        assert t["d_k_block"].shape == (h, 3, d)
        assert t["d_v_block"].flops == 2 * h * S * S * d  # every tile's p_againᵀ @ d_context
        assert t["d_p_tile"].flops == 2 * h * S * S * d
        assert t["d_q"].shape == (h, S, d)
        assert t["d_v"].shape == (h, S, d)
        assert "d_weights" not in t
        assert "weights" not in t

    causal = trace_attention(
        AttentionConfig(**{**config.__dict__, "causal": True}), "numpy", backward=True
    )
    assert causal["s_again"].repeat == 3  # the tile above the diagonal skipped


def test_flash_saved_bytes_are_the_training_figure() -> None:
    config = AttentionConfig(seq=64, hidden=16, heads=4, block_size=16, algorithm="flash")
    t = trace_attention(config, "shape", backward=True)
    assert t.training is not None
    saved = {s.name for s in t.steps if s.saved}
    assert saved == {"x", "q_proj", "k_proj", "v_proj", "context", "lse", "merged"}
    assert t.training.saved_bytes == t.training.flash_saved_bytes
    assert t.training.saved_bytes == sum(t[n].nbytes for n in saved)
    eager = trace_attention(
        AttentionConfig(**{**config.__dict__, "algorithm": "eager"}), "shape", backward=True
    )
    assert eager.training is not None
    assert t.training.eager_saved_bytes == eager.training.saved_bytes
    assert t.training.saved_bytes < eager.training.saved_bytes


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        ({"window": 2}, "--window"),
        ({"softcap": 2.0}, "--softcap"),
        ({"relative_bias": "8,16"}, "--relative-bias"),
    ],
)
def test_flash_variants_not_written_are_refused(extra: dict[str, object], word: str) -> None:
    config = AttentionConfig(seq=5, hidden=16, heads=4, algorithm="flash", **extra)
    with pytest.raises(ConfigError, match=word):
        trace_attention(config, backward=True)


def test_flash_with_a_mask_file_is_refused() -> None:
    config = AttentionConfig(seq=5, hidden=16, heads=4, algorithm="flash")
    with pytest.raises(ConfigError, match="--mask"):
        trace_attention(config, backward=True, mask=np.ones((5, 5), dtype=bool))


@settings(max_examples=12, deadline=None)
@given(
    seq=st.integers(1, 9),
    block=st.integers(1, 4),
    causal=st.booleans(),
    kv_heads=st.sampled_from([None, 2, 1]),
    batch=st.sampled_from([None, 2]),
)
def test_flash_gradients_over_configs(
    seq: int, block: int, causal: bool, kv_heads: int | None, batch: int | None
) -> None:
    fields = {"seq": seq, "hidden": 8, "heads": 4, "dtype": "float64", "block_size": block}
    fields |= {"causal": causal, "kv_heads": kv_heads, "batch": batch, "seed": seq}
    flash = trace_attention(AttentionConfig(algorithm="flash", **fields), backward=True)
    want, _ = autograd_of(flash)
    for name, value in want.items():
        np.testing.assert_allclose(flash[name].value, value, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_flash_backward_steps_have_their_own_sentences(lang: str) -> None:
    from attntrace.learn.words import explain_trace, message_keys

    config = AttentionConfig(seq=4, hidden=8, heads=2, algorithm="flash", block_size=2)
    t = trace_attention(config, "shape", backward=True)
    words = explain_trace(t, lang)  # type: ignore[arg-type]
    for name in ("lse", "delta", "s_again", "p_again"):
        assert message_keys(t.config, t[name])[0] == name
        assert "(2, " in words[name]
        assert "gradient of the loss with respect to" not in words[name]
    assert "v_block" in words["d_v_block"]  # a gradient: the gradient's sentence
