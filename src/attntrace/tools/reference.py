"""PyTorch's own attention for a config, written independently of :mod:`attntrace.engine.attention`:
the references of ``attntrace verify``.

- SDPA: ``torch.nn.functional.scaled_dot_product_attention`` with projections by ``F.linear``,
  masks as ``attn_mask`` (bool, True = attend, or additive floats) or ``is_causal``, built here
  from the options with torch (not by :mod:`attntrace.engine.masks`), ``enable_gqa=True`` for
  grouped-query attention, and RoPE in Meta's complex-number formulation (:func:`rope_reference`).
  Its attention weights are SDPA applied to an identity value matrix: softmax(q kᵀ·scale) @ I.
- ``torch.nn.MultiheadAttention``, where it applies (:func:`mha_skip_reason` says why not).
  Its bool masks mean True = *ignore*, the opposite of SDPA's: the mask is inverted.

Both give (as numpy) ``output`` and ``weights``; a query row left without any key gives zeros in
SDPA (checked with torch 2.13) and NaN in nn.MultiheadAttention.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig

if TYPE_CHECKING:
    import numpy as np

MHA, SDPA = (
    "nn.MultiheadAttention",
    "SDPA",
)  # SDPA: torch.nn.functional.scaled_dot_product_attention


def torch_references(
    config: AttentionConfig, inputs: Mapping[str, np.ndarray | None], mask: np.ndarray | None = None
) -> dict[str, dict[str, np.ndarray] | str]:
    """{reference: {"output": ..., "weights": ...}} from SDPA and nn.MultiheadAttention, as
    numpy; a reference that does not apply to ``config`` maps to the reason.

    >>> from attntrace.engine.inputs import random_sources
    >>> cfg = AttentionConfig(seq=3, hidden=8, heads=2, rope=True)
    >>> refs = torch_references(cfg, {n: s.make() for n, s in random_sources(cfg).items()})
    >>> refs[SDPA]["weights"].shape, refs[MHA]
    ((2, 3, 3), 'nn.MultiheadAttention has no rotary embedding (--rope)')
    """
    import torch

    dt = getattr(torch, config.dtype)
    t = {name: torch.from_numpy(v).to(dt) for name, v in inputs.items() if v is not None}
    attn_mask, is_causal = reference_mask(config, mask)
    skip = mha_skip_reason(config, attn_mask)
    with torch.no_grad():
        sdpa = _sdpa(config, t, attn_mask, is_causal)
        mha = skip or _mha(config, t, attn_mask, is_causal)
    return {MHA: mha if isinstance(mha, str) else _numpy(mha), SDPA: _numpy(sdpa)}


def reference_mask(config: AttentionConfig, user: np.ndarray | None) -> tuple[Any, bool]:
    """SDPA's ``(attn_mask, is_causal)`` for the config's masks and a user mask, made with torch:
    is_causal alone for a causal mask only, else a bool mask (True = attend) or additive floats.

    >>> reference_mask(AttentionConfig(causal=True), None)
    (None, True)
    >>> padded = AttentionConfig(batch=2, seq=3, hidden=8, heads=2, causal=True, key_lengths=(3, 1))
    >>> keep, _ = reference_mask(padded, None)
    >>> keep.shape, keep[1, 0].int().tolist()
    (torch.Size([2, 1, 3, 3]), [[1, 0, 0], [1, 0, 0], [1, 0, 0]])
    """
    import torch

    keep: Any = None
    if config.key_lengths is not None:
        valid = torch.arange(config.keys) < torch.tensor(config.key_lengths)[:, None]  # (B, N)
        keep = valid[:, None, None, :]  # (B, 1, 1, N)
    if user is not None and user.dtype.kind == "b":
        keep = _and(keep, torch.from_numpy(user))
    if config.window is not None:
        pos = torch.arange(max(config.seq, config.keys))
        band = pos[: config.keys][None, :] > pos[: config.seq][:, None] - config.window  # (S, N)
        keep = _and(keep, band)
    if config.causal and keep is None and user is None:
        return None, True  # SDPA's own causal mask (top-left aligned)
    if config.causal:
        keep = _and(keep, torch.ones(config.seq, config.keys, dtype=torch.bool).tril())  # (S, N)
    if user is not None and user.dtype.kind == "f":
        dt = getattr(torch, config.dtype)
        added = torch.from_numpy(user).to(dt)
        return (added if keep is None else added.masked_fill(~keep, -math.inf)), False
    return keep, False


def _and(a: Any, b: Any) -> Any:
    return b if a is None else a & b


def mha_skip_reason(config: AttentionConfig, attn_mask: Any) -> str | None:
    """Why nn.MultiheadAttention cannot be a reference for ``config``, or None."""
    if config.grouped:
        return f"{MHA} has no grouped-query attention (--kv-heads)"
    if config.rope:
        return f"{MHA} has no rotary embedding (--rope)"
    if config.qk_norm is not None or config.softcap is not None or config.position_biased:
        return f"{MHA} has no q/k norm, soft-capping or position bias (T5's, ALiBi)"
    if config.heads * config.head_dim != config.hidden:
        return f"{MHA} ties head_dim to hidden / heads (--head-dim)"
    if attn_mask is not None and bool(_dead(attn_mask).any()):
        return f"{MHA} gives NaN for query rows without any key (SDPA gives zeros)"
    return None


def _dead(attn_mask: Any) -> Any:
    """Per query row (the mask's shape without N): True when every key is masked."""
    import torch

    return (
        (~attn_mask).all(dim=-1)
        if attn_mask.dtype == torch.bool
        else torch.isneginf(attn_mask).all(dim=-1)
    )


def rope_reference(x: Any, base: float) -> Any:
    """RoPE as Meta's Llama code writes it (``apply_rotary_emb``): neighbours (2i, 2i + 1) as one
    complex number, times ``exp(1j * pos * base^(-2i/d))``. attntrace (like Hugging Face) rotates
    dimension i with i + d/2 instead; the two are the same rotation up to a fixed permutation of
    the head dimension, so x is interleaved ([0, d/2, 1, d/2 + 1, ...]) first and restored after.
    Computed in float64; x (..., S, d).

    >>> import torch
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    >>> rope_reference(x, 10000.0).round(decimals=4).tolist()
    [[1.0, 0.0], [0.5403, 0.8415]]
    """
    import torch

    seq, d = x.shape[-2], x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), freqs)  # (S, d/2)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)  # (S, d/2) complex
    perm = torch.arange(d).reshape(2, d // 2).T.flatten()  # (d,) pairs i, i + d/2 side by side
    pairs = x[..., perm].to(torch.float64).reshape(*x.shape[:-1], d // 2, 2)  # (..., S, d/2, 2)
    rotated = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * freqs_cis).flatten(
        -2
    )  # (..., S, d)
    return rotated[..., torch.argsort(perm)].to(x.dtype)


def _sdpa(
    config: AttentionConfig, t: Mapping[str, Any], attn_mask: Any, is_causal: bool
) -> tuple[Any, Any]:
    """(output (B, S, H), weights (B, h, S, N)) by F.linear and SDPA."""
    import torch

    F = torch.nn.functional
    x = t["x"] if config.batched else t["x"][None]  # (B, S, H): SDPA wants the batch axis
    kv = (t["x_kv"] if config.batched else t["x_kv"][None]) if config.cross else x  # (B, N, M)

    def heads(src: Any, c: str, n: int) -> Any:  # (B, S, n·d) -> (B, n, S, d)
        y = F.linear(src, t[f"w_{c}"], t.get(f"b_{c}"))
        if config.qk_norm == "full" and c in "qk":
            y = _rms(y, t[f"n_{c}"], config)
        y = y.reshape(*y.shape[:-1], n, config.head_dim).transpose(1, 2)
        return _rms(y, t[f"n_{c}"], config) if config.qk_norm == "head" and c in "qk" else y

    q, k, v = (
        heads(x, "q", config.heads),
        heads(kv, "k", config.groups),
        heads(kv, "v", config.groups),
    )
    if config.rope and config.rope_style == "interleaved":
        q, k = rope_pairs_reference(q, config), rope_pairs_reference(k, config)
    elif config.rope and (config.rope_scaling is not None or config.rotary_dims is not None):
        q, k = _rope_variant(q, config), _rope_variant(k, config)
    elif config.rope:
        q, k = rope_reference(q, config.rope_base), rope_reference(k, config.rope_base)
    if config.relative_bias is not None:  # T5: the bias joins the mask as floats
        attn_mask = _with_relative_bias(config, t["rel_bias"], attn_mask, is_causal)
        is_causal = False
    if config.alibi:  # ALiBi: the bias joins the mask as floats, as T5's does
        attn_mask = _with_bias(config, alibi_reference(config), attn_mask, is_causal)
        is_causal = False
    if config.softcap is not None:  # capped first: the bias and the mask are added after
        return _eager_softcap(config, t, q, k, v, attn_mask, is_causal)
    sdpa = {
        "attn_mask": attn_mask,
        "is_causal": is_causal,
        "scale": config.scale,
        "enable_gqa": config.grouped,
    }
    context = F.scaled_dot_product_attention(
        q, k, v, **sdpa
    )  # (B, h, S, d); scale None: SDPA's own 1/√d
    eye = torch.eye(config.keys, dtype=q.dtype).expand(*v.shape[:-1], config.keys)  # (B, g, N, N)
    weights = F.scaled_dot_product_attention(
        q, k, eye, **sdpa
    )  # softmax(...) @ I = the weights (B, h, S, N)
    output = F.linear(context.transpose(1, 2).flatten(-2), t["w_o"], t.get("b_o"))  # (B, S, H)
    return (output, weights) if config.batched else (output[0], weights[0])


def _with_relative_bias(
    config: AttentionConfig, table: Any, attn_mask: Any, is_causal: bool
) -> Any:
    """T5's position bias (h, S, N) from the table, as a float mask with the other masks."""
    import torch

    from attntrace.config.variants import parse_relative_bias
    from attntrace.engine.relative import buckets

    spec = parse_relative_bias(config.relative_bias or "")
    index = torch.from_numpy(buckets(config.seq, config.keys, spec))  # (S, N)
    bias = table[index].permute(2, 0, 1)  # (S, N, h) -> (h, S, N)
    return _with_bias(config, bias, attn_mask, is_causal)


def alibi_reference(config: AttentionConfig) -> Any:
    """ALiBi's bias (h, S, N) written as MPT's ``build_mpt_alibi_tensor`` does (slopes of the
    power of two at or above h, odd ones first when h is not one), not as the engine does
    (Press et al.'s); query i sits at position i + cached.

    >>> b = alibi_reference(AttentionConfig(seq=2, hidden=8, heads=2))
    >>> b[:, 1].tolist()
    [[-0.0625, 0.0], [-0.00390625, 0.0]]
    """
    import torch

    h = config.heads
    power = 2 ** math.ceil(math.log2(h))
    slopes = 1.0 / 2 ** (torch.arange(1, power + 1, dtype=torch.float64) * (8 / power))
    if power != h:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:h]
    keys = torch.arange(config.keys, dtype=torch.float64)  # (N,)
    queries = torch.arange(config.seq, dtype=torch.float64) + config.cached  # (S,)
    bias = slopes[:, None, None] * (keys[None, :] - queries[:, None])  # (h, S, N)
    return bias.to(getattr(torch, config.dtype))


def _with_bias(config: AttentionConfig, bias: Any, attn_mask: Any, is_causal: bool) -> Any:
    """A position bias (h, S, N) as a float mask, with the other masks."""
    import torch

    if is_causal:
        attn_mask = torch.ones(config.seq, config.keys, dtype=torch.bool).tril()  # (S, N)
    if attn_mask is None:
        return bias
    if attn_mask.dtype == torch.bool:
        return bias.masked_fill(~attn_mask, -math.inf)
    return bias + attn_mask


def _rms(y: Any, weight: Any, config: AttentionConfig) -> Any:
    """RMSNorm over the last axis, in float32 or wider, as transformers' Qwen3RMSNorm."""
    import torch

    eps = config.qk_norm_eps if config.qk_norm_eps is not None else 1e-6
    wide = y.to(torch.promote_types(y.dtype, torch.float32))
    return weight * (wide / torch.sqrt(wide.square().mean(-1, keepdim=True) + eps)).to(y.dtype)


def _rope_variant(x: Any, config: AttentionConfig) -> Any:
    """RoPE with scaled frequencies (--rope-scaling) on the first R dims (--rotary-dims), in
    float64, pairing i with i + R/2 as transformers' rotate_half does; x (..., S, d)."""
    import torch

    from attntrace.engine.rope import inv_frequencies

    r = config.rotary_dims or config.head_dim
    inv, factor = inv_frequencies(r, config.rope_base, config.rope_scaling, config.seq)
    positions = torch.arange(config.seq, dtype=torch.float64)  # (S,)
    angles = torch.outer(positions, torch.from_numpy(inv))  # (S, R/2)
    cos, sin = angles.cos() * factor, angles.sin() * factor  # (S, R/2)
    x1, x2 = x[..., : r // 2].double(), x[..., r // 2 : r].double()  # (..., S, R/2) each
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (..., S, R)
    return torch.cat((rotated.to(x.dtype), x[..., r:]), dim=-1)  # (..., S, d)


def rope_pairs_reference(x: Any, config: AttentionConfig) -> Any:
    """RoPE of --rope-style interleaved as Meta's Llama code writes it (``apply_rotary_emb``):
    neighbours (2i, 2i + 1) of the first R dims as one complex number, times
    ``exp(1j * pos * inv_freq_i)``, in float64; the dims after R pass. x (..., S, d).

    >>> import torch
    >>> cfg = AttentionConfig(seq=2, hidden=4, heads=1, rope=True, rope_style="interleaved")
    >>> x = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 2, dtype=torch.float64)
    >>> rope_pairs_reference(x, cfg)[1].round(decimals=4).tolist()
    [0.5403, 0.8415, 1.0, 0.01]
    """
    import torch

    from attntrace.engine.rope import inv_frequencies

    r = config.rotary_dims or config.head_dim
    inv, factor = inv_frequencies(r, config.rope_base, config.rope_scaling, config.seq)
    angles = torch.outer(torch.arange(config.seq, dtype=torch.float64), torch.from_numpy(inv))
    freqs_cis = torch.polar(torch.full_like(angles, factor), angles)  # (S, R/2) complex
    pairs = x[..., :r].to(torch.float64).reshape(*x.shape[:-1], r // 2, 2)  # (..., S, R/2, 2)
    turned = torch.view_as_complex(pairs.contiguous()) * freqs_cis  # (..., S, R/2)
    rotated = torch.view_as_real(turned).flatten(-2)  # (..., S, R)
    return torch.cat((rotated.to(x.dtype), x[..., r:]), dim=-1)  # (..., S, d)


def _eager_softcap(
    config: AttentionConfig,
    t: Mapping[str, Any],
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any,
    is_causal: bool,
) -> tuple[Any, Any]:
    """SDPA has no soft-capping: the scores written out, C * tanh(s / C), then the mask (a
    float mask holds T5's position bias too)."""
    import torch

    F = torch.nn.functional
    r = config.heads // config.groups
    k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)  # (B, h, N, d)
    cap = float(config.softcap or 1.0)
    scores = cap * torch.tanh(q @ k.transpose(-2, -1) * config.score_scale / cap)  # (B, h, S, N)
    if is_causal:
        attn_mask = torch.ones(config.seq, config.keys, dtype=torch.bool).tril()
    if attn_mask is not None:
        boolean = attn_mask.dtype == torch.bool
        scores = scores.masked_fill(~attn_mask, -math.inf) if boolean else scores + attn_mask
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # (B, h, S, N); keyless rows: zeros
    merged = (weights @ v).transpose(1, 2).flatten(-2)  # (B, S, h·d)
    output = F.linear(merged, t["w_o"], t.get("b_o"))  # (B, S, H)
    return (output, weights) if config.batched else (output[0], weights[0])


def _mha(
    config: AttentionConfig, t: Mapping[str, Any], attn_mask: Any, is_causal: bool
) -> tuple[Any, Any]:
    """(output, weights) of nn.MultiheadAttention with the same weights and mask."""
    mha = mha_module(config, t)
    x = t["x"]  # (B, S, H) or (S, H): MHA takes both
    kv = t["x_kv"] if config.cross else x
    mask = _mha_mask(config, attn_mask, is_causal)
    return mha(  # type: ignore[no-any-return]
        x, kv, kv, attn_mask=mask, need_weights=True, average_attn_weights=False
    )


def mha_query_factor(config: AttentionConfig) -> float:
    """What :func:`mha_module` multiplies w_q and b_q by: MHA always scales q by 1/√d, another
    --scale is folded into them (the same maths)."""
    return 1.0 if config.scale is None else config.score_scale * math.sqrt(config.head_dim)


def mha_module(config: AttentionConfig, t: Mapping[str, Any]) -> Any:
    """nn.MultiheadAttention holding the weights of ``t`` (call under ``torch.no_grad()``)."""
    import torch

    mha = torch.nn.MultiheadAttention(
        config.hidden,
        config.heads,
        bias=config.bias,
        batch_first=True,
        kdim=config.kv_width,
        vdim=config.kv_width,
        dtype=t["x"].dtype,
    ).eval()
    fold = mha_query_factor(config)
    if mha.in_proj_weight is not None:  # kdim = vdim = H: one (3H, H) matrix
        mha.in_proj_weight.copy_(torch.cat([t["w_q"] * fold, t["w_k"], t["w_v"]]))
    else:  # --kv-hidden: separate q (H, H), k and v (H, M)
        for c, w in (("q", t["w_q"] * fold), ("k", t["w_k"]), ("v", t["w_v"])):
            getattr(mha, f"{c}_proj_weight").copy_(w)
    if config.bias:
        mha.in_proj_bias.copy_(torch.cat([t["b_q"] * fold, t["b_k"], t["b_v"]]))
        mha.out_proj.bias.copy_(t["b_o"])
    mha.out_proj.weight.copy_(t["w_o"])
    return mha


def _mha_mask(config: AttentionConfig, attn_mask: Any, is_causal: bool) -> Any:
    """SDPA's mask in MHA's terms: bool inverted (True = ignore), shaped (S, N) or (B·h, S, N)."""
    import torch

    if is_causal:
        attn_mask = torch.ones(config.seq, config.keys, dtype=torch.bool).tril()  # (S, N)
    if attn_mask is None:
        return None
    mask = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
    if mask.dim() <= 2:
        return mask.expand(config.seq, config.keys)  # (S, N)
    scores = (
        *((config.batch,) if config.batch is not None else ()),
        config.heads,
        config.seq,
        config.keys,
    )
    return mask.expand(scores).reshape(-1, config.seq, config.keys)  # (B·h, S, N)


def _numpy(pair: tuple[Any, Any]) -> dict[str, np.ndarray]:
    output, weights = pair
    return {"output": output.numpy(), "weights": weights.numpy()}
