"""What a rank holds and moves, beside the single device: the ``parallel`` section of a rank
trace (``Trace.parallel``, schema ``attntrace.trace/3``).

FLOPs summed over the T·C ranks equal the single device's plus the redundancy that
:func:`redundancy` states term by term (a hypothesis test checks the identity):

- kv-heads replicated (g < T): every rank projects (and norms, rotates) the kv-head its query
  heads read, so T/g ranks compute each kv-head: (T/g - 1) times the single device's k and v
  steps;
- b_o added on every TP rank after the all-reduce (not with --sp: after the reduce-scatter
  each rank adds it to its own shard);
- ring attention: the log-sum-exp of every round's rows (2 FLOPs a row) and the merges (12 a
  row and 3 an element); under a causal mask, the masked halves of blocks it skips (negative)
  and the mask applied to the own blocks alone (negative); with --window every round's block
  is masked whole, and the max and sum of each row guarded (2 FLOPs a row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.sharding.comm import Collective
from attntrace.trace import Trace
from attntrace.units import exact_count

#: FLOPs a single device spends per (query, key) pair and head outside the two matmuls: scale,
#: softmax (5); the mask's where is 1 more where a mask applies, the soft-cap 3.
PAIR_FLOPS = 6
#: FLOPs of one merge of a ring round per row (max, 4 subtractions, 4 exps, 2 adds, a log).
MERGE_ROW_FLOPS = 12


@dataclass(frozen=True, kw_only=True)
class RankFigures:
    """One rank's cost and traffic per layer, the single device's beside it."""

    layout: ParallelLayout
    flops: int  # the rank's steps
    activation_bytes: int  # its steps that own memory
    peak_bytes: int  # the most activation bytes alive at once, plus its weights
    weight_bytes: int  # its shards of w_q, w_k, w_v, w_o (b_o whole)
    kv_cache_bytes: int  # the keys and values it holds (B · its tokens · 2 · its kv-heads · d)
    collectives: tuple[Collective, ...]
    single_flops: int
    single_weight_bytes: int
    single_kv_cache_bytes: int
    single_peak_bytes: int
    redundancy: tuple[tuple[str, int], ...]  # (what, FLOPs summed over the ranks)
    max_error: float | None = None  # gathered output against the single device (compute only)

    @property
    def comm_bytes(self) -> int:
        """Bytes the rank sends and receives per layer, every collective and round."""
        return sum(c.count * (c.sent + c.received) for c in self.collectives)

    @property
    def summed_flops(self) -> int:
        """The single device's FLOPs plus the stated redundancy: every rank's, summed."""
        return self.single_flops + sum(f for _, f in self.redundancy)

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready values (``parallel`` of ``--format json``)."""
        return {
            "layout": self.layout.to_dict(),
            "ranks": self.layout.ranks,
            "rank": {
                "index": self.layout.rank,
                "tp_rank": self.layout.tp_rank,
                "cp_rank": self.layout.cp_rank,
                "flops": self.flops,
                "macs": exact_count(self.flops, "macs"),
                "activation_bytes": self.activation_bytes,
                "peak_bytes": self.peak_bytes,
                "weight_bytes": self.weight_bytes,
                "kv_cache_bytes": self.kv_cache_bytes,
                "comm_bytes_per_layer": self.comm_bytes,
            },
            "single_device": {
                "flops": self.single_flops,
                "weight_bytes": self.single_weight_bytes,
                "kv_cache_bytes": self.single_kv_cache_bytes,
                "peak_bytes": self.single_peak_bytes,
            },
            "collectives": [c.to_dict() for c in self.collectives],
            "redundancy": [{"what": w, "flops": f} for w, f in self.redundancy],
            "summed_flops": self.summed_flops,
            **({"max_error": self.max_error} if self.max_error is not None else {}),
        }


def parallel_figures(
    trace: Trace, collectives: Sequence[Collective], max_error: float | None
) -> RankFigures:
    """The figures of rank ``trace`` (its config carries the layout)."""
    import dataclasses

    from attntrace.engine.attention import trace_attention

    config = trace.config
    layout = config.parallel
    assert layout is not None
    single = trace_attention(dataclasses.replace(config, parallel=None), "shape")
    kv = layout.kv_heads(config)
    tokens = config.keys // layout.cp  # (--past: the cache's and the new tokens')
    if layout.shards_cache(config):  # its N/C of the cache, and the new tokens on the last
        last = layout.cp_rank == layout.cp - 1
        tokens = config.cached // layout.cp + config.seq * last
    kv_cache = (config.batch or 1) * tokens * 2 * kv * config.head_dim * config.itemsize
    return RankFigures(
        layout=layout,
        flops=trace.total_flops,
        activation_bytes=trace.step_bytes,
        peak_bytes=trace.peak_bytes + trace.param_bytes,
        weight_bytes=trace.param_bytes,
        kv_cache_bytes=kv_cache,
        collectives=tuple(collectives),
        single_flops=single.total_flops,
        single_weight_bytes=single.param_bytes,
        single_kv_cache_bytes=config.kv_cache_bytes(tokens=(config.batch or 1) * config.keys),
        single_peak_bytes=single.peak_bytes + single.param_bytes,
        redundancy=redundancy(config, single),
        max_error=max_error,
    )


def redundancy(config: AttentionConfig, single: Trace) -> tuple[tuple[str, int], ...]:
    """The FLOPs the ranks spend together beyond the single device's, term by term (negative:
    work the ranks skip).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> cfg = AttentionConfig(batch=1, seq=8, hidden=64, heads=8, kv_heads=2, bias=False,
    ...                       parallel=ParallelLayout(tp=4))
    >>> single = trace_attention(AttentionConfig(batch=1, seq=8, hidden=64, heads=8,
    ...                                          kv_heads=2, bias=False), "shape")
    >>> redundancy(cfg, single)  # each kv-head on 2 ranks: k_proj, v_proj (2·8·64·16 each) again
    (('kv-heads replicated on T/g ranks', 32768),)
    """
    layout = config.parallel
    assert layout is not None
    T, B, h = layout.tp, config.batch or 1, config.heads
    terms: list[tuple[str, int]] = []
    C = layout.cp if layout.shards_cache(config) else 1  # decode: every CP rank, every token
    if C > 1:
        again = ("q_proj", "k_proj", "v_proj", "q_norm", "k_norm", "q_rot", "k_rot", "output")
        once = sum(s.flops for s in single.steps if s.name in again)
        terms.append(("the new tokens' projections on every CP rank", (C - 1) * once))
    if config.groups < T:
        kv_steps = ("k_proj", "v_proj", "k_norm", "k_rot")
        once = sum(s.flops for s in single.steps if s.name in kv_steps)
        terms.append(("kv-heads replicated on T/g ranks", C * (T // config.groups - 1) * once))
    if config.bias and T > 1 and not layout.sp:
        bias = C * (T - 1) * B * config.seq * config.hidden
        terms.append(("b_o added on every TP rank", bias))
    if C > 1:
        terms += _decode_terms(config, layout, B * h)
    elif layout.cp > 1 and layout.cp_kind == "ring":
        terms += _ring_terms(config, layout, B * h)
    return tuple(terms)


def _decode_terms(
    config: AttentionConfig, layout: ParallelLayout, bh: int
) -> list[tuple[str, int]]:
    """--past with --cp: each rank's log-sum-exp and guards of the S rows, and every rank's
    C - 1 merges of the gathered partial results."""
    S, C, d = config.seq, layout.cp, config.head_dim
    return [
        ("log-sum-exp of every rank's rows", 2 * bh * C * S),
        ("guards of rows a rank's keys leave empty", 2 * bh * C * S),
        (
            "merging the C partial results on every rank",
            bh * C * (C - 1) * S * (MERGE_ROW_FLOPS + 3 * d),
        ),
    ]


def _ring_terms(config: AttentionConfig, layout: ParallelLayout, bh: int) -> list[tuple[str, int]]:
    """Ring attention's log-sum-exps and merges, and under a causal mask what it skips."""
    S, N, C, d = config.seq, config.keys, layout.cp, config.head_dim
    windowed = config.window is not None  # every round's whole block, masked
    if layout.balanced(config) and not windowed:  # rank c: c early rounds, C-1-c late
        merged_rows = 3 * (C - 1) * S // 4
        pairs = S * S * (C + 1) // (2 * C)  # computed (query, key) pairs of all ranks
        pair_flops = 4 * d + PAIR_FLOPS + (3 if config.softcap is not None else 0)
        return [
            ("log-sum-exp of every round's rows", 2 * bh * (S + merged_rows)),
            (
                "merging each round into the running context",
                bh * merged_rows * (MERGE_ROW_FLOPS + 3 * d),
            ),
            ("masked halves of blocks skipped", -bh * (S * N - pairs) * pair_flops),
            ("mask applied to the own blocks only", -bh * (S * N - S * S // C)),
        ]
    merged_rows = (C - 1) * S
    terms = [
        ("log-sum-exp of every round's rows", 2 * bh * C * S),
        (
            "merging each round into the running context",
            bh * merged_rows * (MERGE_ROW_FLOPS + 3 * d),
        ),
    ]
    if windowed:  # a row may see none of a block's keys: its max and sum guarded
        terms.append(("guards of rows a round masks whole", 2 * bh * C * S))
    return terms
