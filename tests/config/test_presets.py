"""Each preset against the numbers of its cited config.json, and --hf-config on those files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from attntrace import trace_attention
from attntrace.config.presets import PRESETS, get_preset, read_hf_config, resolve_config

# The attention fields of each model's config.json on the Hugging Face Hub, as published
# (the files also hold layer counts, vocabulary sizes and so on, which attntrace ignores).
LLAMA31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
CONFIG_JSON: dict[str, tuple[str, dict[str, Any]]] = {
    "bert-base": (
        "google-bert/bert-base-uncased",
        {
            "architectures": ["BertForMaskedLM"],
            "model_type": "bert",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "max_position_embeddings": 512,
            "position_embedding_type": "absolute",
        },
    ),
    "bert-large": (
        "google-bert/bert-large-uncased",
        {
            "architectures": ["BertForMaskedLM"],
            "model_type": "bert",
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "max_position_embeddings": 512,
        },
    ),
    "gpt2": (
        "openai-community/gpt2",
        {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_embd": 768,
            "n_head": 12,
            "n_positions": 1024,
        },
    ),
    "gpt2-xl": (
        "openai-community/gpt2-xl",
        {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_embd": 1600,
            "n_head": 25,
            "n_positions": 1024,
        },
    ),
    "t5-base": (
        "google-t5/t5-base",
        {
            "architectures": ["T5ForConditionalGeneration"],
            "model_type": "t5",
            "d_model": 768,
            "num_heads": 12,
            "d_kv": 64,
            "n_positions": 512,
        },
    ),
    "t5-3b": (
        "google-t5/t5-3b",
        {
            "architectures": ["T5ForConditionalGeneration"],
            "model_type": "t5",
            "d_model": 1024,
            "num_heads": 32,
            "d_kv": 128,
            "n_positions": 512,
        },
    ),
    "llama-2-7b": (
        "meta-llama/Llama-2-7b-hf",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "rope_scaling": None,
        },
    ),
    "llama-3-8b": (
        "meta-llama/Meta-Llama-3-8B",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
            "attention_bias": False,
        },
    ),
    "llama-3-70b": (
        "meta-llama/Meta-Llama-3-70B",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
            "attention_bias": False,
        },
    ),
    "mistral-7b": (
        "mistralai/Mistral-7B-v0.1",
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
        },
    ),
    "qwen2-7b": (
        "Qwen/Qwen2-7B",
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 131072,
            "rope_theta": 1000000.0,
        },
    ),
    "gemma-7b": (
        "google/gemma-7b",
        {
            "architectures": ["GemmaForCausalLM"],
            "model_type": "gemma",
            "hidden_size": 3072,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 256,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "attention_bias": False,
        },
    ),
    # issue 12: the fields of each repository's config.json that the attention reads
    "llama-3.1-8b": (
        "meta-llama/Llama-3.1-8B",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "num_hidden_layers": 32,
            "attention_bias": False,
            "rope_scaling": LLAMA31,
        },
    ),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "num_hidden_layers": 80,
            "attention_bias": False,
            "rope_scaling": LLAMA31,
        },
    ),
    "llama-3.2-1b": (
        "meta-llama/Llama-3.2-1B",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "num_hidden_layers": 16,
            "attention_bias": False,
            "rope_scaling": {**LLAMA31, "factor": 32.0},
        },
    ),
    "qwen2.5-7b": (
        "Qwen/Qwen2.5-7B",
        {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 131072,
            "rope_theta": 1000000.0,
            "num_hidden_layers": 28,
            "sliding_window": 131072,
            "use_sliding_window": False,
            "max_window_layers": 28,
        },
    ),
    "qwen3-8b": (
        "Qwen/Qwen3-8B",
        {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000,
            "num_hidden_layers": 36,
            "attention_bias": False,
            "rms_norm_eps": 1e-06,
        },
    ),
    "gemma-2-9b": (
        "google/gemma-2-9b",
        {
            "architectures": ["Gemma2ForCausalLM"],
            "model_type": "gemma2",
            "hidden_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": 50.0,
            "sliding_window": 4096,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "num_hidden_layers": 42,
            "attention_bias": False,
        },
    ),
    "gemma-3-4b": (
        "google/gemma-3-4b-pt",
        {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": {
                "model_type": "gemma3_text",
                "hidden_size": 2560,
                "num_attention_heads": 8,
                "num_key_value_heads": 4,
                "head_dim": 256,
                "query_pre_attn_scalar": 256,
                "sliding_window": 1024,
                "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0},
                "max_position_embeddings": 131072,
                "num_hidden_layers": 34,
                "rms_norm_eps": 1e-06,
            },
        },
    ),
    "mistral-7b-v0.3": (
        "mistralai/Mistral-7B-v0.3",
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "num_hidden_layers": 32,
        },
    ),
    "phi-3-mini": (
        "microsoft/Phi-3-mini-4k-instruct",
        {
            "architectures": ["Phi3ForCausalLM"],
            "model_type": "phi3",
            "hidden_size": 3072,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "sliding_window": 2047,
            "num_hidden_layers": 32,
        },
    ),
    "olmo-2-7b": (
        "allenai/OLMo-2-1124-7B",
        {
            "architectures": ["Olmo2ForCausalLM"],
            "model_type": "olmo2",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 500000,
            "attention_bias": False,
            "num_hidden_layers": 32,
            "rms_norm_eps": 1e-06,
        },
    ),
}
#: The layer a preset stands for where a model's layers differ (a global layer).
PRESET_LAYER = {"gemma-2-9b": 1, "gemma-3-4b": 5}


def test_the_common_model_families_have_presets() -> None:
    required = {
        "bert-base",
        "bert-large",
        "gpt2",
        "gpt2-xl",
        "t5-base",
        "llama-2-7b",
        "llama-3-8b",
        "llama-3-70b",
        "mistral-7b",
        "qwen2-7b",
        "gemma-7b",
    }
    assert required <= set(PRESETS)
    assert set(PRESETS) == set(CONFIG_JSON)


@pytest.mark.parametrize("name", list(CONFIG_JSON))
def test_preset_matches_its_config_json(name: str) -> None:
    repo, cfg = CONFIG_JSON[name]
    p = get_preset(name)
    assert p.repo == repo
    cfg = cfg.get("text_config", cfg)
    assert p.hidden == cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))
    assert p.heads == cfg.get("num_attention_heads", cfg.get("n_head", cfg.get("num_heads")))
    assert p.kv_heads == cfg.get("num_key_value_heads", p.heads)
    assert p.head_dim == cfg.get("head_dim", cfg.get("d_kv", p.hidden // p.heads))
    assert p.max_positions == cfg.get("max_position_embeddings", cfg.get("n_positions"))
    if cfg["model_type"] in (
        "llama",
        "mistral",
        "qwen2",
        "gemma",
        "qwen3",
        "gemma2",
        "gemma3_text",
        "phi3",
        "olmo2",
    ):
        assert p.rope_theta == cfg.get("rope_theta", 10000.0)
        assert p.layers == cfg.get("num_hidden_layers", p.layers)
    else:
        assert p.rope_theta is None


@pytest.mark.parametrize("name", list(CONFIG_JSON))
def test_hf_config_of_the_cited_file_gives_the_preset(tmp_path: Path, name: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG_JSON[name][1]))
    fields = read_hf_config(path, PRESET_LAYER.get(name))
    preset = get_preset(name).config_fields()
    if name == "qwen2-7b":  # the file cannot say that o_proj has no bias; both keep biases
        assert fields["bias"] is preset["bias"] is True
    assert fields == preset


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_traces_on_the_shape_backend(name: str) -> None:
    p = PRESETS[name]
    t = trace_attention(resolve_config(preset=name, seq=7, batch=2), "shape")
    assert t.shape("q") == (2, p.heads, 7, p.head_dim)
    assert t.shape("k") == (2, p.kv_heads, 7, p.head_dim)
    assert t.shape("q_proj") == (2, 7, p.heads * p.head_dim)
    assert t.shape("k_proj") == (2, 7, p.kv_heads * p.head_dim)
    assert t.shape("output") == (2, 7, p.hidden)
    assert ("k_rep" in t) == (p.kv_heads != p.heads)
    assert ("q_rot" in t) == (p.rope_theta is not None)
    assert ("mask" in t) == p.causal
    assert t.config.kv_cache_bytes_per_token == 2 * p.kv_heads * p.head_dim * 4  # float32


def test_known_kv_cache_sizes() -> None:
    """float16 KV cache per token and layer: Llama-3-70B's GQA needs 1/8 of its MHA size."""
    assert PRESETS["llama-3-70b"].kv_cache_bytes_per_token == 2 * 8 * 128 * 2 == 4096
    assert PRESETS["llama-2-7b"].kv_cache_bytes_per_token == 16384


def test_explicit_fields_override_a_preset() -> None:
    cfg = resolve_config(preset="gemma-7b", causal=False, rope_base=1234.0, kv_heads=4)
    assert (cfg.hidden, cfg.heads, cfg.head_dim, cfg.kv_heads) == (3072, 16, 256, 4)
    assert cfg.causal is False
    assert cfg.rope
    assert cfg.rope_base == 1234.0
    assert resolve_config(preset="gpt2", bias=False).bias is False
    assert resolve_config().hidden == 768  # no preset: the AttentionConfig defaults


def test_whole_model_figures_add_up_every_layer() -> None:
    """Llama 3.1 70B: 80 layers of q, o (8192 x 8192) and k, v (1024 x 8192); its KV cache at
    131072 tokens in float16 is 80 * 131072 * 2 * 8 * 128 * 2 B = 40 GiB."""
    f = PRESETS["llama-3.1-70b"].model_figures()
    assert f is not None
    assert f.params == 80 * (2 * 8192 * 8192 + 2 * 1024 * 8192)
    assert f.kv_cache_bytes == 40 * 2**30
    matmuls = 2 * 131072 * 8192 * (2 * 8192 + 2 * 1024) + 4 * 64 * 131072**2 * 128
    # projections, scores and context dominate; the softmax, scale, mask and RoPE add the rest
    assert 80 * matmuls < f.flops < 80 * matmuls * 1.03
    assert f.flops % 80 == 0
    assert PRESETS["gpt2"].model_figures() is None  # no layer count on record
    small = PRESETS["qwen2.5-7b"].model_figures(seq=10, batch=2)
    assert small is not None
    assert small.kv_cache_bytes == 28 * 2 * 10 * 2 * 4 * 128 * 2
    assert small.params == 28 * (2 * 3584 * 3584 + 2 * 512 * 3584 + 3584 + 2 * 512 + 3584)
