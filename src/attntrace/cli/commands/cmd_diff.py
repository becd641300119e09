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
from attntrace.errors import EXIT_CANNOT_TELL, EXIT_CHECK_FAILED


class DiffFormat(StrEnum):
    table = "table"
    json = "json"


#: The options that choose how RoPE rotates: given without --rope, the module rotates.
ROPE_CHOICES = ("rope_base", "rope_style", "rotary_dims", "rope_scaling")

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
        help="table, or json (schema attntrace.diff/2) for CI.",
        rich_help_panel=opt.OUTPUT,
    ),
]


Timeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0.1,
        help="Stop the code under test after this many seconds (it runs in a child process, "
        "its memory limited to --max-memory or the default budget); exit 1 \\[default: 60].",
        show_default=False,
    ),
]
DiffBackward = Annotated[
    bool,
    typer.Option(
        "--backward",
        help="Also the gradients: your code run backward (autograd, or your own "
        "autograd.Function) from the reference's d_output; d_x and each weight's gradient "
        "compared, the first that differs and the backward bug named.",
    ),
]
DiffNproc = Annotated[
    int | None,
    typer.Option(
        "--nproc",
        metavar="N",
        help="Run your parallel attention as N local processes (torch.distributed, gloo) and "
        "diff every rank against the reference's rank view, from the weights each rank holds; "
        "the sharding bug named with its rank and line. --tp T (default: N) or --cp C.",
        rich_help_panel=opt.PARALLEL,
        show_default=False,
    ),
]
DiffTp = Annotated[
    int | None,
    typer.Option(
        "--tp",
        metavar="T",
        help="With --nproc: tensor parallelism over T ranks (q, k, v column-parallel, the "
        "output row-parallel and all-reduced; each rank gets the whole x).",
        rich_help_panel=opt.PARALLEL,
        show_default=False,
    ),
]
DiffCp = Annotated[
    int | None,
    typer.Option(
        "--cp",
        metavar="C",
        help="With --nproc: context parallelism over C ranks, rank c handed tokens "
        "c·S/C … (c+1)·S/C - 1 of x.",
        rich_help_panel=opt.PARALLEL,
        show_default=False,
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
    timeout: Timeout = 60.0,
    backward: DiffBackward = False,
    nproc: DiffNproc = None,
    tp: DiffTp = None,
    cp: DiffCp = None,
    cp_kind: opt.CpKind = None,
    no_color: opt.NoColor = False,
    lang: opt.Lang = None,
    model: dict[str, Any],
) -> None:
    """Run your attention beside the reference with the same weights and input; name the bug.

    Every reference step (x, q_proj, ..., scores, scaled, weights, context, merged, output) is
    matched by its numbers to the tensor of your code that holds them; at the first that differs
    the known bugs (heads split without transpose, softmax over the wrong axis, 1/d scaling,
    x @ W, swapped q/k/v, mask polarity, GQA tiling, RoPE pairing ...) are applied to the
    reference to find the one your code reproduces. A function is called as fn(x, params).
    Exit 0 when every step matches within the verify tolerance (MATCH), 1 at a divergence
    (DIFFERS), 2 bad input, 4 when the evidence cannot decide (CANNOT TELL: what is missing and
    the flag that would decide). A flag you give for a choice (--causal, --rope-style ...) wins
    over what the module states; what diff read from the module is printed under the header.

    \b
    Example:
      [bold]attntrace diff my_attn.py:Attention --init num_heads=4 --batch 2 --seq 8[/]
      [bold]attntrace diff tp_attn.py:TPAttention --nproc 2 --batch 1 --seq 16[/]
    """
    import sys

    from attntrace.capturing.sandbox import ChildError
    from attntrace.cli.configure import _typed, resolve_options
    from attntrace.diffing.target import diff_in_child
    from attntrace.text import plain
    from attntrace.units import parse_size

    typed = {
        name for name in ("batch", "seq", "hidden", "heads", "dtype", "scale") if _typed(ctx, name)
    }
    typed |= {name for name, value in model.items() if value is not None}
    if model.get("rope") is None and any(model.get(n) is not None for n in ROPE_CHOICES):
        model = {**model, "rope": True}  # a RoPE choice says the module rotates (not typed)
    config = resolve_options(**model, **sizes, **numbers)
    budget = parse_size(max_memory) if max_memory is not None else None
    out = console(no_color)
    if nproc is not None or tp is not None or cp is not None or cp_kind is not None:
        layout = (nproc, tp, cp, cp_kind and cp_kind.value)
        _diff_ranks(target, init or [], config, (layout, typed), (timeout, budget), fmt, out)
        return
    from attntrace.learn import check_lang

    view: dict[str, Any] = {"format": fmt.value, "lang": check_lang(lang and lang.value)}
    if fmt is DiffFormat.table:
        view |= {
            "width": out.width,
            "color_system": out.color_system,
            "terminal": out.is_terminal,
            "no_color": out.no_color,
            "encoding": out.encoding,
        }
    try:  # the user's code runs in a child process: time and memory limited
        result = diff_in_child(
            target,
            init or [],
            config,
            typed,
            input_file,
            budget,
            view=view,
            timeout=timeout,
            prints=sys.stderr,
            backward=backward,
        )
    except ChildError as exc:
        raise fail(str(exc), exc.code) from None
    if isinstance(result, str):  # the child did not finish: one line saying why
        from attntrace.learn.lang import translate

        sys.stderr.write(plain(translate(f"attntrace: {result}", view["lang"])) + "\n")
        raise typer.Exit(EXIT_CHECK_FAILED)
    if fmt is DiffFormat.json:
        typer.echo(str(result.get("text", "")), nl=False)
    else:
        out.file.write(str(result.get("text", "")))
        out.file.flush()
    if result.get("verdict") == "cannot tell":
        raise typer.Exit(EXIT_CANNOT_TELL)
    if not result.get("ok"):
        raise typer.Exit(EXIT_CHECK_FAILED)


def _diff_ranks(
    target: str,
    init: list[str],
    config: Any,
    asked: tuple[tuple[int | None, int | None, int | None, str | None], set[str]],
    limits: tuple[float, int | None],
    fmt: DiffFormat,
    out: Any,
) -> None:
    """diff --nproc N: every rank of the code against the rank view (diffing/rank_child.py)."""
    import dataclasses
    import sys

    from attntrace.capturing.sandbox import ChildError
    from attntrace.config.parallel_layout import ParallelLayout
    from attntrace.diffing.rank_child import diff_nproc
    from attntrace.errors import AttntraceError, ConfigError

    (nproc, tp, cp, kind), typed = asked
    if nproc is None:
        raise ConfigError("--tp, --cp and --cp-kind diff a parallel attention: add --nproc N")
    given = ParallelLayout(tp=tp or 1, cp=cp or 1, cp_kind=kind or "ring")
    config = dataclasses.replace(config, parallel=given)
    try:
        report = diff_nproc(
            target,
            init,
            config,
            nproc,
            sorted(typed),
            timeout=limits[0],
            budget=limits[1],
            prints=sys.stderr,
        )
    except ChildError as exc:
        raise fail(str(exc), exc.code) from None
    except AttntraceError as exc:
        if getattr(exc, "exit_code", 2) == 1:  # a rank failed: its one line
            raise fail(str(exc), 1) from None
        raise
    if fmt is DiffFormat.json:
        from attntrace.render.rank_diff_view import rank_diff_json

        typer.echo(rank_diff_json(report), nl=False)
    else:
        from attntrace.render.rank_diff_view import render_rank_diff

        render_rank_diff(report, out)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
