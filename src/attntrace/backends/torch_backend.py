"""The torch backend (CPU). torch is imported when this module is, and only the registry
imports it, only when ``backend="torch"`` is asked for."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from attntrace.backends.base import Backend, FastPath, Shape, Source
from attntrace.config.attention_config import MASK_DTYPE
from attntrace.errors import BackendUnavailableError, install_hint

if TYPE_CHECKING:
    import numpy as np
    import torch

#: Buffers of at least this many elements are allocated by numpy, in huge pages (see empty()).
HUGE_PAGES_NUMEL = 1 << 20


def _import_torch() -> object:
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the torch backend needs PyTorch, which is not installed; {install_hint('torch')}"
        ) from exc
    return torch


class TorchBackend(Backend["torch.Tensor"], FastPath["torch.Tensor"]):
    """Attention operations on ``torch.Tensor`` on the CPU: the core ones and the fast path."""

    name = "torch"
    pools_checks = False
    dtypes = ("float16", "bfloat16", "float32", "float64")

    def __init__(self) -> None:
        _import_torch()
        import torch

        self._torch = torch
        self._dtypes = {name: getattr(torch, name) for name in self.dtypes}

    def tensor(self, source: Source) -> torch.Tensor:
        dtype = self._torch.bool if source.dtype == MASK_DTYPE else self._dtypes[source.dtype]
        return self._torch.from_numpy(source.make()).to(dtype)

    def shape(self, x: torch.Tensor) -> Shape:
        return tuple(int(n) for n in x.shape)

    def dtype(self, x: torch.Tensor) -> str:
        return str(x.dtype).removeprefix("torch.")

    def to_numpy(self, x: torch.Tensor) -> np.ndarray:
        x = x.detach().cpu()
        # numpy has no bfloat16: widen to float32 (exact, every bfloat16 is a float32)
        return (x.float() if x.dtype == self._torch.bfloat16 else x).numpy()

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        return self._torch.nn.functional.linear(x, weight, bias)

    def reshape(self, x: torch.Tensor, shape: Shape) -> torch.Tensor:
        return x.reshape(shape)

    def transpose(self, x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
        return x.transpose(dim0, dim1)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self._torch.matmul(a, b)

    def scale(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor

    def softmax_(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        # torch's softmax has no in-place form
        return self.softmax(x if scale == 1.0 else x.mul_(scale))

    def softmax(self, x: torch.Tensor) -> torch.Tensor:
        out = self._torch.softmax(x, dim=-1)  # subtracts the row max internally
        # torch.softmax gives NaN for a row of only -inf (every key masked); SDPA gives zeros
        # (..., S, 1): one read, no (S, N) temporary
        dead = self._torch.isneginf(x.amax(dim=-1, keepdim=True))
        return out.masked_fill_(dead, 0.0) if bool(dead.any()) else out

    def where(
        self, keep: torch.Tensor, x: torch.Tensor, fill: float, *, inplace: bool = False
    ) -> torch.Tensor:
        if inplace:
            return x.masked_fill_(~keep, fill)
        return x.masked_fill(~keep, fill)  # masked_fill fills where True: the opposite polarity

    def repeat_interleave(self, x: torch.Tensor, repeats: int, axis: int) -> torch.Tensor:
        return x.repeat_interleave(repeats, dim=axis)

    def rotate_half(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return self._torch.cat((-x2, x1), dim=-1)

    def rotate_part(self, x: torch.Tensor, dims: int) -> torch.Tensor:
        half, rest = dims // 2, x[..., dims:]
        zeros = self._torch.zeros_like(rest)
        return self._torch.cat((-x[..., half:dims], x[..., :half], zeros), dim=-1)

    def rotate_pairs(self, x: torch.Tensor, dims: int) -> torch.Tensor:
        tc = self._torch
        pairs = tc.stack((-x[..., 1:dims:2], x[..., 0:dims:2]), dim=-1).flatten(-2)  # (..., R)
        out: torch.Tensor = tc.cat((pairs, tc.zeros_like(x[..., dims:])), dim=-1)  # (..., d)
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        tc = self._torch
        wide = x.to(tc.promote_types(x.dtype, tc.float32))
        scaled = wide * tc.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
        out: torch.Tensor = weight * scaled.to(x.dtype)
        return out

    def tanh(self, x: torch.Tensor) -> torch.Tensor:
        return x.tanh()

    def log(self, x: torch.Tensor) -> torch.Tensor:
        return x.log()

    def rsqrt(self, x: torch.Tensor) -> torch.Tensor:
        return x.rsqrt()

    def empty(self, shape: Shape, dtype: str) -> torch.Tensor:
        if math.prod(shape) < HUGE_PAGES_NUMEL:
            return self._torch.empty(shape, dtype=self._dtypes[dtype])
        # numpy asks the kernel for huge pages (madvise) for large buffers, torch's allocator does
        # not: first writes into 256 MiB of weights fault 128 pages instead of 65,536 (4x faster);
        # and the memory of the last large buffer freed is reused (see attntrace.backends.spare)
        import numpy as np

        from attntrace.backends import spare

        held = spare.empty(shape, np.uint16 if dtype == "bfloat16" else np.dtype(dtype))
        return self._torch.from_numpy(held).view(self._dtypes[dtype])

    def stand_in(self, shape: Shape, dtype: str) -> torch.Tensor:
        return self._torch.zeros((), dtype=self._dtypes[dtype]).expand(shape)

    def contiguous(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous()

    def transposed_copy(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous().transpose(-2, -1).contiguous()  # (..., d, N), row-major

    def matmul_into(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        self._torch.matmul(a, b, out=out)

    def scale_(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return x.mul_(factor)

    def softmax_into(self, x: torch.Tensor, out: torch.Tensor, in_range: bool = False) -> None:
        # torch.softmax's own kernel (dim -1, no up-cast), written into out
        self._torch.ops.aten._softmax.out(x, -1, False, out=out)
        nan = out[..., :1].isnan()  # (..., Br, 1): NaN rows are rows of only -inf, or hold NaN
        if bool(nan.any()):
            dead = nan & self._torch.isneginf(x.amax(dim=-1, keepdim=True))
            out.masked_fill_(dead, 0.0)  # zeros, as softmax() and SDPA give them

    def softmax_sums_(self, x: torch.Tensor, in_range: bool = False) -> None:
        return None  # torch's softmax is one kernel: softmax_into, then weights @ v

    def divide_into(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        self._torch.div(a, b, out=out)

    def unshifted_range(self, dtype: str, keys: int) -> float:
        return 0.0  # torch's softmax always subtracts the row max

    @property
    def slices_exactly(self) -> bool:
        return False  # MKL picks its kernels by size: fewer columns, maybe other bits

    def fused_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        mask: torch.Tensor | None,
        additive: bool,
        causal: bool = False,
    ) -> torch.Tensor | None:
        tc = self._torch
        if q.dtype not in (tc.float32, tc.float64):  # half types: the blocks, as before
            return None
        if mask is not None and mask.dtype != (q.dtype if additive else tc.bool):
            return None
        if mask is not None and mask.dim() < 2:
            mask = mask.reshape(1, -1)  # (N,) -> (1, N): SDPA wants the rows axis too
        # torch's SDPA: bool masks keep where True, float masks are added, as ours; a row
        # without any key comes out as zeros on the CPU; the causal rule alone is is_causal,
        # what a torch user passes (SDPA then skips the hidden half of the work)
        sdpa = tc.nn.functional.scaled_dot_product_attention
        out: torch.Tensor = (
            sdpa(q, k, v, is_causal=True, scale=scale)
            if causal
            else sdpa(q, k, v, attn_mask=mask, scale=scale)
        )  # (B, h, S, d)
        return out

    @contextmanager
    def one_thread_each(self) -> Iterator[None]:
        before = self._torch.get_num_threads()
        self._torch.set_num_threads(1)  # process-wide while the blocks run
        try:
            yield
        finally:
            self._torch.set_num_threads(before)

    def narrow(self, x: torch.Tensor, axis: int, start: int, stop: int) -> torch.Tensor:
        return x.narrow(axis, start, stop - start)

    def full(self, shape: Shape, value: float, dtype: str) -> torch.Tensor:
        return self._torch.full(shape, value, dtype=self._dtypes[dtype])

    def write(self, out: torch.Tensor, axis: int, start: int, value: torch.Tensor) -> None:
        out.narrow(axis, start, value.shape[axis]).copy_(value)

    def exp(self, x: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
        return x.exp_() if inplace else x.exp()

    def binary(
        self, op: str, a: torch.Tensor, b: torch.Tensor, *, inplace: bool = False
    ) -> torch.Tensor:
        fn = getattr(self._torch, op)  # torch.add, sub, mul, div, maximum
        out: torch.Tensor = fn(a, b, out=a) if inplace else fn(a, b)
        return out

    def reduce_max(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=-1)

    def reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def backend() -> TorchBackend:
    """The registry's constructor."""
    return TorchBackend()
