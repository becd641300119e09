"""The tiled attention of FlashAttention: the (S, N) score matrix never exists.

For each query block of Br rows, the key/value blocks of Bc rows are visited in turn; an online
softmax keeps, per query row, the running maximum ``m`` and the running sum ``l`` of
``exp(score - m)``, and rescales the partial output when ``m`` grows::

    m_new = max(m, rowmax(s))          alpha = exp(m - m_new)
    p     = exp(s - m_new)             l     = alpha * l + rowsum(p)
    o     = alpha * o + p @ v_block    ...   context_block = o / l

Masks (causal, key padding, a --mask file) are applied inside each tile: the tile's mask
(``mask_tile``, made from the rules and a slice of the --mask file; the whole ``mask`` step is
never formed) turns masked scores into -inf (or is added, for a float mask) before the row max
(``s_masked``). ``m`` starts at the dtype's lowest finite
value instead of -inf and ``l`` at 1, as if each row had a phantom key of that score and a zero
value: a row whose keys so far are all masked computes ``exp(-inf - lowest) = 0``, never
``exp(-inf - -inf) = NaN``; the first real key makes the phantom's weight
``alpha = exp(lowest - m)`` exactly 0 (unmasked rows are unchanged); a row that never sees a key
ends as ``o / l = 0 / 1 = 0``, as eager and torch's SDPA give it.
With --causal, tiles whose keys all lie after their last query are skipped (the op of
``s_tile`` says how many).

Each tile step is recorded once, with its shape for a full tile, ``repeat`` = number of tiles
and FLOPs summed over every tile (a last block that does not divide S is smaller). Backends
that do not compute (shape) visit one tile per distinct size, weighted by its count, so a
trace at S = 131072 takes a handful of steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from attntrace.config import AttentionConfig

if TYPE_CHECKING:
    from attntrace.attention import _Recorder
    from attntrace.backends.base import Backend
    from attntrace.masks import MaskPlan

T = TypeVar("T")

#: Steps of the tiled algorithm, in the order of one tile (after x ... v of the eager chain).
FLASH_STEPS: tuple[str, ...] = (
    "context", "q_block", "q_scaled", "k_block", "v_block", "k_block_t", "s_tile", "m", "p_tile",
    "alpha", "l", "o_acc", "o_block",
)
#: Steps a mask adds to each tile, after ``s_tile`` (the whole ``mask`` step comes before ``context``).
FLASH_MASK_STEPS: tuple[str, ...] = ("mask_tile", "s_masked")

#: The most negative finite value of each dtype: the start of the running max ``m``.
LOWEST: dict[str, float] = {
    "float16": -65504.0, "bfloat16": -3.3895313892515355e38,
    "float32": -3.4028234663852886e38, "float64": -1.7976931348623157e308,
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


def tiles(seq: int, keys: int, size: int, *, causal: bool = False,
          every: bool = True) -> Iterator[tuple[Block, list[Block]]]:
    """Each query block with the key/value blocks it visits, ``times`` of a key block being the
    number of tiles it stands for. With ``causal`` a key block starting after the last query of
    the block is skipped (every key in it is masked: query i attends keys 0..i).

    >>> [(q[:2], [kv[:2] for kv in visited]) for q, visited in tiles(5, 5, 2, causal=True)]
    [((0, 2), [(0, 2)]), ((2, 4), [(0, 2), (2, 4)]), ((4, 5), [(0, 2), (2, 4), (4, 5)])]
    >>> [(q, kv) for q, kv in tiles(5, 5, 2, causal=True, every=False)]
    [((0, 2, 2), [(0, 2, 3)]), ((4, 5, 1), [(0, 2, 2), (4, 5, 1)])]
    """
    kv_blocks = list(blocks(keys, size, every))
    for i0, i1, times in blocks(seq, size, every):
        # the b-th query block it stands for ends at i1 + b * size and sees c0 + b key blocks
        counts = [(j0, j1, _clamped_sum(-(-(i1 - j0) // size), times, n) if causal else times * n)
                  for j0, j1, n in kv_blocks]
        yield (i0, i1, times), [(j0, j1, n) for j0, j1, n in counts if n]


def _clamped_sum(first: int, count: int, top: int) -> int:
    """``sum(min(top, max(0, t)) for t in range(first, first + count))`` in closed form, so a
    shape trace costs the same at any S / block size.

    >>> _clamped_sum(-2, 7, 3), sum(min(3, max(0, t)) for t in range(-2, 5))
    (9, 9)
    """
    last = first + count - 1
    lo, hi = max(first, 0), min(last, top)
    ramp = (lo + hi) * (hi - lo + 1) // 2 if lo <= hi else 0  # the t in [0, top]
    flat = max(0, last - max(first, top + 1) + 1) * top  # the t above top
    return ramp + flat


def skipped_tiles(config: AttentionConfig) -> int:
    """Tiles flash skips because --causal masks every key in them.

    >>> skipped_tiles(AttentionConfig(seq=5, causal=True, algorithm="flash", block_size=2))
    3
    """
    if not config.causal:
        return 0
    total = math.ceil(config.seq / config.block_size) * math.ceil(config.keys / config.block_size)
    plan = tiles(config.seq, config.keys, config.block_size, causal=True, every=False)
    return total - sum(n for _, visited in plan for *_, n in visited)


@dataclass
class _Flash(Generic[T]):
    """What every tile needs: the backend, the recorder, q (scaled per block), k, v, the mask."""

    be: Backend[T]
    rec: _Recorder[T]
    k: T
    v: T
    factor: float  # the score scale, folded into each query block
    scale_op: str  # how the trace writes it
    inplace: bool  # reuse tile buffers (only when no tile value is kept)
    plan: MaskPlan | None = None  # the mask's rules: each tile's mask is made from them

    def ax(self, *letters: str) -> tuple[str, ...]:
        return (*self.rec.lead, "h", *letters)

    def col(self, x: T) -> T:
        """``x[..., None]``: a row statistic (B, h, Br) as a column (B, h, Br, 1) to broadcast."""
        return self.be.reshape(x, (*self.be.shape(x), 1))


def flash_context(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], q: T, k: T, v: T,
                  plan: MaskPlan | None = None) -> T:
    """context (B, h, S, d) from q (B, h, S, d), k, v (B, h, N, d), query block by query block;
    the mask of ``plan`` is made and applied tile by tile (never whole).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash", block_size=128))
    >>> t["s_tile"].shape, t["s_tile"].repeat, t["m"].shape
    ((4, 128, 128), 9, (4, 128))
    >>> t["s_tile"].flops == 2 * 4 * 300 * 300 * 16
    True
    >>> t = trace_attention(AttentionConfig(seq=300, hidden=64, heads=4, causal=True, algorithm="flash", block_size=128))
    >>> t["mask_tile"].shape, t["s_masked"].repeat, t["s_tile"].op
    ((128, 128), 6, 'q_scaled @ k_block_t (3 tiles above the diagonal skipped)')
    """
    d, scale = config.head_dim, config.scale
    scale_op = f"q_block / sqrt({d})" if scale is None else f"q_block * {scale:g}"
    keeps = any(rec.keeps(n) for n in (*FLASH_STEPS, *FLASH_MASK_STEPS))
    f = _Flash(be, rec, k, v, config.score_scale, scale_op, not keeps, plan)
    skipped = skipped_tiles(config)
    s_op = "q_scaled @ k_block_t" + (f" ({skipped} tiles above the diagonal skipped)" if skipped else "")
    out = rec.step("context", be.full(be.shape(q), 0.0, be.dtype(q)), "zeros(B, h, S, d), filled by o_block", f.ax("S", "d"))  # (B, h, S, d)
    S, N = be.shape(q)[-2], be.shape(k)[-2]
    work = list(tiles(S, N, config.block_size, causal=config.causal, every=be.computes))

    def run(block: tuple[Block, list[Block]]) -> None:
        (i0, i1, times), visited = block
        q_block = rec.view("q_block", be.narrow(q, -2, i0, i1), "q[..., i:i+Br, :]", f.ax("Br", "d"), times=times)  # (B, h, Br, d)
        be.write(out, -2, i0, _query_block(f, q_block, (i0, i1), visited, times, s_op))  # out[..., i0:i1, :] = (B, h, Br, d)

    with be.one_thread_each():  # many small matmuls: the threads split blocks, not each matmul
        run(work[0])  # records every tile step, in order; the other blocks only repeat them
        # the longest blocks (the last ones, with --causal) first
        _run_blocks(rec.threads if be.computes else 1, run, work[:0:-1])
    rec.refresh("context", out)
    return out


def _run_blocks(threads: int, run: Callable[[Any], None], work: list[Any]) -> None:
    """``run`` each item of ``work``, on ``threads`` threads."""
    if threads == 1 or len(work) < 2:
        for item in work:
            run(item)
        return
    from attntrace.parallel import pool

    list(pool(threads).map(run, work))  # re-raises the first error of a block


def _query_block(f: _Flash[T], q_block: T, rows: tuple[int, int], kv: list[Block], times: int, s_op: str) -> T:
    """The output rows of one query block: visit its key/value blocks with the online softmax."""
    be, rec = f.be, f.rec
    q_scaled = rec.step("q_scaled", be.scale(q_block, f.factor), f.scale_op, f.ax("Br", "d"), times=times)  # (B, h, Br, d)
    shape, dtype = be.shape(q_block), be.dtype(q_block)
    # a phantom key of score LOWEST (finite) and value 0 per row: no NaN when every key is masked
    m = be.full(shape[:-1], LOWEST[dtype], dtype)  # (B, h, Br) running row max
    l = be.full(shape[:-1], 1.0, dtype)  # (B, h, Br) running sum of exp(s - m); the phantom's weight until a real key
    o = be.full(shape, 0.0, dtype)  # (B, h, Br, d) unnormalised output
    for j0, j1, n in kv:
        m, l, o = _tile(f, q_scaled, (m, l, o), (*rows, j0, j1), n, s_op)
    return rec.step("o_block", be.binary("div", o, f.col(l), inplace=f.inplace), "o_acc / l[..., None]", f.ax("Br", "d"), times=times)  # (B, h, Br, d)


def _tile(f: _Flash[T], q_scaled: T, state: tuple[T, T, T], box: tuple[int, int, int, int], times: int,
          s_op: str) -> tuple[T, T, T]:
    """One (Br, Bc) tile: scores (masked), the new row max, probabilities, rescaled sum and output."""
    be, rec, ip = f.be, f.rec, f.inplace
    m_old, l_old, o_old = state  # (B, h, Br), (B, h, Br), (B, h, Br, d)
    j0, j1 = box[2:]
    k_block = rec.view("k_block", be.narrow(f.k, -2, j0, j1), "k[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)  # (B, h, Bc, d)
    v_block = rec.view("v_block", be.narrow(f.v, -2, j0, j1), "v[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)  # (B, h, Bc, d)
    k_block_t = rec.view("k_block_t", be.transpose(k_block, -2, -1), "k_block.transpose(-2, -1)", f.ax("d", "Bc"), times=times)  # (B, h, d, Bc)
    s = rec.step("s_tile", be.matmul(q_scaled, k_block_t), s_op, f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
    s_name = "s_tile"
    if f.plan is not None:
        s, s_name = _mask_tile(f, s, box, times), "s_masked"  # (B, h, Br, Bc), -inf where masked
    m = rec.step("m", be.binary("maximum", m_old, be.reduce_max(s)), f"maximum(m, {s_name}.max(-1))", f.ax("Br"), times=times)  # (B, h, Br)
    p = rec.step("p_tile", be.exp(be.binary("sub", s, f.col(m), inplace=ip), inplace=True), f"exp({s_name} - m[..., None])", f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
    alpha = rec.step("alpha", be.exp(be.binary("sub", m_old, m), inplace=True), "exp(m_old - m)", f.ax("Br"), times=times)  # (B, h, Br)
    l = rec.step("l", be.binary("add", be.binary("mul", alpha, l_old), be.reduce_sum(p), inplace=True), "alpha * l + p_tile.sum(-1)", f.ax("Br"), times=times)  # (B, h, Br)
    pv = be.matmul(p, v_block)  # (B, h, Br, d)
    o = rec.step("o_acc", be.binary("add", be.binary("mul", o_old, f.col(alpha), inplace=ip), pv, inplace=True), "alpha[..., None] * o_acc + p_tile @ v_block", f.ax("Br", "d"), times=times)  # (B, h, Br, d)
    return m, l, o


def _mask_tile(f: _Flash[T], s: T, box: tuple[int, int, int, int], times: int) -> T:
    """The tile's slice of the mask (rows i0:i1, keys j0:j1 where the mask is not broadcast),
    applied to the tile scores: -inf where a bool mask is False, or the float mask added."""
    be, rec, plan = f.be, f.rec, f.plan
    assert plan is not None  # a bug, not user input
    axes = list(plan.axes)  # (B, 1, S, N) or any shape broadcasting to the scores
    for axis, letter in ((-2, "Br"), (-1, "Bc")):
        if len(axes) >= -axis and axes[axis] != "1":
            axes[axis] = letter
    tile = be.tensor(plan.tile(*box))  # (B, 1, Br, Bc), from the rules
    tile = rec.step("mask_tile", tile, "mask[..., i:i+Br, j:j+Bc], from the rules", tuple(axes),
                    times=times)
    if plan.additive:
        return rec.step("s_masked", be.binary("add", s, tile, inplace=f.inplace), "s_tile + mask_tile",
                        f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
    return rec.step("s_masked", be.where(tile, s, -math.inf), "where(mask_tile, s_tile, -inf)",
                    f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
