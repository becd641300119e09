"""verify --past N: the decode step against torch's SDPA on the concatenated cache and against
transformers' own attention layers with a DynamicCache (Llama, Mistral with its window, Qwen2,
Gemma 2), built from config objects with random init: output and cache equal."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.inputs import random_sources
from attntrace.tools.verify import verify_attention
from attntrace.tools.verify_past import (
    SDPA_CACHE,
    cache_after,
    hf_family,
    past_references,
)

BASE = {"batch": 2, "seq": 2, "past": 6, "hidden": 32, "heads": 4, "kv_heads": 2, "rope": True}
FAMILIES = {
    "Llama": {"causal": True, "bias": False},
    "Mistral": {"causal": True, "bias": False, "window": 4},
    "Qwen2": {"causal": True, "bias": True},
    "Gemma2": {"causal": True, "bias": False, "softcap": 20.0},
    "Gemma2 sliding": {"causal": True, "bias": False, "softcap": 20.0, "window": 4},
}
#: Relative bounds of the issue: float32 2e-5, float64 1e-10 (Gemma 2's eager softmax runs in
#: float32 in transformers, so against it a float64 run can only be as close as float32).
BOUND = {"float32": 2e-5, "float64": 1e-10}


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def run_references(config: AttentionConfig) -> tuple[Any, dict[str, Any]]:
    inputs = {n: s.make() for n, s in random_sources(config).items()}
    trace = trace_attention(config, "numpy")
    return trace, past_references(config, inputs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_step_is_transformers_with_a_dynamic_cache(family: str, dtype: str) -> None:
    config = AttentionConfig(**BASE, **FAMILIES[family], dtype=dtype)
    assert hf_family(config) == family.split(maxsplit=1)[0]
    trace, refs = run_references(config)
    (name,) = [n for n in refs if n.startswith(f"transformers {family.split(maxsplit=1)[0]}")]
    hf = refs[name]
    assert isinstance(hf, dict), hf
    bound = BOUND["float32" if family.startswith("Gemma2") else dtype]
    assert rel(trace["output"].value, hf["output"]) <= bound
    # the cache after the step: every key, or the last W - 1 of a sliding window
    for c in "kv":
        mine = cache_after(config, trace[f"{c}_all"].value)
        assert mine.shape == hf[f"{c}_cache_after"].shape
        assert rel(mine, hf[f"{c}_cache_after"]) <= BOUND[dtype]
    if "window" in FAMILIES[family]:
        assert hf["k_cache_after"].shape[-2] == 3  # W - 1
    assert verify_attention(config).ok


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "variant",
    [{}, {"window": 3}, {"kv_heads": 1}, {"causal": False}, {"key_lengths": (8, 5)}],
    ids=repr,
)
def test_the_step_is_sdpa_on_the_concatenated_cache(variant: dict[str, Any], dtype: str) -> None:
    config = AttentionConfig(**{**BASE, "causal": True, "bias": False, **variant, "dtype": dtype})
    trace, refs = run_references(config)
    sdpa = refs[SDPA_CACHE]
    assert isinstance(sdpa, dict)
    for name in ("output", "weights", "k_all", "v_all"):
        assert rel(trace[name].value, sdpa[name]) <= BOUND[dtype], name
    report = verify_attention(config)
    assert report.ok
    names = {(c.name, c.right) for c in report.references if c.skipped is None}
    assert ("k_all", SDPA_CACHE) in names
    assert ("k_cache_after", next(n for n in refs if n.startswith("transformers"))) in names


def test_an_unbatched_step_is_verified_too() -> None:
    config = AttentionConfig(seq=1, past=5, hidden=16, heads=4, causal=True, rope=True, bias=False)
    assert verify_attention(config).ok


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"rope": False}, "add --rope"),
        ({"qk_norm": "head"}, "q/k norms"),
        ({"window": 4, "bias": True}, "Mistral has no biases"),
        ({"window": 1}, "use --window 2+"),
    ],
)
def test_where_no_family_applies_the_row_says_why(fields: dict[str, Any], reason: str) -> None:
    config = AttentionConfig(**{**BASE, "causal": True, "bias": False, **fields})
    report = verify_attention(config)
    skipped = [c.skipped for c in report.references if c.skipped]
    assert skipped
    assert all(reason in s for s in skipped if s.startswith("transformers") or "--" in s)
    assert report.ok


def test_a_wrong_cache_is_caught() -> None:
    config = AttentionConfig(**BASE, causal=True, bias=False)
    inputs = {n: s.make() for n, s in random_sources(config).items()}
    refs = past_references(config, {**inputs, "k_cache": inputs["k_cache"] * 1.01})
    trace = trace_attention(config, "numpy")
    sdpa = refs[SDPA_CACHE]
    assert isinstance(sdpa, dict)
    assert rel(trace["output"].value, sdpa["output"]) > 1e-4
