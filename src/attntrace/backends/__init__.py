"""Backend registry: a backend's module (and so its library) is imported only on request."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from attntrace.backends.base import Backend, FastPath, Source, fast_path
from attntrace.errors import ConfigError

#: Backend names, in the order the CLI lists them.
BACKENDS: tuple[str, ...] = ("numpy", "torch", "shape")

__all__ = [
    "BACKENDS",
    "Backend",
    "FastPath",
    "Source",
    "blas_pinned",
    "fast_path",
    "get_backend",
    "single_threaded_blas",
]

#: Below this many FLOPs a run is too small for BLAS threads to pay off: waking them costs more
#: than the arithmetic (30 ms against 0.2 ms for a (3, 768) @ (768, 768) on a busy 2-core machine).
SMALL_WORK_FLOPS = 10**9


#: The variables that numpy's BLAS (OpenBLAS, or MKL) reads for its thread count at import.
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Set by single_threaded_blas: whether every variable says one thread (read by blas_pinned).
_blas_state = {"pinned": False}


def single_threaded_blas() -> bool:
    """Ask numpy's BLAS for one thread, unless numpy is already imported (then it is too late)
    or the user chose a thread count; True when the request was made."""
    if "numpy" in sys.modules:
        return False
    for var in _BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")
    _blas_state["pinned"] = all(os.environ[var] == "1" for var in _BLAS_THREAD_VARS)
    return True


def blas_pinned() -> bool:
    """Whether numpy's BLAS was loaded with one thread by :func:`single_threaded_blas` (every
    variable it reads says 1): then limiting it to one thread is nothing to do, and a small
    run skips threadpoolctl's import and its search of the loaded libraries (~8 ms).
    (tests/cli/test_startup.py checks it in fresh processes, with and without the variables.)

    >>> import numpy  # loaded before any request: too late to ask, and nothing is pinned
    >>> single_threaded_blas(), blas_pinned()
    (False, False)
    """
    return _blas_state["pinned"]


def get_backend(name: str) -> Backend[Any]:
    """The backend called ``name``; imports its library now.

    >>> get_backend("numpy").name
    'numpy'
    """
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"attntrace.backends.{name}_backend")
    backend: Backend[Any] = module.backend()
    return backend
