"""The Typer command line: options -> AttentionConfig -> trace -> renderer, nothing more."""

# Commands are listed in --help in the order they are imported here.
from attntrace.cli import run as _run  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import check as _check  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import report as _report  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import presets as _presets  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import sweep as _sweep  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import verify as _verify  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import trace as _trace  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import diff as _diff  # noqa: F401  (registers the command)

# isort: split
from attntrace.cli import demo as _demo  # noqa: F401  (registers the command)
from attntrace.cli.app import app, main

__all__ = ["app", "main"]
