"""The numpy backend: the default, and the reference the study notes use."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from attntrace.backends import blas_pinned, spare
from attntrace.backends.base import Backend, FastPath, Shape, Source
from attntrace.config.attention_config import MASK_DTYPE
from attntrace.engine.parallel import cores, in_pool, map_parts, pool, spread

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

_NUMPY_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
#: Softmaxes of more elements than this run in row chunks on every core (numpy ufuncs release
#: the GIL).
PARALLEL_MIN_NUMEL = 1 << 20
#: Projections of more output elements than this run in row blocks on the pool (see linear):
#: from (1, 768, 768, 12) up, a trace then ran 10–25 % faster and took 30–40 % less CPU time
#: than with one multi-threaded BLAS call (2-core Xeon, 25 interleaved calls each); below it,
#: the same or slower.
LINEAR_POOL_MIN_NUMEL = 1 << 19
#: Elements from which :meth:`NumpyBackend.transposed_copy` spreads its heads over the pool.
TRANSPOSE_POOL_MIN_NUMEL = 1 << 19
_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
}


class NumpyBackend(Backend[np.ndarray], FastPath[np.ndarray]):
    """Attention operations on ``numpy.ndarray``: the core ones and the fast path."""

    name = "numpy"
    dtypes = tuple(_NUMPY_DTYPES)  # numpy has no bfloat16

    @property
    def slices_exactly(self) -> bool:
        # OpenBLAS packs b before its kernel, and each element is one sum over K in order (K is
        # split by its size alone): fewer columns, the same bits. MKL (torch's, or a numpy
        # built with it) picks kernels by size: not assumed of any BLAS but OpenBLAS.
        return _built_with_openblas()

    def tensor(self, source: Source) -> np.ndarray:
        dtype = np.bool_ if source.dtype == MASK_DTYPE else _NUMPY_DTYPES[source.dtype]
        return source.make().astype(dtype, copy=False)

    def shape(self, x: np.ndarray) -> Shape:
        return tuple(int(n) for n in x.shape)

    def dtype(self, x: np.ndarray) -> str:
        return str(x.dtype)

    def to_numpy(self, x: np.ndarray) -> np.ndarray:
        return x

    def linear(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        rows = x.reshape(-1, x.shape[-1])  # (B·S, in)
        size = rows.shape[0] * weight.shape[0]  # elements of the result
        if size < LINEAR_POOL_MIN_NUMEL or cores() == 1 or in_pool() or rows.shape[0] < cores():
            out: np.ndarray = x @ weight.T  # one BLAS call; the bias is added in place
            if bias is not None:
                out += bias
            return out
        # row blocks over the pool, one BLAS thread each: OpenBLAS's own threads, once woken,
        # spin for a while after the call and take a core from the blocks that follow it
        # (eager's chain ran 20 % slower right after a multi-threaded projection)
        flat = np.empty((rows.shape[0], weight.shape[0]), dtype=np.result_type(x, weight))
        w_t = weight.T  # (in, out), a view

        def block(part: slice) -> None:
            np.matmul(rows[part], w_t, out=flat[part])  # (rows, in) @ (in, out)
            if bias is not None:
                flat[part] += bias  # while the block is in cache

        n = cores()
        bounds = [rows.shape[0] * i // n for i in range(n + 1)]
        parts = [slice(a, b) for a, b in itertools.pairwise(bounds)]
        with self.one_thread_each():
            list(pool(cores()).map(block, parts))
        return flat.reshape(*x.shape[:-1], weight.shape[0])

    def reshape(self, x: np.ndarray, shape: Shape) -> np.ndarray:
        out: np.ndarray = x.reshape(shape)
        return out

    def transpose(self, x: np.ndarray, dim0: int, dim1: int) -> np.ndarray:
        return np.swapaxes(x, dim0, dim1)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        lead = a.shape[:-2]  # (B, h): one matrix product per head
        size = math.prod(lead) * a.shape[-2] * b.shape[-1]  # elements of the result
        small = size < PARALLEL_MIN_NUMEL or cores() == 1 or in_pool()
        if small or len(lead) == 0 or lead != b.shape[:-2]:
            out: np.ndarray = np.matmul(a, b)
            return out
        # the heads split over the cores, one BLAS thread each: numpy's stacked matmul calls one
        # multi-threaded sgemm per head, whose threads barely help at K = d and spin when busy
        out = np.empty((*lead, a.shape[-2], b.shape[-1]), dtype=np.result_type(a, b))
        # (B·h) views, (S, d) @ (d, N) -> (S, N) each
        stacks = (x.reshape(-1, *x.shape[-2:]) for x in (a, b, out))
        pairs = list(zip(*stacks, strict=True))
        with self.one_thread_each():
            list(pool(cores()).map(lambda p: np.matmul(p[0], p[1], out=p[2]), pairs))
        return out

    def scale(self, x: np.ndarray, factor: float) -> np.ndarray:
        out: np.ndarray = x * x.dtype.type(factor)
        return out

    def softmax(self, x: np.ndarray) -> np.ndarray:
        # The study notes' soft_max overflows to inf/inf = NaN for logits near 1000; this one
        # subtracts the row max where exp() could overflow or lose its precision (see
        # _row_shift): a new buffer, then in place. A row of only -inf (every key masked)
        # comes out as zeros, as torch's SDPA returns it, never NaN.
        shift = _row_shift(x)
        e: np.ndarray = x - shift if shift.any() else x.copy()
        np.divide(e, _exp_sums(e), out=e)
        return e

    def where(
        self, keep: np.ndarray, x: np.ndarray, fill: float, *, inplace: bool = False
    ) -> np.ndarray:
        if inplace:
            np.copyto(x, x.dtype.type(fill), where=~keep)
            return x
        out: np.ndarray = np.where(keep, x, x.dtype.type(fill))
        return out

    def repeat_interleave(self, x: np.ndarray, repeats: int, axis: int) -> np.ndarray:
        return np.repeat(x, repeats, axis=axis)

    def rotate_half(self, x: np.ndarray) -> np.ndarray:
        half = x.shape[-1] // 2
        return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)

    def rotate_part(self, x: np.ndarray, dims: int) -> np.ndarray:
        out, half = np.zeros_like(x), dims // 2
        out[..., :half], out[..., half:dims] = -x[..., half:dims], x[..., :half]
        return out

    def rotate_pairs(self, x: np.ndarray, dims: int) -> np.ndarray:
        out = np.zeros_like(x)  # (..., d): zeros beyond the R rotated dims
        out[..., 0:dims:2], out[..., 1:dims:2] = -x[..., 1:dims:2], x[..., 0:dims:2]  # (..., R/2)
        return out

    def rms_norm(self, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
        wide = x.astype(np.promote_types(x.dtype, np.float32))
        scaled = wide / np.sqrt((wide * wide).mean(axis=-1, keepdims=True) + eps)
        out: np.ndarray = (weight * scaled.astype(x.dtype)).astype(x.dtype)
        return out

    def tanh(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.tanh(x)
        return out

    def log(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(x)
        return out

    def rsqrt(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1 / np.sqrt(x)
        return out

    def softmax_(self, x: np.ndarray, scale: float = 1.0) -> np.ndarray:
        rows = x.reshape(-1, x.shape[-1])  # (B·h·S, N), a view of the contiguous scores
        factor = None if scale == 1.0 else x.dtype.type(scale)
        if x.size < PARALLEL_MIN_NUMEL or not np.shares_memory(rows, x) or cores() == 1:
            _softmax_inplace(x, factor)
            return x
        # cache-sized blocks of rows
        chunks = np.array_split(rows, max(cores(), rows.nbytes // (4 << 20)))
        list(pool(cores()).map(lambda chunk: _softmax_inplace(chunk, factor), chunks))
        return x

    def empty(self, shape: Shape, dtype: str) -> np.ndarray:
        return spare.empty(shape, _NUMPY_DTYPES[dtype])  # a large one in the memory last freed

    def stand_in(self, shape: Shape, dtype: str) -> np.ndarray:
        return np.broadcast_to(np.zeros((), dtype=_NUMPY_DTYPES[dtype]), shape)

    def contiguous(self, x: np.ndarray) -> np.ndarray:
        if x.flags.c_contiguous:
            return x
        out = np.empty(x.shape, x.dtype)
        map_parts(np.copyto, out, x)  # a large gather on every core
        return out

    def transposed_copy(self, x: np.ndarray) -> np.ndarray:
        # head by head on every core: each head's (N, d) rows gathered into a buffer first (a
        # strided gather of whole rows is fast; a strided transpose is not), then transposed
        # from the cache into the one (..., d, N) result: no second whole-size copy to fault in
        out = np.empty((*x.shape[:-2], x.shape[-1], x.shape[-2]), x.dtype)  # (..., d, N)

        def one(at: tuple[int, ...]) -> None:
            np.copyto(out[at], np.ascontiguousarray(x[at]).T)  # (d, N) from (N, d)

        heads = list(np.ndindex(*x.shape[:-2]))
        if x.size < TRANSPOSE_POOL_MIN_NUMEL or cores() == 1 or in_pool() or len(heads) < 2:
            for at in heads:
                one(at)
        else:
            spread(one, heads, cores())
        return out

    def matmul_into(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.matmul(a, b, out=out)

    def scale_(self, x: np.ndarray, factor: float) -> np.ndarray:
        out: np.ndarray = np.multiply(x, x.dtype.type(factor), out=x)
        return out

    def softmax_into(self, x: np.ndarray, out: np.ndarray, in_range: bool = False) -> None:
        # the passes of softmax() on x in place, the last one writing out: the same bits
        by_rows(np.divide, x, self.softmax_sums_(x, in_range), out)

    def softmax_sums_(self, x: np.ndarray, in_range: bool = False) -> np.ndarray:
        return _shifted_exp_sums(x, in_range)

    def divide_into(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        by_rows(np.divide, a, b, out)

    def unshifted_range(self, dtype: str, keys: int) -> float:
        lo, hi = _exp_range(np.dtype(_NUMPY_DTYPES[dtype]), keys)
        return min(-lo, hi)

    def fused_attention(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        scale: float,
        mask: np.ndarray | None,
        additive: bool,
        causal: bool = False,
    ) -> None:
        return None  # numpy has no fused kernel: eager's blocks are the fast path

    @contextmanager
    def one_thread_each(self) -> Iterator[None]:
        if blas_pinned():  # loaded with one thread: nothing to limit
            yield
            return
        with _blas_controller().limit(limits=1, user_api="blas"):  # process-wide meanwhile
            yield

    def narrow(self, x: np.ndarray, axis: int, start: int, stop: int) -> np.ndarray:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop)
        out: np.ndarray = x[tuple(index)]
        return out

    def full(self, shape: Shape, value: float, dtype: str) -> np.ndarray:
        return np.full(shape, value, dtype=_NUMPY_DTYPES[dtype])

    def write(self, out: np.ndarray, axis: int, start: int, value: np.ndarray) -> None:
        self.narrow(out, axis, start, start + value.shape[axis])[...] = value

    def exp(self, x: np.ndarray, *, inplace: bool = False) -> np.ndarray:
        out: np.ndarray = np.exp(x, out=x if inplace else None)
        return out

    def binary(self, op: str, a: np.ndarray, b: np.ndarray, *, inplace: bool = False) -> np.ndarray:
        return by_rows(_BINARY[op], a, b, a if inplace else None)

    def reduce_max(self, x: np.ndarray) -> np.ndarray:
        # with an initial value numpy takes a faster loop (2x over rows of 256, flash's tiles);
        # a max is exact, whatever the order: the same values
        out: np.ndarray = x.max(axis=-1, initial=-np.inf)
        return out

    def reduce_sum(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.einsum("...i->...", x)  # as the softmax's sums (_exp_sums)
        return out


@cache
def _built_with_openblas() -> bool:
    """Whether numpy's BLAS is OpenBLAS (as numpy's wheels are built)."""
    try:
        name = str(np.__config__.CONFIG["Build Dependencies"]["blas"]["name"])
    except (AttributeError, KeyError, TypeError):
        return False
    return "openblas" in name.lower()


@cache
def _blas_controller() -> ThreadpoolController:
    """numpy's BLAS libraries, found once (finding them takes milliseconds)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _softmax_inplace(x: np.ndarray, factor: np.floating | None = None) -> None:
    if factor is not None:  # the scale, while the rows are in cache: no pass of its own
        x *= factor
    by_rows(np.divide, x, _shifted_exp_sums(x), x)  # in place: no second (..., S, N) buffer


def _shifted_exp_sums(x: np.ndarray, in_range: bool = False) -> np.ndarray:
    """x shifted by :func:`_row_shift` where that is not 0, then overwritten by exp(); its row
    sums (:func:`_exp_sums`). ``in_range``: proven that no shift is needed (eager's bounds)."""
    if not in_range:
        shift = _row_shift(x)
        if shift.any():
            by_rows(np.subtract, x, shift, x)
    return _exp_sums(x)


#: Rows from this long to numpy's ufunc buffer (8192 elements) get a buffer of one row in
#: :func:`by_rows`: 1.7x faster over rows of 256 to 4096 (a (1, 16, 128, 256) tile less a
#: column: 323 -> 192 us), and slower below (rows of 64: 66 -> 91 us).
ROW_BUFFER_MIN = 256


def by_rows(
    ufunc: np.ufunc, a: np.ndarray, b: np.ndarray | np.generic, out: np.ndarray | None
) -> np.ndarray:
    """``ufunc(a, b, out=out)``; where ``b`` is a column (..., 1) that the rows of ``a``
    (..., N) read (a row's max or sum), with numpy's ufunc buffer no longer than a row. With
    its default buffer numpy copies the column, repeated, into buffers spanning several rows
    before every call of the loop: twice the time of dividing by a scalar. The same bits
    either way: the buffer only changes how the elements are handed to the loop.

    >>> x = np.array([[1.0, 3.0], [2.0, 2.0]])
    >>> by_rows(np.divide, x, x.sum(-1, keepdims=True), None).tolist()
    [[0.25, 0.75], [0.5, 0.5]]
    """
    n = a.shape[-1] if a.ndim else 0
    column = np.ndim(b) and np.shape(b)[-1] == 1
    if not column or not ROW_BUFFER_MIN <= n < np.getbufsize():
        result: np.ndarray = ufunc(a, b, out=out)
        return result
    old = np.setbufsize(n // 16 * 16)  # numpy asks for a multiple of 16; per thread
    try:
        result = ufunc(a, b, out=out)
    finally:
        np.setbufsize(old)
    return result


def _row_shift(x: np.ndarray) -> np.ndarray:
    """What each row of ``x`` (..., N) has subtracted before exp(), (..., 1): 0 where the row
    max lies in :func:`_exp_range` (exp() of every score of the row is finite, their sum too,
    and the largest is a normal number: the unshifted exp() loses nothing), else the row max
    (0 too for a row of only -inf). ``x - 0`` is ``x`` bit for bit: a caller that proves every
    row in the range (eager's bounds) skips this pass and gets the same bits."""
    top: np.ndarray = x.max(axis=-1, keepdims=True, initial=-np.inf)  # (..., 1), as reduce_max
    lo, hi = _exp_range(x.dtype, x.shape[-1])
    top[((top >= lo) & (top <= hi)) | np.isneginf(top)] = 0
    return top


def _exp_sums(x: np.ndarray) -> np.ndarray:
    """x overwritten by exp(x); its row sums (..., 1), 1 for a row of zeros (only -inf). The
    sums are einsum's (in SIMD lanes from each row's start, whatever its alignment): 3x faster
    than ``sum``'s pairwise sums over rows of 2048, and the same bits for a row in a block of
    the eager kernel or in the whole array."""
    np.exp(x, out=x)
    total: np.ndarray = np.einsum("...i->...", x)[..., None]  # (..., 1)
    total[total == 0] = 1
    return total


@cache
def _exp_range(dtype: np.dtype, keys: int) -> tuple[float, float]:
    """(lo, hi): the row maxima for which softmax needs no shift in ``dtype`` over ``keys``
    keys. Below hi, ``keys`` values of exp() sum to at most half the largest finite value;
    above lo, exp() of the row max is ``2**(mantissa bits + 1)`` times the smallest normal
    number, so the scores that matter (within that factor of the max) are normal numbers.

    >>> lo, hi = _exp_range(np.dtype(np.float32), 2048)
    >>> round(lo, 1), round(hi, 1)
    (-70.7, 80.4)
    """
    info = np.finfo(dtype)
    hi = math.log(float(info.max)) - math.log(2 * max(1, keys))
    lo = math.log(float(info.smallest_normal)) + (info.nmant + 1) * math.log(2)
    return lo, hi


def backend() -> NumpyBackend:
    """The registry's constructor."""
    return NumpyBackend()
