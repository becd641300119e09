"""``attntrace trace``: run the user's attention code and print the shape of every op."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attntrace.cli import options as opt
from attntrace.cli.app import EPILOG, app, cli_errors, console
from attntrace.errors import EXIT_CHECK_FAILED

if TYPE_CHECKING:
    from rich.console import Console

    from attntrace.capture.runner import Outcome

CODE = "Your code"


class ArrayName(StrEnum):
    """The kind of array a NAME target is called with."""

    numpy = "numpy"
    torch = "torch"


Target = Annotated[
    str,
    typer.Argument(
        help="script.py, FILE.py:NAME or package.module:NAME "
        "(an nn.Module class, a module, or a function of one array).",
        show_default=False,
    ),
]
Args = Annotated[
    list[str] | None, typer.Argument(help="Arguments of the script (after --).", show_default=False)
]
Init = Annotated[
    list[str] | None,
    typer.Option(
        "--init",
        metavar="KEY=VALUE",
        help="Constructor argument of an nn.Module class NAME, repeatable; "
        "values are Python literals.",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
Axes = Annotated[
    str | None,
    typer.Option(
        help="Sizes of axis letters that the sizes alone cannot tell apart, e.g. h=12,d=64.",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
Array = Annotated[
    ArrayName | None,
    typer.Option(
        help="Call NAME with a numpy array or a torch tensor [default: torch for modules "
        "and for functions whose file imports torch].",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
TraceHidden = Annotated[
    int | None,
    typer.Option(
        help="H of the input x [default: the module's embed_dim / hidden_size / "
        "first Linear, else 768].",
        rich_help_panel=opt.SIZES,
        show_default=False,
    ),
]
TraceInput = Annotated[
    Path | None,
    typer.Option(
        "--input", help="x from a .npy file for a NAME target.", rich_help_panel=opt.FILES
    ),
]


@app.command(epilog=EPILOG)
@cli_errors
def trace(
    target: Target,
    args: Args = None,
    init: Init = None,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: TraceHidden = None,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    array: Array = None,
    input_file: TraceInput = None,
    axes: Axes = None,
    fmt: opt.Format = opt.OutputFormat.table,
    no_color: opt.NoColor = False,
) -> None:
    """Run your attention code and print the shape of every tensor op in your files.

    [bold]attntrace trace examples/seed_001_numpy.py[/]   (a script, run as python would)
    [bold]attntrace trace attn.py:Attention --init embed_dim=768 --init num_heads=12 --batch 2[/]
    A wrong shape is explained: the failing line, its operands' axes, the rule and a fix (exit 1).
    """
    from attntrace.capture.runner import Inputs, parse_init, parse_target, run_script, run_target

    letters = _axes(axes)
    spec = parse_target(target, args or [])
    if spec.name is None:
        if init:
            raise _usage("--init needs FILE.py:NAME or package.module:NAME, not a script")
        outcome = run_script(spec.path or Path(target), spec.argv, axes=letters)
    else:
        inputs = Inputs(
            batch, seq, hidden, dtype.value, seed, array.value if array else None, input_file
        )
        outcome = run_target(spec, parse_init(init or []), inputs, axes=letters)
    show(outcome, fmt.value, no_color, target)


def _axes(text: str | None) -> dict[str, int]:
    from attntrace.capture.axes import parse_axes

    return parse_axes(text) if text else {}


def _usage(message: str) -> Exception:
    from attntrace.errors import ConfigError

    return ConfigError(message)


def show(outcome: Outcome, fmt: str, no_color: bool, title: str) -> None:
    """Print the capture (and what broke); exit 1 when the user's code raised."""
    from attntrace.capture.explain import explain, is_shape_error
    from attntrace.render.capture import render_capture, render_error, render_failure

    t = outcome.capture
    out = console(no_color)
    if fmt == "table":
        render_capture(t, out, title=title)
    else:
        from attntrace.render import text_renderer

        typer.echo(text_renderer(fmt)(t), nl=False)  # type: ignore[arg-type]
    if outcome.error is None:
        if outcome.exit_code:
            raise typer.Exit(outcome.exit_code)
        return
    err = console(no_color) if fmt == "table" else _stderr(no_color)
    failure = t.failure
    if failure is not None and failure.error is outcome.error:
        render_failure(failure, explain(failure) if is_shape_error(failure) else None, err)
    else:
        render_error(outcome.error, outcome.frames, err)
    raise typer.Exit(EXIT_CHECK_FAILED)


def _stderr(no_color: bool) -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=True if no_color else None)
