"""Presets: the attention sizes of real models, and reading a Hugging Face ``config.json``.

Every number below is copied from the model's public ``config.json`` on the Hugging Face Hub
(``https://huggingface.co/<repo>/blob/main/config.json``); the comment above each preset names
the repository and quotes the fields. Only the attention of one layer is traced: layer count,
vocabulary, MLP and norms do not matter here. Explicit flags override a preset field by field.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import ConfigError, InputFileError

if TYPE_CHECKING:
    from attntrace.trace import ModelFigures


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
    window: int | None = None  # W: sliding_window of the layers that have one
    scale: float | None = None  # query_pre_attn_scalar ** -0.5 where it is not 1/sqrt(d)
    rope_scaling: str | None = None  # as --rope-scaling takes it, from rope_scaling
    rotary_dims: int | None = None  # R of partial RoPE
    softcap: float | None = None  # attn_logit_softcapping
    layers: int | None = None  # num_hidden_layers (whole-model figures)
    qk_norm: str | None = None  # "head" (q_norm/k_norm over d) or "full" (over the width)
    qk_norm_eps: float | None = None  # rms_norm_eps of the q/k norms
    relative_bias: str | None = None  # T5: relative_attention_num_buckets,_max_distance
    rope_style: str = "half"  # RoPE's pairing: half (Hugging Face) or interleaved (GPT-J)

    def config_fields(self) -> dict[str, Any]:
        """The AttentionConfig fields this preset sets.

        >>> PRESETS["gemma-7b"].config_fields()["head_dim_override"]
        256
        """
        decoupled = self.heads * self.head_dim != self.hidden
        return {
            "hidden": self.hidden,
            "heads": self.heads,
            "kv_heads": self.kv_heads if self.kv_heads != self.heads else None,
            "head_dim_override": self.head_dim if decoupled else None,
            "rope": self.rope_theta is not None,
            "rope_base": self.rope_theta or 10000.0,
            "causal": self.causal,
            "bias": self.bias,
            "window": self.window,
            "scale": self.scale,
            "rope_scaling": self.rope_scaling,
            "rotary_dims": self.rotary_dims,
            "softcap": self.softcap,
            "qk_norm": self.qk_norm,
            "qk_norm_eps": self.qk_norm_eps,
            "relative_bias": self.relative_bias,
            "rope_style": self.rope_style,
        }

    def model_figures(
        self, seq: int | None = None, batch: int = 1, dtype: str = "float16", backward: bool = False
    ) -> ModelFigures | None:
        """Whole-model attention figures over all ``layers`` at ``seq`` tokens (default: the
        context length) and ``batch`` in ``dtype``, from a shape-only trace of one layer (the
        figures ``run --layers`` shows: :func:`attntrace.trace.model_figures`); None when the
        layer count is not known. ``backward``: with the training figures (saved bytes of all
        layers, backward FLOPs, FLOPs per training token).

        >>> f = PRESETS["llama-3.1-8b"].model_figures()
        >>> f.layers, f.params, f.kv_cache_bytes // 2**30  # 16 GiB of KV cache at 131072 tokens
        (32, 1342177280, 16)
        """
        if self.layers is None:
            return None
        # the one import of the engine by config/ (docs/architecture.md): at call time only
        from attntrace.engine.attention import trace_attention
        from attntrace.trace import model_figures

        n = seq if seq is not None else self.max_positions or 1
        config = self.attention_config(seq=n, batch=batch, dtype=dtype)
        return model_figures(trace_attention(config, "shape", backward=backward), self.layers)

    def attention_config(self, **overrides: Any) -> AttentionConfig:
        """The AttentionConfig of this preset, with ``overrides`` (``seq=8``...).

        >>> PRESETS["gpt2"].attention_config(seq=8).causal
        True
        """
        return AttentionConfig(**{**self.config_fields(), **overrides})

    @property
    def kv_cache_bytes_per_token(self) -> int:
        """KV-cache bytes per token and layer in float16: :meth:`AttentionConfig.kv_cache_bytes`.

        >>> PRESETS["llama-3-8b"].kv_cache_bytes_per_token  # 2 (k, v) * 8 * 128 * 2 B
        4096
        """
        return self.attention_config().kv_cache_bytes(dtype="float16")


#: Llama 3.1's rope_scaling (8B and 70B), as --rope-scaling takes it.
_LLAMA31 = (
    "llama3:factor=8.0,low_freq_factor=1.0,high_freq_factor=4.0,"
    "original_max_position_embeddings=8192.0"
)

_PRESETS = (
    # google-bert/bert-base-uncased: hidden_size 768, num_attention_heads 12,
    # max_position_embeddings 512, position_embedding_type "absolute" (no head_dim, no kv heads)
    Preset(
        name="bert-base",
        repo="google-bert/bert-base-uncased",
        hidden=768,
        heads=12,
        kv_heads=12,
        head_dim=64,
        rope_theta=None,
        max_positions=512,
        causal=False,
        bias=True,
    ),
    # google-bert/bert-large-uncased: hidden_size 1024, num_attention_heads 16,
    # max_position_embeddings 512
    Preset(
        name="bert-large",
        repo="google-bert/bert-large-uncased",
        hidden=1024,
        heads=16,
        kv_heads=16,
        head_dim=64,
        rope_theta=None,
        max_positions=512,
        causal=False,
        bias=True,
    ),
    # openai-community/gpt2: n_embd 768, n_head 12, n_positions 1024 (c_attn has a bias)
    Preset(
        name="gpt2",
        repo="openai-community/gpt2",
        hidden=768,
        heads=12,
        kv_heads=12,
        head_dim=64,
        rope_theta=None,
        max_positions=1024,
        causal=True,
        bias=True,
    ),
    # openai-community/gpt2-xl: n_embd 1600, n_head 25, n_positions 1024
    Preset(
        name="gpt2-xl",
        repo="openai-community/gpt2-xl",
        hidden=1600,
        heads=25,
        kv_heads=25,
        head_dim=64,
        rope_theta=None,
        max_positions=1024,
        causal=True,
        bias=True,
    ),
    # google-t5/t5-base: d_model 768, num_heads 12, d_kv 64, n_positions 512 (relative position
    # buckets: relative_attention_num_buckets 32, relative_attention_max_distance 128 by default);
    # T5's linear layers have no bias and its scores are not scaled
    Preset(
        name="t5-base",
        repo="google-t5/t5-base",
        hidden=768,
        heads=12,
        kv_heads=12,
        head_dim=64,
        rope_theta=None,
        max_positions=512,
        causal=False,
        bias=False,
        scale=1.0,
        relative_bias="32,128",
    ),
    # google-t5/t5-3b: d_model 1024, num_heads 32, d_kv 128 -> h·d = 4096 != d_model
    Preset(
        name="t5-3b",
        repo="google-t5/t5-3b",
        hidden=1024,
        heads=32,
        kv_heads=32,
        head_dim=128,
        rope_theta=None,
        max_positions=512,
        causal=False,
        bias=False,
        scale=1.0,
        relative_bias="32,128",
    ),
    # meta-llama/Llama-2-7b-hf: hidden_size 4096, num_attention_heads 32, num_key_value_heads 32,
    # max_position_embeddings 4096, no rope_theta (LlamaConfig default 10000.0), no attention bias
    Preset(
        name="llama-2-7b",
        repo="meta-llama/Llama-2-7b-hf",
        hidden=4096,
        heads=32,
        kv_heads=32,
        head_dim=128,
        rope_theta=10000.0,
        max_positions=4096,
        causal=True,
        bias=False,
    ),
    # meta-llama/Meta-Llama-3-8B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # max_position_embeddings 8192, rope_theta 500000.0, attention_bias false
    Preset(
        name="llama-3-8b",
        repo="meta-llama/Meta-Llama-3-8B",
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_positions=8192,
        causal=True,
        bias=False,
    ),
    # meta-llama/Meta-Llama-3-70B: hidden_size 8192, num_attention_heads 64, num_key_value_heads 8,
    # max_position_embeddings 8192, rope_theta 500000.0, attention_bias false
    Preset(
        name="llama-3-70b",
        repo="meta-llama/Meta-Llama-3-70B",
        hidden=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_positions=8192,
        causal=True,
        bias=False,
    ),
    # mistralai/Mistral-7B-v0.1: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # max_position_embeddings 32768, rope_theta 10000.0, sliding_window 4096
    Preset(
        name="mistral-7b",
        repo="mistralai/Mistral-7B-v0.1",
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        rope_theta=10000.0,
        max_positions=32768,
        causal=True,
        bias=False,
        window=4096,
    ),
    # Qwen/Qwen2-7B: hidden_size 3584, num_attention_heads 28, num_key_value_heads 4,
    # max_position_embeddings 131072, rope_theta 1000000.0; q/k/v have biases, o_proj has none
    Preset(
        name="qwen2-7b",
        repo="Qwen/Qwen2-7B",
        hidden=3584,
        heads=28,
        kv_heads=4,
        head_dim=128,
        rope_theta=1000000.0,
        max_positions=131072,
        causal=True,
        bias=True,
        note="o_proj has no bias (attntrace's biases are all or none)",
    ),
    # google/gemma-7b: hidden_size 3072, num_attention_heads 16, num_key_value_heads 16,
    # head_dim 256 -> h·d = 4096 != hidden_size, max_position_embeddings 8192, rope_theta 10000.0,
    # attention_bias false
    Preset(
        name="gemma-7b",
        repo="google/gemma-7b",
        hidden=3072,
        heads=16,
        kv_heads=16,
        head_dim=256,
        rope_theta=10000.0,
        max_positions=8192,
        causal=True,
        bias=False,
    ),
    # --- models in use now (issue 12); each from the repository's config.json ---
    # meta-llama/Llama-3.1-8B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # head_dim 128, max_position_embeddings 131072, rope_theta 500000.0, num_hidden_layers 32,
    # rope_scaling {rope_type llama3, factor 8.0, low_freq_factor 1.0, high_freq_factor 4.0,
    # original_max_position_embeddings 8192}, attention_bias false
    # checked against the config.json quoted in citsjtu2020/LLM-Prof sglang/Model_Config.md
    # (every field above but head_dim, absent there: 4096 / 32 = 128)
    Preset(
        name="llama-3.1-8b",
        repo="meta-llama/Llama-3.1-8B",
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_positions=131072,
        causal=True,
        bias=False,
        rope_scaling=_LLAMA31,
        layers=32,
    ),
    # meta-llama/Llama-3.1-70B: hidden_size 8192, num_attention_heads 64, num_key_value_heads 8,
    # max_position_embeddings 131072, rope_theta 500000.0, num_hidden_layers 80, rope_scaling as 8B
    # checked against Lightning-AI/litgpt's config for
    # huggingface.co/meta-llama/Meta-Llama-3.1-70B/blob/main/config.json (80 layers, 64/8 heads,
    # 8192 wide, block 131072, base 500000, llama3 factor 8, 1, 4, 8192)
    Preset(
        name="llama-3.1-70b",
        repo="meta-llama/Llama-3.1-70B",
        hidden=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        max_positions=131072,
        causal=True,
        bias=False,
        rope_scaling=_LLAMA31,
        layers=80,
    ),
    # meta-llama/Llama-3.2-1B: hidden_size 2048, num_attention_heads 32, num_key_value_heads 8,
    # head_dim 64, max_position_embeddings 131072, rope_theta 500000.0, num_hidden_layers 16,
    # rope_scaling {rope_type llama3, factor 32.0, low_freq_factor 1.0, high_freq_factor 4.0,
    # original_max_position_embeddings 8192}
    # checked against the config.json quoted in kevinstephano/thunder_model_blocks
    # hf_llama/llama_config.py (Llama-3.2-1B-Instruct, same architecture)
    Preset(
        name="llama-3.2-1b",
        repo="meta-llama/Llama-3.2-1B",
        hidden=2048,
        heads=32,
        kv_heads=8,
        head_dim=64,
        rope_theta=500000.0,
        max_positions=131072,
        causal=True,
        bias=False,
        rope_scaling="llama3:factor=32.0,low_freq_factor=1.0,high_freq_factor=4.0,"
        "original_max_position_embeddings=8192.0",
        layers=16,
    ),
    # Qwen/Qwen2.5-7B: hidden_size 3584, num_attention_heads 28, num_key_value_heads 4,
    # max_position_embeddings 131072, rope_theta 1000000.0, num_hidden_layers 28,
    # use_sliding_window false; q/k/v have biases, o_proj has none
    # checked against a public transformers.Qwen2Config copied "From
    # https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json" and litgpt's Qwen2.5-7B
    Preset(
        name="qwen2.5-7b",
        repo="Qwen/Qwen2.5-7B",
        hidden=3584,
        heads=28,
        kv_heads=4,
        head_dim=128,
        rope_theta=1000000.0,
        max_positions=131072,
        causal=True,
        bias=True,
        note="o_proj has no bias (attntrace's biases are all or none)",
        layers=28,
    ),
    # Qwen/Qwen3-8B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8, head_dim 128,
    # max_position_embeddings 40960, rope_theta 1000000, num_hidden_layers 36, attention_bias false,
    # rms_norm_eps 1e-06 (q_norm, k_norm over head_dim)
    # checked against a public test's Qwen3Config copied from
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json (all fields above)
    Preset(
        name="qwen3-8b",
        repo="Qwen/Qwen3-8B",
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        rope_theta=1000000.0,
        max_positions=40960,
        causal=True,
        bias=False,
        layers=36,
        qk_norm="head",
        qk_norm_eps=1e-6,
    ),
    # google/gemma-2-9b: hidden_size 3584, num_attention_heads 16, num_key_value_heads 8,
    # head_dim 256, query_pre_attn_scalar 256, attn_logit_softcapping 50.0, sliding_window 4096
    # (every other layer, from layer 0), max_position_embeddings 8192, rope_theta 10000.0,
    # num_hidden_layers 42; the preset is a global (odd) layer
    # checked against litgpt's config for huggingface.co/google/gemma-2-9b/blob/main/config.json
    # (attention_scores_scalar 256, softcap 50.0, window 4096 on layers 0, 2, 4, ...) and
    # transformers' PaliGemma 2 converter (9b: query_pre_attn_scalar 256); maxtext's 224 is not
    # the Hub file's value
    Preset(
        name="gemma-2-9b",
        repo="google/gemma-2-9b",
        hidden=3584,
        heads=16,
        kv_heads=8,
        head_dim=256,
        rope_theta=10000.0,
        max_positions=8192,
        causal=True,
        bias=False,
        note="even layers slide over 4096 keys: add --window 4096 for them",
        softcap=50.0,
        layers=42,
    ),
    # google/gemma-3-4b-pt, text_config: hidden_size 2560, num_attention_heads 8,
    # num_key_value_heads 4, head_dim 256, query_pre_attn_scalar 256, sliding_window 1024
    # (5 of every 6 layers),
    # rope_theta 1000000.0 with rope_scaling {rope_type linear, factor 8.0} on the global layers,
    # rope_local_base_freq 10000.0 on the sliding ones, max_position_embeddings 131072,
    # num_hidden_layers 34, rms_norm_eps 1e-06 (q_norm, k_norm); the preset is a global layer
    # checked against a public Gemma 3 text_config that "match[es] google/gemma-3-4b-pt" and a
    # gemma3_text 4B test config with rope_scaling {factor 8.0, rope_type linear}
    Preset(
        name="gemma-3-4b",
        repo="google/gemma-3-4b-pt",
        hidden=2560,
        heads=8,
        kv_heads=4,
        head_dim=256,
        rope_theta=1000000.0,
        max_positions=131072,
        causal=True,
        bias=False,
        note="sliding layers (5 of 6): --window 1024 --rope-base 10000, no scaling",
        rope_scaling="linear:factor=8.0",
        layers=34,
        qk_norm="head",
        qk_norm_eps=1e-6,
    ),
    # mistralai/Mistral-7B-v0.3: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
    # max_position_embeddings 32768, rope_theta 1000000.0, sliding_window null, num_hidden_layers 32
    # checked: sizes and 32768 against a public MistralForCausalLM config of
    # mistralai/Mistral-7B-v0.3 and litgpt; sliding_window null against a public note read off
    # its config.json; rope_theta 1e6 against Lightning-AI/litgpt litgpt/config.py (commit
    # 26857050), whose "Mistral-7B-v0.3" entry cites
    # huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json and sets rope_base=1000000
    # (block_size 32768, n_layer 32, n_query_groups 8, bias False), as the v0.2 model card says
    Preset(
        name="mistral-7b-v0.3",
        repo="mistralai/Mistral-7B-v0.3",
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        rope_theta=1000000.0,
        max_positions=32768,
        causal=True,
        bias=False,
        layers=32,
    ),
    # microsoft/Phi-3-mini-4k-instruct: hidden_size 3072, num_attention_heads 32,
    # num_key_value_heads 32, max_position_embeddings 4096, rope_theta 10000.0,
    # sliding_window 2047, num_hidden_layers 32; q, k, v fused in qkv_proj, no biases
    # checked against several public copies of this repository's config.json (all fields above,
    # attention_bias false)
    Preset(
        name="phi-3-mini",
        repo="microsoft/Phi-3-mini-4k-instruct",
        hidden=3072,
        heads=32,
        kv_heads=32,
        head_dim=96,
        rope_theta=10000.0,
        max_positions=4096,
        causal=True,
        bias=False,
        window=2047,
        layers=32,
    ),
    # allenai/OLMo-2-1124-7B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 32,
    # max_position_embeddings 4096, rope_theta 500000, attention_bias false, num_hidden_layers 32,
    # rms_norm_eps 1e-06 (q_norm, k_norm over all heads)
    # checked against a public test fixture, "Mirror of allenai/OLMo-2-1124-7B/config.json"
    # (rope_theta 500000.0 there)
    Preset(
        name="olmo-2-7b",
        repo="allenai/OLMo-2-1124-7B",
        hidden=4096,
        heads=32,
        kv_heads=32,
        head_dim=128,
        rope_theta=500000.0,
        max_positions=4096,
        causal=True,
        bias=False,
        layers=32,
        qk_norm="full",
        qk_norm_eps=1e-6,
    ),
)

#: Presets by name, in the order ``attntrace presets`` lists them.
PRESETS: dict[str, Preset] = {p.name: p for p in _PRESETS}


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (in any case, or by its Hugging Face repository), or a
    ConfigError naming the nearest and listing them all.

    >>> get_preset("Llama-3-8B").name, get_preset("meta-llama/Meta-Llama-3-8B").name
    ('llama-3-8b', 'llama-3-8b')
    >>> get_preset("llama3-8b")
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: unknown preset 'llama3-8b' (did you mean llama-3-8b?); use ...
    """
    by_repo = {p.repo.lower(): p for p in PRESETS.values()}
    found = PRESETS.get(name.lower()) or by_repo.get(name.lower())
    if found is None:
        import difflib

        near = difflib.get_close_matches(name.lower(), PRESETS, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ConfigError(
            f"unknown preset {name!r}{hint}; use one of {', '.join(PRESETS)} "
            "(see: attntrace presets)"
        )
    return found


def resolve_config(
    *, preset: str | None = None, hf_config: Path | str | None = None, **explicit: Any
) -> AttentionConfig:
    """An AttentionConfig from a preset or a config.json, overridden by the explicit fields
    (those that are not None).

    >>> cfg = resolve_config(preset="llama-3-8b", seq=5, kv_heads=1)
    >>> cfg.hidden, cfg.heads, cfg.kv_heads, cfg.rope_base, cfg.causal
    (4096, 32, 1, 500000.0, True)
    """
    fields, _ = resolve_fields(preset=preset, hf_config=hf_config, **explicit)
    return AttentionConfig(**fields)


def resolve_fields(
    *,
    preset: str | None = None,
    hf_config: Path | str | None = None,
    model_dir: Path | None = None,
    layer: int | None = None,
    layer_prefix: str | None = None,
    **explicit: Any,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every AttentionConfig field (not validated yet: files may still change the sizes): the
    defaults, then a preset's or config.json's, then the explicit ones that are not None. Also
    the fields the preset or config.json set, each with its source (``--preset NAME``).

    >>> fields, known = resolve_fields(preset="gpt2", seq=5)
    >>> fields["seq"], fields["hidden"], known["heads"]
    (5, 768, '--preset gpt2')
    """
    choices = (("--preset", preset), ("--hf-config", hf_config), ("--model", model_dir))
    named = [name for name, v in choices if v is not None]
    if len(named) > 1:
        raise ConfigError(f"use either {named[0]} or {named[1]}, not both")
    if layer is not None and preset is None and hf_config is None and model_dir is None:
        raise ConfigError("--layer picks a layer of --model DIR (or of --hf-config); add one")
    base: dict[str, Any] = {}
    source = ""
    if preset is not None:
        if layer is not None:
            raise ConfigError("--layer picks a layer of --model DIR or --hf-config, not --preset")
        chosen = get_preset(preset)
        base, source = chosen.config_fields(), f"--preset {chosen.name}"
    elif hf_config is not None:
        base, source = read_hf_config(hf_config, layer), f"--hf-config {Path(hf_config).name}"
    elif model_dir is not None:
        from attntrace.models.load import model_fields

        base = model_fields(model_dir, layer, layer_prefix)
        source = f"--model {model_dir.name} (layer {layer or 0})"
    defaults = {f.name: f.default for f in dataclass_fields(AttentionConfig)}
    given = {k: v for k, v in explicit.items() if v is not None}
    return {**defaults, **base, **given}, dict.fromkeys(base, source)


def layer_count(
    *, preset: str | None = None, hf_config: Path | str | None = None, model_dir: Path | None = None
) -> int | None:
    """L, the layers of the model the settings come from: num_hidden_layers (n_layer, ...) of
    --model's or --hf-config's config, a preset's ``layers``; None when none says it.

    >>> layer_count(preset="llama-3.1-8b"), layer_count(preset="gpt2"), layer_count()
    (32, None, None)
    """
    from attntrace.models.hf_config import LAYERS, config_section, int_field

    if preset is not None:
        return get_preset(preset).layers
    if model_dir is not None:
        from attntrace.models.folder import folder_config

        return int_field(config_section(folder_config(model_dir)), LAYERS, model_dir, False)
    if hf_config is not None:
        return int_field(config_section(_load_json(Path(hf_config))), LAYERS, hf_config, False)
    return None


def read_hf_config(path: Path | str, layer: int | None = None) -> dict[str, Any]:
    """The AttentionConfig fields of a Hugging Face ``config.json`` (of layer ``layer`` where
    layers differ): see :func:`attntrace.models.hf_config.attention_fields`.

    Reads the head counts, widths, θ (``rope_theta`` or transformers 5's ``rope_parameters``),
    sliding windows, ``query_pre_attn_scalar``, model_type, architectures and attention_bias;
    a missing size or an attention feature attntrace cannot model (rope scaling, soft-capping,
    q/k norms, ALiBi, T5's relative bias) is a clear error.
    """
    from attntrace.models.hf_config import attention_fields

    try:
        return attention_fields(_load_json(Path(path)), path, layer)
    except ConfigError as exc:
        raise ConfigError(f"--hf-config {exc}") from None


def _load_json(path: Path) -> dict[str, Any]:
    from attntrace.files.guard import load_json  # json's import only when a file is read

    data = load_json(path, what="--hf-config")  # a regular file, size-capped, strict JSON
    if not isinstance(data, dict):
        raise InputFileError(
            f"--hf-config {path} holds a JSON {type(data).__name__}, not an object; give a model's "
            "config.json"
        )
    return data
