"""Read the attention of one layer from a Hugging Face ``config.json``, as transformers reads it.

transformers 4 writes θ as ``rope_theta`` and scaling as ``rope_scaling``; transformers 5 keeps
both in ``rope_parameters`` (``{"rope_type": ..., "rope_theta": ...}``), or one such dict per
layer type (``{"full_attention": {...}, "sliding_attention": {...}}``, Gemma 3). Sliding windows
apply per layer: ``layer_types`` when the file has it, else the family's own rule (Qwen2:
``use_sliding_window`` and ``max_window_layers``; Gemma 2: every other layer; Gemma 3: five of
six). Every feature that changes the numbers and that attntrace does not model is an error naming
it, never a silent approximation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attntrace.config.attention_config import MAX_SIZE
from attntrace.errors import ConfigError
from attntrace.text import plain

#: Where each size lives in the config.json of the common model families.
HEADS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "n_heads")
HIDDEN = ("hidden_size", "n_embd", "d_model", "dim")
HEAD_DIM = ("head_dim", "d_kv")
KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
#: Families with rotary embeddings even when the file has no rope_theta (Llama 2: default 10000).
ROPE_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "gpt_neox",
        "olmo2",
        "falcon",
        "gptj",
    }
)
#: T5 and its variants: relative position bias, unscaled scores, causal in the decoder stack.
T5_TYPES = frozenset({"t5", "mt5", "umt5"})
#: Families whose RoPE pairs neighbours (2i, 2i + 1): GPT-J's rotate_every_two.
INTERLEAVED_TYPES = frozenset({"gptj"})
#: Families whose attention projections have no bias when the file has no attention_bias.
NO_BIAS_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "gemma",
        "gemma2",
        "gemma3_text",
        "t5",
        "mt5",
        "qwen3",
        "phi3",
        "olmo2",
        "gptj",
    }
)
#: Families whose q and k are RMS-normalised before RoPE: per head or over the whole width.
QK_NORM_TYPES = {
    "qwen3": "head",
    "qwen3_moe": "head",
    "gemma3": "head",
    "gemma3_text": "head",
    "olmo2": "full",
    "olmo3": "full",
}
#: The default θ of families whose config may leave it out.
DEFAULT_THETA = 10000.0


def config_section(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The part of ``cfg`` that describes the language model: ``text_config`` of a multimodal
    config (Gemma 3 4B, Llava) when the top level has no head count, else ``cfg`` itself.

    >>> config_section({"text_config": {"num_attention_heads": 8}})["num_attention_heads"]
    8
    """
    text = cfg.get("text_config")
    nested = isinstance(text, Mapping) and any(k in text for k in HEADS)
    if nested and isinstance(text, Mapping) and not any(k in cfg for k in HEADS):
        return text
    return cfg


def int_field(
    cfg: Mapping[str, Any], names: tuple[str, ...], path: Path | str, required: bool = True
) -> int | None:
    """The first of ``names`` in ``cfg``, a whole number >= 1 (None: absent, not required)."""
    for name in names:
        value = cfg.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise ConfigError(
                f"{plain(path)}: {name} must be a whole number from 1 to {MAX_SIZE}, "
                f"got {shown(value)}"
            )
        return value
    if required:
        hint = (
            " (a multimodal config? give its text_config as a file)" if "text_config" in cfg else ""
        )
        raise ConfigError(f"{path} has none of the fields {', '.join(names)}{hint}")
    return None


def layer_type(cfg: Mapping[str, Any], path: Path | str, layer: int | None) -> str:
    """``full_attention`` or ``sliding_attention`` for ``layer`` (None: every layer must agree).
    Closed forms of the families' rules: the cost is the same for 2 layers and for 2³¹ − 1.

    >>> layer_type({"model_type": "gemma2", "num_hidden_layers": 4, "sliding_window": 8}, "c", 1)
    'full_attention'
    """
    n, kind_of, kinds = _layer_rule(cfg, path)
    if n == 0:
        return "full_attention"
    if layer is None or n == 1:
        if len(kinds) > 1:
            raise ConfigError(
                f"{path}: its layers differ ({', '.join(sorted(kinds))}); "
                f"pick one with --layer N (0 to {n - 1})"
            )
        return kind_of(0)
    if not 0 <= layer < n:
        raise ConfigError(
            f"{path}: --layer {layer} does not exist; the model has layers 0 to {n - 1}"
        )
    return kind_of(layer)


#: The layer types attntrace models (transformers' ``layer_types`` values).
LAYER_KINDS = ("full_attention", "sliding_attention")


def _layer_rule(
    cfg: Mapping[str, Any], path: Path | str
) -> tuple[int, Callable[[int], str], frozenset[str]]:
    """The number of layers (0: all full), the type of layer i, and the set of types, as
    transformers' config classes derive them, without a list of the layers."""
    given = cfg.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or not given or not all(isinstance(t, str) for t in given):
            raise ConfigError(
                f"{plain(path)}: layer_types must be a list of layer type names, got {shown(given)}"
            )
        types = list(given)

        def listed(i: int) -> str:
            if types[i] not in LAYER_KINDS:
                raise ConfigError(
                    f"{plain(path)}: layer_types[{i}] is {shown(types[i])}, which attntrace "
                    f"does not model; it models {', '.join(LAYER_KINDS)}"
                )
            return str(types[i])

        return len(types), listed, frozenset(types)
    if cfg.get("sliding_window") is None:
        return 0, _full, frozenset()
    model_type = str(cfg.get("model_type", ""))
    rule = _SLIDING_RULES.get(model_type)
    n = int_field(cfg, LAYERS, path, required=rule is not None)
    if rule is None:  # Mistral, Mixtral, Phi-3, Qwen2 ...: every layer
        if n or _uses_window(cfg):
            return n or 1, lambda i: "sliding_attention", frozenset({"sliding_attention"})
        return 0, _full, frozenset()
    assert n is not None
    if not _uses_window(cfg):
        return 0, _full, frozenset()
    slides, kinds = rule(cfg, path, n)

    def kind_of(i: int) -> str:
        return "sliding_attention" if slides(i) else "full_attention"

    return n, kind_of, kinds


def _full(i: int) -> str:
    return "full_attention"


def _every(period_field: str | None, default: int) -> Any:
    """Gemma's rule: every layer slides but each ``period``-th (Gemma 2: every other)."""

    def rule(cfg: Mapping[str, Any], path: Path | str, n: int) -> tuple[Any, frozenset[str]]:
        period = default
        if period_field is not None and cfg.get(period_field) is not None:
            period = _whole(cfg[period_field], period_field, path, 1)
        kinds = {"sliding_attention"} if period > 1 else set()
        if n >= period:
            kinds.add("full_attention")
        return (lambda i: bool((i + 1) % period)), frozenset(kinds)

    return rule


def _from_layer(cfg: Mapping[str, Any], path: Path | str, n: int) -> tuple[Any, frozenset[str]]:
    """Qwen's rule: layers from max_window_layers on slide."""
    first = cfg.get("max_window_layers")
    first = 0 if first is None else _whole(first, "max_window_layers", path, 0)
    kinds = {"sliding_attention"} if first < n else set()
    if first > 0:
        kinds.add("full_attention")
    return (lambda i: i >= first), frozenset(kinds)


def _uses_window(cfg: Mapping[str, Any]) -> bool:
    """Qwen2/3 keep sliding_window in the file with use_sliding_window false (their default)."""
    return bool(
        cfg.get("use_sliding_window", not str(cfg.get("model_type", "")).startswith("qwen"))
    )


#: Which layers slide, by family, where the config has no layer_types: Gemma2Config (every
#: other layer), Gemma3TextConfig (sliding_window_pattern, 6), Qwen2Config (from max_window_layers).
_SLIDING_RULES: dict[str, Any] = {
    "gemma2": _every(None, 2),
    "gemma3": _every("sliding_window_pattern", 6),
    "gemma3_text": _every("sliding_window_pattern", 6),
    "qwen2": _from_layer,
    "qwen3": _from_layer,
}


def _whole(value: Any, name: str, path: Path | str, low: int, high: int = MAX_SIZE) -> int:
    """``value`` of the field ``name``: a whole number from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"{plain(path)}: {name} must be a whole number from {low} to {high}, got {shown(value)}"
        )
    return value


def window(cfg: Mapping[str, Any], path: Path | str, kind: str) -> int | None:
    """The sliding window W of a layer of type ``kind`` (None: full attention)."""
    size = cfg.get("sliding_window")
    if kind != "sliding_attention" or size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise ConfigError(
            f"{plain(path)}: sliding_window must be a whole number from 1 to {MAX_SIZE} or null, "
            f"got {shown(size)}"
        )
    return size


def rope_parameters(cfg: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """θ and scaling of a layer of type ``kind`` from ``rope_parameters`` (transformers 5, per
    layer type or shared) or ``rope_theta`` / ``rope_scaling`` (transformers 4).

    >>> v5 = {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}
    >>> rope_parameters(v5, "full_attention")
    {'rope_type': 'default', 'rope_theta': 500000.0}
    >>> v4 = {"rope_theta": 1e6, "rope_local_base_freq": 1e4}
    >>> rope_parameters(v4, "sliding_attention")["rope_theta"]
    10000.0
    """
    params: dict[str, Any] = {}
    given = cfg.get("rope_parameters")
    if isinstance(given, Mapping):
        per_type = given.get(kind) if kind in given else None
        params.update(per_type if isinstance(per_type, Mapping) else given)
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, Mapping) and not (
        kind == "sliding_attention" and "rope_local_base_freq" in cfg
    ):
        params = {**scaling, **params}  # Gemma 3 scales its full-attention layers only
    if "rope_theta" not in params:
        theta = cfg.get("rope_local_base_freq") if kind == "sliding_attention" else None
        theta = theta if theta is not None else cfg.get("rope_theta")
        if theta is not None:
            params["rope_theta"] = theta
    params.setdefault("rope_type", params.pop("type", "default"))
    if isinstance(params.get("rope_theta"), int | float) and not isinstance(
        params["rope_theta"], bool
    ):
        params["rope_theta"] = float(params["rope_theta"])
    return params


#: Every config.json field attntrace reads, by kind: ``("whole", low)``, a whole number from
#: ``low`` to MAX_SIZE; ``("number", high)``, a finite number > 0 (and <= ``high``);
#: ``("number0", high)``, the same or 0; ``"flag"``, true or false; ``"name"``, a string;
#: ``"names"``, a list of strings; ``"object"``, a JSON object. Null is "absent" for each.
FIELDS: dict[str, Any] = {
    **dict.fromkeys((*HEADS, *HIDDEN, *HEAD_DIM, *KV_HEADS, *LAYERS), ("whole", 1)),
    "sliding_window": ("whole", 1),
    "sliding_window_pattern": ("whole", 1),
    "max_window_layers": ("whole", 0),
    "max_position_embeddings": ("whole", 1),
    "relative_attention_num_buckets": ("whole", 1),
    "relative_attention_max_distance": ("whole", 1),
    "rotary_dim": ("whole", 1),
    "rope_theta": ("number", 1e300),
    "rope_local_base_freq": ("number", 1e300),
    "rotary_emb_base": ("number", 1e300),
    "query_pre_attn_scalar": ("number", 1e300),
    "attn_logit_softcapping": ("number", 1e300),
    "rms_norm_eps": ("number", 1.0),
    "partial_rotary_factor": ("number", 1.0),
    "rotary_pct": ("number", 1.0),
    "attention_bias": "flag",
    "use_sliding_window": "flag",
    "is_decoder": "flag",
    "is_encoder_decoder": "flag",
    "use_bidirectional_attention": "flag",
    "new_decoder_architecture": "flag",
    "multi_query": "flag",
    "bias": "flag",
    "model_type": "name",
    "architectures": "names",
    "rope_scaling": "object",
    "rope_parameters": "object",
    "text_config": "object",
}
#: The fields of a RoPE scaling object (rope_scaling, rope_parameters), by kind as above.
SCALING_FIELDS: dict[str, Any] = {
    "rope_type": "name",
    "type": "name",
    "rope_theta": ("number", 1e300),
    "factor": ("number", 1e300),
    "low_freq_factor": ("number", 1e300),
    "high_freq_factor": ("number", 1e300),
    "original_max_position_embeddings": ("whole", 1),
    "attention_factor": ("number", 1e300),
    "beta_fast": ("number", 1e300),
    "beta_slow": ("number", 1e300),
    "mscale": ("number0", 1e300),
    "mscale_all_dim": ("number0", 1e300),
    "truncate": "flag",
    "partial_rotary_factor": ("number", 1.0),
}


def check_fields(cfg: Mapping[str, Any], path: Path | str) -> None:
    """Every field attntrace reads has its type and range, or one error naming the field
    (``rope_scaling.factor``; ``rope_parameters.sliding_attention.rope_theta``).

    >>> check_fields({"rope_scaling": {"rope_type": "linear", "factor": "two"}}, "c.json")
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: c.json: rope_scaling.factor must be a number > 0, got "two"
    """
    for name, kind in FIELDS.items():
        _check(cfg.get(name), name, kind, path)
    for name in ("rope_scaling", "rope_parameters"):
        group = cfg.get(name)
        if not isinstance(group, Mapping):
            continue
        nested = [(k, v) for k, v in group.items() if k in LAYER_KINDS]
        for kind_name, inner in nested:
            if not isinstance(inner, Mapping):
                raise ConfigError(
                    f"{plain(path)}: {name}.{kind_name} must be a JSON object, got {shown(inner)}"
                )
            _check_group(inner, f"{name}.{kind_name}", path)
        _check_group(group, name, path)


def _check_group(group: Mapping[str, Any], name: str, path: Path | str) -> None:
    for key, kind in SCALING_FIELDS.items():
        _check(group.get(key), f"{name}.{key}", kind, path)


#: The plain kinds of :data:`FIELDS`: what a value must be, and how the error says it.
_KINDS: dict[str, tuple[Any, str]] = {
    "flag": (lambda v: isinstance(v, bool), "true or false"),
    "name": (lambda v: isinstance(v, str), "a string"),
    "names": (
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "a list of strings",
    ),
    "object": (lambda v: isinstance(v, Mapping), "a JSON object"),
}


def _check(value: Any, name: str, kind: Any, path: Path | str) -> None:
    if value is None:
        return
    where = plain(path)
    if isinstance(kind, str):
        fits, what = _KINDS[kind]
        if not fits(value):
            raise ConfigError(f"{where}: {name} must be {what}, got {shown(value)}")
        return
    if kind[0] == "whole":
        _whole(value, name, path, kind[1])
        return
    high, low = kind[1], ">= 0" if kind[0] == "number0" else "> 0"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {name} must be a number {low}, got {shown(value)}")
    floor = value >= 0 if low == ">= 0" else value > 0
    if not floor or not value <= high:
        bound = "" if high >= 1e300 else f" and at most {high:g}"
        raise ConfigError(f"{where}: {name} must be a number {low}{bound}, got {shown(value)}")


def attention_fields(
    cfg: Mapping[str, Any], path: Path | str, layer: int | None = None
) -> dict[str, Any]:
    """The AttentionConfig fields of layer ``layer`` (None: a layer every layer is like) of the
    config ``cfg`` (a parsed config.json; ``path`` names it in errors).

    >>> f = attention_fields({"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4,
    ...                       "num_key_value_heads": 2, "sliding_window": 16,
    ...                       "rope_parameters": {"rope_theta": 1e6}}, "config.json")
    >>> f["kv_heads"], f["window"], f["rope_base"], f["causal"], f["bias"]
    (2, 16, 1000000.0, True, False)
    """
    _check(cfg.get("text_config"), "text_config", "object", path)
    cfg = config_section(cfg)
    check_fields(cfg, path)
    heads, hidden = int_field(cfg, HEADS, path), int_field(cfg, HIDDEN, path)
    assert heads is not None  # a required field
    assert hidden is not None
    kv_heads = (
        _falcon_kv_heads(cfg)
        if cfg.get("model_type") == "falcon"
        else int_field(cfg, KV_HEADS, path, False)
    )
    head_dim = int_field(cfg, HEAD_DIM, path, required=False)
    model_type = str(cfg.get("model_type", ""))
    kind = layer_type(cfg, path, layer)
    alibi = _alibi(cfg, path, model_type)
    rope, theta = _rope(cfg, path, kind, model_type) if not alibi else (False, 10000.0)
    decoupled = head_dim is not None and (hidden % heads or hidden // heads != head_dim)
    d = head_dim if head_dim is not None else hidden // heads
    return {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads if kv_heads not in (None, heads) else None,
        "head_dim_override": head_dim if decoupled else None,
        "rope": rope,
        "rope_base": theta,
        "causal": _causal(cfg, model_type),
        "bias": _bias(cfg, model_type),
        "window": window(cfg, path, kind),
        "scale": _scale(cfg, path, d),
        "rope_scaling": None,
        "rotary_dims": None,
        **(rope_variants(cfg, path, kind, d) if rope else {}),
        "softcap": _float_or_none(
            cfg.get("attn_logit_softcapping"), "attn_logit_softcapping", path
        ),
        "relative_bias": None,
        "rope_style": "interleaved" if model_type in INTERLEAVED_TYPES else "half",
        **_t5(cfg, model_type),
        **alibi,
        "qk_norm": QK_NORM_TYPES.get(model_type),
        "qk_norm_eps": _float_or_none(cfg.get("rms_norm_eps"), "rms_norm_eps", path)
        if model_type in QK_NORM_TYPES
        else None,
    }


def _falcon_kv_heads(cfg: Mapping[str, Any]) -> int | None:
    """FalconAttention: num_kv_heads with new_decoder_architecture, else 1 (multi_query) or h."""
    if cfg.get("new_decoder_architecture"):
        value = cfg.get("num_kv_heads")
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )
    return 1 if cfg.get("multi_query", True) else None


def _rope(
    cfg: Mapping[str, Any], path: Path | str, kind: str, model_type: str
) -> tuple[bool, float]:
    """Whether the layer rotates q and k, and θ."""
    params = rope_parameters(cfg, kind)
    scaled = params["rope_type"] not in ("default", None)
    if not ("rope_theta" in params or model_type in ROPE_TYPES or scaled):
        return False, DEFAULT_THETA
    theta = params.get("rope_theta", cfg.get("rotary_emb_base", DEFAULT_THETA))
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not 0 < theta < 1e308:
        raise ConfigError(f"{path}: rope_theta must be a number > 0, got {theta!r}")
    return True, float(theta)


#: The keys each RoPE scaling type reads from a config (transformers' rope init functions).
_SCALING_KEYS = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
}


def rope_variants(cfg: Mapping[str, Any], path: Path | str, kind: str, d: int) -> dict[str, Any]:
    """``rope_scaling`` (as --rope-scaling takes it) and ``rotary_dims`` of a layer."""
    params = rope_parameters(cfg, kind)
    out: dict[str, Any] = {"rope_scaling": None, "rotary_dims": None}
    scaling = params["rope_type"]
    if scaling not in ("default", None):
        if scaling not in _SCALING_KEYS:
            raise ConfigError(
                f"{path}: rope scaling {scaling!r} is not modelled; attntrace models "
                f"{', '.join(_SCALING_KEYS)}"
            )
        values = {k: params[k] for k in _SCALING_KEYS[scaling] if params.get(k) is not None}
        if scaling == "dynamic":
            values["max_position_embeddings"] = cfg.get("max_position_embeddings", 2048)
        if scaling == "yarn" and "factor" not in values:  # DeepSeek-V3: from the context lengths
            lengths = ("max_position_embeddings", "original_max_position_embeddings")
            longest, original = cfg.get(lengths[0]), values.get(lengths[1])
            if longest is None or original is None:
                missing = lengths[0] if longest is None else lengths[1]
                raise ConfigError(
                    f"{plain(path)}: yarn rope scaling needs factor, or {missing} to derive "
                    "it from; add rope_scaling.factor"
                )
            values["factor"] = longest / original  # whole numbers >= 1 (check_fields)
        if "truncate" in values:
            values["truncate"] = float(bool(values["truncate"]))
        out["rope_scaling"] = f"{scaling}:" + ",".join(
            f"{k}={float(v)!r}" for k, v in values.items()
        )
    fraction = params.get(
        "partial_rotary_factor", cfg.get("partial_rotary_factor", cfg.get("rotary_pct"))
    )
    if fraction is not None and fraction != 1.0:
        out["rotary_dims"] = int(d * fraction)
    rotary_dim = cfg.get("rotary_dim")  # GPT-J: a number of dims, not a fraction
    if cfg.get("model_type") == "gptj" and rotary_dim is not None and rotary_dim != d:
        out["rotary_dims"] = int_field(cfg, ("rotary_dim",), path)
    return out


def _t5(cfg: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """T5 scores are not scaled and get a relative position bias (encoder: both directions)."""
    if model_type not in T5_TYPES:
        return {}
    buckets = cfg.get("relative_attention_num_buckets", 32)
    spec = f"{buckets},{cfg.get('relative_attention_max_distance', 128)}"
    return {"scale": 1.0, "relative_bias": spec + (",causal" if cfg.get("is_decoder") else "")}


def _float_or_none(value: Any, name: str, path: Path | str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e308:
        shown = plain(repr(value))[:40]
        raise ConfigError(f"{path}: {name} must be a number > 0 or null, got {shown}")
    return float(value)


def _causal(cfg: Mapping[str, Any], model_type: str) -> bool:
    if cfg.get("use_bidirectional_attention") or (
        cfg.get("is_decoder") is False and model_type in ("bert", "roberta")
    ):
        return False
    archs = cfg.get("architectures") or []
    return (
        model_type in ROPE_TYPES
        or model_type in ("gpt2", "bloom", "mpt")
        or (model_type in T5_TYPES and bool(cfg.get("is_decoder")))  # T5's decoder stack
        or any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    )


def _bias(cfg: Mapping[str, Any], model_type: str) -> bool:
    if "attention_bias" in cfg:
        if not isinstance(cfg["attention_bias"], bool):  # "false" is not false
            shown = plain(repr(cfg["attention_bias"]))[:40]
            raise ConfigError(f"attention_bias must be true or false, got {shown}")
        return cfg["attention_bias"]
    if model_type == "falcon":  # FalconConfig.bias, default False
        return bool(cfg.get("bias", False))
    return model_type not in NO_BIAS_TYPES


def _scale(cfg: Mapping[str, Any], path: Path | str, head_dim: int) -> float | None:
    """Gemma 2/3 scale the scores by query_pre_attn_scalar^-0.5 (None: 1/√d, or absent)."""
    scalar = cfg.get("query_pre_attn_scalar")
    if scalar is None or scalar == head_dim:
        return None
    if isinstance(scalar, bool) or not isinstance(scalar, int | float) or not scalar > 0:
        raise ConfigError(f"{path}: query_pre_attn_scalar must be a number > 0, got {scalar!r}")
    return 1.0 / math.sqrt(float(scalar))


def _alibi(cfg: Mapping[str, Any], path: Path | str, model_type: str) -> dict[str, bool]:
    """ALiBi's fields: Bloom always, MPT by attn_config.alibi (default true), Falcon (or any
    other config) by alibi; Falcon adds it to the raw scores, before the scale (alibi_scaled);
    {} without ALiBi.

    >>> _alibi({"model_type": "falcon", "alibi": True}, "config.json", "falcon")
    {'alibi': True, 'alibi_scaled': True}
    >>> _alibi({"model_type": "mpt", "attn_config": {"alibi": False}}, "config.json", "mpt")
    {}
    """
    attn = cfg.get("attn_config")
    attn = attn if isinstance(attn, Mapping) else {}
    on = {"bloom": True, "mpt": attn.get("alibi", True) is True}.get(
        model_type, cfg.get("alibi") is True
    )  # Falcon's and any other config's own alibi: true
    if not on:
        return {}
    most = attn.get("alibi_bias_max", 8)
    if model_type == "mpt" and most != 8:
        raise ConfigError(
            f"{path}: alibi_bias_max {shown(most)} is not modelled (slopes as Press et al., "
            "alibi_bias_max 8); set it to 8 to trace"
        )
    return {"alibi": True, "alibi_scaled": model_type == "falcon"}


def shown(value: Any) -> str:
    """A JSON value as a short, terminal-safe text for an error message."""
    text = (
        json.dumps(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
    )
    return plain(text if len(text) <= 40 else text[:37] + "...")
