"""attntrace: trace every intermediate tensor shape of multi-head attention.

>>> import attntrace
>>> t = attntrace.trace_attention(attntrace.AttentionConfig(seq=3, hidden=768, heads=12))
>>> t.shape("q_heads")
(3, 12, 64)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.attention import STEP_NAMES, VARIANT_STEPS, estimate_bytes, step_names, trace_attention
    from attntrace.backends import BACKENDS, get_backend
    from attntrace.config import DTYPE_BYTES, AttentionConfig
    from attntrace.errors import (
        AttntraceError,
        BackendUnavailableError,
        ConfigError,
        InputFileError,
        MemoryBudgetError,
    )
    from attntrace.masks import MaskWarning
    from attntrace.presets import PRESETS, resolve_config
    from attntrace.trace import Param, Step, Trace

# Eager, and after the package's own names: the functions capture and diff must win over the
# subpackages of the same names (importing a subpackage later does not rebind the attribute).
from attntrace.capture import Capture, CapturedStep, capture
from attntrace.diff import DiffReport, diff

#: Where each public name lives: imported on first use, so that ``attntrace --help`` and the
#: shape backend do not pay for the algorithm's modules (PEP 562).
_HOMES = {
    "attention": ("STEP_NAMES", "VARIANT_STEPS", "estimate_bytes", "step_names", "trace_attention"),
    "backends": ("BACKENDS", "get_backend"),
    "config": ("DTYPE_BYTES", "AttentionConfig"),
    "errors": ("AttntraceError", "BackendUnavailableError", "ConfigError", "InputFileError", "MemoryBudgetError"),
    "masks": ("MaskWarning",),
    "presets": ("PRESETS", "resolve_config"),
    "trace": ("Param", "Step", "Trace"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'attntrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"attntrace.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "DTYPE_BYTES",
    "PRESETS",
    "STEP_NAMES",
    "VARIANT_STEPS",
    "AttentionConfig",
    "AttntraceError",
    "BackendUnavailableError",
    "Capture",
    "CapturedStep",
    "ConfigError",
    "DiffReport",
    "InputFileError",
    "MaskWarning",
    "MemoryBudgetError",
    "Param",
    "Step",
    "Trace",
    "__version__",
    "capture",
    "diff",
    "estimate_bytes",
    "get_backend",
    "resolve_config",
    "step_names",
    "trace_attention",
]
