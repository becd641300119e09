"""The tiled attention of FlashAttention: the (S, N) score matrix never exists.

For each query block of Br rows, the key/value blocks of Bc rows are visited in turn; an online
softmax keeps, per query row, the running maximum ``m`` and the running sum ``l`` of
``exp(score - m)``, and rescales the partial output when ``m`` grows::

    m_new = max(m, rowmax(s))          alpha = exp(m - m_new)
    p     = exp(s - m_new)             l     = alpha * l + rowsum(p)
    o     = alpha * o + p @ v_block    ...   context_block = o / l

Masks (causal, key padding, --window, a --mask file) are applied inside each tile: the tile's
mask (``mask_tile``, made from the rules and a slice of the --mask file; the whole ``mask`` step
is never formed) turns masked scores into -inf (or is added, for a float mask) before the row max
(``s_masked``). ``m`` starts at the dtype's lowest finite
value instead of -inf and ``l`` at 1, as if each row had a phantom key of that score and a zero
value: a row whose keys so far are all masked computes ``exp(-inf - lowest) = 0``, never
``exp(-inf - -inf) = NaN``; the first real key makes the phantom's weight
``alpha = exp(lowest - m)`` exactly 0 (unmasked rows are unchanged); a row that never sees a key
ends as ``o / l = 0 / 1 = 0``, as eager and torch's SDPA give it.
With --causal, tiles whose keys all lie after their last query are skipped; with --window W,
tiles whose keys all lie W or more before their first query (the op of ``s_tile`` says how many).

Each tile step is recorded once, with its shape for a full tile, ``repeat`` = number of tiles
and FLOPs summed over every tile (a last block that does not divide S is smaller). Backends
that do not compute (shape) visit one tile per distinct size, weighted by its count, so a
trace at S = 131072 takes a handful of steps; backends that compute record the first tile and
take the totals from that shape trace, so that the other tiles run without bookkeeping.
"""

from __future__ import annotations

import copy
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from attntrace.config.attention_config import AttentionConfig
from attntrace.engine.masks import declare_mask
from attntrace.engine.relative import bias_op, pair_tile, position_bias

if TYPE_CHECKING:
    from attntrace.backends.base import Backend, Source
    from attntrace.engine.masks import MaskPlan
    from attntrace.engine.recorder import Recorder

T = TypeVar("T")

#: Steps of the tiled algorithm, in the order of one tile (after x ... v of the eager chain).
FLASH_STEPS: tuple[str, ...] = (
    "context",
    "q_block",
    "q_scaled",
    "k_block",
    "v_block",
    "k_block_t",
    "s_tile",
    "m",
    "p_tile",
    "alpha",
    "l",
    "o_acc",
    "o_block",
)
#: Steps a mask adds to each tile, after ``s_tile`` (the whole ``mask`` step comes before
#: ``context``).
FLASH_MASK_STEPS: tuple[str, ...] = ("mask_tile", "s_masked")
#: Steps --softcap and --relative-bias add to each tile, in this order after ``s_tile`` (before
#: the mask's), as eager's ``capped``, ``position_bias`` and ``biased``.
FLASH_VARIANT_STEPS: tuple[str, ...] = ("s_capped", "bias_tile", "s_biased")
#: Every step a tile may record.
TILE_STEPS: tuple[str, ...] = (*FLASH_STEPS, *FLASH_VARIANT_STEPS, *FLASH_MASK_STEPS)

#: The most negative finite value of each dtype: the start of the running max ``m``.
LOWEST: dict[str, float] = {
    "float16": -65504.0,
    "bfloat16": -3.3895313892515355e38,
    "float32": -3.4028234663852886e38,
    "float64": -1.7976931348623157e308,
}

#: A block of rows: (start, stop, how many blocks of this size it stands for).
Block = tuple[int, int, int]


def blocks(n: int, size: int, every: bool = True) -> Iterator[Block]:
    """``(start, stop, times)`` of the blocks of ``size`` covering ``range(n)``; with
    ``every=False`` one block per distinct size, ``times`` saying how many there are.

    >>> list(blocks(5, 2))
    [(0, 2, 1), (2, 4, 1), (4, 5, 1)]
    >>> list(blocks(5, 2, every=False))
    [(0, 2, 2), (4, 5, 1)]
    """
    full = n // size
    if every:
        yield from ((i, min(i + size, n), 1) for i in range(0, n, size))
        return
    if full:
        yield 0, size, full
    if n % size:
        yield full * size, n, 1


@dataclass(frozen=True)
class Band:
    """Which key blocks a query block visits: all of them, but with ``causal`` none whose keys
    all come after the block's last query, and with ``window`` W none whose keys all lie W or
    more before its first query (query i sees keys j > i - W)."""

    rows: int  # Br
    cols: int  # Bc
    causal: bool = False
    window: int | None = None

    def visits(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """Whether the tile of query rows i0:i1 and keys j0:j1 holds a key some query sees."""
        w = self.window
        return (not self.causal or j0 <= i1 - 1) and (w is None or j1 - 1 > i0 - w)

    def count(self, rows: Block, cols: Block) -> int:
        """The tiles visited among ``rows[2]`` query blocks from ``rows[:2]`` on (each ``rows[0]``
        later by Br) and ``cols[2]`` key blocks from ``cols[:2]`` on, in closed form.

        >>> band = Band(2, 3, causal=True, window=2)
        >>> band.count((0, 2, 6), (0, 3, 4)) == sum(band.visits(2 * b, 2 * b + 2, 3 * c, 3 * c + 3)
        ...                                         for b in range(6) for c in range(4))
        True
        """
        (i0, i1, times), (j0, j1, n) = rows, cols
        # visited key blocks c of query block b: lo(b) <= c < hi(b), both floor-linear in b
        seen = (
            n * times
            if not self.causal
            else _clamped_floor_sum(times, self.rows, i1 - 1 - j0 + self.cols, self.cols, n)
        )
        if self.window is None:
            return seen
        return seen - _clamped_floor_sum(
            times, self.rows, i0 - self.window - j1 + 1 + self.cols, self.cols, n
        )


def tiles(
    seq: int,
    keys: int,
    size: int,
    *,
    causal: bool = False,
    every: bool = True,
    key_size: int | None = None,
    window: int | None = None,
    offset: int = 0,
) -> Iterator[tuple[Block, list[Block]]]:
    """Each query block (``size`` rows) with the key/value blocks (``key_size`` rows, default
    ``size``) it visits (see :class:`Band`), ``times`` of a key block being the number of tiles
    it stands for.

    >>> [(q[:2], [kv[:2] for kv in visited]) for q, visited in tiles(5, 5, 2, causal=True)]
    [((0, 2), [(0, 2)]), ((2, 4), [(0, 2), (2, 4)]), ((4, 5), [(0, 2), (2, 4), (4, 5)])]
    >>> [(q, kv) for q, kv in tiles(5, 5, 2, causal=True, every=False)]
    [((0, 2, 2), [(0, 2, 3)]), ((4, 5, 1), [(0, 2, 2), (4, 5, 1)])]
    >>> [(q[:2], [kv[:2] for kv in visited]) for q, visited in tiles(5, 5, 2, window=2)][2]
    ((4, 5), [(2, 4), (4, 5)])
    """
    band = Band(size, key_size or size, causal, window)
    kv_blocks = list(blocks(keys, band.cols, every))
    for rows in blocks(seq, size, every):
        i0, i1, times = rows
        # --past: the band of query i is that of key i + offset (aligned bottom-right)
        at = (i0 + offset, i1 + offset, times)
        counts = [
            (
                j0,
                j1,
                band.count(at, (j0, j1, n)) if not every else int(band.visits(*at[:2], j0, j1)),
            )
            for j0, j1, n in kv_blocks
        ]
        yield rows, [(j0, j1, n) for j0, j1, n in counts if n]


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum((a * i + b) // m for i in range(n))`` for a, b >= 0, m >= 1, in O(log) steps.

    >>> _floor_sum(7, 3, 5, 2) == sum((5 * i + 2) // 3 for i in range(7))
    True
    """
    total = 0
    while n > 0:
        total += (n - 1) * n // 2 * (a // m) + n * (b // m)
        a, b = a % m, b % m
        top = a * n + b
        if top < m:
            break
        n, b, m, a = top // m, top % m, a, m
    return total


def _clamped_floor_sum(n: int, a: int, c: int, m: int, top: int) -> int:
    """``sum(min(top, max(0, (a * i + c) // m)) for i in range(n))`` for a, m >= 1, top >= 0,
    in closed form, so a shape trace costs the same at any S and tile size.

    >>> want = sum(min(3, max(0, (2 * i - 5) // 3)) for i in range(9))
    >>> _clamped_floor_sum(9, 2, -5, 3, 3) == want
    True
    """

    def first(value: int) -> int:  # the first i >= 0 with (a * i + c) // m >= value, at most n
        return min(n, max(0, -(-(value * m - c) // a)))

    start, stop = first(1), first(top)  # below start: <= 0; from stop on: >= top
    ramp = _floor_sum(stop - start, m, a, a * start + c) if stop > start else 0
    return ramp + top * (n - stop)


def skipped_tiles(config: AttentionConfig) -> int:
    """Tiles flash skips because --causal or --window masks every key in them.

    >>> skipped_tiles(AttentionConfig(seq=5, causal=True, algorithm="flash", block_size=2))
    3
    >>> skipped_tiles(AttentionConfig(seq=8, window=2, algorithm="flash", block_size=2))
    3
    """
    if not config.causal and config.window is None:
        return 0
    rows, cols = config.blocks
    total = math.ceil(config.seq / rows) * math.ceil(config.keys / cols)
    plan = tiles(
        config.seq,
        config.keys,
        rows,
        causal=config.causal,
        every=False,
        key_size=cols,
        window=config.window,
        offset=config.cached,
    )
    return total - sum(n for _, visited in plan for *_, n in visited)


def _skipped_op(config: AttentionConfig) -> str:
    """What ``s_tile``'s op adds about the skipped tiles."""
    skipped = skipped_tiles(config)
    if not skipped:
        return ""
    where = {(True, False): "above the diagonal", (False, True): "outside the window"}.get(
        (config.causal, config.window is not None), "above the diagonal or outside the window"
    )
    return f" ({skipped} tiles {where} skipped)"


class _Steps(Protocol[T]):
    """What a tile records its steps with: the recorder, or :class:`_Quiet`."""

    lead: tuple[str, ...]

    def step(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T: ...

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T: ...


class _Quiet(Generic[T]):
    """Stands in for the recorder on every tile after the first of a computing backend: nothing is
    recorded (the shape trace holds the totals); non-finite values are counted only when
    ``count`` (when the bound of :func:`_surely_finite` does not rule them out)."""

    def __init__(self, rec: Recorder[T], count: bool, register: bool = False) -> None:
        self.lead, self.rec, self.count = rec.lead, rec, count
        self.register = register  # name the values, as inputs of the recorded o_block
        self.bad: Counter[str] = Counter()
        self._lock = threading.Lock()

    def step(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T:
        if self.count:
            bad = self.rec.nonfinite(name, value)  # the recorder's rule
            with self._lock:
                self.bad[name] += bad
        if self.register:
            self.rec.registry.add(value, name, axes)
        return value

    def registering(self) -> _Quiet[T]:
        """The same counts, naming the values."""
        twin = copy.copy(self)
        twin.register = True
        return twin

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T:
        return value


@dataclass
class _Flash(Generic[T]):
    """What every tile needs: the backend, the recorder, q (scaled per block), k, v, the mask."""

    be: Backend[T]
    rec: _Steps[T]
    q: T
    k: T
    v: T
    factor: float  # the score scale, folded into each query block
    scale_op: str  # how the trace writes it
    s_op: str  # how the trace writes s_tile
    inplace: bool  # reuse tile buffers (only when no tile value is kept)
    plan: MaskPlan | None = None  # the mask's rules: each tile's mask is made from them
    cap: float | None = None  # --softcap C
    # T5's rel_bias (buckets, h) or ALiBi's slopes (h, 1, 1), with ``onehot`` a tile's buckets
    # (or distances)
    table: T | None = None
    onehot: Callable[[int, int, int, int], Source] | None = field(default=None, repr=False)
    alibi: bool = False  # --alibi: ``table`` holds the slopes
    bias_op: str = ""  # how the trace writes bias_tile
    rest: _Flash[T] | None = field(default=None, repr=False)  # for the tiles after the first
    stats: tuple[T, T] | None = field(default=None, repr=False)  # (B, h, S) m and l, for lse

    def ax(self, *letters: str) -> tuple[str, ...]:
        return (*self.rec.lead, "h", *letters)

    def col(self, x: T) -> T:
        """``x[..., None]``: a row statistic (B, h, Br) as a column (B, h, Br, 1) to broadcast."""
        return self.be.reshape(x, (*self.be.shape(x), 1))

    @property
    def then(self) -> _Flash[T]:
        """The context of the next tile: ``rest``, or this one."""
        return self.rest or self


def flash_context(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    q: T,
    k: T,
    v: T,
    plan: MaskPlan | None = None,
    table: T | None = None,
    lse: bool = False,
) -> T:
    """context (B, h, S, d) from q (B, h, S, d), k, v (B, h, N, d), query block by query block;
    the mask of ``plan`` is made and applied tile by tile (never whole), as are --softcap and
    a position bias (``table``: T5's rel_bias (buckets, h), or ALiBi's slopes (h, 1, 1)).
    ``lse`` (--backward): each block's final row max and sum are kept and the step ``lse`` =
    m + log(l) (B, h, S) follows, what the backward recomputes the weights from
    (:func:`attntrace.engine.backward.flash_core`).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> cfg = AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash", block_size=128)
    >>> t = trace_attention(cfg)
    >>> t["s_tile"].shape, t["s_tile"].repeat, t["m"].shape
    ((4, 128, 128), 9, (4, 128))
    >>> t["s_tile"].flops == 2 * 4 * 300 * 300 * 16
    True
    >>> t = trace_attention(AttentionConfig(**{**cfg.__dict__, "causal": True}))
    >>> t["mask_tile"].shape, t["s_masked"].repeat, t["s_tile"].op
    ((128, 128), 6, 'q_scaled @ k_block_t (3 tiles above the diagonal skipped)')
    """
    d, scale = config.head_dim, config.scale
    scale_op = f"q_block / sqrt({d})" if scale is None else f"q_block * {scale:g}"
    keeps = any(rec.keeps(n) for n in TILE_STEPS)
    s_op = "q_scaled @ k_block_t" + _skipped_op(config)
    f = _Flash(
        be=be,
        rec=rec,
        q=q,
        k=k,
        v=v,
        factor=config.score_scale,
        scale_op=scale_op,
        s_op=s_op,
        inplace=not keeps,
        plan=plan,
        cap=config.softcap,
        table=table,
        onehot=_onehot(config),
        alibi=config.alibi,
        bias_op=bias_op(config) if config.position_biased else "",
    )
    if plan is not None:  # (B, 1, S, N), made tile by tile
        declare_mask(rec, plan, (*be.shape(q)[:-1], config.keys), config.blocks[0])
    *lead, h, S = be.shape(q)[:-1]
    # (B, h, S, d), a view of (B, S, h, d): merging the heads afterwards copies nothing
    zeros = be.transpose(be.full((*lead, S, h, d), 0.0, be.dtype(q)), -3, -2)
    out = rec.step("context", zeros, "zeros(B, h, S, d), filled by o_block", f.ax("S", "d"))
    if lse:  # (B, h, S) each: the row max and sum of every query block, written by its block
        f.stats = (
            be.full((*lead, h, S), 0.0, be.dtype(q)),
            be.full((*lead, h, S), 1.0, be.dtype(q)),
        )
    rows, cols = config.blocks
    work = list(
        tiles(
            be.shape(q)[-2],
            be.shape(k)[-2],
            rows,
            causal=config.causal,
            every=be.computes,
            key_size=cols,
            window=config.window,
            offset=config.cached,
        )
    )
    if not be.computes:  # the shape backend: every distinct tile recorded, weighted by its count
        for block in work:
            _run(f, out, block)
        _lse(f)
        return out
    quiet = _Quiet(rec, count=not _surely_finite(config, rec.be, (q, k, v, table), plan))
    plain = rec.be  # no meter: the totals come from the shape trace
    # the first block's other tiles: values kept as asked, named as inputs of o_block
    f.rest = replace(f, be=plain, rec=quiet.registering())
    others = replace(f, be=plain, rec=quiet, inplace=True, rest=None)
    first = work[0]  # records every tile step, in order; the other blocks repeat them quietly

    def run(block: tuple[Block, list[Block]]) -> None:
        _run(f if block is first else others, out, block)

    with rec.fast.one_thread_each():  # many small matmuls: threads split blocks, not matmuls
        # the first block, then the longest (the last ones, with --causal): all on the pool
        _run_blocks(rec.threads, run, [first, *work[:0:-1]])
    rec.settle(_tile_steps(rec), quiet.bad)
    rec.refresh("context", out)
    _lse(f)
    return out


def _lse(f: _Flash[T]) -> None:
    """The step ``lse`` (B, h, S) = m + log(l) from the rows every block kept, when asked."""
    if f.stats is None:
        return
    m, l = f.stats  # (B, h, S) each
    lse = f.be.add(m, f.be.log(l))  # (B, h, S)
    op = "m + log(l) (each query block's final row max and sum; kept for the backward)"
    f.rec.step("lse", lse, op, f.ax("S"))


def _onehot(config: AttentionConfig) -> Callable[[int, int, int, int], Source] | None:
    """The per-pair tile of a position bias: T5's buckets' one-hot (--relative-bias) or ALiBi's
    distances (--alibi); None without one."""
    if not config.position_biased:
        return None
    return pair_tile(config)


def _tile_steps(rec: Recorder[Any]) -> tuple[str, ...]:
    """The steps flash records once per tile or block (all of them but ``context``)."""
    return tuple(n for n in TILE_STEPS if n != "context" and rec.has(n))


def _surely_finite(
    config: AttentionConfig, be: Backend[T], tensors: tuple[T | None, ...], plan: MaskPlan | None
) -> bool:
    """Whether no tile step can hold NaN or inf, by a bound on ``tensors`` = q, k, v and T5's
    table (or None): all finite, no score beyond a quarter of the dtype's range
    (|s| <= d * max|q| * scale * max|k| + max|table|), nor the output sum
    (|o| <= (N + 1) * max|v|); a float --mask file is not bounded (its tiles are counted)."""
    if plan is not None and plan.additive:
        return False
    arrays = [be.to_numpy(t) if t is not None else None for t in tensors]
    if any(a is None for a in arrays[:3]):
        return False
    tops = [
        max(float(a.max()), -float(a.min())) if a is not None and a.size else 0.0 for a in arrays
    ]  # NaN or inf when the array holds one
    if not all(math.isfinite(t) for t in tops):
        return False
    limit = -LOWEST[config.dtype] / 4
    q_top, k_top, v_top, *table = tops
    far = config.keys if config.alibi else 1  # ALiBi: a slope times a distance below N
    score = config.head_dim * q_top * config.score_scale * k_top + sum(table) * far
    return score < limit and (config.keys + 1) * max(v_top, 1.0) < limit


def _run(f: _Flash[T], out: T, block: tuple[Block, list[Block]]) -> None:
    """One query block: its rows of the context written into ``out`` (B, h, S, d)."""
    (i0, i1, times), visited = block
    be, rec = f.be, f.rec
    q_block = be.narrow(f.q, -2, i0, i1)  # (B, h, Br, d)
    q_block = rec.view("q_block", q_block, "q[..., i:i+Br, :]", f.ax("Br", "d"), times=times)
    o_block = _query_block(f, q_block, (i0, i1), visited, times)  # (B, h, Br, d)
    be.write(out, -2, i0, o_block)  # out[..., i0:i1, :] = o_block


def _run_blocks(threads: int, run: Callable[[Any], None], work: list[Any]) -> None:
    """``run`` each item of ``work``, on ``threads`` threads."""
    if threads == 1 or len(work) < 2:
        for item in work:
            run(item)
        return
    from attntrace.engine.parallel import spread

    spread(run, work, threads)  # re-raises the first error of a block


def _query_block(f: _Flash[T], q_block: T, rows: tuple[int, int], kv: list[Block], times: int) -> T:
    """The output rows of one query block: visit its key/value blocks with the online softmax."""
    be, rec = f.be, f.rec
    q_scaled = be.scale(q_block, f.factor)  # (B, h, Br, d)
    q_scaled = rec.step("q_scaled", q_scaled, f.scale_op, f.ax("Br", "d"), times=times)
    shape, dtype = be.shape(q_block), be.dtype(q_block)
    # a phantom key of score LOWEST (finite) and value 0 per row: no NaN when every key is masked
    m = be.full(shape[:-1], LOWEST[dtype], dtype)  # (B, h, Br) running row max
    l = be.full(shape[:-1], 1.0, dtype)  # (B, h, Br) running sum of exp(s - m), the phantom's 1
    o = be.full(shape, 0.0, dtype)  # (B, h, Br, d) unnormalised output
    tile = f
    for j0, j1, n in kv:
        m, l, o = _tile(tile, q_scaled, (m, l, o), (*rows, j0, j1), n)
        tile = tile.then
    if f.stats is not None:  # --backward: this block's rows of m and l (B, h, Br)
        be.write(f.stats[0], -1, rows[0], m)
        be.write(f.stats[1], -1, rows[0], l)
    o_block = be.binary("div", o, f.col(l), inplace=tile.inplace)  # (B, h, Br, d)
    return rec.step("o_block", o_block, "o_acc / l[..., None]", f.ax("Br", "d"), times=times)


def _tile(
    f: _Flash[T], q_scaled: T, state: tuple[T, T, T], box: tuple[int, int, int, int], times: int
) -> tuple[T, T, T]:
    """One (Br, Bc) tile: scores (masked), the new row max, probabilities, rescaled sum and
    output."""
    be, rec, ip = f.be, f.rec, f.inplace
    m_old, l_old, o_old = state  # (B, h, Br), (B, h, Br), (B, h, Br, d)
    j0, j1 = box[2:]
    k_block = be.narrow(f.k, -2, j0, j1)  # (B, h, Bc, d)
    k_block = rec.view("k_block", k_block, "k[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)
    v_block = be.narrow(f.v, -2, j0, j1)  # (B, h, Bc, d)
    v_block = rec.view("v_block", v_block, "v[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)
    k_block_t = be.transpose(k_block, -2, -1)  # (B, h, d, Bc)
    k_block_t = rec.view(
        "k_block_t", k_block_t, "k_block.transpose(-2, -1)", f.ax("d", "Bc"), times=times
    )
    s = be.matmul(q_scaled, k_block_t)  # (B, h, Br, Bc)
    s = rec.step("s_tile", s, f.s_op, f.ax("Br", "Bc"), times=times)
    s_name = "s_tile"
    if f.cap is not None:
        s, s_name = _capped(f, s, f.cap, times), "s_capped"  # (B, h, Br, Bc)
    if f.onehot is not None:
        s, s_name = _biased(f, s, s_name, box, times), "s_biased"  # (B, h, Br, Bc)
    if f.plan is not None:
        s, s_name = _mask_tile(f, s, s_name, box, times), "s_masked"  # (B, h, Br, Bc), -inf masked
    m = be.binary("maximum", m_old, be.reduce_max(s))  # (B, h, Br)
    m = rec.step("m", m, f"maximum(m, {s_name}.max(-1))", f.ax("Br"), times=times)
    p = be.exp(be.binary("sub", s, f.col(m), inplace=ip), inplace=True)  # (B, h, Br, Bc)
    p = rec.step("p_tile", p, f"exp({s_name} - m[..., None])", f.ax("Br", "Bc"), times=times)
    alpha = be.exp(be.binary("sub", m_old, m), inplace=True)  # (B, h, Br)
    alpha = rec.step("alpha", alpha, "exp(m_old - m)", f.ax("Br"), times=times)
    l = be.binary("mul", alpha, l_old)  # (B, h, Br)
    l = be.binary("add", l, be.reduce_sum(p), inplace=True)  # (B, h, Br)
    l = rec.step("l", l, "alpha * l + p_tile.sum(-1)", f.ax("Br"), times=times)
    pv = be.matmul(p, v_block)  # (B, h, Br, d)
    o = be.binary("mul", o_old, f.col(alpha), inplace=ip)  # (B, h, Br, d)
    o = be.binary("add", o, pv, inplace=True)  # (B, h, Br, d)
    o = rec.step(
        "o_acc", o, "alpha[..., None] * o_acc + p_tile @ v_block", f.ax("Br", "d"), times=times
    )
    return m, l, o


def _mask_tile(f: _Flash[T], s: T, s_name: str, box: tuple[int, int, int, int], times: int) -> T:
    """The tile's slice of the mask (rows i0:i1, keys j0:j1 where the mask is not broadcast),
    applied to the tile scores: -inf where a bool mask is False, or the float mask added."""
    be, rec, plan = f.be, f.rec, f.plan
    assert plan is not None  # a bug, not user input
    axes = list(plan.axes)  # (B, 1, S, N) or any shape broadcasting to the scores
    for axis, letter in ((-2, "Br"), (-1, "Bc")):
        if len(axes) >= -axis and axes[axis] != "1":
            axes[axis] = letter
    tile = be.tensor(plan.tile(*box))  # (B, 1, Br, Bc), from the rules
    op = "mask[..., i:i+Br, j:j+Bc], from the rules"
    tile = rec.step("mask_tile", tile, op, tuple(axes), times=times)
    if plan.additive:
        added = be.binary("add", s, tile, inplace=f.inplace)  # (B, h, Br, Bc)
        return rec.step("s_masked", added, f"{s_name} + mask_tile", f.ax("Br", "Bc"), times=times)
    kept = be.where(tile, s, -math.inf, inplace=f.inplace)  # (B, h, Br, Bc)
    return rec.step(
        "s_masked", kept, f"where(mask_tile, {s_name}, -inf)", f.ax("Br", "Bc"), times=times
    )


def _capped(f: _Flash[T], s: T, cap: float, times: int) -> T:
    """Logit soft-capping (Gemma 2) of the tile: C * tanh(s_tile / C), before the mask."""
    be = f.be
    capped = be.scale(be.tanh(be.scale(s, 1.0 / cap)), cap)  # (B, h, Br, Bc)
    op = f"{cap:g} * tanh(s_tile / {cap:g})"
    return f.rec.step("s_capped", capped, op, f.ax("Br", "Bc"), times=times)


def _biased(f: _Flash[T], s: T, s_name: str, box: tuple[int, int, int, int], times: int) -> T:
    """The position bias of the tile (T5's table's row of each (query, key) bucket, or ALiBi's
    slope times the distance), its per-pair input made from the rule for the tile's rows and
    keys, added to the tile scores."""
    be, rec = f.be, f.rec
    assert f.onehot is not None  # a bug, not user input
    assert f.table is not None
    # (Br, Bc, buckets) or (Br, Bc), inputs as eager's rel_onehot and alibi_distance
    pairs = be.tensor(f.onehot(*box))
    bias = position_bias(be, pairs, f.table, f.alibi)  # (h, Br, Bc)
    bias = rec.step("bias_tile", bias, f.bias_op, ("h", "Br", "Bc"), times=times)
    biased = be.binary("add", s, bias, inplace=f.inplace)  # (B, h, Br, Bc)
    return rec.step("s_biased", biased, f"{s_name} + bias_tile", f.ax("Br", "Bc"), times=times)
