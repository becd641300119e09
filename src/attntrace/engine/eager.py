"""Eager attention's (S, N) matrices, made block by block while they are in cache.

For each (batch item, head, block of query rows) one thread of the pool runs the whole chain on
a (Br, N) block: ``s = q @ k_t``, the scale, the soft-cap, the mask, the softmax (written once
into the weights when they are kept) and the block's rows of ``context = weights @ v``, taken
as ``(exp @ v) / sums`` where the backend's softmax splits in two
(:meth:`FastPath.softmax_sums_`): the weights are then never written when nobody reads them. No
(S, N) matrix is ever read again in a pass of its own. The steps before the weights
(``scores``, ``scaled``, ``capped``, ``masked``) are kept as :class:`attntrace.trace.Lazy`
recipes that run the same blocks again up to that step: reading them gives the exact bits the
softmax read. Each block's BLAS runs on one thread (:meth:`FastPath.one_thread_each`), so a
block gives the same bits on any number of threads, now or when a recipe runs later. A backend
with a fused kernel of its own (torch's SDPA, :meth:`FastPath.fused_attention`) makes the
context instead, when every value is proven finite; ``weights`` is then a recipe too, and
:meth:`Rows.make` makes one head of a recipe alone for a view of that head.

>>> from attntrace import AttentionConfig, trace_attention
>>> t = trace_attention(AttentionConfig(seq=300, hidden=64, heads=4))
>>> t["weights"].value.shape, t["scaled"].value.shape
((4, 300, 300), (4, 300, 300))
>>> bool((t["weights"].value == t["weights"].value.max(-1, keepdims=True)).any(-1).all())
True
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Generic, TypeVar

from attntrace.backends.base import fast_path
from attntrace.engine.masks import record_mask
from attntrace.engine.parallel import extremes, in_pool, map_parts, spread

if TYPE_CHECKING:
    import numpy as np

    from attntrace.backends.base import Backend, FastPath
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.engine.masks import MaskPlan
    from attntrace.engine.recorder import Recorder

T = TypeVar("T")

#: The steps of the score chain in order; the soft-cap and the mask only when they are on.
CHAIN: tuple[str, ...] = ("scores", "scaled", "capped", "masked")
#: Bytes of one (Br, N) block of scores: Br is chosen so that a block stays in the caches
#: (2 MiB ran ~5 % faster than 1 MiB at (1, 2048, 1024, 16) on a 2-core EPYC: Br = 256 rows
#: amortise packing k_t better, and the last level cache holds a block per thread).
BLOCK_BYTES = 2 << 20
#: Fewer score elements than this run on the calling thread alone (no pool).
POOL_MIN_NUMEL = 1 << 18
#: The machine epsilon of each dtype: a sum of d products is off by at most d·eps, relative.
EPSILON: dict[str, float] = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
}
#: The largest finite value of each dtype (the bound that proves every score finite).
FINITE_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}

#: ``count(step name, block) -> NaN and ±inf in it`` (the recorder's rule for that step).
Count = Callable[[str, T], int]


@dataclass
class Tally(Generic[T]):
    """Non-finite values per step, counted block by block by ``count`` (the recorder's rule:
    NaN and ±inf, or NaN and +inf in the steps that masking fills with -inf)."""

    count: Count[T]
    found: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, block: T) -> None:
        n = self.count(name, block)
        with self._lock:  # blocks run on several threads
            self.found[name] = self.found.get(name, 0) + n


#: (index of the leading axes, e.g. (b, head), first query row, last query row + 1).
Block = tuple[tuple[int, ...], int, int]


@dataclass(frozen=True)
class Rows(Generic[T]):
    """What every block reads: q (B, h, S, d), k_t (B, h, d, N), v (B, h, N, d), the score
    scale, the soft-cap and the mask (any shape broadcasting to the scores)."""

    be: Backend[T]
    q: T
    k_t: T
    v: T
    factor: float
    cap: float | None = None
    mask: T | None = None
    additive: bool = False  # True: scaled + mask; False: where(mask, scaled, -inf)
    threads: int = 1
    finite: bool = False  # proven: every score, weight and context value is finite
    causal: bool = False  # the mask hides key j > query i (it holds the rule too)
    window: int | None = None  # the mask hides key j <= query i - W
    offset: int = 0  # --past: query i's own key is key i + offset (the mask aligned bottom-right)
    in_range: bool = False  # proven: the softmax needs no row max (FastPath.unshifted_range)

    @cached_property
    def fast(self) -> FastPath[T]:
        """The backend's speed variants, or the same made of its core operations."""
        return fast_path(self.be)

    @property
    def chain(self) -> tuple[str, ...]:
        """The steps of the chain this configuration has, in order."""
        on = {"capped": self.cap is not None, "masked": self.mask is not None}
        return tuple(name for name in CHAIN if on.get(name, True))

    @property
    def shape(self) -> tuple[int, ...]:
        """The scores' shape (B, h, S, N)."""
        q, k_t = self.be.shape(self.q), self.be.shape(self.k_t)
        return (*q[:-1], k_t[-1])

    @property
    def dtype(self) -> str:
        return self.be.dtype(self.q)

    def block_shape(self, block: Block) -> tuple[int, ...]:
        """(1, 1, Br, N): the shape of ``block``'s scores."""
        at, i0, i1 = block
        return (*(1 for _ in at), i1 - i0, self.shape[-1])

    def blocks(self) -> list[Block]:
        """Every (lead index, i0, i1) block of query rows; Br rows keep a block cache-sized."""
        *lead, S, N = self.shape
        size = max(1, min(S, BLOCK_BYTES // max(1, N * _itemsize(self.dtype))))
        starts = range(0, S, size)
        heads = itertools.product(*(range(n) for n in lead))
        return [(at, i0, min(i0 + size, S)) for at in heads for i0 in starts]

    def head(self, at: tuple[int, ...]) -> Head[T]:
        """The views of one lead index ``at`` (batch item, head) that its blocks read."""
        be = self.be
        mask = None if self.mask is None else _pick(be, self.mask, at)
        return Head(_pick(be, self.q, at), _pick(be, self.k_t, at), _pick(be, self.v, at), mask)

    def keys(self, block: Block) -> tuple[int, int]:
        """The keys [j0, j1) that the rules of the mask (causal, window) leave the queries of
        ``block`` (all of them without those rules, or when none is left).

        >>> import numpy as np
        >>> from attntrace.backends import get_backend
        >>> q = np.ones((1, 8, 4), dtype=np.float32)  # (h, S, d)
        >>> be, k_t = get_backend("numpy"), q.swapaxes(-2, -1)
        >>> rows = Rows(be=be, q=q, k_t=k_t, v=q, factor=0.5, causal=True, window=3)
        >>> rows.keys(((0,), 4, 6))  # queries 4 and 5 see keys 2..5
        (2, 6)
        """
        _, i0, i1 = block
        N = self.shape[-1]
        i0, i1 = i0 + self.offset, i1 + self.offset  # the queries' own keys
        j0 = max(0, i0 - self.window + 1) if self.window is not None else 0
        j1 = min(N, i1) if self.causal else N
        return (j0, j1) if j0 < j1 else (0, N)

    def skips(self) -> bool:
        """Whether the run may leave out the keys the rules hide: the mask makes them -inf
        whatever the scores were, no step before it is counted block by block, and the
        backend's product of fewer columns has the bits of the whole's."""
        return (
            self.finite
            and self.mask is not None
            and not self.additive
            and (self.causal or self.window is not None)
            and self.fast.slices_exactly
        )

    def scores(
        self,
        block: Block,
        upto: str,
        tally: Tally[T] | None = None,
        out: T | None = None,
        head: Head[T] | None = None,
        keys: tuple[int, int] | None = None,
    ) -> T:
        """Step ``upto`` of the chain for ``block``: (1, 1, Br, N), in ``out`` or a new buffer
        (or a new one of the soft-cap or a mask); with ``tally``, the non-finite values of
        each step of the chain are counted. ``head``: the views of the block's lead index,
        when the caller already has them. ``keys`` (j0, j1): only those scores are made (the
        others are left as they were, for a mask that hides them)."""
        be, fast, (at, i0, i1) = self.be, self.fast, block
        views = self.head(at) if head is None else head
        # (1, 1, Br, N)
        s = fast.empty(self.block_shape(block), self.dtype) if out is None else out
        if keys is None:
            fast.matmul_into(_rows(be, views.q, i0, i1), views.k_t, s)
        else:
            j0, j1 = keys  # (1, 1, Br, d) @ (1, 1, d, j1 - j0)
            k_t = be.narrow(views.k_t, -1, j0, j1)
            fast.matmul_into(_rows(be, views.q, i0, i1), k_t, be.narrow(s, -1, j0, j1))
        for name in self.chain:
            if name == "scaled":
                s = fast.scale_(s, self.factor)  # (1, 1, Br, N)
            elif name == "capped" and self.cap is not None:
                s = be.scale(be.tanh(be.scale(s, 1.0 / self.cap)), self.cap)  # C·tanh(s / C)
            elif name == "masked" and views.mask is not None:
                s = self._mask(s, _rows(be, views.mask, i0, i1))  # (1, 1, Br, N)
            if tally is not None:
                tally.add(name, s)
            if name == upto:
                break
        return s

    def _mask(self, s: T, mask: T) -> T:
        if self.additive:
            return self.be.binary("add", s, mask, inplace=True)
        return self.be.where(mask, s, -math.inf)

    def run(
        self,
        weights: T | None,
        context: T,
        tally: Tally[T] | None = None,
        held: Mapping[tuple[int, ...], T] | None = None,
    ) -> None:
        """Fill ``context`` (B, h, S, d), and ``weights`` (B, h, S, N) unless None; with
        ``tally``, count the non-finite values of every step (None: proven all finite).
        ``held`` maps lead indices to (S, N) buffers that get the weights of that index alone
        (those of a head that a view will read, when ``weights`` is None)."""
        be, fast, scratch = self.be, self.fast, _Scratch(self.fast, self.be, self.dtype)
        skips = tally is None and self.skips()
        heads: dict[tuple[int, ...], tuple[Head[T], T | None, T]] = {}
        ones = tuple(1 for _ in self.shape[:-2])
        for at in itertools.product(*(range(n) for n in self.shape[:-2])):
            w_at = (
                _pick(be, weights, at)
                if weights is not None
                else be.reshape(held[at], (*ones, *self.shape[-2:]))
                if held and at in held
                else None
            )
            heads[at] = (self.head(at), w_at, _pick(be, context, at))  # w_at: (1, 1, S, N)

        def one(block: Block) -> None:
            at, i0, i1 = block
            views, w_at, c_at = heads[at]
            shape = self.block_shape(block)
            j0, j1 = self.keys(block) if skips else (0, self.shape[-1])
            s = self.scores(
                block,
                self.chain[-1],
                tally,
                scratch.get("s", shape),
                views,
                (j0, j1) if skips else None,
            )  # (1, 1, Br, N)
            c = _rows(be, c_at, i0, i1)  # (1, 1, Br, d), a view of the context
            v = be.narrow(views.v, -2, j0, j1)  # (1, 1, j1 - j0, d)
            sums = fast.softmax_sums_(s, self.in_range)  # (1, 1, Br, 1); s: exp(s - shift)
            seen = w_at is not None or tally is not None  # the weights are kept or counted
            w = (
                s
                if not seen and sums is not None
                else scratch.get("w", shape)
                if w_at is None
                else _rows(be, w_at, i0, i1)
            )
            if sums is None:  # one softmax kernel: context = weights @ v
                fast.softmax_into(s, w, self.in_range)  # (1, 1, Br, N), 0 outside j0..j1
                fast.matmul_into(be.narrow(w, -1, j0, j1), v, c)  # (1, 1, Br, d)
            else:  # context = (exp @ v) / sums: no pass writes weights that nobody reads
                if seen:
                    fast.divide_into(s, sums, w)  # (1, 1, Br, N): the bits of softmax()
                fast.matmul_into(be.narrow(s, -1, j0, j1), v, c)  # (1, 1, Br, d)
                be.binary("div", c, sums, inplace=True)  # (1, 1, Br, d)
            if tally is not None:
                tally.add("weights", w)

        self.each(one)

    def make(self, upto: str, at: tuple[int, ...] | None = None) -> T:
        """The whole step ``upto`` of the chain or ``weights`` (B, h, S, N), made again block
        by block (a Lazy recipe); with ``at``, only the (S, N) of that lead index. Each block
        is written where it belongs: the scores of ``weights`` go through a buffer of the
        thread, reused from block to block."""
        be, fast, lead = self.be, self.fast, self.shape[:-2]
        # (B, h, S, N), or (1, 1, S, N) for one lead index
        out = fast.empty(
            self.shape if at is None else (*(1 for _ in lead), *self.shape[-2:]), self.dtype
        )
        last = self.chain[-1] if upto == "weights" else upto
        scratch = _Scratch(fast, be, self.dtype)
        # the keys that run() leaves out, masked whatever their scores: the bits it read
        skips = upto in ("masked", "weights") and self.skips()

        def one(block: Block) -> None:
            where, i0, i1 = block
            shape = self.block_shape(block)
            keys = self.keys(block) if skips else None
            rows = _pick(be, out, where, (i0, i1))  # (1, 1, Br, N): a view of out
            if upto == "weights":
                s = self.scores(block, last, out=scratch.get("s", shape), keys=keys)
                fast.softmax_into(s, rows, self.in_range)  # (1, 1, Br, N)
                return
            s = self.scores(block, upto, out=rows, keys=keys)  # (1, 1, Br, N)
            if s is not rows:  # the soft-cap and the mask make new buffers
                be.write(rows, -2, 0, s)

        with warnings.catch_warnings():  # NaN and inf are counted, as in trace_attention
            warnings.simplefilter("ignore", RuntimeWarning)
            self.each(one, None if at is None else [b for b in self.blocks() if b[0] == at])
        return out if at is None else be.reshape(out, self.shape[-2:])

    def each(self, fn: Callable[[Block], None], work: list[Block] | None = None) -> None:
        """``fn`` on every block (or those of ``work``): on the pool when the work is large,
        each BLAS call on one thread either way (the bits of a block do not depend on the
        threads)."""
        work = self.blocks() if work is None else work
        numel = len(work) * math.prod(self.block_shape(work[0])) if work else 0
        with self.fast.one_thread_each():
            if self.threads == 1 or in_pool() or numel < POOL_MIN_NUMEL:
                for block in work:
                    fn(block)
            else:
                spread(fn, work, self.threads)  # re-raises the first error of a block


def attend(
    config: AttentionConfig,
    rec: Recorder[T],
    q: T,
    k_t: T,
    v: T,
    *,
    mask: T | None,
    plan: MaskPlan | None,
    ops: Mapping[str, str],
) -> T:
    """The score chain of q (B, h, S, d), k_t (B, h, d, N), v (B, h, N, d): scores -> scaled
    -> (capped) -> (mask, masked) -> weights -> context (B, h, S, d), made block of query rows
    by block (or by the backend's fused kernel), then each step recorded with the cost of the
    whole operation it stands for and ``ops[step]`` as its op. The speed paths live here: the
    bounds that prove every value finite (nothing to count), the fused kernel, remade or held
    weights (``rec.remake``, ``rec.hold``).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=5, hidden=8, heads=2, causal=True))
    >>> [s.name for s in t.steps][10:17]
    ['k_t', 'scores', 'scaled', 'mask', 'masked', 'weights', 'context']
    """
    raw = rec.be
    rows = _rows_of(config, raw, q, k_t, v, mask, plan, rec.threads)
    causal = plan is not None and plan.op == "causal"
    fused = _fused_context(rows, q, raw.transpose(k_t, -2, -1), v, causal)  # (B, h, S, d) or None
    rows = contiguous(rows) if raw.computes and fused is None else rows  # for the blocks
    # held in a buffer the blocks fill; else (fused, or asked to) a recipe, made when read
    kept = rec.keeps("weights") and raw.computes and fused is None and "weights" not in rec.remake
    fast = rows.fast
    # (B, h, S, N)
    weights = fast.empty(rows.shape, rows.dtype) if kept else fast.stand_in(rows.shape, rows.dtype)
    *lead, h, S, d = raw.shape(q)
    # (B, h, S, d), a view of (B, S, h, d): merging the heads afterwards copies nothing
    context = (
        fused
        if fused is not None
        else raw.transpose(fast.empty((*lead, S, h, d), rows.dtype), -3, -2)
    )
    held = _held(rec, rows) if not kept and fused is None else {}  # {at: (S, N)} or {}
    found = _run_rows(rec, rows, weights if kept else None, context, held) if fused is None else {}
    axes = (*rec.lead, "h", "S", config.labels().keys)  # (B, h, S, N)
    last = _record_scores(rec, rows, q, k_t, mask, plan, ops, axes, found)  # (B, h, S, N)
    if kept:  # the buffer the blocks filled
        rec.meter.charge("softmax", last, out=weights)
        weights = rec.step(
            "weights", weights, ops["weights"], axes, nonfinite=found.get("weights", 0)
        )
    else:  # made again by the blocks when read (if kept), as the steps before it
        softmax = [("softmax", (last,))]
        weights = _made(rec, "weights", rows, ops["weights"], axes, softmax, found, held)
    rec.meter.charge("matmul", weights, v, out=context)
    proven = rows.finite and "context" not in rec.replace  # by the bounds (see bounded)
    if proven:  # nothing to count, here or in merged (the same values)
        rec.proven_finite.add("context")
    hSd = (*axes[:-1], "d")  # (B, h, S, d)
    return rec.step("context", context, ops["context"], hSd, nonfinite=0 if proven else None)


def _record_scores(
    rec: Recorder[T],
    rows: Rows[T],
    q: T,
    k_t: T,
    mask: T | None,
    plan: MaskPlan | None,
    ops: Mapping[str, str],
    axes: tuple[str, ...],
    found: Mapping[str, int],
) -> T:
    """Record the steps of the chain before the weights (scores, scaled, capped, mask,
    masked), each charged as the operation on whole tensors it stands for; the last one."""
    last = _made(rec, "scores", rows, ops["scores"], axes, [("matmul", (q, k_t))], found)
    for name in rows.chain[1:]:
        charges: list[tuple[str, tuple[T, ...]]] = [("scale", (last,))]
        if name == "masked" and mask is not None and plan is not None:
            mask = record_mask(rec, mask, plan, rows.shape)  # (B, 1, S, N), or broadcasting
            charges = [("add", (last, mask))] if plan.additive else [("where", (mask, last))]
        elif name == "capped":
            charges = [("scale", (last,)), ("tanh", ()), ("scale", ())]
        last = _made(rec, name, rows, ops[name], axes, charges, found)  # (B, h, S, N)
    return last


def _rows_of(
    config: AttentionConfig,
    be: Backend[T],
    q: T,
    k_t: T,
    v: T,
    mask: T | None,
    plan: MaskPlan | None,
    threads: int,
) -> Rows[T]:
    """What every block reads, with the bounds of :func:`bounded` on a computing backend."""
    rows = Rows(
        be=be,
        q=q,
        k_t=k_t,
        v=v,
        factor=config.score_scale,
        cap=config.softcap,
        mask=mask if plan else None,
        additive=plan is not None and plan.additive,
        threads=threads,
        causal=config.causal,
        window=config.window,
        offset=config.cached,
    )
    return bounded(rows) if be.computes else rows


def _made(
    rec: Recorder[T],
    name: str,
    rows: Rows[T],
    op: str,
    axes: tuple[str, ...],
    charges: Sequence[tuple[str, tuple[T, ...]]],
    found: Mapping[str, int],
    held: Mapping[tuple[int, ...], T] | None = None,
) -> T:
    """Record step ``name`` of the blocked chain: a stand-in of no memory, charged as the
    backend operations ``charges`` on whole tensors would be, its values (when kept) made again
    by the same blocks on first read; the (S, N) parts of ``held`` (filled by the blocks) are
    read as they are."""
    value = rows.fast.stand_in(rows.shape, rows.dtype)  # (B, h, S, N)
    for op_name, args in charges:
        rec.meter.charge(op_name, *args, out=value)
    again = (lambda: rows.make(name)) if rows.be.computes else None
    parts = dict(held or {})

    def part(at: tuple[int, ...]) -> T:
        return parts[at] if at in parts else rows.make(name, at)

    nonfinite = found.get(name, 0)
    return rec.step(name, value, op, axes, again=again, nonfinite=nonfinite, part=part)


def _held(rec: Recorder[T], rows: Rows[T]) -> dict[tuple[int, ...], T]:
    """An (S, N) buffer for the weights of the lead index ``rec.hold`` when they are remade
    (not kept whole) on a computing backend: the blocks of that head write their weights there,
    so a view of that head reads them without making them again."""
    if (
        rec.hold is None
        or "weights" not in rec.remake
        or not rec.keeps("weights")
        or not rows.be.computes
    ):
        return {}
    return {rec.hold: rows.fast.empty(rows.shape[-2:], rows.dtype)}  # (S, N)


def _fused_context(rows: Rows[T], q: T, k: T, v: T, causal: bool = False) -> T | None:
    """The context of q (B, h, S, d), k, v (B, h, N, d) as recorded, by the backend's fused
    kernel (torch's SDPA: the bits a user gets calling it on these tensors), when the chain has
    nothing it lacks (no soft-cap) and every value is proven finite (nothing to count block by
    block); else None. The (S, N) steps are then recipes, weights too. ``causal``: the mask
    is the causal rule alone."""
    if not rows.be.computes or not rows.finite or rows.cap is not None:
        return None
    return rows.fast.fused_attention(q, k, v, rows.factor, rows.mask, rows.additive, causal)


def _run_rows(
    rec: Recorder[T],
    rows: Rows[T],
    weights: T | None,
    context: T,
    held: Mapping[tuple[int, ...], T],
) -> dict[str, int]:
    """Compute the blocks (on a computing backend); the non-finite values of each step of the
    chain: none when bounds on q, k, v prove every value finite, else counted block by block.
    ``held``: (S, N) buffers for the weights of some lead indices (see :func:`_held`)."""
    if not rows.be.computes:
        return {}
    tally = None if rows.finite else Tally(rec.nonfinite)
    rows.run(weights, context, tally, held)
    return tally.found if tally is not None else {}


@dataclass(frozen=True)
class Head(Generic[T]):
    """What the blocks of one lead index (batch item, head) read: q (1, 1, S, d), k_t
    (1, 1, d, N), v (1, 1, N, d) and the mask's rows for it (or None)."""

    q: T
    k_t: T
    v: T
    mask: T | None


def _rows(be: Backend[T], x: T, i0: int, i1: int) -> T:
    """Query rows i0..i1 of ``x`` (·, S, ·); an axis of size 1 (a broadcast mask's) stays."""
    shape = be.shape(x)
    return x if len(shape) < 2 or shape[-2] == 1 else be.narrow(x, -2, i0, i1)


class _Scratch(Generic[T]):
    """Buffers of each thread, reused from block to block: a new buffer per block would be
    new memory to map (page faults) every time."""

    def __init__(self, fast: FastPath[T], be: Backend[T], dtype: str) -> None:
        self.fast, self.be, self.dtype, self._local = fast, be, dtype, threading.local()

    def get(self, key: str, shape: tuple[int, ...]) -> T:
        """A buffer of ``shape`` (fewer rows than the first request: a view of its first rows)."""
        have = getattr(self._local, key, None)
        if have is None or self.be.shape(have)[-2] < shape[-2]:
            have = self.fast.empty(shape, self.dtype)
            setattr(self._local, key, have)
        return self.be.narrow(have, -2, 0, shape[-2])


def _pick(be: Backend[T], x: T, at: tuple[int, ...], rows: tuple[int, int] | None = None) -> T:
    """The (1, 1, Br, ·) part of ``x`` (B, h, S, ·) for lead index ``at`` and query ``rows``;
    an axis of size 1 (a broadcast mask's) or missing stays whole."""
    shape = be.shape(x)
    off = len(shape) - (len(at) + 2)  # a mask may have fewer axes than the scores
    for axis, i in enumerate(at):
        if axis + off >= 0 and shape[axis + off] != 1:
            x = be.narrow(x, axis + off, i, i + 1)
    if rows is not None and len(shape) >= 2 and shape[-2] != 1:
        x = be.narrow(x, -2, *rows)
    return x


def _itemsize(dtype: str) -> int:
    from attntrace.config.attention_config import ELEMENT_BYTES

    return ELEMENT_BYTES[dtype]


def bounded(rows: Rows[T]) -> Rows[T]:
    """``rows`` with ``finite`` set when bounds on q, k and v prove every score, weight and
    context value finite: |q_i · k_j| <= max ||q_i|| · max ||k_j|| (Cauchy–Schwarz; half the
    largest finite value leaves room for rounding), each softmax row of finite scores lies in
    [0, 1], so |context| <= max|v|. Otherwise (or with a float mask, which adds values of its
    own) they are counted block by block. ``in_range`` is set too when the same bound (or the
    soft-cap) keeps every score the softmax reads within the backend's
    :meth:`~attntrace.backends.base.FastPath.unshifted_range`: its row max is not needed.

    >>> import numpy as np
    >>> from attntrace.backends import get_backend
    >>> q = np.ones((2, 3, 4), dtype=np.float32)  # (h, S, d)
    >>> be, k_t = get_backend("numpy"), q.swapaxes(-2, -1)
    >>> rows = bounded(Rows(be=be, q=q, k_t=k_t, v=q, factor=0.5))
    >>> rows.finite, rows.in_range
    (True, True)
    >>> bounded(Rows(be=be, q=q * 1e19, k_t=k_t * 1e19, v=q, factor=0.5)).finite
    False
    """
    be = rows.be
    pooled = be.pools_checks
    # max ||q_i|| over rows i, max ||k_j|| over columns j, max |v|
    q_top = _largest_norm(be.to_numpy(rows.q), "...i,...i->...", -1, pooled)
    k_top = _largest_norm(be.to_numpy(rows.k_t), "...ij,...ij->...j", -2, pooled)
    v_top = _largest(be.to_numpy(rows.v), pooled)
    limit = FINITE_MAX[rows.dtype] / 2
    d = be.shape(rows.q)[-1]
    slack = 1 + 2 * (d + 2) * EPSILON[rows.dtype]  # the rounding of the scores and of the norms
    scores = q_top * k_top * slack  # NaN or inf when q or k holds one: not proven
    finite = not rows.additive and bool(
        scores < limit and scores * rows.factor < limit and v_top < limit
    )
    reach = (
        scores * rows.factor if rows.cap is None else min(scores * rows.factor, rows.cap * slack)
    )  # |C·tanh(s / C)| <= C
    in_range = finite and reach <= rows.fast.unshifted_range(rows.dtype, rows.shape[-1])
    return replace(rows, finite=finite, in_range=in_range)


def contiguous(rows: Rows[T]) -> Rows[T]:
    """``rows`` with k_t as a row-major (d, N) copy per head: ``(Br, d) @ (d, N)`` runs ~10 %
    faster in OpenBLAS than on a transposed (N, d), and ~20 % faster than on a strided head of
    the projection. q and v stay views of their heads (strided rows cost OpenBLAS nothing
    measurable as (Br, d) and < 5 % as (N, d): less than copying them)."""
    be = rows.be
    # (B, h, d, N), from k (B, h, N, d): rows of the projection
    return replace(rows, k_t=rows.fast.transposed_copy(be.transpose(rows.k_t, -2, -1)))


def _largest(a: np.ndarray | None, pooled: bool = True) -> float:
    """The largest |a|: NaN when ``a`` holds one, 0 when it is empty (``pooled``: see
    :func:`~attntrace.engine.parallel.map_parts`)."""
    if a is None or a.size == 0:
        return 0.0
    import numpy as np

    found = np.array(map_parts(extremes, a, pooled=pooled))  # (parts, 2): max and min of each
    return float(np.max([found[:, 0].max(), -found[:, 1].min()]))  # NaN wins, as in np.max


def _largest_norm(a: np.ndarray | None, squares: str, summed: int, pooled: bool = True) -> float:
    """The largest Euclidean norm of the vectors of ``a`` that the einsum ``squares`` sums the
    squares of (at least float32) along axis ``summed``: NaN when ``a`` holds one, inf when a
    square overflows, 0 when ``a`` is empty (``pooled``: see
    :func:`~attntrace.engine.parallel.map_parts`)."""
    if a is None or a.size == 0:
        return 0.0
    import numpy as np

    wide = np.promote_types(a.dtype, np.float32)

    def largest_square(part: np.ndarray) -> float:
        return float(np.einsum(squares, part, part, dtype=wide).max())

    return float(np.sqrt(np.max(map_parts(largest_square, a, keep=(summed,), pooled=pooled))))
