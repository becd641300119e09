"""The references of ``attntrace verify --past N``: a decode step against a KV cache, computed
by PyTorch and by Hugging Face transformers independently of :mod:`attntrace.engine`.

- **SDPA with the concatenated cache**: q, k, v projected from the new tokens by ``F.linear``,
  RoPE at positions N..N+S-1 (Meta's complex-number formulation), the cache concatenated in
  front (``torch.cat``), and ``scaled_dot_product_attention`` with a bool mask built here with
  torch, aligned bottom-right (query i sees the keys up to position N + i; a window keeps the
  last W; ``--key-lengths`` by position), ``enable_gqa`` for grouped-query attention.
- **transformers' own attention with a DynamicCache**: the family whose options match the
  config, built from a config object with random init (never a download), the trace's weights
  loaded into it: Gemma 2 (--softcap, with or without its sliding window), Mistral (--window),
  Qwen2 (biases on q, k, v: its o_proj has none, so b_o is added to its output), Llama (the
  rest). The cache is ``DynamicCache(config=...)`` (a sliding layer for a window) seeded with
  k_cache and v_cache; the layer's forward appends the new keys and values. The output and the
  cache after the step must equal the trace's (the trace's k_all and v_all, the last W - 1 of
  them with a sliding window). The cos and sin tables are made here in float64 and passed in as
  ``position_embeddings`` (transformers' rotary module makes its angles in float32, which would
  bound a float64 comparison at about 1e-7). Llama, Mistral and Qwen2 run their SDPA attention
  (in the config's dtype); Gemma 2 its eager one, whose softmax runs in float32, so a float64
  run is held to float32's tolerance against it.

Each reference that does not apply to a config maps to the reason instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig

if TYPE_CHECKING:
    import numpy as np

SDPA_CACHE = "SDPA, cache concatenated"
#: What the name of a reference whose softmax runs in float32 says (Gemma 2's eager attention):
#: a float64 run is held to float32's tolerance against it.
SOFTMAX_FLOAT32 = "(softmax in float32)"
HF_FAMILIES = ("Gemma2", "Mistral", "Qwen2", "Llama")


def past_references(
    config: AttentionConfig, inputs: Mapping[str, np.ndarray | None]
) -> dict[str, dict[str, np.ndarray] | str]:
    """{reference: {"output", "weights", "k_all", "v_all"...}} for a --past config, as numpy;
    a reference that does not apply maps to the reason.

    >>> from attntrace.engine.inputs import random_sources
    >>> cfg = AttentionConfig(seq=1, past=5, hidden=16, heads=4, kv_heads=2, causal=True,
    ...                       rope=True, bias=False)
    >>> refs = past_references(cfg, {n: s.make() for n, s in random_sources(cfg).items()})
    >>> sorted(refs), refs[SDPA_CACHE]["weights"].shape
    (['SDPA, cache concatenated', 'transformers Llama + DynamicCache'], (4, 1, 6))
    """
    import torch

    dt = getattr(torch, config.dtype)
    t = {name: torch.from_numpy(v).to(dt) for name, v in inputs.items() if v is not None}
    if not config.batched:  # the references want the batch axis
        t = {n: v[None] if n in ("x", "k_cache", "v_cache") else v for n, v in t.items()}
    family = hf_family(config)
    hf_name = f"transformers {family if family in HF_FAMILIES else 'attention'} + DynamicCache"
    if family == "Gemma2":
        hf_name += f" {SOFTMAX_FLOAT32}"
    with torch.no_grad():
        sdpa = sdpa_skip_reason(config) or _sdpa_past(config, t)
        hf = family if family not in HF_FAMILIES else _hf_past(config, t, family)
    return {SDPA_CACHE: _numpy(config, sdpa), hf_name: _numpy(config, hf)}


def sdpa_skip_reason(config: AttentionConfig) -> str | None:
    """Why the SDPA reference does not apply to a --past config, or None."""
    if config.softcap is not None or config.relative_bias is not None:
        return f"{SDPA_CACHE}: SDPA has no soft-capping or relative position bias"
    if config.rope and (
        config.rope_scaling is not None
        or config.rotary_dims is not None
        or config.rope_style != "half"
    ):
        return f"{SDPA_CACHE}: only plain RoPE (no --rope-scaling, --rotary-dims, interleaved)"
    return None


def hf_family(config: AttentionConfig) -> str:
    """The transformers family that computes this config's decode step, or why none does.

    >>> hf_family(AttentionConfig(seq=1, past=3, rope=True, causal=True, window=4, bias=False))
    'Mistral'
    >>> hf_family(AttentionConfig(seq=1, past=3))
    'transformers families all rotate q and k: add --rope'
    """
    if not config.rope:
        return "transformers families all rotate q and k: add --rope"
    if (
        config.rope_scaling is not None
        or config.rotary_dims is not None
        or config.rope_style != "half"
        or config.qk_norm is not None
        or config.relative_bias is not None
    ):
        return "no family checked here has --rope-scaling, --rotary-dims, interleaved, q/k norms"
    if config.window is not None and config.window < 2:  # its slice [-(W - 1):] keeps them all
        return "transformers' sliding cache keeps every key with a window of 1: use --window 2+"
    if config.softcap is not None:
        return "Gemma2"
    if config.window is not None:
        return "Mistral" if not config.bias else "Mistral has no biases: add --no-bias"
    return "Qwen2" if config.bias else "Llama"


def _mask(config: AttentionConfig) -> Any:
    """(B or 1, 1, S, N+S) bool, True = attend, by position: query i is at N + i, key j at
    N - cached + j (a sliding cache starts later)."""
    import torch

    first = config.past - config.cached
    query = torch.arange(config.past, config.positions)[:, None]  # (S, 1)
    key = torch.arange(first, first + config.keys)[None, :]  # (1, N+S)
    keep = torch.ones(config.seq, config.keys, dtype=torch.bool)
    if config.causal:
        keep &= key <= query
    if config.window is not None:
        keep &= key > query - config.window
    keep = keep[None, None]  # (1, 1, S, N+S)
    if config.key_lengths is not None:
        lengths = torch.tensor(config.key_lengths)[:, None, None, None]  # (B, 1, 1, 1)
        keep = keep & (key[None, None] < lengths)
    return keep


def _rope_tables(config: AttentionConfig) -> tuple[Any, Any]:
    """cos, sin (S, d) of positions N..N+S-1 in float64, halves duplicated (Hugging Face's)."""
    import torch

    d = config.head_dim
    inv = config.rope_base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.outer(torch.arange(config.past, config.positions, dtype=torch.float64), inv)
    both = torch.cat((angles, angles), dim=-1)  # (S, d)
    return both.cos(), both.sin()


def _rotate(x: Any, start: int, base: float) -> Any:
    """RoPE at positions start.. as Meta writes it: pairs (i, i + d/2) as complex numbers."""
    import torch

    seq, d = x.shape[-2], x.shape[-1]
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.outer(torch.arange(start, start + seq, dtype=torch.float64), freqs)
    turn = torch.polar(torch.ones_like(angles), angles)  # (S, d/2) complex
    pairs = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())  # (..., S, d/2)
    out = pairs * turn
    return torch.cat((out.real, out.imag), dim=-1).to(x.dtype)  # (..., S, d)


def _sdpa_past(config: AttentionConfig, t: Mapping[str, Any]) -> dict[str, Any]:
    """Output, weights and the keys and values after the append, by SDPA on the concatenation."""
    import torch

    F = torch.nn.functional
    x, d = t["x"], config.head_dim

    def heads(c: str, n: int) -> Any:  # (B, S, n·d) -> (B, n, S, d)
        y = F.linear(x, t[f"w_{c}"], t.get(f"b_{c}"))
        if config.qk_norm == "full" and c in "qk":
            y = _rms(y, t[f"n_{c}"], config)
        y = y.reshape(*y.shape[:-1], n, d).transpose(1, 2)
        return _rms(y, t[f"n_{c}"], config) if config.qk_norm == "head" and c in "qk" else y

    q, k, v = heads("q", config.heads), heads("k", config.groups), heads("v", config.groups)
    if config.rope:
        q, k = _rotate(q, config.past, config.rope_base), _rotate(k, config.past, config.rope_base)
    k_all = torch.cat((t["k_cache"], k), dim=2)  # (B, g, N+S, d)
    v_all = torch.cat((t["v_cache"], v), dim=2)  # (B, g, N+S, d)
    sdpa = {"attn_mask": _mask(config), "scale": config.scale, "enable_gqa": config.grouped}
    if config.alibi:  # the bias by distance as a float mask, -inf where the mask hides a key
        from attntrace.tools.reference import alibi_reference

        bias = alibi_reference(config)  # (h, S, N+S): key j - query (i + cached)
        sdpa["attn_mask"] = bias.masked_fill(~sdpa["attn_mask"], -math.inf)  # (B, h, S, N+S)
    context = F.scaled_dot_product_attention(q, k_all, v_all, **sdpa)  # (B, h, S, d)
    eye = torch.eye(config.keys, dtype=q.dtype).expand(*v_all.shape[:-1], config.keys)
    weights = F.scaled_dot_product_attention(q, k_all, eye, **sdpa)  # (B, h, S, N+S)
    output = F.linear(context.transpose(1, 2).flatten(-2), t["w_o"], t.get("b_o"))  # (B, S, H)
    return {"output": output, "weights": weights, "k_all": k_all, "v_all": v_all}


def _rms(y: Any, weight: Any, config: AttentionConfig) -> Any:
    """RMSNorm over the last axis in at least float32, as transformers' RMSNorm."""
    import torch

    eps = config.qk_norm_eps if config.qk_norm_eps is not None else 1e-6
    y32 = y.double() if y.dtype == torch.float64 else y.float()
    return (y32 * (y32.pow(2).mean(-1, keepdim=True) + eps).rsqrt()).to(y.dtype) * weight


def _hf_config(config: AttentionConfig, family: str) -> Any:
    """A transformers config of ``family`` with this config's sizes (one layer)."""
    import transformers

    sizes: dict[str, Any] = {
        "hidden_size": config.hidden,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.groups,
        "head_dim": config.head_dim,
        "num_hidden_layers": 1,
        "intermediate_size": 8,
        "vocab_size": 8,
        "max_position_embeddings": max(config.positions, 8),
        "attention_dropout": 0.0,
    }
    if family == "Gemma2":
        sliding = config.window is not None
        sizes |= {
            "attn_logit_softcapping": config.softcap,
            "query_pre_attn_scalar": round(config.score_scale**-2),
            "sliding_window": config.window or 4096,
            "layer_types": ["sliding_attention" if sliding else "full_attention"],
            "attention_bias": config.bias,
        }
    elif family == "Mistral":
        sizes["sliding_window"] = config.window
    elif family == "Llama":
        sizes["attention_bias"] = config.bias
    made = getattr(transformers, f"{family}Config")(**sizes)
    # Gemma 2's soft-cap lives in its eager attention (softmax in float32); the others run
    # torch's SDPA, in the config's dtype
    made._attn_implementation = "eager" if family == "Gemma2" else "sdpa"
    return made


def _hf_past(config: AttentionConfig, t: Mapping[str, Any], family: str) -> dict[str, Any] | str:
    """Output and the cache after the step, by transformers' attention layer and DynamicCache."""
    import importlib

    import torch
    from transformers import DynamicCache

    if family != "Gemma2" and config.scale is not None:
        return f"{family} scales by 1/sqrt(d) only: drop --scale"
    whole = round(config.score_scale**-2)
    if family == "Gemma2" and not math.isclose(whole**-0.5, config.score_scale, rel_tol=1e-12):
        return "Gemma2 scales by query_pre_attn_scalar ** -0.5, a whole number: change --scale"
    hf = _hf_config(config, family)
    module = importlib.import_module(
        f"transformers.models.{family.lower()}.modeling_{family.lower()}"
    )
    layer = getattr(module, f"{family}Attention")(hf, layer_idx=0).to(t["x"].dtype).eval()
    for c, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj")):
        proj = getattr(layer, name)
        proj.weight.copy_(t[f"w_{c}"])
        if proj.bias is not None:
            proj.bias.copy_(t[f"b_{c}"])
    cache = DynamicCache(config=hf)
    cache.update(t["k_cache"], t["v_cache"], 0)  # the N earlier tokens (W - 1 of a window)
    cos, sin = (table.to(t["x"].dtype)[None] for table in _rope_tables(config))  # (1, S, d)
    finite = torch.finfo(t["x"].dtype).min  # transformers' masked value
    mask = torch.zeros(_mask(config).shape, dtype=t["x"].dtype).masked_fill(~_mask(config), finite)
    output, weights = layer(
        hidden_states=t["x"],
        position_embeddings=(cos, sin),
        attention_mask=mask,
        past_key_values=cache,
    )
    if family == "Qwen2" and "b_o" in t:  # Qwen2's o_proj has no bias
        output = output + t["b_o"]
    held: Any = cache.layers[0]  # a DynamicLayer or DynamicSlidingWindowLayer
    keys, values = held.keys, held.values  # (B, g, kept, d)
    got = {"output": output, "k_cache_after": keys, "v_cache_after": values}
    return got if weights is None else {**got, "weights": weights}  # SDPA returns no weights


def _numpy(config: AttentionConfig, got: Mapping[str, Any] | str) -> dict[str, np.ndarray] | str:
    """Every tensor as numpy, without the batch axis of an unbatched config."""
    if isinstance(got, str):
        return got
    return {
        name: (v.detach() if config.batched else v.detach()[0]).numpy() for name, v in got.items()
    }


def cache_after(config: AttentionConfig, k_all: np.ndarray) -> np.ndarray:
    """What a cache holds after the step: every key, or the last W - 1 with a sliding window
    (transformers' sliding layer keeps ``sliding_window - 1``).

    >>> import numpy as np
    >>> cache_after(AttentionConfig(seq=1, past=9, window=4), np.zeros((2, 4, 5, 8))).shape
    (2, 4, 3, 8)
    """
    if config.window is None:
        return k_all
    kept = config.window - 1
    return k_all[..., k_all.shape[-2] - kept :, :] if kept else k_all[..., :0, :]
