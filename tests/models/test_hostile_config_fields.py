"""Every config.json field attntrace reads is checked by type and range: a table of field/value
pairs over the families and both config generations, each one line naming the field, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostile import invoke

LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "rope_theta": 10000.0,
}
GEMMA2 = {
    "model_type": "gemma2",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "head_dim": 16,
    "num_hidden_layers": 4,
    "sliding_window": 8,
    "query_pre_attn_scalar": 16,
}
GEMMA3 = {
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "head_dim": 16,
    "num_hidden_layers": 6,
    "sliding_window": 8,
    "rope_local_base_freq": 1e4,
}
QWEN2 = {**LLAMA, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4}
T5 = {"model_type": "t5", "d_model": 64, "num_heads": 4, "d_kv": 16}
GPTJ = {"model_type": "gptj", "n_embd": 64, "n_head": 4}
FALCON = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4}
V5 = {**LLAMA, "rope_theta": None, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
HUGE = int("9" * 400)  # far past a float

#: (config, its changes, the field the error must name)
CASES: list[tuple[dict[str, object], dict[str, object], str]] = [
    (LLAMA, {"rope_scaling": [1, 2]}, "rope_scaling"),
    (LLAMA, {"rope_scaling": {"type": "linear", "factor": "two"}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {"rope_type": "linear", "factor": -1}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {"rope_type": "linear", "factor": HUGE}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {"rope_type": "yarn"}}, "max_position_embeddings"),
    (
        {**LLAMA, "max_position_embeddings": 100},
        {"rope_scaling": {"rope_type": "yarn"}},
        "original_max_position_embeddings",
    ),
    (
        {**LLAMA, "max_position_embeddings": 100},
        {"rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 0}},
        "rope_scaling.original_max_position_embeddings",
    ),
    (
        LLAMA,
        {"rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": "q"}},
        "rope_scaling.beta_fast",
    ),
    (
        LLAMA,
        {"rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": "x"}},
        "rope_scaling.truncate",
    ),
    (
        LLAMA,
        {"rope_scaling": {"rope_type": "dynamic", "factor": 2}, "max_position_embeddings": "x"},
        "max_position_embeddings",
    ),
    (LLAMA, {"partial_rotary_factor": "0.5"}, "partial_rotary_factor"),
    (LLAMA, {"partial_rotary_factor": 5}, "partial_rotary_factor"),
    (LLAMA, {"rotary_pct": -0.5}, "rotary_pct"),
    (LLAMA, {"rope_theta": HUGE}, "rope_theta"),
    (LLAMA, {"rope_theta": "1e4"}, "rope_theta"),
    (LLAMA, {"rope_theta": 0}, "rope_theta"),
    (LLAMA, {"architectures": 5}, "architectures"),
    (LLAMA, {"architectures": [5]}, "architectures"),
    (LLAMA, {"model_type": 5}, "model_type"),
    (LLAMA, {"attention_bias": "false"}, "attention_bias"),
    (LLAMA, {"rms_norm_eps": "x"}, "rms_norm_eps"),
    (LLAMA, {"num_hidden_layers": HUGE}, "num_hidden_layers"),
    (LLAMA, {"num_attention_heads": 0}, "num_attention_heads"),
    (LLAMA, {"num_key_value_heads": 2.5}, "num_key_value_heads"),
    (LLAMA, {"hidden_size": True}, "hidden_size"),
    (LLAMA, {"head_dim": -1}, "head_dim"),
    (LLAMA, {"layer_types": "full"}, "layer_types"),
    (LLAMA, {"layer_types": [1, 2]}, "layer_types"),
    (LLAMA, {"text_config": 5}, "text_config"),
    (LLAMA, {"is_decoder": 1}, "is_decoder"),
    (LLAMA, {"use_bidirectional_attention": "no"}, "use_bidirectional_attention"),
    (LLAMA, {"attn_logit_softcapping": HUGE}, "attn_logit_softcapping"),
    (GEMMA2, {"query_pre_attn_scalar": HUGE}, "query_pre_attn_scalar"),
    (GEMMA2, {"query_pre_attn_scalar": "x"}, "query_pre_attn_scalar"),
    (GEMMA2, {"sliding_window": 0}, "sliding_window"),
    (GEMMA2, {"attn_logit_softcapping": [50]}, "attn_logit_softcapping"),
    (GEMMA3, {"sliding_window_pattern": 0}, "sliding_window_pattern"),
    (GEMMA3, {"sliding_window_pattern": "6"}, "sliding_window_pattern"),
    (GEMMA3, {"rope_local_base_freq": HUGE}, "rope_local_base_freq"),
    (QWEN2, {"max_window_layers": "x"}, "max_window_layers"),
    (QWEN2, {"max_window_layers": -1}, "max_window_layers"),
    (QWEN2, {"use_sliding_window": "yes"}, "use_sliding_window"),
    (T5, {"relative_attention_num_buckets": "x"}, "relative_attention_num_buckets"),
    (T5, {"relative_attention_max_distance": HUGE}, "relative_attention_max_distance"),
    (T5, {"is_encoder_decoder": "yes"}, "is_encoder_decoder"),
    (GPTJ, {"rotary_dim": "x"}, "rotary_dim"),
    (FALCON, {"new_decoder_architecture": True, "num_kv_heads": "x"}, "num_kv_heads"),
    (FALCON, {"bias": "x"}, "bias"),
    (FALCON, {"multi_query": 0}, "multi_query"),
    (V5, {"rope_parameters": [1]}, "rope_parameters"),
    (V5, {"rope_parameters": {"rope_type": 5}}, "rope_parameters.rope_type"),
    (V5, {"rope_parameters": {"rope_theta": "1e4"}}, "rope_parameters.rope_theta"),
    (
        V5,
        {"rope_parameters": {"full_attention": {"rope_theta": HUGE}}},
        "rope_parameters.full_attention.rope_theta",
    ),
    (V5, {"rope_parameters": {"sliding_attention": 3}}, "rope_parameters.sliding_attention"),
    (
        V5,
        {"rope_parameters": {"rope_type": "linear", "factor": "two"}},
        "rope_parameters.factor",
    ),
]


def _write(tmp_path: Path, cfg: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return path


@pytest.mark.parametrize(
    ("base", "change", "field"),
    CASES,
    ids=[f"{b['model_type']}-{f}-{i}" for i, (b, _, f) in enumerate(CASES)],
)
def test_a_bad_field_is_one_line_naming_it(
    tmp_path: Path, base: dict[str, object], change: dict[str, object], field: str
) -> None:
    path = _write(tmp_path, {**base, **change})
    for layer in ("0", "1"):
        outcome = invoke("run", "--backend", "shape", "--hf-config", str(path), "--layer", layer)
        outcome.assert_contained()
        assert outcome.code == 2, outcome
        assert f" {field} " in outcome.err, outcome.err
        assert "internal error" not in outcome.err


@pytest.mark.parametrize("base", [LLAMA, GEMMA2, GEMMA3, QWEN2, T5, GPTJ, FALCON, V5])
def test_the_good_configs_of_each_family_trace(tmp_path: Path, base: dict[str, object]) -> None:
    path = _write(tmp_path, base)
    outcome = invoke("run", "--backend", "shape", "--hf-config", str(path), "--layer", "1")
    assert outcome.code == 0, outcome
    assert outcome.err == ""


@pytest.mark.parametrize(
    ("base", "kinds"),
    [(GEMMA2, (1, 0)), (GEMMA3, (1, 1, 1, 1, 1, 0)), ({**QWEN2, "max_window_layers": 1}, (0, 1))],
)
def test_which_layers_slide_follows_each_family(
    tmp_path: Path, base: dict[str, object], kinds: tuple[int, ...]
) -> None:
    from attntrace.models.hf_config import layer_type

    for layer, slides in enumerate(kinds):
        expected = "sliding_attention" if slides else "full_attention"
        assert layer_type(base, "c", layer) == expected


def _bad_values(kind: object) -> list[object]:
    """Values outside ``kind`` (a kind of attntrace.models.hf_config.FIELDS)."""
    wrong_type: list[object] = ["7", [1], {"a": 1}]
    if kind == "flag":
        return [*wrong_type, 1, 0, "false"]
    if kind in ("name", "names", "object"):
        return [5, 2.5, True] + ([["x", 5], "x"] if kind == "names" else [])
    assert isinstance(kind, tuple)
    low = 0 if kind[0] == "number0" else 1
    values: list[object] = [*wrong_type, True, -1, HUGE, -HUGE]
    if kind[0] == "whole":
        return [*values, 2.5, kind[1] - 1, 2**31]
    return [*values, 2.0] if kind[1] == 1.0 else values + ([0] if low else [-0.5])


def _generated() -> list[tuple[str, object]]:
    from attntrace.models.hf_config import FIELDS

    return [(name, value) for name, kind in FIELDS.items() for value in _bad_values(kind)]


@pytest.mark.slow
@pytest.mark.parametrize(("field", "value"), _generated(), ids=lambda v: str(v)[:20])
def test_every_field_of_the_table_refuses_values_outside_its_kind(
    tmp_path: Path, field: str, value: object
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, field: value}))
    outcome = invoke("run", "--backend", "shape", "--hf-config", str(path))
    outcome.assert_contained()
    assert outcome.code == 2, (field, value, outcome)
    assert f" {field} " in outcome.err, outcome.err


@pytest.mark.slow
@pytest.mark.parametrize("group", ["rope_scaling", "rope_parameters"])
def test_every_scaling_field_refuses_values_outside_its_kind(tmp_path: Path, group: str) -> None:
    from attntrace.models.hf_config import SCALING_FIELDS

    for key, kind in SCALING_FIELDS.items():
        for value in _bad_values(kind):
            path = tmp_path / "config.json"
            scaling = {"rope_type": "linear", "factor": 2.0, key: value}
            path.write_text(json.dumps({**LLAMA, group: scaling}))
            outcome = invoke("run", "--backend", "shape", "--hf-config", str(path))
            outcome.assert_contained()
            assert outcome.code == 2, (key, value, outcome)
            assert f" {group}.{key} " in outcome.err, outcome.err


@pytest.mark.parametrize("kind", ["chunked_attention", "linear_attention", "x", ""])
def test_a_layer_type_not_modelled_is_refused_for_that_layer(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, {**LLAMA, "layer_types": [kind, "full_attention"]})
    outcome = invoke("run", "--backend", "shape", "--hf-config", str(path), "--layer", "0")
    outcome.assert_contained()
    assert outcome.code == 2, outcome
    assert " layer_types[0] is " in outcome.err
    assert invoke("run", "--backend", "shape", "--hf-config", str(path), "--layer", "1").code == 0
