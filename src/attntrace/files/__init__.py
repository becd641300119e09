"""User files: safe loading of weights and inputs, the ``--save`` writer, and how the sizes a
file states combine with the command-line options. Nothing here imports torch or safetensors
until a file needs it."""

from attntrace.files.readers import WEIGHT_SUFFIXES, read_arrays, read_npy
from attntrace.files.resolve import resolve_run
from attntrace.files.save import save_trace, trace_arrays
from attntrace.files.schemes import SCHEMES, LoadedWeights, load_weights

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
