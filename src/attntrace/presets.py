"""Presets: the attention sizes of real models, and reading a Hugging Face ``config.json``.

Every number below is copied from the model's public ``config.json`` on the Hugging Face Hub
(``https://huggingface.co/<repo>/blob/main/config.json``); the comment above each preset names
the repository and quotes the fields. Only the attention of one layer is traced: layer count,
vocabulary, MLP and norms do not matter here. Explicit flags override a preset field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attntrace.config import MAX_SIZE, AttentionConfig
from attntrace.errors import ConfigError, InputFileError
from attntrace.files.guard import json_bool, json_float, json_str, load_json
from attntrace.text import plain


@dataclass(frozen=True)
class Preset:
    """The attention of one real model.

    >>> p = PRESETS["llama-3-8b"]
    >>> p.heads, p.kv_heads, p.hidden, p.head_dim, p.rope_theta
    (32, 8, 4096, 128, 500000.0)
    """

    name: str
    repo: str  # Hugging Face repository whose config.json the numbers come from
    hidden: int  # H: hidden_size / n_embd / d_model
    heads: int  # h: num_attention_heads / n_head / num_heads
    kv_heads: int  # g: num_key_value_heads (= heads where the config has none)
    head_dim: int  # d: head_dim / d_kv, else hidden / heads
    rope_theta: float | None  # None: no rotary embedding (learned or relative positions)
    max_positions: int | None  # max_position_embeddings / n_positions; None: relative positions
    causal: bool  # decoder-only language model: query i attends keys 0..i
    bias: bool  # the q/k/v/o linear layers have biases
    note: str = ""  # what attntrace does not model about this attention

    def config_fields(self) -> dict[str, Any]:
        """The AttentionConfig fields this preset sets.

        >>> PRESETS["gemma-7b"].config_fields()["head_dim_override"]
        256
        """
        decoupled = self.heads * self.head_dim != self.hidden
        return {
            "hidden": self.hidden, "heads": self.heads,
            "kv_heads": self.kv_heads if self.kv_heads != self.heads else None,
            "head_dim_override": self.head_dim if decoupled else None,
            "rope": self.rope_theta is not None, "rope_base": self.rope_theta or 10000.0,
            "causal": self.causal, "bias": self.bias,
        }

    @property
    def kv_cache_bytes_per_token(self) -> int:
        """KV-cache bytes per token and layer in float16 (2 bytes): 2 * g * d * 2."""
        return 2 * self.kv_heads * self.head_dim * 2


_PRESETS = (
    # google-bert/bert-base-uncased: hidden_size 768, num_attention_heads 12,
    # max_position_embeddings 512, position_embedding_type "absolute" (no head_dim, no kv heads)
    Preset("bert-base", "google-bert/bert-base-uncased", 768, 12, 12, 64, None, 512, False, True),
    # google-bert/bert-large-uncased: hidden_size 1024, num_attention_heads 16, max_position_embeddings 512
    Preset("bert-large", "google-bert/bert-large-uncased", 1024, 16, 16, 64, None, 512, False, True),
    # openai-community/gpt2: n_embd 768, n_head 12, n_positions 1024 (c_attn has a bias)
    Preset("gpt2", "openai-community/gpt2", 768, 12, 12, 64, None, 1024, True, True),
    # openai-community/gpt2-xl: n_embd 1600, n_head 25, n_positions 1024
    Preset("gpt2-xl", "openai-community/gpt2-xl", 1600, 25, 25, 64, None, 1024, True, True),
    # google-t5/t5-base: d_model 768, num_heads 12, d_kv 64, n_positions 512 (relative position
    # buckets); T5's linear layers have no bias
    Preset("t5-base", "google-t5/t5-base", 768, 12, 12, 64, None, 512, False, False,
           "T5 does not scale the scores by 1/sqrt(d) and adds a relative position bias"),
    # google-t5/t5-3b: d_model 1024, num_heads 32, d_kv 128 -> h·d = 4096 != d_model
    Preset("t5-3b", "google-t5/t5-3b", 1024, 32, 32, 128, None, 512, False, False,
           "T5 does not scale the scores by 1/sqrt(d) and adds a relative position bias"),
    # meta-llama/Llama-2-7b-hf: hidden_size 4096, num_attention_heads 32, num_key_value_heads 32,
    # max_position_embeddings 4096, no rope_theta (LlamaConfig default 10000.0), no attention bias
    Preset("llama-2-7b", "meta-llama/Llama-2-7b-hf", 4096, 32, 32, 128, 10000.0, 4096, True, False),
    # meta-llama/Meta-Llama-3-8B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # max_position_embeddings 8192, rope_theta 500000.0, attention_bias false
    Preset("llama-3-8b", "meta-llama/Meta-Llama-3-8B", 4096, 32, 8, 128, 500000.0, 8192, True, False),
    # meta-llama/Meta-Llama-3-70B: hidden_size 8192, num_attention_heads 64, num_key_value_heads 8,
    # max_position_embeddings 8192, rope_theta 500000.0, attention_bias false
    Preset("llama-3-70b", "meta-llama/Meta-Llama-3-70B", 8192, 64, 8, 128, 500000.0, 8192, True, False),
    # mistralai/Mistral-7B-v0.1: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # max_position_embeddings 32768, rope_theta 10000.0, sliding_window 4096
    Preset("mistral-7b", "mistralai/Mistral-7B-v0.1", 4096, 32, 8, 128, 10000.0, 32768, True, False,
           "the sliding window of 4096 keys is not modelled (no difference for S <= 4096)"),
    # Qwen/Qwen2-7B: hidden_size 3584, num_attention_heads 28, num_key_value_heads 4,
    # max_position_embeddings 131072, rope_theta 1000000.0; q/k/v have biases, o_proj has none
    Preset("qwen2-7b", "Qwen/Qwen2-7B", 3584, 28, 4, 128, 1000000.0, 131072, True, True,
           "o_proj has no bias (attntrace's biases are all or none)"),
    # google/gemma-7b: hidden_size 3072, num_attention_heads 16, num_key_value_heads 16,
    # head_dim 256 -> h·d = 4096 != hidden_size, max_position_embeddings 8192, rope_theta 10000.0,
    # attention_bias false
    Preset("gemma-7b", "google/gemma-7b", 3072, 16, 16, 256, 10000.0, 8192, True, False),
)

#: Presets by name, in the order ``attntrace presets`` lists them.
PRESETS: dict[str, Preset] = {p.name: p for p in _PRESETS}


def get_preset(name: str) -> Preset:
    """The preset called ``name``, or a ConfigError listing them all."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)} (see: attntrace presets)")
    return PRESETS[name]


def resolve_config(*, preset: str | None = None, hf_config: Path | str | None = None, **explicit: Any) -> AttentionConfig:
    """An AttentionConfig from a preset or a config.json, overridden by the explicit fields
    (those that are not None).

    >>> cfg = resolve_config(preset="llama-3-8b", seq=5, kv_heads=1)
    >>> cfg.hidden, cfg.heads, cfg.kv_heads, cfg.rope_base, cfg.causal
    (4096, 32, 1, 500000.0, True)
    """
    if preset is not None and hf_config is not None:
        raise ConfigError("use either --preset or --hf-config, not both")
    base = get_preset(preset).config_fields() if preset is not None else read_hf_config(hf_config) if hf_config is not None else {}
    return AttentionConfig(**{**base, **{k: v for k, v in explicit.items() if v is not None}})


#: Where each size lives in the config.json of the common model families.
_HEADS = ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads")
_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HEAD_DIM = ("head_dim", "d_kv")
#: Families with rotary embeddings even when the file has no rope_theta (Llama 2: default 10000).
_ROPE_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "gpt_neox"})
#: Families whose attention projections have no bias when the file has no attention_bias.
_NO_BIAS_TYPES = frozenset({"llama", "mistral", "mixtral", "gemma", "gemma2", "t5", "mt5", "qwen3", "phi3"})


def read_hf_config(path: Path | str) -> dict[str, Any]:
    """The AttentionConfig fields of a Hugging Face ``config.json``.

    Reads num_attention_heads (or n_head, num_heads), hidden_size (or n_embd, d_model),
    num_key_value_heads, head_dim (or d_kv), rope_theta, model_type, architectures and
    attention_bias; a missing size or an attention feature attntrace cannot model
    (rope_scaling, ALiBi) is a clear error.
    """
    cfg = _load_json(Path(path))
    heads, hidden = _int_field(cfg, _HEADS, path), _int_field(cfg, _HIDDEN, path)
    kv_heads = _optional_int(cfg, ("num_key_value_heads",), path)
    head_dim = _optional_int(cfg, _HEAD_DIM, path)
    _refuse_unmodelled(cfg, path)
    source = f"--hf-config {plain(path)}"
    model_type = json_str(cfg, "model_type", source, default="") or ""
    rope = "rope_theta" in cfg or model_type in _ROPE_TYPES
    archs = cfg.get("architectures") or []
    causal = model_type in _ROPE_TYPES or model_type == "gpt2" or any(
        str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    bias = json_bool(cfg, "attention_bias", source, default=model_type not in _NO_BIAS_TYPES)
    decoupled = head_dim is not None and (hidden % heads or hidden // heads != head_dim)
    return {
        "hidden": hidden, "heads": heads,
        "kv_heads": kv_heads if kv_heads not in (None, heads) else None,
        "head_dim_override": head_dim if decoupled else None,
        "rope": rope, "rope_base": json_float(cfg, "rope_theta", source, lo=1e-300, default=10000.0), "causal": causal, "bias": bias,
    }


def _load_json(path: Path) -> dict[str, Any]:
    data = load_json(path, what="--hf-config")  # a regular file, size-capped, strict JSON
    if not isinstance(data, dict):
        raise InputFileError(f"--hf-config {path} holds a JSON {type(data).__name__}, not an object; give a model's config.json")
    return data


def _int_field(cfg: dict[str, Any], names: tuple[str, ...], path: Path | str) -> int:
    value = _optional_int(cfg, names, path)
    if value is None:
        hint = " (a multimodal config? give its text_config as a file)" if "text_config" in cfg else ""
        raise ConfigError(f"--hf-config {path} has none of the fields {', '.join(names)}{hint}")
    return value


def _optional_int(cfg: dict[str, Any], names: tuple[str, ...], path: Path | str) -> int | None:
    for name in names:
        value = cfg.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            shown = plain(json.dumps(value))[:40]
            raise ConfigError(f"--hf-config {plain(path)}: {name} must be a whole number from 1 to {MAX_SIZE}, got {shown}")
        return value
    return None


def _refuse_unmodelled(cfg: dict[str, Any], path: Path | str) -> None:
    """Attention features that would change the result and that attntrace does not model."""
    if cfg.get("rope_scaling"):
        raise ConfigError(f"--hf-config {path}: rope_scaling {cfg['rope_scaling']!r} is not modelled; "
                          "remove it from the file to trace plain RoPE")
    if cfg.get("alibi"):
        raise ConfigError(f"--hf-config {path}: ALiBi position biases are not modelled; remove alibi to trace without them")
