"""The shape chain of the design card, on every backend, batched and unbatched."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import STEP_NAMES, AttentionConfig, trace_attention

CARD = {  # --seq 3 --hidden 768 --heads 12, as in the issue and the study notes
    "x": (3, 768),
    "q_proj": (3, 768),
    "k_proj": (3, 768),
    "v_proj": (3, 768),
    "q_heads": (3, 12, 64),
    "k_heads": (3, 12, 64),
    "v_heads": (3, 12, 64),
    "q": (12, 3, 64),
    "k": (12, 3, 64),
    "v": (12, 3, 64),
    "k_t": (12, 64, 3),
    "scores": (12, 3, 3),
    "scaled": (12, 3, 3),
    "weights": (12, 3, 3),
    "context": (12, 3, 64),
    "context_heads": (3, 12, 64),
    "merged": (3, 768),
    "output": (3, 768),
}
AXES = {
    "x": "SH",
    "q_proj": "SH",
    "q_heads": "Shd",
    "q": "hSd",
    "k_t": "hdS",
    "scores": "hSS",
    "weights": "hSS",
    "context": "hSd",
    "context_heads": "Shd",
    "merged": "SH",
    "output": "SH",
}


@pytest.fixture(params=["numpy", "torch", "shape"])
def any_backend(request: pytest.FixtureRequest) -> str:
    if request.param == "torch":
        pytest.importorskip("torch")
    return str(request.param)


def test_step_names_are_the_public_contract() -> None:
    assert tuple(CARD) == STEP_NAMES
    assert trace_attention(AttentionConfig(), "shape").names == STEP_NAMES


def test_unbatched_chain_matches_the_card(any_backend: str) -> None:
    trace = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), any_backend)
    assert {s.name: s.shape for s in trace.steps} == CARD
    assert [s.index for s in trace.steps] == list(range(len(CARD)))


def test_batched_chain_adds_a_leading_batch_axis(any_backend: str) -> None:
    trace = trace_attention(AttentionConfig(batch=2, seq=3, hidden=768, heads=12), any_backend)
    assert {s.name: s.shape for s in trace.steps} == {
        name: (2, *shape) for name, shape in CARD.items()
    }
    assert trace["scores"].axes == ("B", "h", "S", "S")


def test_named_axes_follow_the_card() -> None:
    trace = trace_attention(AttentionConfig(), "shape")
    for name, axes in AXES.items():
        assert trace[name].axes == tuple(axes), name


def test_parameters_have_torch_linear_shapes(compute_backend: str) -> None:
    trace = trace_attention(AttentionConfig(batch=4, hidden=768, heads=12), compute_backend)
    shapes = {p.name: p.shape for p in trace.parameters}
    assert shapes == {
        f"{kind}_{c}": (768, 768) if kind == "w" else (768,) for c in "qkvo" for kind in "wb"
    }
    assert trace.param_count == 4 * 768 * 768 + 4 * 768
    assert set(trace.params) == set(shapes)
    assert trace.params["w_q"].shape == (768, 768)


def test_ops_name_the_operation_of_each_step() -> None:
    ops = {s.name: s.op for s in trace_attention(AttentionConfig(), "shape").steps}
    assert ops["q_proj"] == "x @ w_q.T + b_q"
    assert ops["q_heads"] == "q_proj.view(S, h, d)"
    assert ops["q"] == "q_heads.transpose(0, 1)"
    assert ops["scores"] == "q @ k_t"
    batched = {s.name: s.op for s in trace_attention(AttentionConfig(batch=2), "shape").steps}
    assert batched["q_heads"] == "q_proj.view(B, S, h, d)"
    assert batched["q"] == "q_heads.transpose(1, 2)"


def test_views_are_marked_and_values_are_numpy(compute_backend: str) -> None:
    trace = trace_attention(AttentionConfig(seq=4, hidden=16, heads=4), compute_backend)
    assert {s.name for s in trace.steps if s.view} == {
        "q_heads",
        "k_heads",
        "v_heads",
        "q",
        "k",
        "v",
        "k_t",
        "context_heads",
    }
    for step in trace.steps:
        assert step.value is not None
        assert step.value.shape == step.shape, step.name
        assert str(step.value.dtype) == "float32"


def test_shape_backend_keeps_no_values() -> None:
    trace = trace_attention(AttentionConfig(), "shape")
    assert all(s.value is None for s in trace.steps)
    assert trace.params == {}
    assert trace["scores"].nbytes == 12 * 3 * 3 * 4


@settings(max_examples=60, deadline=None)
@given(
    batch=st.none() | st.integers(1, 3),
    seq=st.integers(1, 9),
    heads=st.integers(1, 6),
    head_dim=st.integers(1, 8),
    backend=st.sampled_from(["numpy", "shape"]),
)
def test_every_shape_follows_the_closed_form(
    batch: int | None, seq: int, heads: int, head_dim: int, backend: str
) -> None:
    hidden = heads * head_dim
    cfg = AttentionConfig(batch=batch, seq=seq, hidden=hidden, heads=heads)
    trace = trace_attention(cfg, backend)
    lead = (batch,) if batch is not None else ()
    S, H, h, d = seq, hidden, heads, head_dim
    assert trace.shape("x") == trace.shape("output") == trace.shape("merged") == (*lead, S, H)
    assert trace.shape("q_heads") == trace.shape("context_heads") == (*lead, S, h, d)
    assert trace.shape("q") == trace.shape("context") == (*lead, h, S, d)
    assert trace.shape("k_t") == (*lead, h, d, S)
    assert trace.shape("scores") == trace.shape("weights") == (*lead, h, S, S)
    for step in trace.steps:  # the axes letters spell the shape
        sizes = {**cfg.axis_sizes()}
        assert tuple(sizes[a] for a in step.axes) == step.shape, step.name
        assert step.nbytes == math.prod(step.shape) * 4
