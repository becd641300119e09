"""attntrace: trace every intermediate tensor shape of multi-head attention.

>>> import attntrace
>>> t = attntrace.trace_attention(attntrace.AttentionConfig(seq=3, hidden=768, heads=12))
>>> t.shape("q_heads")
(3, 12, 64)
"""

from __future__ import annotations

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
    from attntrace.backends import BACKENDS, get_backend
    from attntrace.capturing.session import Capture, CapturedStep, capture
    from attntrace.config.attention_config import DTYPE_BYTES, AttentionConfig
    from attntrace.config.presets import PRESETS, resolve_config
    from attntrace.diffing.diff_report import DiffReport, diff
    from attntrace.display import show
    from attntrace.engine.attention import (
        STEP_NAMES,
        VARIANT_STEPS,
        estimate_bytes,
        step_names,
        trace_attention,
    )
    from attntrace.engine.masks import MaskWarning
    from attntrace.trace import Param, Step, Trace

#: Public name -> the module that defines it, imported when the name is first read.
_LAZY = {
    **dict.fromkeys(
        ["STEP_NAMES", "VARIANT_STEPS", "estimate_bytes", "step_names", "trace_attention"],
        "attntrace.engine.attention",
    ),
    **dict.fromkeys(["BACKENDS", "get_backend"], "attntrace.backends"),
    **dict.fromkeys(["Capture", "CapturedStep", "capture"], "attntrace.capturing.session"),
    **dict.fromkeys(["DTYPE_BYTES", "AttentionConfig"], "attntrace.config.attention_config"),
    **dict.fromkeys(["DiffReport", "diff"], "attntrace.diffing.diff_report"),
    "MaskWarning": "attntrace.engine.masks",
    "show": "attntrace.display",
    **dict.fromkeys(["PRESETS", "resolve_config"], "attntrace.config.presets"),
    **dict.fromkeys(["Param", "Step", "Trace"], "attntrace.trace"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


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
    "show",
    "step_names",
    "trace_attention",
]
