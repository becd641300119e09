"""Every layout's rank view against shapes and bytes counted by hand: T in {1, 2, 4, 8}, C in
{1, 2, 4}, each --cp-kind, GQA with g < T and g >= T, causal and not, batch 1 and 2."""

from __future__ import annotations

import itertools

import pytest

from attntrace import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import ConfigError
from attntrace.sharding import trace_parallel
from attntrace.trace import Trace

H, h, d, S = 256, 32, 8, 64  # S divides 2·C·T for every T, C below
GRID = [
    case
    for case in itertools.product(
        (1, 2, 4, 8),  # T
        (1, 2, 4),  # C
        ("ring", "allgather", "ulysses"),
        (2, 8),  # g: below T = 4, 8 for 2; at or above T otherwise
        (False, True),  # causal
        (1, 2),  # B
    )
    if case[1] > 1 or case[2] == "ring"  # --cp-kind matters only with C > 1
]


def rank_trace(tp: int, cp: int, kind: str, g: int, causal: bool, b: int, **kw: object) -> Trace:
    layout = ParallelLayout(tp=tp, cp=cp, cp_kind=kind, **kw)  # type: ignore[arg-type]
    config = AttentionConfig(
        batch=b, seq=S, hidden=H, heads=h, kv_heads=g, causal=causal, parallel=layout
    )
    return trace_parallel(config, "shape")


def sent(trace: Trace, step: str) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    (c,) = [c for c in trace.parallel.collectives if c.step == step]  # type: ignore[union-attr]
    return c.shape_in, c.shape_out, c.sent, c.count


@pytest.mark.parametrize(("tp", "cp", "kind", "g", "causal", "b"), GRID)
def test_rank_shapes_and_bytes_by_hand(
    tp: int, cp: int, kind: str, g: int, causal: bool, b: int
) -> None:
    T, C, B = tp, cp, b
    t = rank_trace(T, C, kind, g, causal, B)
    Sl, hT = S // C, h // T
    kv = g // T if g >= T else 1  # g < T: the one kv-head the rank's heads read
    assert t["x"].shape == (B, Sl, H)
    assert t["q_proj"].shape == (B, Sl, hT * d)
    assert t["k_proj"].shape == (B, Sl, kv * d)
    assert t["q"].shape == (B, hT, Sl, d)
    assert t["k"].shape == (B, kv, Sl, d)
    assert t["q"].axes == ("B", "h/T" if T > 1 else "h", "S/C" if C > 1 else "S", "d")
    assert t.param("w_q").shape == (hT * d, H)
    assert t.param("w_k").shape == (kv * d, H)
    assert t.param("w_o").shape == (H, hT * d)
    assert t["output"].shape == (B, Sl, H)
    four = 4  # float32
    names = [c.step for c in t.parallel.collectives]  # type: ignore[union-attr]
    if T > 1:
        ar = B * Sl * H * four
        assert sent(t, "o_all_reduce") == ((B, Sl, H), (B, Sl, H), 2 * (T - 1) * ar // T, 1)
    else:
        assert "o_all_reduce" not in names
    kv_block = B * kv * Sl * d * four
    if C > 1 and kind == "ring":
        assert sent(t, "k_ring_recv") == ((B, kv, Sl, d),) * 2 + (kv_block, C - 1)
        assert sent(t, "v_ring_recv")[2:] == (kv_block, C - 1)
        if causal:  # rank 0: every later block is seen by its second chunk of queries only
            assert t["scores"].shape == (B, hT, Sl, Sl)
            assert t["scores_late"].shape == (B, hT, Sl // 2, Sl)
            assert t["scores_late"].repeat == C - 1
        else:
            assert t["scores_ring"].shape == (B, hT, Sl, Sl)
    if C > 1 and kind == "allgather":
        assert sent(t, "k_all_gather") == ((B, kv, Sl, d), (B, kv, S, d), (C - 1) * kv_block, 1)
        assert t["scores"].shape == (B, hT, Sl, S)
    if C > 1 and kind == "ulysses":
        q_in = B * hT * Sl * d * four
        assert sent(t, "q_all_to_all") == (
            (B, hT, Sl, d),
            (B, hT // C, S, d),
            (C - 1) * q_in // C,
            1,
        )
        kv_in, kv_out = (kv, kv // C) if kv >= C else (C, 1)  # fewer than C: copied first
        assert sent(t, "k_all_to_all")[:2] == ((B, kv_in, Sl, d), (B, kv_out, S, d))
        assert t["scores"].shape == (B, hT // C, S, S)
        assert sent(t, "context_all_to_all")[:2] == ((B, hT // C, S, d), (B, hT, Sl, d))
    if C == 1:
        assert t["scores"].shape == (B, hT, S, S)


@pytest.mark.parametrize(("tp", "cp", "b"), [(2, 1, 1), (4, 2, 2), (8, 4, 1)])
def test_sequence_parallel_gathers_x_and_scatters_the_output(tp: int, cp: int, b: int) -> None:
    T, C, B = tp, cp, b
    t = rank_trace(T, C, "ring", 8, True, B, sp=True)
    Sl = S // C
    shard = B * (Sl // T) * H * 4
    assert t["x"].shape == (B, Sl // T, H)
    assert t["x"].axes == ("B", "S/CT" if C > 1 else "S/T", "H")
    assert sent(t, "x_all_gather") == ((B, Sl // T, H), (B, Sl, H), (T - 1) * shard, 1)
    assert sent(t, "o_reduce_scatter") == ((B, Sl, H), (B, Sl // T, H), (T - 1) * shard, 1)
    assert t["output"].shape == (B, Sl // T, H)
    # Megatron: SP's all-gather + reduce-scatter move what TP's one all-reduce moves
    tp = rank_trace(T, C, "ring", 8, True, B)
    assert (
        sent(t, "x_all_gather")[2] + sent(t, "o_reduce_scatter")[2] == sent(tp, "o_all_reduce")[2]
    )


def test_every_rank_has_the_shapes_of_its_own_shard() -> None:
    """Rank C-1 of a causal ring sees earlier blocks only: every query, their first chunk."""
    layout = ParallelLayout(tp=2, cp=4, rank=7)  # t = 1, c = 3
    t = trace_parallel(
        AttentionConfig(seq=64, hidden=64, heads=8, causal=True, parallel=layout), "shape"
    )
    assert t["scores_early"].shape == (4, 16, 8)  # (h/T, S/C, S/2C)
    assert t["scores_early"].repeat == 3
    assert "scores_late" not in t


@pytest.mark.parametrize(
    ("kw", "layout", "message"),
    [
        (
            {"heads": 12, "hidden": 768},
            {"tp": 8},
            "--heads 12 is not divisible by --tp 8; --tp values that work: 1, 2, 3, 4, 6, 12",
        ),
        ({"heads": 24, "kv_heads": 6, "hidden": 192}, {"tp": 4}, "one must divide the other"),
        (
            {"seq": 100, "heads": 4, "hidden": 64, "causal": True},
            {"cp": 16},
            "--seq 100 is not divisible by 2C (--cp 16, causal: two chunks a rank) = 32; "
            "--seq values that work: 96, 128",
        ),
        (
            {"seq": 64, "heads": 4, "hidden": 64},
            {"cp": 8, "cp_kind": "ulysses"},
            "--cp values that work: 1, 2, 4",
        ),
        (
            {"seq": 3, "heads": 4, "hidden": 64},
            {"tp": 2, "sp": True},
            "--seq 3 is not divisible by T (--tp 2 with --sp) = 2",
        ),
        (
            {"seq": 8, "heads": 4, "hidden": 64},
            {"sp": True},
            "--sp shards the sequence over the --tp group",
        ),
        (
            {"seq": 8, "heads": 4, "hidden": 64, "past": 4},
            {"cp": 2, "cp_kind": "ulysses"},
            "--past with --cp-kind allgather/ulysses is not traced across devices yet",
        ),
        (
            {"seq": 1, "heads": 4, "hidden": 64, "past": 10},
            {"cp": 4},
            "the cache's 10 tokens (--past) are not divisible by --cp 4; "
            "--past values that work: 8, 12",
        ),
    ],
)
def test_sizes_that_do_not_divide_name_the_sizes_that_work(
    kw: dict[str, object], layout: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=None) as error:
        AttentionConfig(parallel=ParallelLayout(**layout), **kw)  # type: ignore[arg-type]
    assert message in str(error.value)
