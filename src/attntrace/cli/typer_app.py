"""The Typer application and the one place where errors become exit codes.

No ``from __future__ import annotations`` here: Typer reads the root options' annotations, and
strings would be compiled and evaluated on every start.
"""

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from attntrace.cli.registry import bound_group
from attntrace.cli.root import EPILOG, HELP, HELP_NAMES, VERSION_HELP
from attntrace.errors import EXIT_INTERNAL, EXIT_USAGE, AttntraceError

if TYPE_CHECKING:
    from rich.console import Console

P = ParamSpec("P")
R = TypeVar("R")

#: The line printed for an unexpected exception: a bug, never the user's fault.
BUG_REPORT = (
    "internal error ({kind}: {detail}); this is a bug in attntrace {version}, "
    "please report it with the command you ran"
)

app: typer.Typer = typer.Typer(
    name="attntrace",
    # commands imported when used; --help drawn without importing Rich
    cls=bound_group(lambda: app),
    help=HELP,
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": list(HELP_NAMES)},
)


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``attntrace: error: message`` as one line on stderr; return the Exit to raise.
    Whatever the message quotes from a file or the command line is made inert here."""
    from attntrace.text import plain

    sys.stderr.write(f"attntrace: error: {plain(' '.join(message.split()))}\n")
    return typer.Exit(code)


def internal_error(exc: BaseException) -> typer.Exit:
    """The one line (and exit code 3) for an exception attntrace did not expect."""
    from attntrace import __version__

    detail = " ".join(str(exc).split())
    detail = detail if len(detail) <= 200 else detail[:197] + "..."
    return fail(
        BUG_REPORT.format(
            kind=type(exc).__name__, detail=detail or "no message", version=__version__
        ),
        EXIT_INTERNAL,
    )


def _is_click_signal(exc: BaseException) -> bool:
    """Typer's Exit/Abort and click's usage errors: control flow, not bugs."""
    return isinstance(exc, typer.Exit | typer.Abort) or hasattr(exc, "exit_code")


@functools.cache
def _console_class() -> type["Console"]:
    from rich.console import Console

    class _Console(Console):
        """Rich's console, ending like every other writer when the reader of stdout goes away."""

        def on_broken_pipe(self) -> None:
            quiet_broken_pipe()

    return _Console


#: The narrowest width tables are drawn at: below it names, shapes and numbers would be cut
#: ("q_…", "(768,\n768)"); a narrower terminal wraps the lines instead, their text whole.
MIN_WIDTH = 60


def console(no_color: bool = False) -> "Console":
    """The stdout console: colours off with --no-color or NO_COLOR, no escape codes when piped,
    no trailing spaces, ASCII where stdout cannot take Unicode (attntrace.render.terminal), at
    least :data:`MIN_WIDTH` columns wide."""
    from attntrace.render.terminal import plain

    out = _console_class()(file=plain(sys.stdout), no_color=True if no_color else None)
    out.width = max(out.width, MIN_WIDTH)
    return out


def cli_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the project's errors (and running out of memory) into one line and exit code 2,
    and any other exception into the one bug-report line and exit code 3."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except AttntraceError as exc:
            raise fail(str(exc)) from None
        except MemoryError:
            raise fail("out of memory; lower the sizes or set a smaller --max-memory") from None
        except BrokenPipeError:
            raise  # the reader of stdout went away: main() ends quietly
        except Exception as exc:
            if _is_click_signal(exc):
                raise
            raise internal_error(exc) from None

    return wrapper


def _print_version(value: bool) -> None:
    if value:
        from attntrace import __version__

        typer.echo(f"attntrace {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help=VERSION_HELP)
    ] = False,
) -> None:
    """Options that apply before any command."""


def main() -> None:
    """Console-script entry point: usage errors (a typo in an option, a bad choice) become the
    same one line on stderr and exit code 2 as every other bad input."""
    from attntrace.render.terminal import plain

    sys.stdout = plain(sys.stdout)  # help too: ASCII when needed, quiet when piped into head
    try:
        code = app(standalone_mode=False)
    except BrokenPipeError:
        quiet_broken_pipe()
    except Exception as exc:
        # Typer >= 0.27 vendors click; both raise ClickException subclasses with these two members.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            sys.exit(internal_error(exc).exit_code)
        message, ctx = exc.format_message().rstrip("."), getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `attntrace`: Typer printed the help
            sys.exit(0)
        if not message and ctx is not None:  # no command given: the help is the answer
            typer.echo(ctx.get_help())
            sys.exit(0)
        hint = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
        sys.exit(fail(f"{message}{hint}", exc.exit_code).exit_code)
    except typer.Abort:
        sys.exit(130)
    finally:
        sys.stdout.flush()
    sys.exit(code if isinstance(code, int) else 0)


def quiet_broken_pipe() -> None:
    """``attntrace run -f json | head -1``: the reader left; end like a killed writer would,
    without a traceback (and without Python's own complaint when it flushes stdout at exit)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a writer killed by SIGPIPE
