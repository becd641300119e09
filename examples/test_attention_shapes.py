"""Shape tests for your own attention configs: copy this file into your test suite.

Run with ``pytest``; needs only ``pip install attntrace pytest``. Each test traces the
attention on the shape backend (no arrays are allocated, so real model sizes are instant)
and fails with a readable message when a shape is not what the model code expects.
"""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.config.presets import resolve_config
from attntrace.tools.check import check_expectations, parse_expectation

# Your model's sizes: (name, batch, seq, hidden, heads)
MODELS = [
    ("bert-base", 8, 512, 768, 12),
    ("gpt2-medium", 4, 1024, 1024, 16),
]


@pytest.mark.parametrize(
    ("name", "batch", "seq", "hidden", "heads"), MODELS, ids=[m[0] for m in MODELS]
)
def test_scores_are_square_per_head(
    name: str, batch: int, seq: int, hidden: int, heads: int
) -> None:
    trace = trace_attention(
        AttentionConfig(batch=batch, seq=seq, hidden=hidden, heads=heads), "shape"
    )
    assert trace.shape("scores") == (batch, heads, seq, seq)
    assert trace.shape("output") == trace.shape("x") == (batch, seq, hidden)
    assert trace.shape("q") == (batch, heads, seq, hidden // heads)


def test_expectations_with_axis_letters() -> None:
    """The same checks as ``attntrace check --expect``: B S H h d come from the config."""
    trace = trace_attention(AttentionConfig(batch=2, seq=128, hidden=768, heads=12), "shape")
    expectations = [
        parse_expectation(e)
        for e in ("q_heads=B,S,h,d", "k_t=B,h,d,S", "weights=B,h,S,S", "merged=B,S,H")
    ]
    assert check_expectations(trace, expectations) == ()


def test_grouped_query_attention_of_a_preset() -> None:
    """As ``attntrace check --preset llama-3-8b --seq 16 -e k_proj=S,g*d -e k_rep=h,S,d``."""
    trace = trace_attention(resolve_config(preset="llama-3-8b", seq=16), "shape")
    expectations = [
        parse_expectation(e) for e in ("k_proj=S,g*d", "k=g,S,d", "k_rep=h,S,d", "scores=h,S,S")
    ]
    assert check_expectations(trace, expectations) == ()
    assert trace.shape("k_proj") == (16, 8 * 128)  # 8 kv-heads of 128: a quarter of q_proj


def test_the_json_document_is_what_ci_reads() -> None:
    """``trace.to_dict()`` is the document of ``attntrace run --format json``."""
    doc = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "shape").to_dict()
    scores = next(s for s in doc["steps"] if s["name"] == "scores")
    assert scores["shape"] == [12, 3, 3]
    assert scores["axes"] == ["h", "S", "S"]
    assert doc["totals"]["param_count"] == 4 * 768 * 768 + 4 * 768
    assert scores["flops"] == 2 * 12 * 3 * 3 * 64  # 2·h·S·S·d (1 multiply-add = 2 FLOPs)
    assert scores["formula"] == "2·h·S·S·d"
    assert doc["totals"]["flops"] == sum(s["flops"] for s in doc["steps"])


def test_parameter_memory_budget() -> None:
    trace = trace_attention(AttentionConfig(hidden=4096, heads=32, dtype="bfloat16"), "shape")
    assert (
        trace.param_bytes == (4 * 4096 * 4096 + 4 * 4096) * 2
    )  # about 128 MiB per attention layer
