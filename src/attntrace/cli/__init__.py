"""The Typer command line: options -> AttentionConfig -> trace -> renderer, nothing more."""

from attntrace.cli import demo as _demo  # noqa: F401
from attntrace.cli import run as _run  # noqa: F401  (registers the command)
from attntrace.cli import verify as _verify  # noqa: F401
from attntrace.cli.app import app, main

__all__ = ["app", "main"]
