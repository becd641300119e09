"""Numpy copies of kept values: arrays that are views of one buffer (a reshape, a transpose)
get views of one copy of that buffer, so each buffer is copied once. Below both the recorder
(:mod:`~attntrace.capturing.record`, for values no adapter reads) and the numpy hooks
(:mod:`~attntrace.capturing.numpy_hooks`, which unwrap their traced arrays first)."""

from __future__ import annotations

from typing import Any

import numpy as np

# bound at import, before a capture wraps np.array (numpy_hooks imports this module first)
_array = np.array


def copy_shared(plain: Any, memo: dict[int, Any]) -> np.ndarray:
    """A read-only-shared copy of the ndarray ``plain``; ``memo`` holds the copies by buffer.

    >>> a = np.arange(6.0).reshape(2, 3)
    >>> memo = {}
    >>> b, c = copy_shared(a, memo), copy_shared(a.T, memo)
    >>> np.shares_memory(b, c), np.shares_memory(a, b), c.tolist()
    (True, False, [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]])
    """
    owner = plain
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if owner is plain or not (owner.flags.c_contiguous or owner.flags.f_contiguous):
        return _array(plain, copy=True)
    if id(owner) not in memo:
        copied = _array(owner, copy=True, order="K")
        copied.flags.writeable = False  # shared by the views below: read-only
        memo[id(owner)] = (owner, copied)
    copied = memo[id(owner)][1]
    offset = plain.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    view = np.ndarray(plain.shape, plain.dtype, copied.data, offset, plain.strides)
    view.flags.writeable = False
    return view
