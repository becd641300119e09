"""The ranks simulated in one process: their gathered output equals the single device's (float64
to 1e-12), and their FLOPs summed equal the single device's plus the stated redundancy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, trace_attention
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.sharding import trace_parallel
from attntrace.sharding.simulate import gathered_output


@st.composite
def layouts(draw: st.DrawFn) -> AttentionConfig:
    """A config and a layout whose sizes divide."""
    T = draw(st.sampled_from((1, 2, 4)))
    C = draw(st.sampled_from((1, 2, 4)))
    kind = draw(st.sampled_from(("ring", "allgather", "ulysses")))
    per_rank = draw(st.sampled_from((1, 2)))  # query heads of a rank (and of a Ulysses rank)
    heads = T * per_rank * (C if kind == "ulysses" else 1)
    g = draw(
        st.sampled_from([n for n in (1, 2, 4, 8) if heads % n == 0 and (n % T == 0 or T % n == 0)])
    )
    if kind == "ulysses":
        kv = max(1, g // T)
        if kv % C and C % kv:
            g = heads  # no GQA where the kv-heads cannot be shared
    causal = draw(st.booleans())
    cross = not causal and C > 1 and draw(st.booleans())
    rope = not cross and draw(st.booleans())
    window = draw(st.sampled_from((None, 3))) if not cross else None
    sp = T > 1 and draw(st.booleans())
    softcap = draw(st.sampled_from((None, 20.0)))
    qk_norm = draw(st.sampled_from((None, "head")))
    d = draw(st.sampled_from((2, 4)))
    seq = 2 * C * T * draw(st.integers(1, 2))
    return AttentionConfig(
        batch=draw(st.sampled_from((None, 1, 2))),
        seq=seq,
        hidden=heads * d,
        heads=heads,
        kv_heads=g,
        causal=causal,
        rope=rope,
        window=window,
        kv_seq=2 * C if cross else None,
        softcap=softcap,
        qk_norm=qk_norm,
        dtype="float64",
        seed=draw(st.integers(0, 3)),
        parallel=ParallelLayout(tp=T, sp=sp, cp=C, cp_kind=kind),
    )


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_gathered_output_equals_one_device_and_flops_add_up(config: AttentionConfig) -> None:
    trace = trace_parallel(config, "numpy")
    figures = trace.parallel
    assert figures.max_error is not None  # type: ignore[union-attr]
    assert figures.max_error < 1e-12  # type: ignore[union-attr]
    layout = config.parallel
    assert layout is not None
    summed = sum(
        trace_parallel(dataclasses.replace(config, parallel=layout.at(r)), "shape").total_flops
        for r in range(layout.ranks)
    )
    assert summed == figures.summed_flops  # type: ignore[union-attr]
    single = trace_attention(dataclasses.replace(config, parallel=None), "shape")
    assert figures.single_flops == single.total_flops  # type: ignore[union-attr]


def test_gathered_output_matches_torch_sdpa() -> None:
    """An independent reference: torch's scaled_dot_product_attention on the same weights."""
    torch = pytest.importorskip("torch")
    config = AttentionConfig(
        batch=2,
        seq=16,
        hidden=32,
        heads=8,
        kv_heads=2,
        causal=True,
        bias=False,
        dtype="float64",
        parallel=ParallelLayout(tp=4, cp=2),
    )
    from attntrace.backends import get_backend
    from attntrace.engine.inputs import random_sources
    from attntrace.sharding.simulate import simulate

    be = get_backend("numpy")
    single = dataclasses.replace(config, parallel=None)
    src = {n: s.make() for n, s in random_sources(single).items()}
    runs = simulate(config, be, {n: be.tensor(s) for n, s in random_sources(single).items()})
    out = gathered_output(config, be, runs)
    x = torch.from_numpy(src["x"])
    q = (x @ torch.from_numpy(src["w_q"]).T).view(2, 16, 8, 4).transpose(1, 2)
    k = (x @ torch.from_numpy(src["w_k"]).T).view(2, 16, 2, 4).transpose(1, 2)
    v = (x @ torch.from_numpy(src["w_v"]).T).view(2, 16, 2, 4).transpose(1, 2)
    ctx = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), is_causal=True
    )
    ref = ctx.transpose(1, 2).reshape(2, 16, 32) @ torch.from_numpy(src["w_o"]).T
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["ring", "allgather", "ulysses"])
def test_torch_backend_float32_within_verify_tolerance(kind: str) -> None:
    pytest.importorskip("torch")
    config = AttentionConfig(
        batch=1,
        seq=32,
        hidden=64,
        heads=8,
        kv_heads=4,
        causal=True,
        rope=True,
        parallel=ParallelLayout(tp=2, cp=4, cp_kind=kind, sp=True),
    )
    trace = trace_parallel(config, "torch")
    assert trace.backend == "torch"
    assert trace.parallel.max_error < 1e-5  # type: ignore[union-attr]
    assert trace["q"].value is not None
    assert trace["q"].value.shape == (1, 4, 8, 8)


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize(
    "variant",
    [{"causal": True}, {"causal": True, "rope": True}, {"causal": True, "window": 4}, {}],
)
def test_decode_with_a_cache_sharded_by_heads(tp: int, variant: dict[str, object]) -> None:
    """--past under TP: each rank reads its kv-heads of the cache (g = 2: replicated at T = 4)."""
    config = AttentionConfig(
        batch=2,
        seq=2,
        past=6,
        hidden=32,
        heads=4,
        kv_heads=2,
        dtype="float64",
        parallel=ParallelLayout(tp=tp),
        **variant,  # type: ignore[arg-type]
    )
    trace = trace_parallel(config, "numpy")
    assert trace.parallel.max_error < 1e-12  # type: ignore[union-attr]
    kv = 2 // tp if tp <= 2 else 1
    cached = 3 if "window" in variant else 6  # a sliding cache keeps W - 1
    assert trace["k_cache"].shape == (2, kv, cached, 8)
    assert trace["k_all"].shape == (2, kv, cached + 2, 8)
    assert trace["scores"].shape == (2, 4 // tp, 2, cached + 2)
    summed = sum(
        trace_parallel(
            dataclasses.replace(config, parallel=ParallelLayout(tp=tp, rank=r)), "shape"
        ).total_flops
        for r in range(tp)
    )
    assert summed == trace.parallel.summed_flops  # type: ignore[union-attr]


@pytest.mark.parametrize(("tp", "cp"), [(1, 2), (2, 2), (1, 4), (4, 2)])
@pytest.mark.parametrize(
    "variant",
    [{"causal": True, "rope": True}, {"causal": True, "window": 5}, {"softcap": 20.0}],
)
def test_decode_with_a_cache_sharded_by_tokens(
    tp: int, cp: int, variant: dict[str, object]
) -> None:
    """--past under CP: each rank holds N/C of the cache (the last one the new keys too); the
    partial results, all-gathered, merge into one device's output."""
    past = 12 if "window" in variant else 8
    config = AttentionConfig(
        batch=2,
        seq=2,
        past=past,
        hidden=32,
        heads=4,
        kv_heads=2,
        dtype="float64",
        parallel=ParallelLayout(tp=tp, cp=cp),
        **variant,  # type: ignore[arg-type]
    )
    trace = trace_parallel(config, "numpy")
    assert trace.parallel.max_error < 1e-12  # type: ignore[union-attr]
    part = (4 if "window" in variant else 8) // cp  # the rank's share of the (W-1 or N) cache
    kv = 2 // tp if tp <= 2 else 1
    assert trace["x"].shape == (2, 2, 32)  # every rank: the S new tokens
    assert trace["k_cache"].shape == (2, kv, part, 8)
    assert trace["context_all_gather"].shape == (2, 4 // tp, cp * 2, 8)
    assert trace["context_merged"].repeat == cp - 1
    last = dataclasses.replace(config, parallel=ParallelLayout(tp=tp, cp=cp, rank=tp * cp - 1))
    assert trace_parallel(last, "shape")["k_all"].shape == (2, kv, part + 2, 8)
    summed = sum(
        trace_parallel(
            dataclasses.replace(config, parallel=ParallelLayout(tp=tp, cp=cp, rank=r)), "shape"
        ).total_flops
        for r in range(tp * cp)
    )
    assert summed == trace.parallel.summed_flops  # type: ignore[union-attr]
