"""Public names of a package imported on first use (PEP 562), so that ``attntrace --help`` and
a numpy run load only what they need."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name of ``names`` (name ->
    the module defining it) is imported when first read, then kept in the package.

    >>> get, _ = lazy_names("attntrace", {"AttentionConfig": "attntrace.config.attention_config"})
    >>> get("AttentionConfig").__name__
    'AttentionConfig'
    """

    def get(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def listing() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return get, listing
