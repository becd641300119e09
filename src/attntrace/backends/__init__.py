"""Backend registry: a backend's module (and so its library) is imported only on request."""

from __future__ import annotations

import importlib
from typing import Any

from attntrace.backends.base import Backend, Source
from attntrace.errors import ConfigError

#: Backend names, in the order the CLI lists them.
BACKENDS: tuple[str, ...] = ("numpy", "torch", "shape")

__all__ = ["BACKENDS", "Backend", "Source", "get_backend"]


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
