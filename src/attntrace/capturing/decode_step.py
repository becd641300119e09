"""``trace --past N`` (and ``diff --past N``): the user's attention called as a decode step, with
a KV cache of N earlier tokens.

A module takes the cache as it runs in generation:

- a forward argument ``layer_past``, ``past_key_value``, ``past_key_values``, ``past``,
  ``kv_cache``, ``cache`` or ``past_kv`` (:data:`CACHE_ARGUMENTS`): the tuple
  ``(k_cache, v_cache)``, each (B, g, N, d), and it returns the cache after the step with its
  output (GPT-2's ``present``);
- a Hugging Face attention class built by attntrace (``transformers:LlamaAttention``):
  ``past_key_values`` (GPT-NeoX's ``layer_past``), a ``DynamicCache``, with the positions
  N..N+S-1 and the causal mask (B, 1, S, N+S) aligned bottom-right.

For trace, the cache is what the module itself makes from a prefill of N seeded tokens, run
before the capture starts: the capture shows the decode step alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from attntrace.errors import ConfigError

#: The forward arguments that take the cache as a (k, v) tuple, in the order looked for.
CACHE_ARGUMENTS = (
    "layer_past",
    "past_key_value",
    "past_key_values",
    "past",
    "kv_cache",
    "cache",
    "past_kv",
)
#: The forward arguments of transformers' classes that take a ``Cache`` object, newest name
#: first (GPT-NeoX and Bloom keep ``layer_past``).
HF_CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "layer_past")


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


def is_library_module(module: Any) -> bool:
    """Whether ``module`` is a transformers class attntrace built (it holds ``attn``)."""
    return bool(getattr(type(module), "attntrace_caller", False))


def no_cache(name: str, past: int, what: str) -> ConfigError:
    """The error of a target that cannot take a cache."""
    return ConfigError(
        f"--past {past}: {name} {what}; name its cache argument one of "
        f"{', '.join(CACHE_ARGUMENTS)} (a (k, v) tuple), or drop --past"
    )


def hf_step(module: Any, x: Any, cache: Any, start: int, held: int | None = None) -> Any:
    """A transformers attention class built by attntrace (``module.attn``, as
    :func:`attntrace.capturing.library.call` calls it) on x (B, S, H) or (S, H) at positions
    start..start+S-1 with the ``DynamicCache`` ``cache`` holding the ``held`` tokens before them
    (all ``start``, or the last W-1 of a sliding window), the causal mask (B, 1, S, held+S)
    aligned bottom-right (and its sliding window); its output."""
    import torch

    attn, rotary = module.attn, module.rotary
    batched = x if x.ndim == 3 else x[None]  # (B, S, H)
    B, S = batched.shape[:2]
    n = start
    kept = n if held is None else held
    positions = torch.arange(n, n + S)  # (S,): N..N+S-1
    params = inspect.signature(attn.forward).parameters
    name = next((a for a in HF_CACHE_ARGUMENTS if a in params), HF_CACHE_ARGUMENTS[0])
    kwargs: dict[str, Any] = {name: cache}
    if "cache_position" in params:
        kwargs["cache_position"] = positions
    if rotary is not None and "position_embeddings" in params:
        kwargs["position_embeddings"] = rotary(batched, positions[None].expand(B, S))
    if "position_ids" in params:
        kwargs["position_ids"] = positions[None].expand(B, S)
    if getattr(attn, "is_causal", False):
        i = torch.arange(n, n + S)[:, None]  # (S, 1): the queries' positions
        j = torch.arange(n - kept, n + S)[None]  # (1, N+S): the positions of the keys held
        hidden = j > i  # (S, N+S): bottom-right aligned
        window = getattr(attn, "sliding_window", None)  # else the config's (Mistral)
        window = window or getattr(getattr(module, "config", None), "sliding_window", None)
        if isinstance(window, int) and window > 0:
            hidden = hidden | (j <= i - window)
        fill = torch.finfo(batched.dtype).min
        mask = torch.zeros(S, kept + S, dtype=batched.dtype).masked_fill(hidden, fill)
        kwargs["attention_mask"] = mask[None, None].expand(B, 1, S, kept + S)  # (B, 1, S, N+S)
    out = _first(attn(batched, **kwargs))
    return out if x.ndim == 3 else out[0]


def dynamic_cache(k: Any, v: Any, module: Any) -> Any:
    """A ``DynamicCache`` holding k and v (B, g, N, d) (or (g, N, d)) at the layer of
    ``module.attn``."""
    from transformers import DynamicCache

    if k.ndim == 3:
        k, v = k[None], v[None]  # (1, g, N, d)
    cache = DynamicCache()
    cache.update(k, v, getattr(module.attn, "layer_idx", None) or 0)
    return cache


def decode_call(call: Any, x: Any, past: int, seed: int) -> Callable[[Any], Any]:
    """``call`` (an ``nn.Module``) as a decode step on x (B, S, H) or (S, H) after a prefill of
    ``past`` seeded tokens (run now, outside any capture) that made its cache.

    >>> import torch
    >>> class Attn(torch.nn.Module):
    ...     def forward(self, x, kv_cache=None):
    ...         k = x if kv_cache is None else torch.cat((kv_cache[0], x), dim=-2)
    ...         return x * 2, (k, k)
    >>> step = decode_call(Attn(), torch.zeros(1, 2, 4), 3, 0)
    >>> step(torch.zeros(1, 2, 4)).shape
    torch.Size([1, 2, 4])
    """
    import numpy as np
    import torch

    name = getattr(call, "__name__", None) or type(call).__name__
    if not isinstance(call, torch.nn.Module):
        raise no_cache(f"{name}()", past, "is a function, called on x alone")
    shape = (*x.shape[:-2], past, x.shape[-1])  # (B, N, H)
    earlier = np.random.default_rng(seed + 1).standard_normal(shape)  # (B, N, H)
    prefill = torch.from_numpy(earlier).to(x.dtype)  # (B, N, H)
    with torch.no_grad():
        if is_library_module(call):
            from transformers import DynamicCache

            cache = DynamicCache()
            hf_step(call, prefill, cache, 0)
            layer = cache.layers[getattr(call.attn, "layer_idx", None) or 0]
            kept = (getattr(layer, "keys"), getattr(layer, "values"))  # noqa: B009  (B, g, N, d)
            held = int(kept[0].shape[-2])  # N, or what a sliding window's layer keeps
            return _Step(lambda x: hf_step(call, x, cache, past, held), kept)
        arg = cache_argument(call.forward)
        if arg is None:
            raise no_cache(f"{type(call).__name__}.forward", past, "takes no cache")
        made = _cache_of(call(prefill))
    if made is None:
        raise ConfigError(
            f"--past {past}: {type(call).__name__} returned no (k, v) cache after a prefill of "
            f"{past} tokens; return it with the output, as GPT-2 returns present = (k, v)"
        )
    return _Step(lambda x: _first(call(x, **{arg: made})), made)


class _Step:
    """The decode step's call, and the cache it reads (recorded as inputs by trace)."""

    def __init__(self, run: Callable[[Any], Any], cache: tuple[Any, Any]) -> None:
        self.run, self.cache = run, cache

    def __call__(self, x: Any) -> Any:
        return self.run(x)


def record_cache(session: Any, apply: Any, x: Any) -> None:
    """The cache a decode step reads recorded as inputs ``k_cache``, ``v_cache`` with the
    axes (B, g, N, d) (``h`` where the cache has as many heads as the queries, and without B
    for an unbatched x), as x is the input of every trace."""
    from attntrace.capturing.source import Site

    cache = getattr(apply, "cache", None)
    if cache is None or session._torch is None:
        return
    for name, tensor in zip(("k_cache", "v_cache"), cache, strict=True):
        letters = ("B", "g", "N", "d")[4 - tensor.ndim :] if tensor.ndim <= 4 else None
        session._recorder.record(
            tensor.detach(),
            0,
            "input",
            "create",
            Site("input", name, name),
            [],
            session._torch.adapter,
            {"axes": letters} if letters else None,
            key=tensor,
        )


def _cache_of(out: Any) -> tuple[Any, Any] | None:
    """The (k, v) pair of tensors in what the module returned (its last such item): torch
    tensors of at least 3 dimensions, on a device that holds values (a numpy array, a meta
    tensor, a 2-D pair is no cache)."""
    import torch

    items = out if isinstance(out, tuple | list) else (out,)
    for item in reversed(items):
        if (
            isinstance(item, tuple | list)
            and len(item) == 2
            and all(isinstance(t, torch.Tensor) and t.ndim >= 3 and not t.is_meta for t in item)
        ):
            return item[0], item[1]
    return None


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple | list) else out
