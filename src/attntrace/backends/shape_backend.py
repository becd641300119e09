"""The shape backend: the same operations on shapes alone, in pure Python.

It allocates nothing and imports neither numpy nor torch, so it traces sizes of any scale,
and :mod:`attntrace.engine.attention` uses it to estimate memory before a compute backend allocates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attntrace.backends.base import Backend, Shape, Source
from attntrace.config.attention_config import DTYPE_BYTES
from attntrace.errors import ConfigError


@dataclass(frozen=True)
class ShapeTensor:
    """A tensor that has a shape and a dtype but no values."""

    shape: Shape
    dtype: str


class ShapeBackend(Backend[ShapeTensor]):
    """Shape arithmetic of every operation, with the checks a real backend would make."""

    name = "shape"
    dtypes = tuple(DTYPE_BYTES)
    computes = False

    def tensor(self, source: Source) -> ShapeTensor:
        return ShapeTensor(tuple(source.shape), source.dtype)

    def shape(self, x: ShapeTensor) -> Shape:
        return x.shape

    def dtype(self, x: ShapeTensor) -> str:
        return x.dtype

    def to_numpy(self, x: ShapeTensor) -> None:
        return None

    def linear(self, x: ShapeTensor, weight: ShapeTensor, bias: ShapeTensor | None) -> ShapeTensor:
        out_features, in_features = weight.shape
        if x.shape[-1] != in_features:
            raise ConfigError(
                f"linear: input width {x.shape[-1]} != weight in_features {in_features}"
            )
        if bias is not None and bias.shape != (out_features,):
            raise ConfigError(f"linear: bias shape {bias.shape} != ({out_features},)")
        return ShapeTensor((*x.shape[:-1], out_features), x.dtype)

    def reshape(self, x: ShapeTensor, shape: Shape) -> ShapeTensor:
        if math.prod(shape) != math.prod(x.shape):
            raise ConfigError(f"reshape: cannot view {x.shape} as {shape}")
        return ShapeTensor(tuple(shape), x.dtype)

    def transpose(self, x: ShapeTensor, dim0: int, dim1: int) -> ShapeTensor:
        dims = list(x.shape)
        dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
        return ShapeTensor(tuple(dims), x.dtype)

    def matmul(self, a: ShapeTensor, b: ShapeTensor) -> ShapeTensor:
        if a.shape[-1] != b.shape[-2]:
            raise ConfigError(f"matmul: {a.shape} @ {b.shape} do not chain")
        lead = _broadcast(a.shape[:-2], b.shape[:-2])
        return ShapeTensor((*lead, a.shape[-2], b.shape[-1]), a.dtype)

    def scale(self, x: ShapeTensor, factor: float) -> ShapeTensor:
        return x

    def softmax(self, x: ShapeTensor) -> ShapeTensor:
        return x

    def where(
        self, keep: ShapeTensor, x: ShapeTensor, fill: float, *, inplace: bool = False
    ) -> ShapeTensor:
        return x if inplace else ShapeTensor(_broadcast(keep.shape, x.shape), x.dtype)

    def repeat_interleave(self, x: ShapeTensor, repeats: int, axis: int) -> ShapeTensor:
        dims = list(x.shape)
        dims[axis] *= repeats
        return ShapeTensor(tuple(dims), x.dtype)

    def rotate_half(self, x: ShapeTensor) -> ShapeTensor:
        if x.shape[-1] % 2:
            raise ConfigError(f"rotate_half: the last axis of {x.shape} is odd")
        return x

    def rotate_part(self, x: ShapeTensor, dims: int) -> ShapeTensor:
        if dims % 2 or dims > x.shape[-1]:
            raise ConfigError(f"rotate_part: {dims} dims do not fit the last axis of {x.shape}")
        return x

    def rotate_pairs(self, x: ShapeTensor, dims: int) -> ShapeTensor:
        if dims % 2 or dims > x.shape[-1]:
            raise ConfigError(f"rotate_pairs: {dims} dims do not fit the last axis of {x.shape}")
        return x

    def rms_norm(self, x: ShapeTensor, weight: ShapeTensor, eps: float) -> ShapeTensor:
        if weight.shape != x.shape[-1:]:
            raise ConfigError(
                f"rms_norm: weight {weight.shape} does not fit the last axis of {x.shape}"
            )
        return x

    def tanh(self, x: ShapeTensor) -> ShapeTensor:
        return x

    def log(self, x: ShapeTensor) -> ShapeTensor:
        return x

    def rsqrt(self, x: ShapeTensor) -> ShapeTensor:
        return x

    def narrow(self, x: ShapeTensor, axis: int, start: int, stop: int) -> ShapeTensor:
        dims = list(x.shape)
        if not 0 <= start < stop <= dims[axis]:
            raise ConfigError(f"narrow: [{start}:{stop}] is outside axis {axis} of {x.shape}")
        dims[axis] = stop - start
        return ShapeTensor(tuple(dims), x.dtype)

    def full(self, shape: Shape, value: float, dtype: str) -> ShapeTensor:
        return ShapeTensor(tuple(shape), dtype)

    def write(self, out: ShapeTensor, axis: int, start: int, value: ShapeTensor) -> None:
        self.narrow(out, axis, start, start + value.shape[axis])

    def exp(self, x: ShapeTensor, *, inplace: bool = False) -> ShapeTensor:
        return x

    def binary(
        self, op: str, a: ShapeTensor, b: ShapeTensor, *, inplace: bool = False
    ) -> ShapeTensor:
        shape = _broadcast(a.shape, b.shape)
        if inplace and shape != a.shape:
            raise ConfigError(f"{op}: cannot write {shape} into {a.shape} in place")
        return a if inplace else ShapeTensor(shape, a.dtype)

    def reduce_max(self, x: ShapeTensor) -> ShapeTensor:
        return ShapeTensor(x.shape[:-1], x.dtype)

    def reduce_sum(self, x: ShapeTensor) -> ShapeTensor:
        return ShapeTensor(x.shape[:-1], x.dtype)


def _broadcast(a: Shape, b: Shape) -> Shape:
    """numpy broadcasting of two batch shapes."""
    width = max(len(a), len(b))
    a, b = (1,) * (width - len(a)) + a, (1,) * (width - len(b)) + b
    if any(m != n and 1 not in (m, n) for m, n in zip(a, b, strict=True)):
        raise ConfigError(f"shapes {a} and {b} do not broadcast")
    return tuple(max(m, n) for m, n in zip(a, b, strict=True))


def backend() -> ShapeBackend:
    """The registry's constructor."""
    return ShapeBackend()
