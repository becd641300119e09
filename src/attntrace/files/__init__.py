"""User files: safe loading of weights and inputs, the ``--save`` writer, and how the sizes a
file states combine with the command-line options. Nothing here imports torch or safetensors
until a file needs it; each name below is imported on first use (``attntrace.files.guard``
alone, for a preset's JSON, loads none of the readers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.lazy import lazy_names

if TYPE_CHECKING:
    from attntrace.files.readers import WEIGHT_SUFFIXES, read_arrays, read_npy
    from attntrace.files.resolve import resolve_run
    from attntrace.files.save import save_trace, trace_arrays
    from attntrace.files.schemes import SCHEMES, LoadedWeights, load_weights

_LAZY = {
    **dict.fromkeys(["WEIGHT_SUFFIXES", "read_arrays", "read_npy"], "attntrace.files.readers"),
    "resolve_run": "attntrace.files.resolve",
    **dict.fromkeys(["save_trace", "trace_arrays"], "attntrace.files.save"),
    **dict.fromkeys(["SCHEMES", "LoadedWeights", "load_weights"], "attntrace.files.schemes"),
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "SCHEMES",
    "WEIGHT_SUFFIXES",
    "LoadedWeights",
    "load_weights",
    "read_arrays",
    "read_npy",
    "resolve_run",
    "save_trace",
    "trace_arrays",
]
