"""Values of every variant against torch's scaled_dot_product_attention and an independent RoPE.

The reference rebuilds the whole layer from x and the traced parameters with torch's own
functions (F.linear, SDPA with attn_mask / is_causal / enable_gqa); RoPE is written with
complex numbers, not with rotate_half.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attntrace import AttentionConfig, Trace, trace_attention
from attntrace.engine.masks import MaskWarning

torch = pytest.importorskip("torch")
F = torch.nn.functional


def rope_complex(x: Any, base: float) -> Any:
    """RoPE as a complex rotation: (x_i + i x_{i+d/2}) * exp(i * pos * base^(-2i/d));
    x (B, n, S, d)."""
    seq, d = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), freqs)  # (S, d/2)
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * torch.polar(
        torch.ones_like(angles), angles
    )
    return torch.cat((z.real, z.imag), dim=-1)


def reference(trace: Trace, attn_mask: Any = None, is_causal: bool = False) -> tuple[Any, Any]:
    """(context (B, h, S, d), output (B, S, H)) recomputed with torch from x and the parameters."""
    cfg = trace.config
    p = {name: torch.from_numpy(v) for name, v in trace.params.items()}
    x = torch.from_numpy(trace["x"].value)
    kv = torch.from_numpy(trace["x_kv"].value) if cfg.cross else x
    if not cfg.batched:
        x, kv = x[None], kv[None]  # SDPA wants the batch axis

    def heads(t: Any, c: str, n: int) -> Any:
        return (
            F.linear(t, p[f"w_{c}"], p.get(f"b_{c}"))
            .unflatten(-1, (n, cfg.head_dim))
            .transpose(1, 2)
        )

    q, k, v = heads(x, "q", cfg.heads), heads(kv, "k", cfg.groups), heads(kv, "v", cfg.groups)
    if cfg.rope:
        q, k = rope_complex(q, cfg.rope_base), rope_complex(k, cfg.rope_base)
    context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=cfg.grouped
    )
    out = F.linear(context.transpose(1, 2).flatten(-2), p["w_o"], p.get("b_o"))
    return (context, out) if cfg.batched else (context[0], out[0])


def check(trace: Trace, **sdpa: Any) -> None:
    context, out = reference(trace, **sdpa)
    np.testing.assert_allclose(trace["context"].value, context.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(trace["output"].value, out.numpy(), rtol=1e-10, atol=1e-12)


def f64(**fields: Any) -> AttentionConfig:
    return AttentionConfig(dtype="float64", **fields)


def test_causal_matches_sdpa_is_causal(compute_backend: str) -> None:
    t = trace_attention(f64(batch=2, seq=5, hidden=12, heads=3, causal=True), compute_backend)
    check(t, is_causal=True)
    weights = t["weights"].value
    assert np.all(
        weights[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0.0
    )  # exactly 0 above the diagonal


def test_causal_cross_attention_is_top_left_aligned(compute_backend: str) -> None:
    check(
        trace_attention(f64(seq=3, kv_seq=5, hidden=8, heads=2, causal=True), compute_backend),
        is_causal=True,
    )


def test_key_padding_matches_sdpa_bool_mask(compute_backend: str) -> None:
    t = trace_attention(
        f64(batch=3, seq=4, hidden=8, heads=2, key_lengths=(4, 2, 1)), compute_backend
    )
    keep = torch.arange(4) < torch.tensor([4, 2, 1])[:, None]  # (B, N), True = attend
    check(t, attn_mask=keep[:, None, None, :])
    assert np.all(t["weights"].value[1, :, :, 2:] == 0.0)


@pytest.mark.slow
def test_key_padding_polarity_of_nn_multihead_attention() -> None:
    """nn.MultiheadAttention's key_padding_mask is True = ignore: the opposite of ours."""
    t = trace_attention(f64(batch=2, seq=4, hidden=8, heads=2, key_lengths=(4, 2)), "numpy")
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(
            torch.from_numpy(np.concatenate([t.params[f"w_{c}"] for c in "qkv"]))
        )
        mha.in_proj_bias.copy_(
            torch.from_numpy(np.concatenate([t.params[f"b_{c}"] for c in "qkv"]))
        )
        mha.out_proj.weight.copy_(torch.from_numpy(t.params["w_o"]))
        mha.out_proj.bias.copy_(torch.from_numpy(t.params["b_o"]))
    x = torch.from_numpy(t["x"].value)
    ignore = ~(torch.arange(4) < torch.tensor([4, 2])[:, None])  # True = ignore
    out, _ = mha(x, x, x, key_padding_mask=ignore, need_weights=False)
    np.testing.assert_allclose(t["output"].value, out.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_causal_and_padding_combine(compute_backend: str) -> None:
    t = trace_attention(
        f64(batch=2, seq=4, hidden=8, heads=2, causal=True, key_lengths=(3, 2)), compute_backend
    )
    keep = (
        torch.ones(4, 4, dtype=torch.bool).tril()
        & (torch.arange(4) < torch.tensor([3, 2])[:, None])[:, None, None, :]
    )
    check(t, attn_mask=keep)


def test_cross_attention_with_kv_hidden(compute_backend: str) -> None:
    check(
        trace_attention(
            f64(batch=2, seq=3, kv_seq=6, kv_hidden=5, hidden=8, heads=2), compute_backend
        )
    )


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_and_multi_query_match_sdpa_enable_gqa(compute_backend: str, kv_heads: int) -> None:
    t = trace_attention(
        f64(batch=2, seq=4, hidden=16, heads=4, kv_heads=kv_heads, causal=True), compute_backend
    )
    check(t, is_causal=True)


def test_head_dim_and_no_bias(compute_backend: str) -> None:
    check(
        trace_attention(
            f64(seq=3, hidden=6, heads=2, head_dim_override=5, bias=False), compute_backend
        )
    )


def test_rope_matches_the_complex_formulation(compute_backend: str) -> None:
    t = trace_attention(
        f64(batch=2, seq=6, hidden=16, heads=2, rope=True, rope_base=500.0), compute_backend
    )
    q = torch.from_numpy(t["q"].value)
    np.testing.assert_allclose(
        t["q_rot"].value, rope_complex(q, 500.0).numpy(), rtol=1e-12, atol=1e-12
    )
    check(t)


def test_rope_scores_depend_only_on_relative_position() -> None:
    """The defining property of RoPE: <rot(q, m), rot(k, n)> depends on m - n only."""
    t = trace_attention(f64(seq=8, hidden=8, heads=1, rope=True), "numpy")
    cos, sin = t["rope_cos"].value, t["rope_sin"].value  # (S, d)
    q, k = np.random.default_rng(1).standard_normal((2, 8))

    def rot(v: np.ndarray, pos: int) -> np.ndarray:
        return v * cos[pos] + np.concatenate((-v[4:], v[:4])) * sin[pos]

    assert rot(q, 5) @ rot(k, 3) == pytest.approx(rot(q, 2) @ rot(k, 0), rel=1e-12)


def test_everything_at_once_with_gqa_rope_and_masks(compute_backend: str) -> None:
    cfg = f64(
        batch=2,
        seq=5,
        hidden=12,
        heads=4,
        kv_heads=2,
        head_dim_override=4,
        kv_hidden=7,
        bias=False,
        causal=True,
        key_lengths=(5, 3),
        rope=True,
    )
    keep = (
        torch.ones(5, 5, dtype=torch.bool).tril()
        & (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, None, :]
    )
    check(trace_attention(cfg, compute_backend), attn_mask=keep)


def test_float_mask_file_is_added(compute_backend: str, tmp_path: Path) -> None:
    additive = np.random.default_rng(0).standard_normal((4, 4))
    additive[0, 1:] = -np.inf
    t = trace_attention(f64(seq=4, hidden=8, heads=2), compute_backend, mask=additive)
    assert t["masked"].op == "scaled + mask"
    assert t["mask"].dtype == "float64"
    check(t, attn_mask=torch.from_numpy(additive))


def test_fully_masked_row_gives_zeros_and_a_warning(compute_backend: str) -> None:
    keep = np.ones((2, 1, 3, 3), dtype=bool)
    keep[1, 0, 2] = False  # batch item 1, query 2: no key at all
    with pytest.warns(MaskWarning, match="attend to no key"):
        t = trace_attention(f64(batch=2, seq=3, hidden=8, heads=2), compute_backend, mask=keep)
    assert t.notes
    assert "2 query row(s)" in t.notes[0]
    assert not np.isnan(t["output"].value).any()
    assert np.all(t["weights"].value[1, :, 2] == 0.0)
    assert np.all(t["context"].value[1, :, 2] == 0.0)
    np.testing.assert_allclose(t["output"].value[1, 2], t.params["b_o"])
    check(t, attn_mask=torch.from_numpy(keep))  # SDPA gives zeros too


def test_no_warning_without_fully_masked_rows() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = trace_attention(
            AttentionConfig(batch=2, seq=3, hidden=8, heads=2, causal=True, key_lengths=(1, 3))
        )
    assert t.notes == ()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_masks_in_low_precision_stay_finite(dtype: str) -> None:
    t = trace_attention(
        AttentionConfig(
            batch=2, seq=4, hidden=8, heads=2, causal=True, key_lengths=(2, 4), dtype=dtype
        )
    )
    assert np.isfinite(t["weights"].value).all()
    np.testing.assert_allclose(t["weights"].value.sum(-1), 1.0, rtol=1e-2)


def test_backends_agree_on_every_variant() -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=4,
        hidden=12,
        heads=4,
        kv_heads=1,
        head_dim_override=4,
        kv_hidden=5,
        causal=True,
        key_lengths=(4, 2),
        rope=True,
    )
    a, b = trace_attention(cfg, "numpy"), trace_attention(cfg, "torch")
    for sa, sb in zip(a, b, strict=True):
        np.testing.assert_allclose(sa.value, sb.value, rtol=1e-5, atol=1e-6, err_msg=sa.name)
