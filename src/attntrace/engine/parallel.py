"""Threads for independent blocks of work (flash's query blocks, eager's softmax rows).

numpy and torch release the GIL inside their kernels, so a pool of Python threads runs the
blocks on every core. Inside the pool each kernel must stay on one thread: a multi-threaded BLAS
under many small matmuls spins its own threads against ours (and against any other process on
the cores), which made flash 20x slower on a busy machine. See
:meth:`attntrace.backends.base.FastPath.one_thread_each`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from attntrace.errors import ConfigError

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

W = TypeVar("W")
R = TypeVar("R")


@cache
def cores() -> int:
    """The cores this process may run on.

    >>> cores() >= 1
    True
    """
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_threads(threads: int | None) -> int:
    """``threads``, or the default (every usable core); ConfigError when it is not positive.

    >>> check_threads(3), check_threads(None) == cores()
    (3, True)
    """
    if threads is None:
        return cores()
    if not 1 <= threads <= 1024:
        raise ConfigError(
            f"--threads {threads} is out of range; use 1 to 1024 (default: {cores()}, the cores)"
        )
    return threads


def in_pool() -> bool:
    """Whether this is one of attntrace's worker threads, which must not wait on a pool of
    its own (every worker could be waiting then).

    >>> in_pool()
    False
    """
    import threading

    return threading.current_thread().name.startswith(POOL_PREFIX)


#: The name of every worker thread begins with this.
POOL_PREFIX = "attntrace"


@cache
def pool(threads: int) -> ThreadPoolExecutor:
    """A shared pool of ``threads`` worker threads (created once per size)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(threads, thread_name_prefix=POOL_PREFIX)


def spread(fn: Callable[[W], object], work: Sequence[W], threads: int) -> None:
    """``fn`` on every item of ``work``, on ``threads`` workers of the pool that each take the
    next item until none is left: one task per worker, not one per item (a future per item
    made the waiting thread build ~150 of them against the GIL while the workers ran, ~25 ms of
    a 2048 run). The first error of an item stops the others' taking and is raised here.

    >>> done = []
    >>> spread(done.append, range(5), 2)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
    """
    import threading

    items, lock, failed = iter(work), threading.Lock(), threading.Event()

    def drain(_: int) -> None:
        while not failed.is_set():
            with lock:
                item = next(items, _END)
            if item is _END:
                return
            try:
                fn(item)  # type: ignore[arg-type]  # not _END: checked above
            except BaseException:
                failed.set()
                raise

    list(pool(threads).map(drain, range(min(threads, len(work)))))


_END = object()


#: Arrays of fewer elements than this are read on the calling thread alone by
#: :func:`map_parts` (a pass over 2^20 float32 takes ~0.1 ms; the pool's hand-off ~0.05 ms).
PARTS_MIN_NUMEL = 1 << 20


def map_parts(
    fn: Callable[..., R], *arrays: np.ndarray, keep: tuple[int, ...] = (), pooled: bool = True
) -> list[R]:
    """``fn`` on views of ``arrays`` (of one shape; the first decides) that together hold each
    element once, in order, the same part of each array in one call (``np.copyto`` as ``fn``
    copies one into another): one part per core along the longest axis not in ``keep`` (axes
    a part must hold whole, as the rows of a norm), on the pool, when the array is large,
    ``pooled`` and this is not a worker; else ``[fn(*arrays)]``. For reductions whose order
    does not matter (a max, a count, norms): the main thread's passes over the projections and
    the weights ran on one core while the other waited.

    >>> import numpy as np
    >>> a = np.arange(12.0).reshape(3, 4)
    >>> float(max(map_parts(np.max, a))), float(sum(map_parts(np.sum, np.ones((2048, 1024)))))
    (11.0, 2097152.0)
    >>> shapes = [p.shape for p in map_parts(lambda p: p, np.ones((4, 64, 8192)), keep=(-1,))]
    >>> sum(s[1] for s in shapes), {(s[0], s[2]) for s in shapes}  # along the 64, never the 8192
    (64, {(4, 8192)})
    """
    n, array = cores(), arrays[0]
    kept = {k % array.ndim for k in keep}
    axes = [i for i in range(array.ndim) if i not in kept]
    if not pooled or n == 1 or array.size < PARTS_MIN_NUMEL or in_pool() or not axes:
        return [fn(*arrays)]
    axis = max(axes, key=lambda i: array.shape[i])
    cuts = [array.shape[axis] * i // n for i in range(n + 1)]
    lead = (slice(None),) * axis
    parts = [(*lead, slice(a, b)) for a, b in itertools.pairwise(cuts) if b > a]
    return list(pool(n).map(lambda part: fn(*(a[part] for a in arrays)), parts))


def extremes(a: np.ndarray) -> tuple[np.generic, np.generic]:
    """The max and the min of a non-empty ``a`` (both NaN when it holds one): two passes, no
    temporary (a part of :func:`map_parts` each).

    >>> import numpy as np
    >>> [float(x) for x in extremes(np.array([3.0, -1.0, 2.0]))]
    [3.0, -1.0]
    """
    return a.max(), a.min()
