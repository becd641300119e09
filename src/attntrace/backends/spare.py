"""One large freed buffer kept for the next trace.

The first write into a new (B, h, S, N) buffer of weights costs a page fault per page: 256 MiB
at (1, 2048, 1024, 16) is 35 ms on a quiet machine and several hundred when the kernel must
compact memory for huge pages on a busy one, as much as the attention itself. So the memory of
the last large buffer whose arrays are all gone is kept (one buffer, no more) and handed to the
next large request of about the same size. It is reused only when no array made from it is
alive (a view kept by the caller keeps its memory to itself); :func:`release` gives it back.

>>> import numpy as np
>>> a = empty((4, 1 << 22), np.float32)  # 64 MiB
>>> where = a.__array_interface__["data"][0]
>>> del a  # nothing else holds it: kept
>>> b = empty((4, 1 << 22), np.float32)
>>> b.__array_interface__["data"][0] == where
True
>>> view = b[0]
>>> del b  # a view still holds the memory: never handed out again while it lives
>>> empty((4, 1 << 22), np.float32).__array_interface__["data"][0] == where
False
>>> release()
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from typing import Any

import numpy as np

#: Buffers of at least this many bytes are kept for reuse (the weights of large runs).
SPARE_MIN_BYTES = 64 << 20

_lock = threading.Lock()
_spare: list[np.ndarray] = []  # at most one uint8 buffer whose array is gone


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``numpy.empty(shape, dtype)``, in the kept buffer when it is free and of about that size."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size < SPARE_MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    base = _take(size)
    if base is None:
        base = np.empty(size, dtype=np.uint8)
    out: np.ndarray = base[:size].view(dtype).reshape(shape)
    weakref.finalize(out, _keep, base)  # when the array is gone, its memory waits here
    return out


def release() -> None:
    """Give the kept buffer back (to the system, unless a view of it is still alive)."""
    with _lock:
        _spare.clear()


def _take(size: int) -> np.ndarray | None:
    with _lock:
        base = _spare.pop() if _spare else None
    # getrefcount counts its argument and this function's name: 2 when no array uses it
    if base is None or not size <= base.nbytes <= 2 * size or sys.getrefcount(base) > 2:
        return None  # dropped: freed now, or when the views that hold it are gone
    return base


def _keep(base: np.ndarray) -> None:
    with _lock:
        _spare[:] = [base]  # replaces (frees) an older one
