"""The small interface every backend implements; the attention algorithm uses nothing else.

A backend never imports its library at module level of :mod:`attntrace`: the registry in
:mod:`attntrace.backends` imports a backend module only when that backend is asked for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from attntrace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
Shape = tuple[int, ...]

#: The elementwise operations of :meth:`Backend.binary` (numpy broadcasting).
BINARY_OPS: tuple[str, ...] = ("add", "sub", "mul", "div", "maximum")


@dataclass(frozen=True)
class Source:
    """A tensor to create: its shape and dtype, and how to make its values (called only by
    backends that compute; the shape backend never calls ``make``). ``drawn``: its values are
    drawn from a generator, work enough to run on a thread of its own when large. ``parts``:
    the same values as ``make()``'s, drawn block of rows by block (each with a generator of
    its own), so that a large tensor is drawn on every core; None when they come in one piece."""

    shape: Shape
    dtype: str
    make: Callable[[], np.ndarray]
    drawn: bool = False
    parts: Parts | None = None


@dataclass(frozen=True)
class Parts:
    """The blocks of rows (of all axes but the last) of a :class:`Source`: ``empty()`` is the
    (rows, last axis) array of ``make``'s dtype that they fill, ``blocks`` each fill rows
    ``start:stop`` of it in place."""

    empty: Callable[[], np.ndarray]
    blocks: tuple[RowBlock, ...]


@dataclass(frozen=True)
class RowBlock:
    """Rows ``start:stop`` of :class:`Parts`, written in place by ``fill(rows)``."""

    start: int
    stop: int
    fill: Callable[[np.ndarray], None]


class Backend(ABC, Generic[T]):
    """Operations on tensors of type ``T``; each returns a new tensor or a view."""

    name: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]]  # the dtype names this backend supports
    computes: ClassVar[bool] = True  # False for the shape backend: no values, no memory
    #: Whether numpy's passes over this backend's values (the non-finite checks, eager's bounds)
    #: may run on attntrace's pool (:func:`attntrace.engine.parallel.map_parts`). Not for torch: its
    #: OpenMP threads still spin on the cores after each kernel (the torch backend's trace ran
    #: ~5 % slower with them pooled, 6 interleaved runs of 11 calls).
    pools_checks: ClassVar[bool] = True

    def check_dtype(self, dtype: str) -> None:
        """Raise ConfigError naming the supported dtypes when ``dtype`` is not one of them."""
        if dtype not in self.dtypes:
            raise ConfigError(
                f"the {self.name} backend has no dtype {dtype}; use one of {', '.join(self.dtypes)}"
                + (" or --backend torch" if dtype == "bfloat16" else "")
            )

    @abstractmethod
    def tensor(self, source: Source) -> T:
        """Create a tensor from ``source`` in ``source.dtype``."""

    @abstractmethod
    def shape(self, x: T) -> Shape:
        """The shape of ``x`` as a tuple of ints."""

    @abstractmethod
    def dtype(self, x: T) -> str:
        """The dtype name of ``x`` (one of ``attntrace.config.attention_config.DTYPE_BYTES``)."""

    @abstractmethod
    def to_numpy(self, x: T) -> np.ndarray | None:
        """The values of ``x`` as a numpy array (bfloat16 widened to float32), or None."""

    @abstractmethod
    def linear(self, x: T, weight: T, bias: T | None) -> T:
        """``x @ weight.T + bias`` with weight (out_features, in_features)."""

    @abstractmethod
    def reshape(self, x: T, shape: Shape) -> T:
        """``x`` with a new shape of the same number of elements (a view when possible)."""

    @abstractmethod
    def transpose(self, x: T, dim0: int, dim1: int) -> T:
        """``x`` with axes ``dim0`` and ``dim1`` swapped (a view)."""

    @abstractmethod
    def matmul(self, a: T, b: T) -> T:
        """Batched matrix product ``a @ b`` over the last two axes."""

    @abstractmethod
    def scale(self, x: T, factor: float) -> T:
        """``x * factor``, keeping the dtype of ``x``."""

    @abstractmethod
    def softmax(self, x: T) -> T:
        """Softmax over the last axis; numerically stable (finite for logits of any size).

        A row whose logits are all -inf (every key masked) gives zeros, never NaN, as torch's
        ``scaled_dot_product_attention`` does."""

    # --- operations of the attention variants (masks, GQA/MQA, RoPE) ---

    def add(self, a: T, b: T) -> T:
        """Elementwise ``a + b``, broadcasting ``b``."""
        return self.binary("add", a, b)

    def mul(self, a: T, b: T) -> T:
        """Elementwise ``a * b``, broadcasting ``b``."""
        return self.binary("mul", a, b)

    @abstractmethod
    def where(self, keep: T, x: T, fill: float, *, inplace: bool = False) -> T:
        """``x`` where the boolean ``keep`` is True, else ``fill`` (``keep`` broadcasts to ``x``;
        into the memory of ``x`` when ``inplace``).

        The polarity is that of SDPA's boolean mask: True = attend."""

    @abstractmethod
    def repeat_interleave(self, x: T, repeats: int, axis: int) -> T:
        """Each slice along ``axis`` repeated ``repeats`` times in a row: [a, b] -> [a, a, b, b]."""

    @abstractmethod
    def rotate_half(self, x: T) -> T:
        """``concat(-x2, x1)`` of the two halves x1, x2 of the last axis (RoPE, Llama convention)."""

    # --- operations of current models' variants (issue 12) ---

    @abstractmethod
    def rotate_part(self, x: T, dims: int) -> T:
        """:meth:`rotate_half` of the first ``dims`` entries of the last axis, zeros after them
        (partial RoPE: the other entries keep their values through cos = 1, sin = 0)."""

    @abstractmethod
    def rotate_pairs(self, x: T, dims: int) -> T:
        """``(-x1, x0, -x3, x2, ...)`` of the first ``dims`` entries of the last axis, zeros
        after them: RoPE's pairing of neighbours (2i, 2i + 1), as Meta's Llama code and GPT-J
        (``rotate_every_two``) rotate (--rope-style interleaved)."""

    @abstractmethod
    def tanh(self, x: T) -> T:
        """Elementwise hyperbolic tangent (logit soft-capping)."""

    @abstractmethod
    def rms_norm(self, x: T, weight: T, eps: float) -> T:
        """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last axis (q/k norms), computed
        in at least float32 as transformers' RMSNorm does, returned in the dtype of ``x``."""

    def softmax_(self, x: T, scale: float = 1.0) -> T:
        """Softmax of ``x * scale`` (the same bits as :meth:`scale` then :meth:`softmax`) over
        the last axis, reusing the memory of ``x`` where the library allows (``x`` must not be
        used afterwards); the scale is not charged (the caller records it as its own step)."""
        return self.softmax(x if scale == 1.0 else self.scale(x, scale))

    # The operations of eager's blocked kernel (attntrace.engine.eager): each (Br, N) block of scores
    # is made, softmaxed and multiplied by v while in cache, written once where it is kept.

    def empty(self, shape: Shape, dtype: str) -> T:
        """A new tensor of ``shape`` whose values are not set (the caller writes every one)."""
        return self.full(shape, 0.0, dtype)

    def stand_in(self, shape: Shape, dtype: str) -> T:
        """A tensor of ``shape`` that holds no memory of its own (one zero, broadcast): it
        stands for a step whose values are made block by block elsewhere."""
        return self.full(shape, 0.0, dtype)

    def contiguous(self, x: T) -> T:
        """``x`` in a buffer of its own, in row-major order (BLAS reads it faster)."""
        out = self.empty(self.shape(x), self.dtype(x))
        self.write(out, 0, 0, x)
        return out

    def transposed_copy(self, x: T) -> T:
        """``x`` (..., N, d) as (..., d, N) in a buffer of its own, in row-major order (the
        k_t that eager's blocks multiply by: BLAS reads a row-major (d, N) fastest)."""
        return self.contiguous(self.transpose(self.contiguous(x), -2, -1))

    def matmul_into(self, a: T, b: T, out: T) -> None:
        """``out[...] = a @ b`` (:meth:`matmul`'s bits), in the memory of ``out``."""
        self.write(out, 0, 0, self.matmul(a, b))

    def scale_(self, x: T, factor: float) -> T:
        """:meth:`scale` (the same bits), in the memory of ``x`` where the library allows."""
        return self.scale(x, factor)

    def softmax_into(self, x: T, out: T, in_range: bool = False) -> None:
        """``out[...] = softmax(x)`` with the bits of :meth:`softmax` (zeros for a row of only
        -inf); ``x`` may be overwritten and must not be ``out``. ``in_range``: the caller
        proves every finite value of ``x`` within ±:meth:`unshifted_range` (a backend may
        then leave out the row max: the bits are the same)."""
        self.write(out, 0, 0, self.softmax(x))

    def softmax_sums_(self, x: T, in_range: bool = False) -> T | None:
        """The two halves of :meth:`softmax_into`: ``x`` overwritten by its exponentials (the
        row max subtracted where the softmax subtracts it) and their row sums (..., 1) returned,
        1 for a row of only -inf, so that ``x / sums`` has the bits of :meth:`softmax`; None
        (default, ``x`` untouched) when the library's softmax is one kernel that cannot be
        split."""
        return None

    def divide_into(self, a: T, b: T, out: T) -> None:
        """``out[...] = a / b``, ``b`` broadcasting to ``a``."""
        self.write(out, 0, 0, self.binary("div", a, b))

    def unshifted_range(self, dtype: str, keys: int) -> float:
        """R such that a softmax over ``keys`` keys whose finite scores all lie within ±R
        needs no row max subtracted (exp() can neither overflow nor lose precision there) and
        this backend's softmax then subtracts none; 0.0 (default): it always subtracts it."""
        return 0.0

    @property
    def slices_exactly(self) -> bool:
        """Whether ``matmul_into`` of some columns of ``b`` alone gives the bits of those
        columns of the whole product (eager then leaves out the keys a causal or window rule
        hides); default False."""
        return False

    def fused_attention(
        self, q: T, k: T, v: T, scale: float, mask: T | None, additive: bool, causal: bool = False
    ) -> T | None:
        """``softmax(q @ k^T * scale (+ mask)) @ v`` (B, h, S, d) from q (B, h, S, d), k, v
        (B, h, N, d) by the library's own fused kernel, which never forms the (S, N) matrix;
        ``mask`` broadcasts to the scores: True = attend, or added when ``additive``; a row
        without any key gives zeros. ``causal``: the mask is the causal rule alone (key j
        hidden from query i when j > i), which the kernel may apply itself instead of reading
        the mask. None when the library has no such kernel (default): the eager blocks run
        instead."""
        return None

    # The operations of the tiled (flash) algorithm.

    @contextmanager
    def one_thread_each(self) -> Iterator[None]:
        """A context in which each operation runs on one thread, so that independent blocks of
        work can run on several threads at once without the library's own threads fighting
        them for the cores (default: nothing to limit)."""
        yield

    @abstractmethod
    def narrow(self, x: T, axis: int, start: int, stop: int) -> T:
        """``x[..., start:stop, ...]`` along ``axis`` (a view)."""

    @abstractmethod
    def full(self, shape: Shape, value: float, dtype: str) -> T:
        """A new tensor of ``shape`` filled with ``value``."""

    @abstractmethod
    def write(self, out: T, axis: int, start: int, value: T) -> None:
        """Copy ``value`` into ``out`` at ``start`` along ``axis``, in place."""

    @abstractmethod
    def exp(self, x: T, *, inplace: bool = False) -> T:
        """Elementwise ``e ** x`` (into the memory of ``x`` when ``inplace``)."""

    @abstractmethod
    def binary(self, op: str, a: T, b: T, *, inplace: bool = False) -> T:
        """Elementwise ``a op b`` for ``op`` in :data:`BINARY_OPS`, broadcasting ``b``
        (into the memory of ``a`` when ``inplace``; then the result has the shape of ``a``)."""

    @abstractmethod
    def reduce_max(self, x: T) -> T:
        """Maximum over the last axis, which is dropped."""

    @abstractmethod
    def reduce_sum(self, x: T) -> T:
        """Sum over the last axis, which is dropped."""
