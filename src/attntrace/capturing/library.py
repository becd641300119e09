"""Hugging Face attention classes as targets, without a wrapper file: ``transformers:NAME``
found in its family's modeling module, its config object built from the sizes (random init,
eager attention unless ``--init attn_implementation=sdpa``), and a module that calls it as its
model does: the rotary embedding's (cos, sin) of positions 0..S-1, position ids, the causal (and
sliding-window) mask as an additive (B, 1, S, S) tensor, the keyword names of the family, the
first item of the tuple.

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
BART, Whisper, TrOCR …    built from sizes: ``cls(embed_dim=H, num_heads=h, config=...)``
CLIP, SigLIP              built from the vision (or text) part of their composite config
Bloom                     ``attn(x, residual=0, alibi=..., attention_mask=mask)``: causal
MPT                       ``attn(x, position_bias=..., attention_mask=hidden)``: causal, the
                          mask as booleans (True where a key is hidden)
DeBERTa                   ``attn(x, attention_mask=keep)`` (True where kept); with
                          relative_attention, the encoder's ``rel_embeddings``, ``relative_pos``
Gemma 3, OLMo 3           the rotary asked for the layer's kind (``layer_type``)
========================  ==================================================================
"""

from __future__ import annotations

import functools
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
            folder = model_type.replace("-", "_")  # xlm-roberta
            modeling = importlib.import_module(f"{PACKAGE}.models.{folder}.modeling_{folder}")
        except ImportError:
            continue
        if isinstance(getattr(modeling, name, None), type):
            return getattr(modeling, name)
    return None


def build(cls: Any, init: Mapping[str, Any], sizes: Mapping[str, Any]) -> Any:
    """``cls`` built from a config of ``sizes`` (hidden, heads, kv_heads; defaults 64 and 4) and
    ``init`` (config fields and arguments of ``cls``), wrapped in a module that calls it on x
    as its model does (:func:`called`). A class whose ``__init__`` takes sizes (``embed_dim``,
    ``num_heads``: BART, Whisper) gets them from that config too."""
    import torch

    modeling = sys.modules[cls.__module__]
    config_cls = _config_class(cls, modeling)
    params = inspect.signature(cls.__init__).parameters
    own = set(params) - {"self", "config"}
    init, implementation = _implementation(init)
    config = config_cls(**_config_kwargs(config_cls, init, sizes, own))
    config._attn_implementation = implementation  # eager unless asked: the ops, one by one
    kwargs = {k: v for k, v in init.items() if k in own}
    kwargs.update(_size_arguments(params, config, kwargs))
    if "has_relative_attention_bias" in own and "has_relative_attention_bias" not in kwargs:
        kwargs["has_relative_attention_bias"] = True  # T5: the first layer holds the table
    first = next(iter(list(params)[1:2]), "")
    if first == "config":
        attn = cls(config, **kwargs)
    else:  # sizes first (BART, Whisper), the config an optional keyword, or none
        attn = cls(**kwargs, **({"config": config} if "config" in params else {}))
    rotary_cls = _rotary_class(cls, modeling)
    rotary = rotary_cls(config=config) if rotary_cls is not None and _takes_rope(cls) else None
    return called(torch, attn, rotary, config)


#: The ``attn_implementation`` values ``--init`` may ask for; "eager" when it does not.
IMPLEMENTATIONS = ("eager", "sdpa")


def _implementation(init: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``init`` without ``attn_implementation``, and the implementation it asks for: "eager"
    (the default: the family's own ops, line by line) or "sdpa" (its
    ``F.scaled_dot_product_attention`` call, which trace and diff open step by step).

    >>> _implementation({"attn_implementation": "sdpa", "rope_theta": 1e6})
    ({'rope_theta': 1000000.0}, 'sdpa')
    """
    rest = {k: v for k, v in init.items() if k != "attn_implementation"}
    asked = str(init.get("attn_implementation", "eager"))
    if asked not in IMPLEMENTATIONS:
        raise LibraryError(
            f"--init attn_implementation={asked}: attntrace runs "
            f"{' or '.join(IMPLEMENTATIONS)} (flash_attention_2 needs a GPU kernel it cannot open)"
        )
    return rest, asked


#: The sizes a class's ``__init__`` may take instead of reading them from its config: the
#: argument names, and the config attribute each comes from.
_SIZE_ARGUMENTS = {
    "embed_dim": "hidden_size",
    "d_model": "hidden_size",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_attn_heads": "num_attention_heads",
    "n_heads": "num_attention_heads",
}


def _size_arguments(
    params: Mapping[str, inspect.Parameter], config: Any, given: Mapping[str, Any]
) -> dict[str, Any]:
    """The sizes, the layer index (0) and a config-typed second argument that ``__init__``
    takes, from ``config``, for those ``given`` leaves out."""
    out: dict[str, Any] = {}
    for name, field in _SIZE_ARGUMENTS.items():
        if name in params and name not in given and hasattr(config, field):
            out[name] = getattr(config, field)
    for name in ("layer_idx", "layer_id"):
        if name in params and name not in given:
            out[name] = 0
    return out


def _config_class(cls: Any, modeling: Any) -> Any:
    """The config class ``cls`` takes: its annotation (the first config of a union: CLIP's
    ``CLIPVisionConfig | CLIPTextConfig``, Whisper's ``WhisperConfig | None``), else the
    modeling module's config named like the class, a plain one before a composite one."""
    import re

    from transformers import PretrainedConfig

    def is_config(v: Any) -> bool:
        return isinstance(v, type) and issubclass(v, PretrainedConfig) and v is not PretrainedConfig

    hint = inspect.signature(cls.__init__).parameters.get("config")
    annotation = getattr(hint, "annotation", None)
    if isinstance(annotation, str):
        names = re.findall(r"\w+Config\b", annotation)
        found = [getattr(modeling, n.rsplit(".", 1)[-1], None) for n in names]
        annotation = next((c for c in found if is_config(c)), None)
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if is_config(candidate):
            return candidate
    configs = [v for v in vars(modeling).values() if is_config(v)]
    prefix = [c for c in configs if cls.__name__.lower().startswith(c.__name__[:-6].lower())]
    if not (prefix or configs):
        raise LibraryError(f"cannot find the config class of {cls.__name__}")
    ordered = sorted(prefix or configs, key=lambda c: bool(getattr(c, "sub_configs", None)))
    parts = list(dict(getattr(ordered[0], "sub_configs", None) or {}).values())
    return next((c for c in parts if is_config(c)), ordered[0])  # SigLIP: its text part


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
    d = int(wanted["head_dim"])
    if "rotary_dim" in names:  # GPT-J, CodeGen: rotate half of each head (the default 64 > d)
        wanted["rotary_dim"] = max(2, d // 2)
    if "use_sliding_window" in names and not init.get("use_sliding_window"):
        wanted["sliding_window"] = None  # Qwen2-MoE: off, and 0 is no window size
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


def known_axes(call: Any) -> dict[str, int]:
    """The head count h and head size d that the transformers attention ``call`` is (as
    attntrace builds it) or holds states, so that trace names a size two axes share by what the
    class says (Pythia-410m: the rotary part of d is 16 = h); {} when it holds none.

    >>> known_axes(len)
    {}
    """
    modules = getattr(call, "modules", None)
    found = [m for m in modules() if is_library_class(type(m))] if callable(modules) else []
    for module in found:
        config = getattr(module, "config", None)
        h = _first_count(module, _HEAD_COUNTS) or _first_count(config, _HEAD_COUNTS)
        d = _first_count(module, _HEAD_SIZES) or _first_count(config, ("head_dim",))
        if h and d:
            return {"h": h, "d": d}
    return {}


#: Attributes that hold the head count and the head size of a transformers attention class.
_HEAD_COUNTS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
_HEAD_SIZES = ("head_dim", "head_size", "attention_head_size")


def _first_count(obj: Any, names: tuple[str, ...]) -> int:
    """The first of ``names`` that ``obj`` holds as a positive int, else 0."""
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def called(torch: Any, attn: Any, rotary: Any, config: Any) -> Any:
    """A module holding ``attn`` whose forward(x) calls it as its model does."""

    class Called(torch.nn.Module):  # type: ignore[misc]
        attntrace_transparent = True  # capture records the ops inside attn, not one row
        attntrace_caller = True  # attntrace's caller of a transformers class: attn, rotary

        def __init__(self) -> None:
            super().__init__()
            self.attn, self.rotary, self.config = attn, rotary, config
            self.hidden_size = int(getattr(config, "hidden_size", 0)) or None
            self.key_lengths: tuple[int, ...] | None = None  # diff --key-lengths: padded keys

        def forward(self, x: Any) -> Any:
            return call(torch, self.attn, self.rotary, self.config, x, self.key_lengths)

    Called.__name__ = Called.__qualname__ = type(attn).__name__
    return Called()


def call(torch: Any, attn: Any, rotary: Any, config: Any, x: Any, key_lengths: Any = None) -> Any:
    """``attn`` on x (B, S, H) or (S, H) with what its forward takes (``key_lengths``: the
    keys each batch item keeps, the rest hidden by its mask, as its model pads); its first
    output."""
    batched = x if x.ndim == 3 else x[None]  # (B, S, H)
    B, S, _ = batched.shape
    positions = torch.arange(S)[None].expand(B, S)  # (B, S)
    params = inspect.signature(attn.forward).parameters
    kwargs: dict[str, Any] = {}
    if rotary is not None and "position_embeddings" in params:
        kwargs["position_embeddings"] = _rotary(rotary, attn, config, batched, positions)
    if "position_ids" in params:
        kwargs["position_ids"] = positions
    if "residual" in params:  # Bloom adds the residual itself: none, to see the attention
        kwargs["residual"] = torch.zeros_like(batched)  # (B, S, H)
    kwargs.update(_position_biases(torch, attn, config, params, batched))
    mask = _mask(torch, attn, config, B, S, batched.dtype)  # (B, 1, S, S) or None
    mask = _padded(torch, mask, key_lengths, S, batched.dtype)
    for name in ("attention_mask", "mask"):
        if name in params:
            kwargs[name] = _keep_mask(torch, attn, mask, B, S)
            break
    out = attn(batched, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    return out if x.ndim == 3 else out[0]


def _rotary(rotary: Any, attn: Any, config: Any, x: Any, positions: Any) -> Any:
    """The (cos, sin) tables of positions; a rotary of several layer kinds (Gemma 3, OLMo 3)
    is asked for this layer's kind."""
    if "layer_type" not in inspect.signature(rotary.forward).parameters:
        return rotary(x, positions)  # (B, S, d) each
    kinds = getattr(config, "layer_types", None) or [None]
    kind = getattr(attn, "layer_type", None) or kinds[getattr(attn, "layer_idx", 0) or 0]
    return rotary(x, positions, kind)


def _position_biases(
    torch: Any, attn: Any, config: Any, params: Mapping[str, Any], x: Any
) -> dict[str, Any]:
    """What the model hands the layer beside x when its forward takes it: ALiBi (Bloom's
    ``alibi``, MPT's ``position_bias``: the model's own tables), DeBERTa's relative
    positions and their embeddings (from its encoder, random-init as the layer is)."""
    modeling = sys.modules[type(attn).__module__]
    B, S, _ = x.shape
    out: dict[str, Any] = {}
    if "alibi" in params:
        alibi = alibi_on(config)
        build = getattr(modeling, "build_alibi_tensor", None)
        heads = int(getattr(attn, "num_heads", 0) or config.num_attention_heads)
        made = build(torch.ones(B, S), heads, x.dtype) if alibi and build else None
        out["alibi"] = made  # (B·h, 1, S)
    if "position_bias" in params and (build := getattr(modeling, "build_mpt_alibi_tensor", None)):
        heads = int(getattr(attn, "n_heads", 0) or config.num_attention_heads)
        out["position_bias"] = build(heads, S)[:, :, -S:]  # (h, 1, S)
    if "relative_pos" in params and getattr(attn, "relative_attention", False):
        encoder = _relative_encoder(modeling, config)
        if encoder is not None:
            out["rel_embeddings"] = encoder.get_rel_embedding()  # (2·span, H)
            out["relative_pos"] = encoder.get_rel_pos(x)  # (1, S, S)
    return out


def alibi_on(config: Any) -> bool:
    """Whether the layer's model adds ALiBi: Bloom always, Falcon when its config says so."""
    return bool(getattr(config, "alibi", getattr(config, "model_type", "") == "bloom"))


def _relative_encoder(modeling: Any, config: Any) -> Any | None:
    """The modeling module's encoder that makes the relative embeddings (DeBERTa's)."""
    for value in vars(modeling).values():
        if isinstance(value, type) and hasattr(value, "get_rel_embedding"):
            return value(config)
    return None


#: Decoder-only families whose attention class states no ``is_causal``: their model is causal.
DECODERS = frozenset({"bloom", "mpt"})


@functools.lru_cache(maxsize=256)
def _fills_where_true(cls: type) -> bool:
    """Whether ``cls.forward`` hides the keys where its boolean mask is True (MPT)."""
    try:
        forward = cls.forward  # type: ignore[attr-defined]
        return "masked_fill(attention_mask," in inspect.getsource(forward)
    except (TypeError, OSError, AttributeError):
        return False


@functools.lru_cache(maxsize=256)
def _reads_bool_mask(cls: type) -> bool:
    """Whether ``cls.forward`` reads the mask as booleans (``attention_mask.bool()``)."""
    try:
        forward = cls.forward  # type: ignore[attr-defined]
        return "attention_mask.bool()" in inspect.getsource(forward)
    except (TypeError, OSError, AttributeError):
        return False


def _keep_mask(torch: Any, attn: Any, additive: Any, B: int, S: int) -> Any:  # noqa: N803
    """The mask in the layer's convention: the additive one, or for a layer that reads it as
    booleans (DeBERTa's ``attention_mask.bool()``: True where a key is kept) that mask, or
    for MPT's ``masked_fill(attention_mask, min)`` True where a key is hidden."""
    classes: set[type] = {type(m) for m in attn.modules()}
    if additive is not None and any(_fills_where_true(cls) for cls in classes):
        return additive != 0  # (B, 1, S, S): True where hidden
    if not any(_reads_bool_mask(cls) for cls in classes):
        return additive
    if additive is None:
        return torch.ones(B, 1, S, S, dtype=torch.bool)  # (B, 1, S, S): every key kept
    return additive == 0  # (B, 1, S, S)


def _mask(torch: Any, attn: Any, config: Any, B: int, S: int, dtype: Any) -> Any:  # noqa: N803
    """The additive (B, 1, S, S) mask of a causal layer (and its sliding window), or None."""
    causal = getattr(attn, "is_causal", None)
    if causal is None:
        causal = getattr(attn, "is_decoder", False)
    if not causal and getattr(config, "model_type", "") not in DECODERS:
        return None
    i = torch.arange(S)[:, None]  # (S, 1)
    j = torch.arange(S)[None]  # (1, S)
    hidden = j > i  # (S, S)
    window = getattr(attn, "sliding_window", None) or _passed_window(attn, config)
    if isinstance(window, int) and window > 0:
        hidden = hidden | (j <= i - window)
    additive = torch.zeros(S, S, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)
    return additive[None, None].expand(B, 1, S, S)  # (B, 1, S, S)


def _padded(torch: Any, mask: Any, key_lengths: Any, S: int, dtype: Any) -> Any:  # noqa: N803
    """``mask`` ((B, 1, S, S) additive, or None) with the keys past each item's length hidden."""
    if key_lengths is None:
        return mask
    pad = torch.arange(S)[None] >= torch.tensor(key_lengths)[:, None]  # (B, N)
    pad = pad[:, None, None, :].expand(-1, 1, S, S)  # (B, 1, S, N)
    base = torch.zeros(pad.shape, dtype=dtype) if mask is None else mask  # (B, 1, S, N)
    return base.masked_fill(pad, torch.finfo(base.dtype).min)  # (B, 1, S, N)


def _passed_window(attn: Any, config: Any) -> Any:
    """The config's sliding window when the layer hands it to its attention function
    (Mistral, Phi-3: ``sliding_window=getattr(self.config, "sliding_window", None)``): the
    model's mask then holds the window, whatever the implementation."""
    try:
        source = inspect.getsource(type(attn).forward)
    except (TypeError, OSError):
        return None
    passed = 'sliding_window=getattr(self.config, "sliding_window"' in source
    return getattr(config, "sliding_window", None) if passed else None
