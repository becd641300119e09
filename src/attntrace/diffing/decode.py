"""``diff --past N`` and ``trace --past N``: the user's decode step, called with a KV cache of N
earlier tokens, beside the reference's ``--past`` step; and the bugs of a decode step.

The cache is the reference's own ``k_cache`` and ``v_cache`` (B, g, N, d) (seeded, or read from
``--cache``), handed to the user's code as it takes one:

- a forward argument ``layer_past``, ``past_key_value``, ``past_key_values``, ``past``,
  ``kv_cache``, ``cache`` or ``past_kv``: the tuple ``(k_cache, v_cache)`` (GPT-2's
  ``layer_past``, Llama's tuple cache);
- a Hugging Face attention class (``past_key_values``): a ``DynamicCache`` filled with them,
  with the positions N..N+S-1 (``cache_position``) and their RoPE tables.

Both sides read the same earlier keys and values, so every step of the decode step compares:
the cache read, the append (B, g, N+S, d), scores (B, h, S, N+S) and on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from attntrace.capturing.decode_step import (
    _cache_of,
    cache_argument,
    dynamic_cache,
    hf_step,
    is_library_module,
    no_cache,
)

if TYPE_CHECKING:
    import numpy as np

    from attntrace.diffing.layer import Layer

    Done = Mapping[str, np.ndarray]  # the reference's steps so far, by name


#: A module's decode step: (x (torch), a list to extend with the cache given or None) -> what it
#: returned and the cache in it (k, v) or None (held by the Layer as ``decode_step``).
Step = Callable[[Any, Any], tuple[Any, Any]]


def wrong_axis_name(what: str, dim: int | str, axis: str) -> str:
    """The name of the bug.

    >>> wrong_axis_name("keys", -1, "head dim")
    'new keys appended on the wrong axis (dim=-1, the head dim, not -2, the sequence)'
    """
    return f"new {what} appended on the wrong axis (dim={dim}, the {axis}, not -2, the sequence)"


FIX_AXIS = "append on the sequence axis of (B, g, N, d): torch.cat((past_key, k), dim=-2)"


def decode_layer(layer: Layer, tensors: Mapping[str, Any], past: int) -> Layer:
    """``layer`` called with the cache ``tensors["k_cache"], tensors["v_cache"]`` (B, g, N, d):
    as a (k, v) tuple argument, or a ``DynamicCache`` for a transformers class. The cache each
    call returns is compared by :func:`~attntrace.diffing.diff_report.decode_diff`."""
    module = layer.module
    if module is None:
        raise no_cache(layer.name, past, "is a function; give an nn.Module whose forward takes it")
    k_np, v_np = tensors["k_cache"], tensors["v_cache"]  # (B, g, N, d) each

    def cached(x: Any) -> tuple[Any, Any]:
        import torch

        k, v = (torch.from_numpy(a.copy()).to(x.dtype) for a in (k_np, v_np))  # (B, g, N, d)
        return k, v

    if is_library_module(module):

        def library(x: Any, given: Any = None) -> tuple[Any, Any]:
            cache = dynamic_cache(*cached(x), module)
            out = hf_step(_in_dtype(module, x.dtype), x, cache, past, int(k_np.shape[-2]))
            held = cache.layers[getattr(module.attn, "layer_idx", None) or 0]
            return out, (getattr(held, "keys"), getattr(held, "values"))  # noqa: B009

        return dataclasses.replace(
            layer,
            call=lambda x, p: library(x)[0],
            decode_step=(library, None),  # library code: no line, no wrong-axis check
            notes=(*layer.notes, f"called with a DynamicCache of {past} earlier tokens"),
        )
    inner = getattr(module, "inner", module)  # a region's module: the user's forward takes it
    name = cache_argument(inner.forward)
    if name is None:
        raise no_cache(f"{type(module).__name__}.forward", past, "takes no cache")
    core = held_library_class(module)
    if core is not None:
        return _held_library(layer, core, name, cached, past)

    def step(x: Any, given: list[Any] | None = None) -> tuple[Any, Any]:
        cache = cached(x)
        if given is not None:
            given.extend(cache)  # what the step is given: the wrong-axis check looks for it
        out = _in_dtype(module, x.dtype)(x, **{name: cache})
        return out, _cache_of(out)

    def call(x: Any, params: Any) -> Any:
        return _first(step(x)[0])

    return dataclasses.replace(
        layer,
        call=call,
        notes=(*layer.notes, f"called with {name}=(k_cache, v_cache) of {past} earlier tokens"),
        decode_step=(step, getattr(type(inner).forward, "__code__", None)),
    )


def held_library_class(module: Any) -> Any | None:
    """The transformers attention class a region's module (:func:`~attntrace.diffing.region.
    region_module`) hands x, or None: the user's block passes its cache on to it, so the cache
    is that class's ``DynamicCache``, not a (k, v) tuple."""
    region = getattr(module, "attntrace_region", None)
    if region is None:
        return None
    core = module.inner.get_submodule(region.core)
    return core if type(core).__module__.startswith("transformers.") else None


def _held_library(
    layer: Layer, core: Any, name: str, cached: Callable[[Any], tuple[Any, Any]], past: int
) -> Layer:
    """``layer``'s user block called with a ``DynamicCache`` of the cache under ``name`` (and
    ``cache_position``, ``position_ids`` where its forward takes them), the class it holds
    updating that cache; the step returns the cache's keys and values after the call."""
    import inspect
    import types

    module = layer.module
    params = inspect.signature(module.inner.forward).parameters
    index = getattr(core, "layer_idx", None) or 0

    def step(x: Any, given: list[Any] | None = None) -> tuple[Any, Any]:
        import torch

        cache = dynamic_cache(*cached(x), types.SimpleNamespace(attn=core))
        kwargs: dict[str, Any] = {name: cache}
        positions = torch.arange(past, past + x.shape[-2])  # (S,): N..N+S-1
        if "cache_position" in params:
            kwargs["cache_position"] = positions
        if "position_ids" in params:
            kwargs["position_ids"] = positions[None].expand(*x.shape[:-2], -1)  # (B, S)
        out = _in_dtype(module, x.dtype)(x, **kwargs)
        held = cache.layers[index]
        return out, (getattr(held, "keys"), getattr(held, "values"))  # noqa: B009

    return dataclasses.replace(
        layer,
        call=lambda x, p: _first(step(x)[0]),
        decode_step=(step, None),  # library code updates the cache: no wrong-axis check
        notes=(
            *layer.notes,
            f"called with {name}=DynamicCache of {past} earlier tokens "
            f"(for the {type(core).__name__} it holds)",
        ),
    )


def _in_dtype(module: Any, dtype: Any) -> Any:
    """``module``, or a copy of it in ``dtype`` (--dtype float64 on a float32 module) kept on it
    for the next calls; the user's module stays as it is."""
    import copy

    if all(p.dtype == dtype for p in module.parameters()):
        return module
    copies = module.__dict__.setdefault("_attntrace_dtypes", {})
    if dtype not in copies:
        copies[dtype] = copy.deepcopy(module).to(dtype)
    return copies[dtype]


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple | list) else out


def _cast(out: np.ndarray, like: np.ndarray) -> np.ndarray:
    return out.astype(like.dtype, copy=False)


def _table(table: np.ndarray) -> Callable[[Done, np.ndarray], np.ndarray]:
    """A RoPE table (S, d) in place of the reference's."""
    return lambda done, value: table.astype(value.dtype)  # (S, d)


# --- the bugs of a decode step ---------------------------------------------------------------


def decode_bugs(s: Any) -> Iterator[dict[str, Any]]:
    """The mistakes of a decode step (``--past``) for the :class:`~attntrace.diffing.bugs.Setting`
    ``s``, as the fields of a :class:`~attntrace.diffing.bugs.Bug` (the catalogue builds them):
    RoPE positions restarted at 0 or off by one, the causal mask aligned top-left, the new keys
    prepended, the k and v caches swapped, the new keys and values joined on the head dim and
    read back as the sequence (N = S: no shape error), RoPE applied after the append."""
    import numpy as np

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
            yield {
                "key": key,
                "name": name,
                "fix": f"rotate the new tokens at their positions N..N+S-1 = "
                f"{cfg.past}..{cfg.past + cfg.seq - 1}: arange(past_len, past_len + S)",
                "at": "q_rot",
                "replace": {"rope_cos": _table(cos), "rope_sin": _table(sin)},
            }
    if cfg.causal and cfg.seq > 0:

        def top_left(done: Done, value: np.ndarray) -> np.ndarray:
            keep = np.tril(np.ones((cfg.seq, cfg.keys), dtype=bool))  # (S, N+S) query i: ≤ i
            return np.broadcast_to(keep, value.shape)

        if cfg.cached:

            def new_only(done: Done, value: np.ndarray) -> np.ndarray:
                n = cfg.cached
                keep = np.tril(np.ones((cfg.seq, cfg.keys), dtype=bool), k=n)  # (S, N+S)
                keep[:, :n] = False  # the cached keys not read
                return np.broadcast_to(keep, value.shape)

            yield {
                "key": "decode-cache-unread",
                "name": "the new tokens attended alone: the cache returned but not read "
                "(scores over S keys, not N+S)",
                "fix": "attend over the cache and the new keys: scores = q @ k_all.T with "
                "k_all = torch.cat((past_key, k), dim=-2), before the scores are made",
                "at": "mask",
                "replace": {"mask": new_only},
            }
        yield {
            "key": "decode-mask-top-left",
            "name": "causal mask aligned top-left (query i sees keys ≤ i, not ≤ N+i)",
            "fix": "align the causal mask bottom-right: query i sees the N cached keys and new "
            "keys ≤ i (mask[:, :, N_all - S : N_all, :N_all], or tril(ones, diagonal=N))",
            "at": "mask",
            "replace": {"mask": top_left},
        }
    k_new = "k_rot" if cfg.rope else "k_norm" if cfg.qk_norm == "head" else "k"

    def joined(first: str, second: str) -> Callable[[Done, np.ndarray], np.ndarray]:
        return lambda done, value: _cast(
            np.concatenate((done[first], done[second]), axis=axis), value
        )  # (B, g, N+S, d)

    if n:
        yield {
            "key": "decode-prepended",
            "name": "the new keys and values put before the cache (cat(new, cache))",
            "fix": "append the new tokens after the cache: torch.cat((k_cache, k), dim=-2)",
            "at": "k_all",
            "replace": {"k_all": joined(k_new, "k_cache"), "v_all": joined("v", "v_cache")},
        }
        yield {
            "key": "decode-kv-swapped",
            "name": "the k and v caches swapped (keys appended to the values' cache)",
            "fix": "append k to the k cache and v to the v cache: (k_cache, v_cache) = layer_past",
            "at": "k_all",
            "replace": {"k_all": joined("v_cache", k_new), "v_all": joined("k_cache", "v")},
        }
        yield {
            "key": "decode-k-from-v-cache",
            "name": "the new keys appended to the v cache",
            "fix": "append k to the k cache: torch.cat([past_key_value[0], k], dim=2)",
            "at": "k_all",
            "replace": {"k_all": joined("v_cache", k_new)},
        }
        yield {
            "key": "decode-v-from-k-cache",
            "name": "the new values appended to the k cache",
            "fix": "append v to the v cache: torch.cat([past_key_value[1], v], dim=2)",
            "at": "v_all",
            "replace": {"v_all": joined("k_cache", "v")},
        }
        if n == cfg.seq:  # the shapes allow a cat on the head dim read back as the sequence

            def side_by_side(first: str, second: str) -> Callable[[Done, np.ndarray], np.ndarray]:
                return lambda done, value: _cast(
                    np.concatenate((done[first], done[second]), axis=-1).reshape(value.shape),
                    value,
                )  # (B, g, N, 2d) read as (B, g, N+S, d)

            yield {
                "key": "decode-wrong-axis",
                "name": wrong_axis_name("keys and values", -1, "head dim"),
                "fix": FIX_AXIS,
                "at": "k_all",
                "replace": {
                    "k_all": side_by_side("k_cache", k_new),
                    "v_all": side_by_side("v_cache", "v"),
                },
            }
        yield {
            "key": "decode-k-prepended",
            "name": "the new key put before the cache (the values after it)",
            "fix": "append the new keys after the cache: torch.cat((k_cache, k), dim=-2)",
            "at": "k_all",
            "replace": {"k_all": joined(k_new, "k_cache")},
        }
    if cfg.rope and n:
        cos_all, sin_all = rope_tables(dataclasses.replace(cfg, past=0, seq=cfg.keys))

        def rotated_again(done: Done, value: np.ndarray) -> np.ndarray:
            from attntrace.backends.numpy_backend import backend

            be = backend()
            r = cfg.rotary_dims or cfg.head_dim
            turn = be.rotate_pairs if cfg.rope_style == "interleaved" else be.rotate_part
            rotated = np.concatenate((done["k_cache"], done["k"]), axis=axis)  # (B, g, N+S, d)
            return _cast(rotated * cos_all + turn(rotated, r) * sin_all, value)

        yield {
            "key": "decode-rope-after-cache",
            "name": "RoPE applied after the append (the cache holds unrotated keys)",
            "fix": "rotate the new keys before they go into the cache; the cache holds rotated "
            "keys, rotated once at their own positions",
            "at": "k_all",
            "replace": {"k_all": rotated_again},
        }
