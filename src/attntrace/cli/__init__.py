"""The Typer command line: options -> AttentionConfig -> trace -> renderer, nothing more.

The application lives in :mod:`attntrace.cli.typer_app` and is imported on first use of
``app``; each command's module is imported when that command runs (attntrace.cli.root.COMMANDS
lists them, in the order of ``attntrace --help``). ``attntrace --help`` itself imports neither
where :mod:`attntrace.cli.fast_help` was verified against the installed Typer and Rich: then
:func:`main` draws it from :mod:`attntrace.cli.root`, in a fraction of Typer's import time.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attntrace.cli.typer_app import app

__all__ = ["app", "main"]


def __getattr__(name: str) -> object:
    if name == "app":  # the Typer application, built (and Typer imported) on first use
        from attntrace.cli.typer_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: ``attntrace --help`` without Typer (with the Typer and Rich
    versions that drawing was verified against), anything else through the Typer application
    (:func:`attntrace.cli.typer_app.main`)."""
    _bound_widths(os.environ)
    if _is_root_help(sys.argv):
        from attntrace.cli.fast_help import verified

        if verified():
            _print_root_help()
    from attntrace.cli.typer_app import main as typer_main

    typer_main()


#: The widest terminal attntrace draws for: COLUMNS (LINES, TERMINAL_WIDTH) above it, however
#: many digits (Python refuses to read 4,300), are read as this.
MAX_COLUMNS = 10_000


def _bound_widths(env: os._Environ[str]) -> None:
    """Terminal sizes of the environment that Rich and Typer read with ``int()``, bounded.

    >>> env = {"COLUMNS": "9" * 5000, "LINES": "40"}
    >>> _bound_widths(env)  # type: ignore[arg-type]
    >>> env["COLUMNS"], env["LINES"]
    ('10000', '40')
    """
    for name in ("COLUMNS", "LINES", "TERMINAL_WIDTH"):
        value = env.get(name, "").strip()
        if value.isdigit() and (len(value) > len(str(MAX_COLUMNS)) or int(value) > MAX_COLUMNS):
            env[name] = str(MAX_COLUMNS)


def _is_root_help(argv: list[str]) -> bool:
    """``attntrace --help`` (or ``-h``) as typed, where Typer would print the top-level help
    under the name ``attntrace``: not ``python -m attntrace``, not a shell's completion call."""
    from attntrace.cli.root import HELP_NAMES

    main_module = sys.modules.get("__main__")
    return (
        len(argv) == 2
        and argv[1] in HELP_NAMES
        and os.path.basename(argv[0]) == "attntrace"
        and getattr(main_module, "__package__", None) in (None, "")
        and "_ATTNTRACE_COMPLETE" not in os.environ
    )


def _print_root_help() -> None:
    """Write the top-level help (ASCII where stdout needs it) and exit 0; quietly when the
    reader of stdout went away, as every other command does."""
    from attntrace.cli.fast_help import print_root_help
    from attntrace.render.terminal import (
        StdoutError,
        complete_writes,
        plain,
        reopen_closed_std_streams,
    )

    reopen_closed_std_streams()
    sys.stdout = plain(complete_writes(sys.stdout))
    try:
        print_root_help()
        sys.stdout.flush()
    except BrokenPipeError:
        from attntrace.cli.typer_app import quiet_broken_pipe

        quiet_broken_pipe()
    except StdoutError as exc:  # a full disk, a closed stdout: one line, as every command
        sys.stderr.write(f"attntrace: error: {exc}\n")
        sys.exit(2)
    sys.exit(0)
