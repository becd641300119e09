"""Gradients by torch autograd, written independently of :mod:`attntrace.engine.backward`: the
references of ``attntrace verify --backward``.

- eager autograd: attention written in plain torch as the study notes write it (``F.linear``,
  ``view``/``transpose``, ``q @ kᵀ``, ``torch.softmax``, ``weights @ v``; RoPE by
  ``rotate_half``, grouped-query attention by ``repeat_interleave``), differentiated by
  autograd, with the bytes autograd saves for its backward counted by
  ``torch.autograd.graph.saved_tensors_hooks`` (one count per storage, parameters left out);
- SDPA: autograd through the ``F.linear`` + ``F.scaled_dot_product_attention`` reference of
  :mod:`attntrace.tools.reference`;
- ``nn.MultiheadAttention``, where it applies: its ``in_proj_weight`` gradient split into q, k
  and v.

Each gives ``d_x`` (``d_x_kv``) and ``d_<parameter>`` as numpy, from the trace's own inputs,
parameters and ``d_output``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from attntrace.tools.reference import (
    MHA,
    SDPA,
    _mha_mask,
    _sdpa,
    mha_module,
    mha_query_factor,
    mha_skip_reason,
    reference_mask,
)

if TYPE_CHECKING:
    import numpy as np

    from attntrace.trace import Trace

#: The name of the plain-torch reference.
EAGER = "eager autograd"


def torch_gradients(
    trace: Trace, mask: np.ndarray | None = None
) -> dict[str, dict[str, np.ndarray] | str]:
    """{reference: {"d_x": ..., "d_w_q": ...}} for ``trace`` (a trace with values and its
    backward); a reference that does not apply maps to the reason.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), backward=True)
    >>> grads = torch_gradients(t)
    >>> sorted(grads), grads[SDPA]["d_w_q"].shape
    (['SDPA', 'eager autograd', 'nn.MultiheadAttention'], (8, 8))
    """
    config = trace.config
    out: dict[str, dict[str, np.ndarray] | str] = {EAGER: eager_autograd(trace)[0]}
    leaves = _leaves(trace, wide=False)
    attn_mask, is_causal = reference_mask(config, mask)
    sdpa = _sdpa(config, leaves, attn_mask, is_causal)[0]
    out[SDPA] = _backward(trace, sdpa, leaves)
    skip = mha_skip_reason(config, attn_mask)
    out[MHA] = skip or _mha_gradients(trace, attn_mask, is_causal)
    return out


def _leaves(trace: Trace, wide: bool) -> dict[str, Any]:
    """x (x_kv) and every parameter of ``trace`` as torch leaves that require a gradient."""
    import numpy as np
    import torch

    cast = np.float64 if wide else None
    names = [n for n in ("x", "x_kv") if n in trace]
    values = {n: trace[n].value for n in names} | dict(trace.params)
    return {
        n: torch.tensor(np.asarray(v, dtype=cast), requires_grad=True) for n, v in values.items()
    }


def _backward(trace: Trace, output: Any, leaves: dict[str, Any]) -> dict[str, np.ndarray]:
    """Autograd from ``output`` with the trace's d_output; the leaves' gradients as numpy."""
    import numpy as np
    import torch

    grad = torch.tensor(np.asarray(trace["d_output"].value)).to(output.dtype)
    output.backward(grad.reshape(output.shape))
    return {f"d_{n}": t.grad.numpy() for n, t in leaves.items() if t.grad is not None}


def eager_autograd(trace: Trace, wide: bool = False) -> tuple[dict[str, np.ndarray], int]:
    """The plain-torch reference's gradients and the bytes autograd saves for its backward
    (not counting the parameters; one count per storage). ``wide``: in float64.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), backward=True)
    >>> grads, saved = eager_autograd(t)
    >>> saved == t.training.saved_bytes
    True
    """
    import torch

    leaves = _leaves(trace, wide)
    params = {t.untyped_storage().data_ptr() for n, t in leaves.items() if n not in ("x", "x_kv")}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = _eager(trace, leaves)
    return _backward(trace, output, leaves), sum(saved.values())


def _eager(trace: Trace, p: dict[str, Any]) -> Any:
    """The forward of the study notes in plain torch (B, S, H) -> (B, S, H)."""
    import torch

    F = torch.nn.functional
    cfg = trace.config
    lead = (cfg.batch,) if cfg.batch is not None else ()
    n, d = len(lead), cfg.head_dim
    x, x_kv = p["x"], p.get("x_kv", p["x"])
    q = F.linear(x, p["w_q"], p.get("b_q"))  # (B, S, h·d)
    k = F.linear(x_kv, p["w_k"], p.get("b_k"))  # (B, N, g·d)
    v = F.linear(x_kv, p["w_v"], p.get("b_v"))
    if cfg.qk_norm == "full":  # OLMo 2: over the whole projection
        q, k = _rms(q, p["n_q"], cfg), _rms(k, p["n_k"], cfg)
    q = q.view(*lead, cfg.seq, cfg.heads, d).transpose(n, n + 1)  # (B, h, S, d)
    k = k.view(*lead, cfg.keys, cfg.groups, d).transpose(n, n + 1)  # (B, g, N, d)
    v = v.view(*lead, cfg.keys, cfg.groups, d).transpose(n, n + 1)
    if cfg.qk_norm == "head":
        q, k = _rms(q, p["n_q"], cfg), _rms(k, p["n_k"], cfg)
    if cfg.rope:
        cos = torch.tensor(trace["rope_cos"].value).to(x.dtype)  # (S, d)
        sin = torch.tensor(trace["rope_sin"].value).to(x.dtype)
        dims, pairs = cfg.rotary_dims or d, cfg.rope_style == "interleaved"
        q = q * cos + _rotate(q, dims, pairs) * sin
        k = k * cos + _rotate(k, dims, pairs) * sin
    if cfg.grouped:  # a copy of each kv head per query head, as the traced forward
        r = cfg.heads // cfg.groups
        k, v = k.repeat_interleave(r, dim=n), v.repeat_interleave(r, dim=n)
    s = (q @ k.transpose(-2, -1)) * cfg.score_scale  # (B, h, S, N)
    if cfg.softcap is not None:
        s = cfg.softcap * torch.tanh(s / cfg.softcap)
    if cfg.relative_bias is not None:  # T5: the table's rows picked by a one-hot product
        from attntrace.engine.relative import relative_sources

        onehot = torch.tensor(relative_sources(cfg)["rel_onehot"].make()).to(s.dtype)
        s = s + (onehot @ p["rel_bias"]).permute(2, 0, 1)  # (S, N, h) -> (h, S, N)
    if "mask" in trace:
        mask = torch.tensor(trace["mask"].value)
        s = torch.where(mask, s, -math.inf) if mask.dtype == torch.bool else s + mask.to(s.dtype)
    context = torch.softmax(s, dim=-1) @ v  # (B, h, S, d)
    merged = context.transpose(n, n + 1).reshape(*lead, cfg.seq, cfg.heads * d)
    return F.linear(merged, p["w_o"], p.get("b_o"))


def _rms(x: Any, weight: Any, cfg: Any) -> Any:
    """RMSNorm as transformers writes it (LlamaRMSNorm): in at least float32."""
    import torch

    eps = cfg.qk_norm_eps if cfg.qk_norm_eps is not None else 1e-6
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    variance = wide.pow(2).mean(-1, keepdim=True)
    return weight * (wide * torch.rsqrt(variance + eps)).to(x.dtype)


def _rotate(x: Any, dims: int, pairs: bool) -> Any:
    """rotate_half (or the pairs of neighbours) of the first ``dims`` entries, zeros after."""
    import torch

    part, rest = x[..., :dims], x[..., dims:]
    if pairs:
        turned = torch.stack((-part[..., 1::2], part[..., 0::2]), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-part[..., dims // 2 :], part[..., : dims // 2]), dim=-1)
    return torch.cat((turned, torch.zeros_like(rest)), dim=-1)


def _mha_gradients(trace: Trace, attn_mask: Any, is_causal: bool) -> dict[str, np.ndarray]:
    """nn.MultiheadAttention's gradients, its packed in-projection split into q, k, v."""
    import torch

    config = trace.config
    leaves = _leaves(trace, wide=False)
    with torch.no_grad():
        mha = mha_module(config, leaves)
    x = leaves["x"]
    kv = leaves.get("x_kv", x)
    mask = _mha_mask(config, attn_mask, is_causal)
    out = mha(x, kv, kv, attn_mask=mask, need_weights=False)[0]
    grads = _backward(trace, out, {n: t for n, t in leaves.items() if n in ("x", "x_kv")})
    fold, width = mha_query_factor(config), config.hidden
    if mha.in_proj_weight is not None:
        w = mha.in_proj_weight.grad
        parts = {"q": w[:width], "k": w[width : 2 * width], "v": w[2 * width :]}
    else:
        parts = {c: getattr(mha, f"{c}_proj_weight").grad for c in "qkv"}
    grads |= {f"d_w_{c}": g.numpy() for c, g in parts.items()}
    grads["d_w_q"] = grads["d_w_q"] * fold  # w_q was folded: d(w_q·f)/dw_q = f
    grads["d_w_o"] = mha.out_proj.weight.grad.numpy()
    if config.bias:
        b = mha.in_proj_bias.grad
        grads |= {"d_b_q": (b[:width] * fold).numpy(), "d_b_k": b[width : 2 * width].numpy()}
        grads |= {"d_b_v": b[2 * width :].numpy(), "d_b_o": mha.out_proj.bias.grad.numpy()}
    return grads
