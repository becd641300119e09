"""The Typer command line: options -> AttentionConfig -> trace -> renderer, nothing more.

Each command's module is imported when that command runs (attntrace.cli.lazy.COMMANDS lists
them, in the order of ``attntrace --help``).
"""

from attntrace.cli.app import app, main

__all__ = ["app", "main"]
