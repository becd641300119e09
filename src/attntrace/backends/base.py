"""The interface of a backend, in two parts.

:class:`Backend` holds the core operations every backend implements (linear, reshape,
transpose, matmul, softmax, masked fill, ...): the attention algorithm is written once against
them. :class:`FastPath` is optional: the speed variants of some of them (in place, into a
given buffer, a fused kernel) that the numpy and torch backends add and eager's blocks
(:mod:`attntrace.engine.eager`) use. The engine asks for it once, with :func:`fast_path`: a
backend of the core alone (the shape backend, or one a user writes) gets the same operations
made of its core ones.

A backend never imports its library at module level of :mod:`attntrace`: the registry in
:mod:`attntrace.backends` imports a backend module only when that backend is asked for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar, cast, runtime_checkable

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
    ``start:stop`` of it in place; a lazy sequence where there are many, so that making a
    source costs nothing before a backend computes it."""

    empty: Callable[[], np.ndarray]
    blocks: Sequence[RowBlock]


@dataclass(frozen=True)
class RowBlock:
    """Rows ``start:stop`` of :class:`Parts`, written in place by ``fill(rows)``."""

    start: int
    stop: int
    fill: Callable[[np.ndarray], None]


class Backend(ABC, Generic[T]):
    """The core operations on tensors of type ``T``; each returns a new tensor or a view.
    Shapes are written batched, (B, h, S, d); any leading axes broadcast the same way."""

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
        """``x @ weight.T + bias``: x (..., in), weight (out, in), bias (out,) -> (..., out)."""

    @abstractmethod
    def reshape(self, x: T, shape: Shape) -> T:
        """``x`` with a new shape of the same number of elements (a view when possible)."""

    @abstractmethod
    def transpose(self, x: T, dim0: int, dim1: int) -> T:
        """``x`` with axes ``dim0`` and ``dim1`` swapped (a view)."""

    @abstractmethod
    def matmul(self, a: T, b: T) -> T:
        """``a @ b`` over the last two axes: (..., M, K) @ (..., K, N) -> (..., M, N)."""

    @abstractmethod
    def scale(self, x: T, factor: float) -> T:
        """``x * factor``, keeping the dtype of ``x``."""

    @abstractmethod
    def softmax(self, x: T) -> T:
        """Softmax over the last axis (..., N) -> (..., N); finite for logits of any size.

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
        """Each slice along ``axis`` repeated ``repeats`` times: (B, g, N, d) -> (B, g·r, N, d)."""

    @abstractmethod
    def rotate_half(self, x: T) -> T:
        """``concat(-x2, x1)`` of the halves x1, x2 of the last axis (..., d) (RoPE, Llama's)."""

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

    def rsqrt(self, x: T) -> T:
        """Elementwise ``1 / sqrt(x)`` (the backward of the q/k norms). Not abstract: a backend
        written before it raises ConfigError when the backward of --qk-norm asks for it."""
        raise ConfigError(f"the {self.name} backend has no rsqrt, which --backward --qk-norm needs")

    def log(self, x: T) -> T:
        """Elementwise natural log (flash's log-sum-exp, kept for its backward). Not abstract: a
        backend written before it raises ConfigError when --backward --algorithm flash asks."""
        raise ConfigError(f"the {self.name} backend has no log, which --backward flash needs")

    # --- the operations of the tiled (flash) algorithm, and of eager's blocks ---

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
        """Maximum over the last axis, which is dropped: (..., N) -> (...)."""

    @abstractmethod
    def reduce_sum(self, x: T) -> T:
        """Sum over the last axis, which is dropped: (..., N) -> (...)."""


@runtime_checkable
class FastPath(Protocol[T]):
    """The optional speed variants of the core operations (numpy and torch implement them):
    each gives the bits of the core operations it names, only faster or in less memory.
    :func:`fast_path` gives them made of the core operations to a backend without them."""

    def softmax_(self, x: T, scale: float = 1.0) -> T:
        """Softmax of ``x * scale`` (the bits of ``scale`` then ``softmax``) over the last axis,
        in the memory of ``x`` where the library allows (``x`` is not used afterwards); the
        scale is not charged (the caller records it as its own step)."""
        ...

    def empty(self, shape: Shape, dtype: str) -> T:
        """A new tensor of ``shape`` whose values are not set (the caller writes every one)."""
        ...

    def stand_in(self, shape: Shape, dtype: str) -> T:
        """A tensor of ``shape`` that holds no memory of its own (one zero, broadcast): it
        stands for a step whose values are made block by block elsewhere."""
        ...

    def contiguous(self, x: T) -> T:
        """``x`` in a buffer of its own, in row-major order (BLAS reads it faster)."""
        ...

    def transposed_copy(self, x: T) -> T:
        """``x`` (..., N, d) as (..., d, N) in a row-major buffer of its own (the k_t that
        eager's blocks multiply by: BLAS reads a row-major (d, N) fastest)."""
        ...

    def matmul_into(self, a: T, b: T, out: T) -> None:
        """``out[...] = a @ b`` (the bits of ``matmul``), (..., M, K) @ (..., K, N) into
        (..., M, N) in the memory of ``out``."""
        ...

    def scale_(self, x: T, factor: float) -> T:
        """``scale`` (the same bits), in the memory of ``x`` where the library allows."""
        ...

    def softmax_into(self, x: T, out: T, in_range: bool = False) -> None:
        """``out[...] = softmax(x)`` over the last axis with the bits of ``softmax`` (zeros
        for a row of only -inf); ``x`` may be overwritten and is not ``out``. ``in_range``:
        the caller proves every finite value of ``x`` within ±:meth:`unshifted_range` (the row
        max may then be left out: the same bits)."""
        ...

    def softmax_sums_(self, x: T, in_range: bool = False) -> T | None:
        """The two halves of :meth:`softmax_into`: ``x`` (..., N) overwritten by its
        exponentials (less the row max where the softmax subtracts it) and their row sums
        (..., 1) returned, 1 for a row of only -inf, so that ``x / sums`` has the bits of
        ``softmax``; None (``x`` untouched) when the library's softmax is one kernel."""
        ...

    def divide_into(self, a: T, b: T, out: T) -> None:
        """``out[...] = a / b``, ``b`` (..., 1) broadcasting to ``a`` (..., N)."""
        ...

    def unshifted_range(self, dtype: str, keys: int) -> float:
        """R such that a softmax over ``keys`` keys whose finite scores all lie within ±R
        needs no row max (exp() neither overflows nor loses precision) and this backend's
        softmax then subtracts none; 0.0: it always subtracts it."""
        ...

    @property
    def slices_exactly(self) -> bool:
        """Whether ``matmul_into`` of some columns of ``b`` alone gives the bits of those
        columns of the whole product (eager then leaves out the keys a causal or window rule
        hides)."""
        ...

    def fused_attention(
        self, q: T, k: T, v: T, scale: float, mask: T | None, additive: bool, causal: bool = False
    ) -> T | None:
        """``softmax(q @ k^T * scale (+ mask)) @ v`` (B, h, S, d) from q (B, h, S, d), k, v
        (B, h, N, d) by the library's fused kernel (no (S, N) matrix); ``mask`` broadcasts to
        the scores: True = attend, or added when ``additive``; a row without any key gives
        zeros; ``causal``: the mask is the causal rule alone (the kernel may apply it itself).
        None when the library has no such kernel: eager's blocks run instead."""
        ...

    def one_thread_each(self) -> AbstractContextManager[None]:
        """A context in which each operation runs on one thread, so that independent blocks of
        work run on several threads at once without the library's own threads fighting them
        for the cores."""
        ...


class CoreFastPath(Generic[T]):
    """:class:`FastPath` made of the core operations of ``be``: the same bits, none of the
    speed (for a backend of the core alone).

    >>> from attntrace.backends.shape_backend import ShapeBackend
    >>> fast = fast_path(ShapeBackend())
    >>> type(fast).__name__, fast.stand_in((2, 3), "float32").shape, fast.slices_exactly
    ('CoreFastPath', (2, 3), False)
    """

    def __init__(self, be: Backend[T]) -> None:
        self.be = be

    def softmax_(self, x: T, scale: float = 1.0) -> T:
        return self.be.softmax(x if scale == 1.0 else self.be.scale(x, scale))

    def empty(self, shape: Shape, dtype: str) -> T:
        return self.be.full(shape, 0.0, dtype)

    def stand_in(self, shape: Shape, dtype: str) -> T:
        return self.be.full(shape, 0.0, dtype)

    def contiguous(self, x: T) -> T:
        out = self.empty(self.be.shape(x), self.be.dtype(x))
        self.be.write(out, 0, 0, x)
        return out

    def transposed_copy(self, x: T) -> T:
        return self.contiguous(self.be.transpose(self.contiguous(x), -2, -1))

    def matmul_into(self, a: T, b: T, out: T) -> None:
        self.be.write(out, 0, 0, self.be.matmul(a, b))

    def scale_(self, x: T, factor: float) -> T:
        return self.be.scale(x, factor)

    def softmax_into(self, x: T, out: T, in_range: bool = False) -> None:
        self.be.write(out, 0, 0, self.be.softmax(x))

    def softmax_sums_(self, x: T, in_range: bool = False) -> T | None:
        return None

    def divide_into(self, a: T, b: T, out: T) -> None:
        self.be.write(out, 0, 0, self.be.binary("div", a, b))

    def unshifted_range(self, dtype: str, keys: int) -> float:
        return 0.0

    @property
    def slices_exactly(self) -> bool:
        return False

    def fused_attention(
        self, q: T, k: T, v: T, scale: float, mask: T | None, additive: bool, causal: bool = False
    ) -> T | None:
        return None

    @contextmanager
    def one_thread_each(self) -> Iterator[None]:
        yield


def fast_path(be: Backend[T]) -> FastPath[T]:
    """The speed variants of ``be``: the backend itself when it implements :class:`FastPath`,
    else the same operations made of its core ones (:class:`CoreFastPath`). The one check.

    >>> from attntrace.backends import get_backend
    >>> numpy = get_backend("numpy")
    >>> fast_path(numpy) is numpy
    True
    """
    if isinstance(be, FastPath):
        return cast("FastPath[T]", be)
    return CoreFastPath(be)
