"""attntrace: trace every intermediate tensor shape of multi-head attention.

>>> import attntrace
>>> t = attntrace.trace_attention(attntrace.AttentionConfig(seq=3, hidden=768, heads=12))
>>> t.shape("q_heads")
(3, 12, 64)
"""

from attntrace.attention import STEP_NAMES, VARIANT_STEPS, estimate_bytes, step_names, trace_attention
from attntrace.backends import BACKENDS, get_backend
from attntrace.capture import Capture, CapturedStep, capture
from attntrace.config import DTYPE_BYTES, AttentionConfig
from attntrace.diff import DiffReport, diff
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
