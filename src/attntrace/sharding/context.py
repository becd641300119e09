"""The attention of one rank under context parallelism: from q, k, v heads first to the
context, by the layout's ``cp_kind``.

- **one CP rank** (C = 1): the eager chain, scores to context, on the rank's heads.
- **allgather**: k and v are all-gathered over the C ranks; the rank's S/C queries attend to
  all S keys under the mask of their global positions.
- **ring**: C rounds. Round 0 attends to the rank's own keys; before each later round the key
  and value block moves one rank along the ring (send to the next, receive from the previous),
  and each round's normalised context is merged into the running one by the log-sum-exp of its
  rows: ``lse = max + log(exp(lse_a - max) + exp(lse_b - max))``,
  ``context = context_a·exp(lse_a - lse) + context_b·exp(lse_b - lse)``. Under a causal mask
  the tokens sit in the load-balanced order (rank c holds chunks c and 2C-1-c), and a round whose
  block comes from an earlier rank reads the block's first chunk only (``*_early``: all the
  rank's queries, S/C × S/2C), from a later rank only the rank's second chunk of queries attends
  (``*_late``: S/2C × S/C): half a block each, the rest of the block masked and skipped.
- **ulysses**: q, k, v are exchanged by an all-to-all, S/C tokens of h/T heads for all S tokens
  of h/TC heads; attention runs on whole sequences; a second all-to-all brings the context back.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from attntrace.sharding.comm import concat
from attntrace.sharding.rank import key_ranges, token_ranges

if TYPE_CHECKING:
    from collections.abc import Mapping

    from attntrace.sharding.rank import Ranges, RankAttention, RankRun

T = TypeVar("T")


def forward(r: RankAttention[T], sources: Mapping[str, T]) -> RankRun[T]:
    """Every step of rank ``r`` from the global ``sources`` (x, the weights, the tables)."""
    p = r.shard_params(sources)
    q, k, v = r.project(sources, p)  # (B, h/T, S/C, d), (B, g/T, S/C, d) x2
    if r.config.qk_norm == "head":
        q, k = r.qk_norm(q, k, p)
    if r.config.rope:
        q, k = r.rotate(sources, q, k)
    if r.config.past:
        k, v = r.append(sources, k, v)  # (B, g/T, N+S, d) each
    context = attend(r, q, k, v)  # (B, h/T, S/C, d)
    r.run.output = r.merge(context, p)  # (B, S/C, H), or (B, S/CT, H) with --sp
    return r.run


def attend(r: RankAttention[T], q: T, k: T, v: T) -> T:
    """The rank's context (B, h/T, S/C, d) from its q, k, v."""
    kind = r.layout.cp_kind if r.layout.cp > 1 else "local"
    if r.layout.shards_cache(r.config):
        return _decode_across(r, q, k, v)
    if kind == "ulysses":
        return _ulysses(r, q, k, v)
    if kind == "ring":
        return _ring(r, q, k, v)
    k_ranges = r.k_at
    if kind == "allgather":
        k = r.collective(
            "k_all_gather", "all_gather", k, "cp", r.ax(r.lab.kv, r.lab.keys, "d"), (r.n + 1, 0)
        )
        v = r.collective(
            "v_all_gather", "all_gather", v, "cp", r.ax(r.lab.kv, r.lab.keys, "d"), (r.n + 1, 0)
        )
        k_ranges = _all_keys(r)
    k, v = _repeat(r, k, v, r.lab.heads, r.lab.keys)
    weights = _weights(r, q, k, r.q_at, k_ranges, r.lab.tokens, r.lab.keys)
    context = r.be.matmul(weights, v)  # (B, h/T, S/C, d)
    return r.rec.step("context", context, "weights @ v", r.ax(r.lab.heads, r.lab.tokens, "d"))


def _all_keys(r: RankAttention[T]) -> Ranges:
    """The global positions of the keys gathered from every CP rank, in rank order."""
    return tuple(run for c in range(r.layout.cp) for run in key_ranges(r.config, r.layout, c))


def _repeat(
    r: RankAttention[T], k: T, v: T, heads: str, keys: str, suffix: str = ""
) -> tuple[T, T]:
    """GQA on the rank: each of its kv-heads serves its share of query heads."""
    kv_heads = r.be.shape(k)[r.n]
    q_heads = _query_heads(r)
    if kv_heads == q_heads:
        return k, v
    times = q_heads // kv_heads
    k = r.rec.step(
        f"k_rep{suffix}",
        r.be.repeat_interleave(k, times, r.n),
        f"k.repeat_interleave({times})",
        r.ax(heads, keys, "d"),
    )
    v = r.rec.step(
        f"v_rep{suffix}",
        r.be.repeat_interleave(v, times, r.n),
        f"v.repeat_interleave({times})",
        r.ax(heads, keys, "d"),
    )
    return k, v


def _query_heads(r: RankAttention[T]) -> int:
    h = r.config.heads // r.layout.tp
    return h // r.layout.cp if r.layout.cp > 1 and r.layout.cp_kind == "ulysses" else h


def _scores(r: RankAttention[T], q: T, k: T, rows: str, keys: str, suffix: str) -> T:
    """k_t -> scores -> scaled -> (capped): the block's scaled scores."""
    be, rec, cfg, heads = r.be, r.rec, r.config, _heads_label(r)
    k_t = rec.view(
        f"k_t{suffix}", be.transpose(k, -2, -1), "k.transpose(-2, -1)", r.ax(heads, "d", keys)
    )
    scores = be.matmul(q, k_t)  # (B, h/T, S/C, N)
    scores = rec.step(f"scores{suffix}", scores, "q @ k_t", r.ax(heads, rows, keys), contract="d")
    scaled = be.scale(scores, cfg.score_scale)  # (B, h/T, S/C, N)
    scaled = rec.step(
        f"scaled{suffix}", scaled, f"scores * {cfg.score_scale:g}", r.ax(heads, rows, keys)
    )
    if cfg.softcap is not None:
        c = cfg.softcap
        capped = be.scale(be.tanh(be.scale(scaled, 1.0 / c)), c)  # (B, h/T, S/C, N)
        scaled = rec.step(
            f"capped{suffix}", capped, f"{c:g} * tanh(scaled / {c:g})", r.ax(heads, rows, keys)
        )
    return scaled


def _heads_label(r: RankAttention[T]) -> str:
    if r.layout.cp > 1 and r.layout.cp_kind == "ulysses":
        return "h/TC" if r.layout.tp > 1 else "h/C"
    return r.lab.heads


def _weights(
    r: RankAttention[T], q: T, k: T, q_ranges: Ranges, k_ranges: Ranges, rows: str, keys: str
) -> T:
    """scores -> scaled -> (mask, masked) -> softmax weights of one whole block."""
    be, rec, heads = r.be, r.rec, _heads_label(r)
    scaled = _scores(r, q, k, rows, keys, "")
    mask = r.mask(q_ranges, k_ranges)
    if mask is not None:
        axes = (*(("B",) if r.config.batched else ()), "1", rows, keys)
        mask = rec.step("mask", mask, "global positions: " + _mask_words(r), axes)
        scaled = rec.step(
            "masked",
            be.where(mask, scaled, -math.inf),
            "where(mask, scaled, -inf)",
            r.ax(heads, rows, keys),
        )
    return rec.step("weights", be.softmax(scaled), "softmax(…, dim=-1)", r.ax(heads, rows, keys))


def _mask_words(r: RankAttention[T]) -> str:
    cfg = r.config
    words = [
        w
        for w, on in (
            ("causal", cfg.causal),
            (f"window({cfg.window})", cfg.window is not None),
            ("key_lengths", cfg.key_lengths is not None),
        )
        if on
    ]
    return " & ".join(words)


# --- ring attention ---


def _ring(r: RankAttention[T], q: T, k: T, v: T) -> T:
    """C rounds of partial attention merged by their log-sum-exp (see the module docstring)."""
    lab, C, rec = r.lab, r.layout.cp, r.rec
    context, lse = _partial(r, q, k, v, r.q_pos, r.k_pos, lab.tokens, lab.keys, "")
    windowed = r.config.window is not None  # every block masked: no half is seen whole
    balanced = r.layout.balanced(r.config) and not windowed
    kv_ax = r.ax(lab.kv, lab.keys, "d")
    for i in range(1, C):
        k = r.collective("k_ring_recv", "send_recv", k, "cp", kv_ax, count=C - 1)
        v = r.collective("v_ring_recv", "send_recv", v, "cp", kv_ax, count=C - 1)
        source = (r.c - i) % C
        if not balanced:
            at = key_ranges(r.config, r.layout, source)  # the block's global positions
            causal = r.config.causal  # contiguous runs: a block is seen whole, half or not
            part = _partial(r, q, k, v, r.q_pos, at, lab.tokens, lab.keys, "_ring", guard=causal)
            context, lse = _merge(r, context, lse, part, 0, "_ring")
        elif source < r.c:  # an earlier rank's block: its first chunk, seen by every query
            half = r.be.shape(k)[r.n + 1] // 2
            k_half, v_half = (r.raw.narrow(t, r.n + 1, 0, half) for t in (k, v))
            part = _partial(r, q, k_half, v_half, r.q_pos, r.q_pos, lab.tokens, "S/2C", "_early")
            context, lse = _merge(r, context, lse, part, 0, "_early")
        else:  # a later rank's block: seen by the rank's second chunk of queries only
            half = r.be.shape(q)[r.n + 1] // 2
            q_half = r.raw.narrow(q, r.n + 1, half, 2 * half)
            part = _partial(r, q_half, k, v, r.q_pos, r.q_pos, "S/2C", lab.keys, "_late")
            context, lse = _merge(r, context, lse, part, half, "_late")
    del rec
    return context


def _partial(
    r: RankAttention[T],
    q: T,
    k: T,
    v: T,
    q_ranges: Ranges,
    k_ranges: Ranges,
    rows: str,
    keys: str,
    suffix: str,
    *,
    guard: bool = False,
) -> tuple[T, T]:
    """One round: the block's normalised context and the log-sum-exp of each query row.
    Round 0 (no suffix) is masked, and with --window every round (its rows may see no key of a
    block: guarded, they get zero weights and a log-sum-exp of -inf); without a window a later
    block is seen whole or skipped."""
    be, rec, heads = r.be, r.rec, r.lab.heads
    windowed = r.config.window is not None or guard
    k, v = _repeat(r, k, v, heads, keys, suffix)
    scaled = _scores(r, q, k, rows, keys, suffix)
    mask = r.mask(q_ranges, k_ranges) if not suffix or windowed else None
    if mask is not None:
        axes = (*(("B",) if r.config.batched else ()), "1", rows, keys)
        mask = rec.step(f"mask{suffix}", mask, "global positions: " + _mask_words(r), axes)
        scaled = rec.step(
            f"masked{suffix}",
            be.where(mask, scaled, -math.inf),
            "where(mask, scaled, -inf)",
            r.ax(heads, rows, keys),
        )
    raw = r.raw  # the softmax by hand, keeping its max and sum: charged as one softmax below
    top = raw.reduce_max(scaled)  # (B, h/T, S/C)
    shape = raw.shape(top)
    if windowed:  # a row without keys: its max -inf made finite (its exps then 0)
        top = _guard(r, top, LOWEST)  # (B, h/T, S/C)
    e = raw.exp(raw.binary("sub", scaled, raw.reshape(top, (*shape, 1))))  # (B, h/T, S/C, N)
    total = raw.reduce_sum(e)  # (B, h/T, S/C)
    if windowed:  # and its sum 0 kept off the divide: weights 0, log-sum-exp -inf
        total = _guard(r, total, TINY)  # (B, h/T, S/C)
    weights = raw.binary("div", e, raw.reshape(total, (*shape, 1)))  # (B, h/T, S/C, N)
    rec.meter.charge("softmax", scaled, out=weights)  # 5 FLOPs an element, as one device's
    weights = rec.step(f"weights{suffix}", weights, "softmax(…, dim=-1)", r.ax(heads, rows, keys))
    lse = be.add(top, be.log(total))  # (B, h/T, S/C)
    lse = rec.step(f"lse{suffix}", lse, "max + log(sum(exp(… - max)))", r.ax(heads, rows))
    context = be.matmul(weights, v)  # (B, h/T, S/C, d)
    context = rec.step(f"context{suffix}", context, "weights @ v", r.ax(heads, rows, "d"))
    return context, lse


#: The most negative finite value and the smallest positive normal of each dtype (the guards of
#: a row that a round masks whole).
LOWEST = {"float16": -65504.0, "bfloat16": -3.3895e38, "float32": -3.4028e38, "float64": -1.79e308}
TINY = {"float16": 6.104e-05, "bfloat16": 1.1755e-38, "float32": 1.1755e-38, "float64": 2.23e-308}


def _guard(r: RankAttention[T], x: T, floor: dict[str, float]) -> T:
    """max(x, floor of its dtype), 1 FLOP a row: the guards of a row a round masks whole."""
    dtype, shape = r.raw.dtype(x), r.raw.shape(x)
    return r.be.binary("maximum", x, r.raw.full(shape, floor[dtype], dtype))


def _merge(
    r: RankAttention[T], context: T, lse: T, part: tuple[T, T], start: int, suffix: str
) -> tuple[T, T]:
    """The running (context, lse) with a round's merged into rows ``start:`` of it."""
    be, raw, rec, lab, n = r.be, r.raw, r.rec, r.lab, r.n
    o_b, l_b = part
    rows = be.shape(l_b)[-1]
    o_a = raw.narrow(context, n + 1, start, start + rows)  # (B, h/T, rows, d)
    l_a = raw.narrow(lse, n + 1, start, start + rows)  # (B, h/T, rows)
    top = be.binary("maximum", l_a, l_b)  # (B, h/T, rows)
    both = be.add(be.exp(be.binary("sub", l_a, top)), be.exp(be.binary("sub", l_b, top)))
    part_lse = be.add(top, be.log(both))  # (B, h/T, rows)
    late = start or rows != be.shape(lse)[-1]  # the late half: the first rows stay as they are
    new = _join(r, raw.narrow(lse, n + 1, 0, start), part_lse, n + 1) if late else part_lse
    op = f"logaddexp(lse, lse{suffix})"
    new = rec.step("lse_merged", new, op, r.ax(lab.heads, lab.tokens))  # (B, h/T, S/C)
    shape = be.shape(part_lse)
    w_a = be.reshape(be.exp(be.binary("sub", l_a, part_lse)), (*shape, 1))  # (B, h/T, rows, 1)
    w_b = be.reshape(be.exp(be.binary("sub", l_b, part_lse)), (*shape, 1))  # (B, h/T, rows, 1)
    merged = be.add(be.mul(o_a, w_a), be.mul(o_b, w_b))  # (B, h/T, rows, d)
    if late:
        merged = _join(r, raw.narrow(context, n + 1, 0, start), merged, n + 1)
    op = f"context·exp(lse - lse') + context{suffix}·exp(lse{suffix} - lse')"
    merged = rec.step("context_merged", merged, op, r.ax(lab.heads, lab.tokens, "d"))
    return merged, new


def _join(r: RankAttention[T], a: T, b: T, axis: int) -> T:
    out = concat(r.raw, [a, b], axis)
    r.rec.meter.inputs.extend((a, b))
    return out


# --- decoding across ranks (--past with --cp) ---


def _decode_across(r: RankAttention[T], q: T, k: T, v: T) -> T:
    """Each rank attends the S new queries to its N/C of the cache (and the last rank to the new
    keys); the partial contexts and log-sum-exps are all-gathered over the C ranks and merged,
    in rank order, into the same context on every rank (FlashDecoding's split of the keys)."""
    lab, n, C = r.lab, r.n, r.layout.cp
    context, lse = _partial(r, q, k, v, r.q_at, r.k_at, lab.tokens, lab.keys, "", guard=True)
    dims = (n + 1, 0)
    every = r.ax(lab.heads, "C·S", "d")
    contexts = r.collective("context_all_gather", "all_gather", context, "cp", every, dims)
    lses = r.collective("lse_all_gather", "all_gather", lse, "cp", every[:-1], dims)
    S = r.raw.shape(q)[n + 1]
    parts = [
        (
            r.raw.narrow(contexts, n + 1, c * S, (c + 1) * S),
            r.raw.narrow(lses, n + 1, c * S, (c + 1) * S),
        )
        for c in range(C)
    ]
    context, lse = parts[0]
    for part in parts[1:]:
        context, lse = _merge(r, context, lse, part, 0, "_rank")
    return context


# --- Ulysses ---


def _ulysses(r: RankAttention[T], q: T, k: T, v: T) -> T:
    """Two all-to-alls around attention on whole sequences (DeepSpeed-Ulysses)."""
    lab, n, C = r.lab, r.n, r.layout.cp
    heads = _heads_label(r)
    kv = r.be.shape(k)[n]
    if kv < C:  # fewer kv-heads than ranks: each rank gets a copy of the one its heads read
        k = r.rec.step(
            "k_rep_a2a",
            r.be.repeat_interleave(k, C // kv, n),
            f"k.repeat_interleave({C // kv})",
            r.ax("C", lab.tokens, "d"),
        )
        v = r.rec.step(
            "v_rep_a2a",
            r.be.repeat_interleave(v, C // kv, n),
            f"v.repeat_interleave({C // kv})",
            r.ax("C", lab.tokens, "d"),
        )
        kv_lab = "1"
    else:
        kv_lab = "g/TC" if r.config.grouped else heads
        if r.layout.tp == 1:
            kv_lab = kv_lab.replace("TC", "C")
    dims = (n, n + 1)  # scatter the heads, gather the sequence
    q = r.collective(
        "q_all_to_all",
        "all_to_all",
        q,
        "cp",
        r.ax(heads, lab.keys if not r.config.cross else "S", "d"),
        dims,
    )
    k = r.collective("k_all_to_all", "all_to_all", k, "cp", r.ax(kv_lab, lab.keys, "d"), dims)
    v = r.collective("v_all_to_all", "all_to_all", v, "cp", r.ax(kv_lab, lab.keys, "d"), dims)
    k, v = _repeat(r, k, v, heads, lab.keys)
    everyone = tuple(run for c in range(C) for run in _q_ranges(r, c))
    weights = _weights(r, q, k, everyone, _all_keys(r), "S", lab.keys)
    context = r.be.matmul(weights, v)  # (B, h/TC, S, d)
    context = r.rec.step("context_full", context, "weights @ v", r.ax(heads, "S", "d"))
    return r.collective(
        "context_all_to_all",
        "all_to_all",
        context,
        "cp",
        r.ax(lab.heads, lab.tokens, "d"),
        (n + 1, n),
    )


def _q_ranges(r: RankAttention[T], c: int) -> Ranges:
    return token_ranges(r.config, r.layout, c)
