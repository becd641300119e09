"""attntrace: trace every intermediate tensor shape of multi-head attention.

>>> import attntrace
>>> t = attntrace.trace_attention(attntrace.AttentionConfig(seq=3, hidden=768, heads=12))
>>> t.shape("q_heads")
(3, 12, 64)
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from attntrace.errors import (
    AttntraceError,
    BackendUnavailableError,
    ConfigError,
    InputFileError,
    MemoryBudgetError,
)
from attntrace.lazy import lazy_names

if TYPE_CHECKING:  # the names below are imported on first use (``attntrace --help`` stays fast)
    from attntrace.attention import (
        STEP_NAMES,
        VARIANT_STEPS,
        estimate_bytes,
        step_names,
        trace_attention,
    )
    from attntrace.backends import BACKENDS, get_backend
    from attntrace.capture import Capture, CapturedStep, capture
    from attntrace.config import DTYPE_BYTES, AttentionConfig
    from attntrace.diff import DiffReport, diff
    from attntrace.masks import MaskWarning
    from attntrace.presets import PRESETS, resolve_config
    from attntrace.trace import Param, Step, Trace

#: Public name -> the module that defines it, imported when the name is first read.
_LAZY = {
    **dict.fromkeys(["STEP_NAMES", "VARIANT_STEPS", "estimate_bytes", "step_names",
                     "trace_attention"], "attntrace.attention"),
    **dict.fromkeys(["BACKENDS", "get_backend"], "attntrace.backends"),
    **dict.fromkeys(["Capture", "CapturedStep", "capture"], "attntrace.capture"),
    **dict.fromkeys(["DTYPE_BYTES", "AttentionConfig"], "attntrace.config"),
    **dict.fromkeys(["DiffReport", "diff"], "attntrace.diff"),
    "MaskWarning": "attntrace.masks",
    **dict.fromkeys(["PRESETS", "resolve_config"], "attntrace.presets"),
    **dict.fromkeys(["Param", "Step", "Trace"], "attntrace.trace"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


class _Package(types.ModuleType):
    """``attntrace.capture`` and ``attntrace.diff`` stay the functions: importing the subpackage
    of the same name sets the package's attribute to the subpackage, and this keeps its function."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("capture", "diff") and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
