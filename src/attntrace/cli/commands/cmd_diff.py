"""``attntrace diff``: the user's attention beside the reference, the first step that differs
and the bug that explains it."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import with_option_groups
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors, console, fail
from attntrace.errors import EXIT_CHECK_FAILED


class DiffFormat(StrEnum):
    table = "table"
    json = "json"


Target = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="FILE.py:NAME or package.module:NAME: an nn.Module class "
        "(built with --init), an nn.Module instance, or a function fn(x, params).",
        show_default=False,
    ),
]
Init = Annotated[
    list[str] | None,
    typer.Option(
        "--init",
        metavar="KEY=VALUE",
        help="Argument of the module class, repeatable; values are Python literals.",
        show_default=False,
    ),
]
Fmt = Annotated[
    DiffFormat,
    typer.Option(
        "--format",
        "-f",
        help="table, or json (schema attntrace.diff/1) for CI.",
        rich_help_panel=opt.OUTPUT,
    ),
]


@app.command(epilog=EPILOG)
@cli_errors
@with_option_groups
def diff(
    ctx: typer.Context,
    target: Target,
    init: Init = None,
    *,
    sizes: dict[str, Any],
    numbers: dict[str, Any],
    input_file: opt.Input = None,
    max_memory: opt.MaxMemory = None,
    fmt: Fmt = DiffFormat.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    no_color: opt.NoColor = False,
    model: dict[str, Any],
) -> None:
    """Run your attention beside the reference with the same weights and input; name the bug.

    Every reference step (x, q_proj, ..., scores, scaled, weights, context, merged, output) is
    matched by its numbers to the tensor of your code that holds them; at the first that differs
    the known bugs (heads split without transpose, softmax over the wrong axis, 1/d scaling,
    x @ W, swapped q/k/v, mask polarity, GQA tiling, RoPE pairing ...) are applied to the
    reference to find the one your code reproduces. A function is called as fn(x, params).
    Exit 0 when every step matches within the verify tolerance, 1 at a divergence, 2 bad input.

    \b
    Example:
      [bold]attntrace diff my_attn.py:Attention --init num_heads=4 --batch 2 --seq 8[/]
    """
    from attntrace.cli.configure import _typed, resolve_options
    from attntrace.diffing.target import diff_target
    from attntrace.diffing.user_side import UserCodeError
    from attntrace.render.diff_view import render_diff, render_diff_json
    from attntrace.units import parse_size

    typed = {
        name for name in ("batch", "seq", "hidden", "heads", "dtype", "scale") if _typed(ctx, name)
    }
    typed |= {name for name, value in model.items() if value is not None}
    config = resolve_options(**model, **sizes, **numbers)
    budget = parse_size(max_memory) if max_memory is not None else None
    try:
        report = diff_target(target, init or [], config, typed, input_file, budget)
    except UserCodeError as exc:
        raise fail(str(exc), EXIT_CHECK_FAILED) from None
    if fmt is DiffFormat.json:
        typer.echo(render_diff_json(report), nl=False)
    else:
        render_diff(report, console(no_color))
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)
