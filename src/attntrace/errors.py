"""The project's own error types.

Every error a user can cause is an :class:`AttntraceError`; the CLI turns it into one line on
stderr and exit code 2 in exactly one place (``attntrace.cli.typer_app``).
"""

from __future__ import annotations


class AttntraceError(Exception):
    """Bad input or an impossible request; the message names the fix."""


class ConfigError(AttntraceError, ValueError):
    """Sizes or options that cannot describe a multi-head attention."""


class BackendUnavailableError(AttntraceError, ImportError):
    """A backend whose library is not installed."""


#: How to get PyTorch, for every message about a missing torch (the CPU wheel, never a CUDA build).
TORCH_INSTALL_HINT = (
    "install it with: pip install 'attntrace[torch]' (or pip install torch==2.13.0)"
)


class MemoryBudgetError(AttntraceError, MemoryError):
    """The tensors of a trace would not fit into the memory budget."""


class InputFileError(AttntraceError, OSError):
    """A user file that is missing, unreadable, malformed or unsafe."""


#: Exit codes of the CLI (a public contract, documented in the README and in --help).
EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3  # an unexpected error inside attntrace: a bug, reported in one line
