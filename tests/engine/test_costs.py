"""Costs per step: closed forms, totals, shape backend = numpy, peak memory, the memory guard."""

from __future__ import annotations

import math
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, MemoryBudgetError, trace_attention
from attntrace.engine.costs import SOFTMAX_FLOPS_PER_ELEMENT
from attntrace.units import format_terms


def closed_form(cfg: AttentionConfig) -> dict[str, int]:
    """The FLOPs of every eager step, written out by hand."""
    B, S, H, h, d = cfg.batch or 1, cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    linear = 2 * B * S * H * H + B * S * H
    flops = dict.fromkeys(
        ("x", "q_heads", "k_heads", "v_heads", "q", "k", "v", "k_t", "context_heads", "merged"), 0
    )
    flops |= {
        "q_proj": linear,
        "k_proj": linear,
        "v_proj": linear,
        "output": linear,
        "scores": 2 * B * h * S * S * d,
        "scaled": B * h * S * S,
        "weights": SOFTMAX_FLOPS_PER_ELEMENT * B * h * S * S,
        "context": 2 * B * h * S * S * d,
    }
    return flops


def evaluate(formula: str, sizes: dict[str, int]) -> float:
    """The value of a formula such as ``2·h·S·S·d + S·H`` for the given axis sizes."""
    total = 0.0
    for term in formula.split(" + "):
        total += math.prod(float(sizes.get(f, f)) for f in term.split("·"))
    return total


configs = st.builds(
    lambda batch, seq, heads, head_dim: AttentionConfig(
        batch=batch, seq=seq, hidden=heads * head_dim, heads=heads
    ),
    batch=st.none() | st.integers(1, 3),
    seq=st.integers(1, 12),
    heads=st.integers(1, 6),
    head_dim=st.integers(1, 8),
)


@settings(max_examples=60, deadline=None)
@given(cfg=configs, backend=st.sampled_from(["numpy", "shape"]))
def test_eager_costs_equal_the_closed_form(cfg: AttentionConfig, backend: str) -> None:
    trace = trace_attention(cfg, backend, keep_values=False)
    assert {s.name: s.flops for s in trace.steps} == closed_form(cfg)
    sizes = {**cfg.axis_sizes(), "B": cfg.batch or 1}
    for step in trace.steps:
        assert evaluate(step.formula, sizes) == step.flops, (step.name, step.formula)
    assert trace.total_flops == sum(s.flops for s in trace.steps)
    assert trace.total_macs == trace.total_flops / 2


@settings(max_examples=40, deadline=None)
@given(cfg=configs, algorithm=st.sampled_from(["eager", "flash"]), block=st.integers(1, 9))
def test_shape_backend_equals_numpy(cfg: AttentionConfig, algorithm: str, block: int) -> None:
    from dataclasses import replace

    cfg = replace(cfg, algorithm=algorithm, block_size=block)
    shape, numpy = trace_attention(cfg, "shape"), trace_attention(cfg, "numpy")
    fields = ("name", "shape", "axes", "view", "flops", "terms", "inputs", "repeat", "op")
    assert [[getattr(s, f) for f in fields] for s in shape.steps] == [
        [getattr(s, f) for f in fields] for s in numpy.steps
    ]
    assert shape.peak_bytes == numpy.peak_bytes
    assert shape.kv_cache_bytes_per_token == numpy.kv_cache_bytes_per_token


def test_keeping_values_does_not_change_the_record(compute_backend: str) -> None:
    cfg = AttentionConfig(batch=2, seq=5, hidden=16, heads=4)
    kept, dropped = (
        trace_attention(cfg, compute_backend),
        trace_attention(cfg, compute_backend, keep_values=False),
    )
    assert [(s.name, s.flops, s.terms, s.inputs) for s in kept] == [
        (s.name, s.flops, s.terms, s.inputs) for s in dropped
    ]
    assert all(s.value is None for s in dropped)


def test_formulas_read_in_axis_letters() -> None:
    trace = trace_attention(AttentionConfig(batch=2), "shape")
    assert trace["scores"].formula == "2·B·h·S·S·d"
    assert trace["context"].formula == "2·B·h·S·S·d"
    assert trace["q_proj"].formula == "2·B·S·H·H + B·S·H"
    assert format_terms(trace["q_proj"].terms, "macs") == "B·S·H·H + 0.5·B·S·H"
    assert trace["q"].formula == "0"


def test_memory_totals() -> None:
    cfg = AttentionConfig(batch=2, seq=64, hidden=256, heads=4, dtype="float64")
    trace = trace_attention(cfg, "shape")
    assert trace.param_bytes == (4 * 256 * 256 + 4 * 256) * 8
    assert trace.kv_cache_bytes_per_token == 2 * 256 * 8
    # at the softmax: x, the K and V projections (alive through context), scaled and weights
    assert trace.peak_bytes >= 2 * trace["scores"].nbytes
    assert trace.score_bytes == 2 * 4 * 64 * 64 * 8


def test_eager_peak_grows_with_s_squared_and_flash_peak_does_not() -> None:
    def peak(seq: int, algorithm: str) -> int:
        return trace_attention(
            AttentionConfig(seq=seq, hidden=512, heads=8, algorithm=algorithm), "shape"
        ).peak_bytes

    assert peak(8192, "eager") / peak(4096, "eager") > 3.5
    assert peak(8192, "flash") / peak(4096, "flash") < 2.1


def test_the_memory_guard_refuses_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    import attntrace.engine.inputs

    def no_values(*args: object) -> None:
        raise AssertionError("a value was drawn")

    monkeypatch.setattr(attntrace.engine.inputs, "_rng", no_values)
    cfg = AttentionConfig(seq=200_000, hidden=768, heads=12)
    tracemalloc.start()
    with pytest.raises(MemoryBudgetError) as err:
        trace_attention(cfg, "numpy", max_memory=10**9)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10 * 2**20
    assert "--backend shape" in str(err.value)
    assert "--algorithm flash" in str(err.value)


def test_the_default_budget_is_a_fraction_of_available_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import attntrace.engine.memory

    monkeypatch.setattr(attntrace.engine.memory, "available_memory", lambda: 2**20)
    with pytest.raises(MemoryBudgetError, match="50% of available memory"):
        trace_attention(AttentionConfig(seq=512), "numpy")
    flash = AttentionConfig(seq=512, hidden=64, heads=2, algorithm="flash", block_size=64)
    with pytest.raises(MemoryBudgetError) as err:
        trace_attention(flash, "numpy")
    assert "--algorithm flash" not in str(err.value)


def test_shape_backend_traces_a_70b_layer_at_128k_tokens() -> None:
    trace = trace_attention(AttentionConfig(seq=131072, hidden=8192, heads=64), "shape")
    assert trace["scores"].shape == (64, 131072, 131072)
    assert trace["scores"].nbytes == 4 * 2**40
    assert trace["scores"].flops == 2 * 64 * 131072**2 * 128
