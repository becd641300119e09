"""The tiled attention of FlashAttention: the (S, N) score matrix never exists.

For each query block of Br rows, the key/value blocks of Bc rows are visited in turn; an online
softmax keeps, per query row, the running maximum ``m`` and the running sum ``l`` of
``exp(score - m)``, and rescales the partial output when ``m`` grows::

    m_new = max(m, rowmax(s))          alpha = exp(m - m_new)
    p     = exp(s - m_new)             l     = alpha * l + rowsum(p)
    o     = alpha * o + p @ v_block    ...   context_block = o / l

Each tile step is recorded once, with its shape for a full tile, ``repeat`` = number of tiles
and FLOPs summed over every tile (a last block that does not divide S is smaller). Backends
that do not compute (shape) visit one tile per distinct size, weighted by its count, so a
trace at S = 131072 takes a handful of steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from attntrace.config import AttentionConfig

if TYPE_CHECKING:
    from attntrace.attention import _Recorder
    from attntrace.backends.base import Backend

T = TypeVar("T")

#: Steps of the tiled algorithm, in the order of one tile (after x ... v of the eager chain).
FLASH_STEPS: tuple[str, ...] = (
    "context", "q_block", "q_scaled", "k_block", "v_block", "k_block_t", "s_tile", "m", "p_tile",
    "alpha", "l", "o_acc", "o_block",
)


def blocks(n: int, size: int, every: bool = True) -> Iterator[tuple[int, int, int]]:
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


@dataclass
class _Flash(Generic[T]):
    """What every tile needs: the backend, the recorder, q (scaled per block), k, v."""

    be: Backend[T]
    rec: _Recorder[T]
    k: T
    v: T
    factor: float  # the score scale, folded into each query block
    scale_op: str  # how the trace writes it
    block_size: int
    inplace: bool  # reuse tile buffers (only when no tile value is kept)

    def ax(self, *letters: str) -> tuple[str, ...]:
        return (*self.rec.lead, "h", *letters)

    def col(self, x: T) -> T:
        """``x[..., None]``: a row statistic (B, h, Br) as a column (B, h, Br, 1) to broadcast."""
        return self.be.reshape(x, (*self.be.shape(x), 1))


def flash_context(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], q: T, k: T, v: T) -> T:
    """context (B, h, S, d) from q (B, h, S, d), k, v (B, h, N, d), query block by query block.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash", block_size=128))
    >>> t["s_tile"].shape, t["s_tile"].repeat, t["m"].shape
    ((4, 128, 128), 9, (4, 128))
    >>> t["s_tile"].flops == 2 * 4 * 300 * 300 * 16
    True
    """
    d, scale = config.head_dim, config.scale
    scale_op = f"q_block / sqrt({d})" if scale is None else f"q_block * {scale:g}"
    f = _Flash(be, rec, k, v, config.score_scale, scale_op, config.block_size, not any(rec.keeps(n) for n in FLASH_STEPS))
    S = be.shape(q)[-2]
    out = rec.step("context", be.full(be.shape(q), 0.0, be.dtype(q)), "zeros(B, h, S, d), filled by o_block", f.ax("S", "d"))  # (B, h, S, d)
    for i0, i1, times in blocks(S, config.block_size, be.computes):
        q_block = rec.view("q_block", be.narrow(q, -2, i0, i1), "q[..., i:i+Br, :]", f.ax("Br", "d"), times=times)  # (B, h, Br, d)
        be.write(out, -2, i0, _query_block(f, q_block, times))  # out[..., i0:i1, :] = (B, h, Br, d)
    rec.refresh("context", out)
    return out


def _query_block(f: _Flash[T], q_block: T, times: int) -> T:
    """The output rows of one query block: visit every key/value block with the online softmax."""
    be, rec = f.be, f.rec
    q_scaled = rec.step("q_scaled", be.scale(q_block, f.factor), f.scale_op, f.ax("Br", "d"), times=times)  # (B, h, Br, d)
    rows = be.shape(q_block)[:-1]  # (B, h, Br)
    m = be.full(rows, -math.inf, be.dtype(q_block))  # (B, h, Br) running row max
    l = be.full(rows, 0.0, be.dtype(q_block))  # (B, h, Br) running sum of exp(s - m)
    o = be.full(be.shape(q_block), 0.0, be.dtype(q_block))  # (B, h, Br, d) unnormalised output
    for j0, j1, kv_times in blocks(be.shape(f.k)[-2], f.block_size, be.computes):
        m, l, o = _tile(f, q_scaled, (m, l, o), j0, j1, times * kv_times)
    return rec.step("o_block", be.binary("div", o, f.col(l), inplace=f.inplace), "o_acc / l[..., None]", f.ax("Br", "d"), times=times)  # (B, h, Br, d)


def _tile(f: _Flash[T], q_scaled: T, state: tuple[T, T, T], j0: int, j1: int, times: int) -> tuple[T, T, T]:
    """One (Br, Bc) tile: scores, the new row max, probabilities, rescaled sum and output."""
    be, rec, ip = f.be, f.rec, f.inplace
    m_old, l_old, o_old = state  # (B, h, Br), (B, h, Br), (B, h, Br, d)
    k_block = rec.view("k_block", be.narrow(f.k, -2, j0, j1), "k[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)  # (B, h, Bc, d)
    v_block = rec.view("v_block", be.narrow(f.v, -2, j0, j1), "v[..., j:j+Bc, :]", f.ax("Bc", "d"), times=times)  # (B, h, Bc, d)
    k_block_t = rec.view("k_block_t", be.transpose(k_block, -2, -1), "k_block.transpose(-2, -1)", f.ax("d", "Bc"), times=times)  # (B, h, d, Bc)
    s = rec.step("s_tile", be.matmul(q_scaled, k_block_t), "q_scaled @ k_block_t", f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
    m = rec.step("m", be.binary("maximum", m_old, be.reduce_max(s)), "maximum(m, s_tile.max(-1))", f.ax("Br"), times=times)  # (B, h, Br)
    p = rec.step("p_tile", be.exp(be.binary("sub", s, f.col(m), inplace=ip), inplace=True), "exp(s_tile - m[..., None])", f.ax("Br", "Bc"), times=times)  # (B, h, Br, Bc)
    alpha = rec.step("alpha", be.exp(be.binary("sub", m_old, m), inplace=True), "exp(m_old - m)", f.ax("Br"), times=times)  # (B, h, Br)
    l = rec.step("l", be.binary("add", be.binary("mul", alpha, l_old), be.reduce_sum(p), inplace=True), "alpha * l + p_tile.sum(-1)", f.ax("Br"), times=times)  # (B, h, Br)
    pv = be.matmul(p, v_block)  # (B, h, Br, d)
    o = rec.step("o_acc", be.binary("add", be.binary("mul", o_old, f.col(alpha), inplace=ip), pv, inplace=True), "alpha[..., None] * o_acc + p_tile @ v_block", f.ax("Br", "d"), times=times)  # (B, h, Br, d)
    return m, l, o
