"""The Typer application and the one place where errors become exit codes.

No ``from __future__ import annotations`` here: Typer reads the root options' annotations, and
strings would be compiled and evaluated on every start.
"""

import contextlib
import contextvars
import functools
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from attntrace.cli.registry import bound_group
from attntrace.cli.root import EPILOG, HELP, HELP_NAMES, VERSION_HELP
from attntrace.errors import EXIT_CANNOT_TELL, EXIT_INTERNAL, EXIT_USAGE, AttntraceError

#: The exit codes of a command that gave its answer (success, a check failed, diff's CANNOT
#: TELL): its output is complete, written to --output and flushed.
ANSWERED = (0, 1, EXIT_CANNOT_TELL)

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from attntrace.learn import Lang

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


#: The language of the running command's words (its --lang), for its error line.
_LANG: contextvars.ContextVar[str | None] = contextvars.ContextVar("attntrace_lang", default=None)


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``attntrace: error: message`` as one line on stderr; return the Exit to raise.
    Whatever the message quotes from a file or the command line is made inert here. Under
    ``--lang zh`` (or a zh_* locale) the line is in Chinese where the catalogue knows it."""
    from attntrace.text import plain

    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr itself refused it
        sys.stderr.write(plain(error_line(" ".join(message.split()))) + "\n")
        sys.stderr.flush()
    return typer.Exit(code)


def error_line(message: str) -> str:
    """``attntrace: error: message``, in the language of the command (its ``--lang``, else
    the command line's, else the locale).

    >>> error_line("--heads must be at least 1, got 0")  # an English locale
    'attntrace: error: --heads must be at least 1, got 0'
    """
    from attntrace.learn.lang import message as words
    from attntrace.learn.lang import requested_lang, translate

    given = _LANG.get()
    lang = requested_lang([f"--lang={given}"] if given else sys.argv[1:])
    if lang == "en":
        return f"attntrace: error: {message}"
    return words("err.prefix", lang, message=translate(message, lang))


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
    from attntrace.render.speaking import in_words
    from attntrace.render.terminal import plain

    out = _console_class()(file=plain(sys.stdout), no_color=True if no_color else None)
    out.width = max(out.width, MIN_WIDTH)
    return in_words(out, command_lang())


def command_lang() -> "Lang":
    """The language of the running command's words: its --lang, else the locale."""
    from attntrace.learn.lang import requested_lang

    given = _LANG.get()
    return requested_lang([f"--lang={given}"] if given else [])


def cli_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the project's errors (and running out of memory) into one line and exit code 2,
    and any other exception into the one bug-report line and exit code 3.

    Also the one place where every command's output is made all or nothing: the outputs are
    checked before any work (:func:`refuse_outputs`), ``--output FILE`` receives what the command
    prints, written atomically when it ends with exit code 0 or 1, stdout is flushed and checked
    (a full disk or a closed stdout is one line and exit code 2), and the warnings of libraries
    are held back until the command has succeeded, so an exit 2 prints exactly one line."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        output = kwargs.pop("output_file", None)
        lang = kwargs.get("lang")
        token = _LANG.set(str(getattr(lang, "value", lang)) if lang is not None else None)
        with held_notices(), _reset(token):
            try:
                refuse_outputs(kwargs, output)
                with to_document(output):
                    result = command(*args, **kwargs)
                flush_stdout()
                return result
            except AttntraceError as exc:
                raise fail(str(exc), getattr(exc, "exit_code", EXIT_USAGE)) from None
            except MemoryError:
                raise fail("out of memory; lower the sizes or set a smaller --max-memory") from None
            except BrokenPipeError:
                raise  # the reader of stdout went away: main() ends quietly
            except Exception as exc:
                if _is_click_signal(exc):
                    flush_stdout_or_fail(exc)
                    raise
                raise internal_error(exc) from None

    return wrapper


@contextlib.contextmanager
def _reset(token: contextvars.Token[str | None]) -> Iterator[None]:
    """The command's language forgotten when it ends (an in-process runner runs many)."""
    try:
        yield
    finally:
        _LANG.reset(token)


def exit_code_of(exc: BaseException) -> int:
    """The exit code an exception ends the command with (3: an unexpected one)."""
    if isinstance(exc, SystemExit):
        code = exc.code
        return 0 if code is None else code if isinstance(code, int) else 1
    code = getattr(exc, "exit_code", None)
    return code if isinstance(code, int) else EXIT_INTERNAL


@contextlib.contextmanager
def held_notices() -> Iterator[None]:
    """Hold back the warnings (and log records: matplotlib's font cache) that libraries issue
    during a command; shown as they would have been when it ends with exit code 0 or 1,
    dropped when it fails, so that an exit 2 prints its one line and nothing else."""
    import logging
    import warnings

    root = logging.getLogger()
    held: Any = (
        _held_class()() if not root.handlers else None
    )  # else the program's own logging config
    if held is not None:
        root.addHandler(held)
    catcher = warnings.catch_warnings(record=True)
    caught = catcher.__enter__()
    ok = False
    try:
        yield
        ok = True
    except BaseException as exc:
        ok = exit_code_of(exc) in ANSWERED
        raise
    finally:
        catcher.__exit__(None, None, None)
        if held is not None:
            root.removeHandler(held)
        if ok:
            for w in caught:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
            last = logging.lastResort
            for record in held.records if held is not None else []:
                if last is not None and record.levelno >= last.level:
                    last.handle(record)


@functools.cache
def _held_class() -> type:
    import logging

    class Held(logging.Handler):
        """Keeps the records that Python would print on stderr (logging.lastResort)."""

        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    return Held


@contextlib.contextmanager
def to_document(output: object) -> Iterator[None]:
    """``--output FILE``: what the command prints goes into FILE, written atomically (complete,
    or the file as it was) when the command ends with exit code 0 or 1; stdout gets nothing.
    ``--output -`` is stdout, as for every tool that takes a file name."""
    from pathlib import Path

    if not isinstance(output, Path) or str(output) == "-":
        yield
        return
    import io

    from attntrace.files.output import write_output
    from attntrace.render.terminal import PlainStream

    buffer = io.BytesIO()
    text = io.TextIOWrapper(buffer, encoding="utf-8")
    saved, sys.stdout = sys.stdout, PlainStream(text)

    def write() -> None:
        sys.stdout.flush()
        text.flush()
        write_output(output, buffer.getvalue())

    try:
        yield
    except BaseException as exc:
        if exit_code_of(exc) in ANSWERED:
            write()
        raise
    else:
        write()
    finally:
        sys.stdout = saved


def flush_stdout() -> None:
    """Flush stdout; a write it refuses (other than a reader that went away) is a
    :class:`~attntrace.render.terminal.StdoutError`."""
    from attntrace.render.terminal import stdout_error

    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a closed file
        raise stdout_error(exc if isinstance(exc, OSError) else OSError(9, str(exc))) from None


def flush_stdout_or_fail(exc: BaseException) -> None:
    """Before a command's own exit code (1: a check failed) goes out: stdout complete, or the
    one line and exit code 2 instead."""
    if getattr(exc, "exit_code", 0) not in ANSWERED:
        return
    try:
        flush_stdout()
    except AttntraceError as error:
        raise fail(str(error)) from None


#: The parameters of a command that name files it writes, and their options.
OUTPUT_OPTIONS = {
    "save": "--save",
    "out": "--out",
    "plot": "--plot",
    "plot_flow": "--plot-flow",
    "output_file": "--output",
}
#: Options whose name is not their parameter's.
_INPUT_FLAGS = {"input_file": "--input", "model_dir": "--model", "target": "TARGET"}


def refuse_outputs(params: dict[str, object], output: object) -> None:
    """Refuse an output path that is one of the command's inputs (every other path it takes,
    the files of a model folder, the file of a trace TARGET), a FIFO, a device, a directory, a
    symbolic link, or the path of another output: before any work is done."""
    from pathlib import Path

    outputs = {
        flag: value
        for name, flag in OUTPUT_OPTIONS.items()
        if isinstance(value := output if name == "output_file" else params.get(name), Path)
    }
    if not outputs:
        return
    from attntrace.files.output import refuse_inputs

    inputs: dict[str, list[Path]] = {}
    for name, value in params.items():
        if name in OUTPUT_OPTIONS:
            continue
        flag = _INPUT_FLAGS.get(name, "--" + name.replace("_", "-"))
        paths = _paths(value, target=name == "target")
        if paths:
            inputs[flag] = paths
    refuse_inputs(outputs, inputs)


def _paths(value: object, *, target: bool = False) -> list["Path"]:
    """The files a parameter's value names: a path, the files of a folder, the paths of a list,
    the file of a TARGET (``FILE.py:NAME`` or a script)."""
    import os
    from pathlib import Path

    if target and isinstance(value, str):
        head = value.rpartition(":")[0] if ":" in value else value
        return [Path(part) for part in {head, value} if part and os.path.isfile(part)]
    if isinstance(value, list | tuple):
        return [p for item in value for p in _paths(item)]
    if not isinstance(value, Path):
        return []
    if value.is_dir():
        try:
            return [Path(entry.path) for entry in os.scandir(value)]
        except OSError:
            return []
    return [value]


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
    from attntrace.render.terminal import complete_writes, plain, reopen_closed_std_streams

    reopen_closed_std_streams()
    # help too: ASCII when needed, quiet when piped into head, every write complete or refused
    sys.stdout = plain(complete_writes(sys.stdout))
    try:
        code = app(standalone_mode=False)
        flush_stdout()
    except BrokenPipeError:
        quiet_broken_pipe()
    except AttntraceError as exc:  # stdout refused the help or a usage line
        sys.exit(fail(str(exc)).exit_code)
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
        with contextlib.suppress(OSError, ValueError, AttntraceError):
            sys.stdout.flush()
    sys.exit(code if isinstance(code, int) else 0)


def quiet_broken_pipe() -> None:
    """``attntrace run -f json | head -1``: the reader left; end like a killed writer would,
    without a traceback (and without Python's own complaint when it flushes stdout at exit)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a writer killed by SIGPIPE
