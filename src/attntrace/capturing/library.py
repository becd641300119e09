"""Hugging Face attention classes as targets, without a wrapper file: ``transformers:NAME``
found in its family's modeling module, its config object built from the sizes (random init,
eager attention), and a module that calls it as its model does: the rotary embedding's
(cos, sin) of positions 0..S-1, position ids, the causal (and sliding-window) mask as an
additive (B, 1, S, S) tensor, the keyword names of the family, the first item of the tuple.

========================  ==================================================================
family                    how it is called
========================  ==================================================================
Llama, Mistral, Qwen2/3,  ``attn(x, position_embeddings=(cos, sin), attention_mask=mask)``
Gemma, Gemma 2, Phi-3
Falcon                    ``attn(x, alibi=None, attention_mask=mask, position_ids=...,
                          position_embeddings=(cos, sin))``
GPT-2                     ``attn(x, attention_mask=mask)``
BERT (BertSelfAttention)  ``attn(x)``: not causal
T5 (T5Attention)          ``attn(x, mask=...)``: the relative bias from its own table
========================  ==================================================================
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from typing import Any

from attntrace.errors import AttntraceError

#: The package whose attention classes attntrace builds and calls itself.
PACKAGE = "transformers"


class LibraryError(AttntraceError):
    """A library class attntrace cannot build (exit 2)."""


def is_library_class(obj: Any) -> bool:
    """Whether ``obj`` is an attention class of transformers' models (built from a config).

    >>> is_library_class(dict)
    False
    """
    return isinstance(obj, type) and obj.__module__.startswith(f"{PACKAGE}.models.")


def find_class(module: str, name: str) -> Any | None:
    """``transformers:LlamaAttention``: the class in its family's modeling module (the top
    package does not export attention classes), or None when there is none."""
    if module != PACKAGE or not name[:1].isupper():
        return None
    from transformers.models.auto import configuration_auto

    names: dict[str, str] = dict(getattr(configuration_auto, "CONFIG_MAPPING_NAMES", {}))

    found = [
        (len(config) - len("Config"), model_type)
        for model_type, config in names.items()
        if name.lower().startswith(config[: -len("Config")].lower())
    ]
    for _, model_type in sorted(found, reverse=True):  # Qwen2 before Qwen, Gemma2 before Gemma
        try:
            modeling = importlib.import_module(
                f"{PACKAGE}.models.{model_type}.modeling_{model_type}"
            )
        except ImportError:
            continue
        if isinstance(getattr(modeling, name, None), type):
            return getattr(modeling, name)
    return None


def build(cls: Any, init: Mapping[str, Any], sizes: Mapping[str, Any]) -> Any:
    """``cls`` built from a config of ``sizes`` (hidden, heads, kv_heads; defaults 64 and 4) and
    ``init`` (config fields and arguments of ``cls``), wrapped in a module that calls it on x
    as its model does (:func:`called`)."""
    import torch

    modeling = sys.modules[cls.__module__]
    config_cls = _config_class(cls, modeling)
    own = set(inspect.signature(cls.__init__).parameters) - {"self", "config"}
    config = config_cls(**_config_kwargs(config_cls, init, sizes, own))
    config._attn_implementation = "eager"  # the ops, not one fused kernel
    kwargs = {k: v for k, v in init.items() if k in own}
    if "layer_idx" in own and "layer_idx" not in kwargs:
        kwargs["layer_idx"] = 0
    if "has_relative_attention_bias" in own and "has_relative_attention_bias" not in kwargs:
        kwargs["has_relative_attention_bias"] = True  # T5: the first layer holds the table
    attn = cls(config, **kwargs)
    rotary_cls = _rotary_class(cls, modeling)
    rotary = rotary_cls(config=config) if rotary_cls is not None and _takes_rope(cls) else None
    return called(torch, attn, rotary, config)


def _config_class(cls: Any, modeling: Any) -> Any:
    from transformers import PretrainedConfig

    hint = inspect.signature(cls.__init__).parameters.get("config")
    annotation = getattr(hint, "annotation", None)
    if isinstance(annotation, str):
        annotation = getattr(modeling, annotation.rsplit(".", 1)[-1], None)
    if isinstance(annotation, type) and issubclass(annotation, PretrainedConfig):
        return annotation
    configs = [
        v
        for v in vars(modeling).values()
        if isinstance(v, type) and issubclass(v, PretrainedConfig) and v is not PretrainedConfig
    ]
    prefix = [c for c in configs if cls.__name__.lower().startswith(c.__name__[:-6].lower())]
    if not (prefix or configs):
        raise LibraryError(f"cannot find the config class of {cls.__name__}")
    return (prefix or configs)[0]


def _config_kwargs(
    config_cls: Any, init: Mapping[str, Any], sizes: Mapping[str, Any], own: set[str]
) -> dict[str, Any]:
    """The config's fields: the sizes under the family's names, one layer, then ``init``'s."""
    names = set(inspect.signature(config_cls.__init__).parameters)
    alias = dict(getattr(config_cls, "attribute_map", {}))
    hidden = int(sizes.get("hidden") or 64)
    heads = int(sizes.get("heads") or (4 if hidden <= 256 else max(1, hidden // 64)))
    wanted: dict[str, Any] = {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": 1,
        "intermediate_size": 4 * hidden,
        "head_dim": sizes.get("head_dim") or hidden // heads,
    }
    kv = "num_key_value_heads" if "num_key_value_heads" in names else "num_kv_heads"
    wanted[kv] = int(sizes.get("kv_heads") or heads)  # the family's default would not fit h
    if sizes.get("kv_heads") and kv == "num_kv_heads":
        wanted["new_decoder_architecture"] = True  # Falcon: grouped kv heads
    out = {alias.get(k, k): v for k, v in wanted.items() if alias.get(k, k) in names}
    unknown = [k for k in init if k not in own and k not in names and k not in alias]
    if unknown:
        raise LibraryError(
            f"--init {unknown[0]}: neither an argument of the class nor a field of "
            f"{config_cls.__name__}"
        )
    return {**out, **{alias.get(k, k): v for k, v in init.items() if k not in own}}


def _rotary_class(cls: Any, modeling: Any) -> Any | None:
    found = [n for n, v in vars(modeling).items() if n.endswith("RotaryEmbedding")]
    same = [n for n in found if cls.__name__.startswith(n[: -len("RotaryEmbedding")])]
    names = same or found
    return getattr(modeling, names[0]) if names else None


def _takes_rope(cls: Any) -> bool:
    return "position_embeddings" in inspect.signature(cls.forward).parameters


def called(torch: Any, attn: Any, rotary: Any, config: Any) -> Any:
    """A module holding ``attn`` whose forward(x) calls it as its model does."""

    class Called(torch.nn.Module):  # type: ignore[misc]
        attntrace_transparent = True  # capture records the ops inside attn, not one row

        def __init__(self) -> None:
            super().__init__()
            self.attn, self.rotary, self.config = attn, rotary, config
            self.hidden_size = int(getattr(config, "hidden_size", 0)) or None

        def forward(self, x: Any) -> Any:
            return call(torch, self.attn, self.rotary, self.config, x)

    Called.__name__ = Called.__qualname__ = type(attn).__name__
    return Called()


def call(torch: Any, attn: Any, rotary: Any, config: Any, x: Any) -> Any:
    """``attn`` on x (B, S, H) or (S, H) with what its forward takes; its first output."""
    batched = x if x.ndim == 3 else x[None]  # (B, S, H)
    B, S, _ = batched.shape
    positions = torch.arange(S)[None].expand(B, S)  # (B, S)
    params = inspect.signature(attn.forward).parameters
    kwargs: dict[str, Any] = {}
    if rotary is not None and "position_embeddings" in params:
        kwargs["position_embeddings"] = rotary(batched, positions)  # (B, S, d) each
    if "position_ids" in params:
        kwargs["position_ids"] = positions
    if "alibi" in params:
        kwargs["alibi"] = None
    mask = _mask(torch, attn, config, B, S, batched.dtype)
    for name in ("attention_mask", "mask"):
        if name in params:
            kwargs[name] = mask
            break
    out = attn(batched, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    return out if x.ndim == 3 else out[0]


def _mask(torch: Any, attn: Any, config: Any, B: int, S: int, dtype: Any) -> Any:  # noqa: N803
    """The additive (B, 1, S, S) mask of a causal layer (and its sliding window), or None."""
    causal = getattr(attn, "is_causal", None)
    if causal is None:
        causal = getattr(attn, "is_decoder", False)
    if not causal:
        return None
    i = torch.arange(S)[:, None]  # (S, 1)
    j = torch.arange(S)[None]  # (1, S)
    hidden = j > i  # (S, S)
    window = getattr(attn, "sliding_window", None)
    if isinstance(window, int) and window > 0:
        hidden = hidden | (j <= i - window)
    additive = torch.zeros(S, S, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)
    return additive[None, None].expand(B, 1, S, S)  # (B, 1, S, S)
