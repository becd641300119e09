"""``diff --past N`` and ``trace --past N``: the user's decode step, called with a KV cache of N
earlier tokens, beside the reference's ``--past`` step; and the bugs of a decode step.

The cache is the reference's own ``k_cache`` and ``v_cache`` (B, g, N, d) (seeded, or read from
``--cache``), handed to the user's code as it takes one:

- a forward argument ``layer_past``, ``past_key_value``, ``past``, ``kv_cache``, ``cache`` or
  ``past_kv``: the tuple ``(k_cache, v_cache)`` (GPT-2's ``layer_past``, Llama's tuple cache);
- a Hugging Face attention class (``past_key_values``): a ``DynamicCache`` filled with them,
  with the positions N..N+S-1 (``cache_position``) and their RoPE tables.

Both sides read the same earlier keys and values, so every step of the decode step compares:
the cache read, the append (B, g, N+S, d), scores (B, h, S, N+S) and on.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from attntrace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.diffing.bugs import Bug, Done, Setting
    from attntrace.diffing.layer import Layer

#: The forward arguments that take the cache as a (k, v) tuple, in the order looked for.
CACHE_ARGUMENTS = ("layer_past", "past_key_value", "past", "kv_cache", "cache", "past_kv")


def cache_argument(forward: Callable[..., Any]) -> str | None:
    """The argument of ``forward`` that takes a (k, v) cache, or None.

    >>> def forward(self, x, layer_past=None): ...
    >>> cache_argument(forward), cache_argument(lambda x: x)
    ('layer_past', None)
    """
    try:
        names = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in CACHE_ARGUMENTS if name in names), None)


def decode_layer(layer: Layer, tensors: Mapping[str, Any], past: int) -> Layer:
    """``layer`` called with the cache ``tensors["k_cache"], tensors["v_cache"]`` (B, g, N, d):
    as a (k, v) tuple argument, or a ``DynamicCache`` for a transformers class."""
    module = layer.module
    if module is None:
        raise ConfigError(
            f"diff --past {past}: {layer.name} is a function; give an nn.Module whose forward "
            f"takes the cache (one of {', '.join(CACHE_ARGUMENTS)}), or drop --past"
        )
    k_np, v_np = tensors["k_cache"], tensors["v_cache"]  # (B, g, N, d) each
    if getattr(type(module), "attntrace_transparent", False):
        return dataclasses.replace(
            layer,
            call=lambda x, p: _hf_decode(module, x, k_np, v_np),
            notes=(*layer.notes, f"called with a DynamicCache of {past} earlier tokens"),
        )
    name = cache_argument(module.forward)
    if name is None:
        raise ConfigError(
            f"diff --past {past}: {type(module).__name__}.forward takes no cache; name its cache "
            f"argument one of {', '.join(CACHE_ARGUMENTS)} (a (k, v) tuple), or drop --past"
        )

    def call(x: Any, params: Any) -> Any:
        import torch

        k, v = (torch.from_numpy(a.copy()).to(x.dtype) for a in (k_np, v_np))  # (B, g, N, d)
        return _first(module(x, **{name: (k, v)}))

    return dataclasses.replace(
        layer,
        call=call,
        notes=(*layer.notes, f"called with {name}=(k_cache, v_cache) of {past} earlier tokens"),
    )


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple | list) else out


def _hf_decode(module: Any, x: Any, k_np: np.ndarray, v_np: np.ndarray) -> Any:
    """A transformers attention class built by attntrace (``module.attn``, as
    :func:`attntrace.capturing.library.call` calls it) on x at positions N..N+S-1, with a
    ``DynamicCache`` holding the N earlier keys and values and the causal mask (B, 1, S, N+S)
    aligned bottom-right (its sliding window too)."""
    import torch
    from transformers import DynamicCache

    attn, rotary = module.attn, module.rotary
    batched = x if x.ndim == 3 else x[None]  # (B, S, H)
    k, v = (torch.from_numpy(a.copy()).to(x.dtype) for a in (k_np, v_np))  # (B, g, N, d)
    if k.ndim == 3:
        k, v = k[None], v[None]  # (1, g, N, d)
    B, S = batched.shape[:2]
    n = k.shape[-2]
    cache = DynamicCache()
    cache.update(k, v, getattr(attn, "layer_idx", None) or 0)
    positions = torch.arange(n, n + S)  # (S,): N..N+S-1
    params = inspect.signature(attn.forward).parameters
    kwargs: dict[str, Any] = {"past_key_values": cache}
    if "cache_position" in params:
        kwargs["cache_position"] = positions
    if rotary is not None and "position_embeddings" in params:
        kwargs["position_embeddings"] = rotary(batched, positions[None].expand(B, S))
    if "position_ids" in params:
        kwargs["position_ids"] = positions[None].expand(B, S)
    if getattr(attn, "is_causal", False):
        i = torch.arange(n, n + S)[:, None]  # (S, 1): the queries' positions
        j = torch.arange(n + S)[None]  # (1, N+S)
        hidden = j > i  # (S, N+S): bottom-right aligned
        window = getattr(attn, "sliding_window", None)
        if isinstance(window, int) and window > 0:
            hidden = hidden | (j <= i - window)
        fill = torch.finfo(batched.dtype).min
        mask = torch.zeros(S, n + S, dtype=batched.dtype).masked_fill(hidden, fill)
        kwargs["attention_mask"] = mask[None, None].expand(B, 1, S, n + S)  # (B, 1, S, N+S)
    out = _first(attn(batched, **kwargs))
    return out if x.ndim == 3 else out[0]


# --- the bugs of a decode step ---------------------------------------------------------------


def decode_bugs(s: Setting) -> Iterator[Bug]:
    """The mistakes of a decode step (``--past``): RoPE positions restarted at 0 or off by
    one, the causal mask aligned top-left, the new keys prepended, k and v caches swapped,
    the cache rotated again, the new token left out of the keys."""
    import numpy as np

    from attntrace.diffing.bugs import Bug, _cast
    from attntrace.engine.rope import rope_tables

    cfg = s.config
    if not cfg.past:
        return
    axis = len(s.lead) + 1  # the sequence axis of (B, g, N, d)
    n = cfg.cached
    if cfg.rope:
        for start, key, name in (
            (0, "decode-rope-from-0", "RoPE positions restarted at 0 for the new tokens"),
            (cfg.past - 1, "decode-rope-minus-1", "RoPE positions of the new tokens one short"),
            (cfg.past + 1, "decode-rope-plus-1", "RoPE positions of the new tokens one ahead"),
        ):
            if start < 0:
                continue
            cos, sin = rope_tables(dataclasses.replace(cfg, past=start))  # (S, d)
            yield Bug(
                key=key,
                name=name,
                fix=f"rotate the new tokens at their positions N..N+S-1 = "
                f"{cfg.past}..{cfg.past + cfg.seq - 1}: arange(past_len, past_len + S)",
                at="q_rot",
                replace={
                    "rope_cos": lambda done, value, c=cos: c.astype(value.dtype),  # (S, d)
                    "rope_sin": lambda done, value, t=sin: t.astype(value.dtype),  # (S, d)
                },
            )
    if cfg.causal and cfg.seq > 0:

        def top_left(done: Done, value: np.ndarray) -> np.ndarray:
            keep = np.tril(np.ones((cfg.seq, cfg.keys), dtype=bool))  # (S, N+S) query i: ≤ i
            return np.broadcast_to(keep, value.shape)

        yield Bug(
            key="decode-mask-top-left",
            name="causal mask aligned top-left (query i sees keys ≤ i, not ≤ N+i)",
            fix="align the causal mask bottom-right: query i sees the N cached keys and new "
            "keys ≤ i (mask[:, :, N_all - S : N_all, :N_all], or tril(ones, diagonal=N))",
            at="mask",
            replace={"mask": top_left},
        )
    k_new = "k_rot" if cfg.rope else "k_norm" if cfg.qk_norm == "head" else "k"

    def joined(first: str, second: str) -> Callable[[Done, np.ndarray], np.ndarray]:
        return lambda done, value: _cast(
            np.concatenate((done[first], done[second]), axis=axis), value
        )  # (B, g, N+S, d)

    if n:
        yield Bug(
            key="decode-prepended",
            name="the new keys and values put before the cache (cat(new, cache))",
            fix="append the new tokens after the cache: torch.cat((k_cache, k), dim=-2)",
            at="k_all",
            replace={"k_all": joined(k_new, "k_cache"), "v_all": joined("v", "v_cache")},
        )
        yield Bug(
            key="decode-kv-swapped",
            name="the k and v caches swapped (keys appended to the values' cache)",
            fix="append k to the k cache and v to the v cache: (k_cache, v_cache) = layer_past",
            at="k_all",
            replace={"k_all": joined("v_cache", k_new), "v_all": joined("k_cache", "v")},
        )
        yield Bug(
            key="decode-k-from-v-cache",
            name="the new keys appended to the v cache",
            fix="append k to the k cache: torch.cat([past_key_value[0], k], dim=2)",
            at="k_all",
            replace={"k_all": joined("v_cache", k_new)},
        )
        yield Bug(
            key="decode-v-from-k-cache",
            name="the new values appended to the k cache",
            fix="append v to the v cache: torch.cat([past_key_value[1], v], dim=2)",
            at="v_all",
            replace={"v_all": joined("k_cache", "v")},
        )
        yield Bug(
            key="decode-k-prepended",
            name="the new key put before the cache (the values after it)",
            fix="append the new keys after the cache: torch.cat((k_cache, k), dim=-2)",
            at="k_all",
            replace={"k_all": joined(k_new, "k_cache")},
        )
    if cfg.rope and n:
        cos_all, sin_all = rope_tables(dataclasses.replace(cfg, past=0, seq=cfg.keys))

        def rotated_again(done: Done, value: np.ndarray) -> np.ndarray:
            from attntrace.backends.numpy_backend import backend

            be = backend()
            r = cfg.rotary_dims or cfg.head_dim
            turn = be.rotate_pairs if cfg.rope_style == "interleaved" else be.rotate_part
            rotated = np.concatenate((done["k_cache"], done["k"]), axis=axis)  # (B, g, N+S, d)
            return _cast(rotated * cos_all + turn(rotated, r) * sin_all, value)

        yield Bug(
            key="decode-rope-after-cache",
            name="RoPE applied after the append (the cache holds unrotated keys)",
            fix="rotate the new keys before they go into the cache; the cache holds rotated "
            "keys, rotated once at their own positions",
            at="k_all",
            replace={"k_all": rotated_again},
        )
