"""``attntrace compare``: two configurations side by side, the second the first with the options
of ``--vs``."""

from __future__ import annotations

import inspect
import shlex
import sys
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click as click

from attntrace.cli import options as opt
from attntrace.cli.commands.cmd_run import trace_from_options
from attntrace.cli.configure import OPTION_GROUPS, with_option_groups
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import ConfigError

Vs = Annotated[
    str,
    typer.Option(
        "--vs",
        metavar="'OPTIONS'",
        help="The options that make B from A, quoted as one argument, e.g. '--heads 8' or "
        "'--causal --kv-heads 4' or '--algorithm flash': every other option is A's.",
        show_default=False,
    ),
]
CompareFormat = Annotated[
    opt.ListingFormatName,
    typer.Option(
        "--format",
        "-f",
        help="table (for people) or json (schema attntrace.compare/1: both configs, the "
        "settings that differ, every step in each, the totals).",
        rich_help_panel=opt.OUTPUT,
    ),
]
#: The options --vs may change: those that make the configuration (and the backend).
CHANGEABLE = frozenset(
    {name for group in OPTION_GROUPS.values() for name in group} | {"backend", "mask"}
)


@app.command(epilog=EPILOG)
@cli_errors
@with_option_groups
def compare(
    ctx: typer.Context,
    *,
    vs: Vs,
    sizes: dict[str, Any],
    mask: opt.MaskFile = None,
    backend: opt.Backend = opt.BackendName.shape,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    computation: dict[str, Any],
    fmt: CompareFormat = opt.ListingFormatName.table,
    no_color: opt.NoColor = False,
    files: dict[str, Any],
    model: dict[str, Any],
    parallel: dict[str, Any],
    lang: opt.Lang = None,
) -> None:
    """Set two configurations side by side: the steps whose shape or op changes, FLOPs, bytes.

    A takes run's options; B is A with the options of --vs. The steps of both are aligned by
    name: a step whose shape or op changes is yellow, one of A only red, one of B only green.
    Settings that differ, FLOPs, parameters and bytes of A and B are set beside each other.
    Shapes only by default (--backend shape): any size, at once.

    \b
    Examples:
      [bold]attntrace compare --hidden 768 --heads 12 --vs '--heads 8'[/]
      [bold]attntrace compare --seq 8 --vs '--causal --kv-heads 4'[/]
      [bold]attntrace compare --seq 1024 --vs '--algorithm flash' --format json[/]
      [bold]attntrace compare --preset llama-3-70b --seq 4096 --vs '--tp 8'[/]
    """
    from attntrace.cli.configure import parallel_layout
    from attntrace.render.compare_view import render_compare, render_compare_json
    from attntrace.tools.side_by_side import side_by_side

    changed = vs_options(ctx, vs)
    groups = {"sizes": sizes, "numbers": numbers, "computation": computation, "files": files}
    common: dict[str, Any] = {"max_memory": max_memory, "validate": _no_check, "keep": False}
    a = trace_from_options(
        ctx,
        model,
        **common,
        **_flat(groups),
        mask=mask,
        backend=backend,
        layout=parallel_layout(parallel),
    )
    moved = {g: {k: changed.get(k, v) for k, v in d.items()} for g, d in groups.items()}
    model_b = {k: changed.get(k, v) for k, v in model.items()}
    b = trace_from_options(
        _Typed(ctx, changed),  # type: ignore[arg-type]
        model_b,
        **common,
        **_flat(moved),
        mask=changed.get("mask", mask),
        backend=changed.get("backend", backend),
        layout=parallel_layout({k: changed.get(k, v) for k, v in parallel.items()}),
    )
    pair = side_by_side(a, b)
    if fmt is opt.ListingFormatName.json:
        sys.stdout.write(render_compare_json(pair))
    else:
        render_compare(pair, console(no_color))


def vs_options(ctx: typer.Context, vs: str) -> dict[str, Any]:
    """The options typed in ``--vs``, parsed as this command parses its own, by name."""
    from attntrace.units import bounded, quoted

    bounded(vs, "--vs")  # outside the try: a ConfigError is a ValueError
    try:
        args = shlex.split(vs)
    except ValueError as exc:
        raise ConfigError(f"--vs {quoted(vs)}: {exc}; quote it as one argument") from None
    if not args:
        raise ConfigError("--vs needs the options that make B, e.g. --vs '--heads 8'")
    if {"-h", "--help"} & set(args):
        raise ConfigError("--vs takes the options that make B, not --help")
    try:
        sub = ctx.command.make_context(ctx.info_name, ["--vs", "-", *args], parent=ctx.parent)
    except (typer.Exit, click.exceptions.NoArgsIsHelpError):
        raise ConfigError("--vs takes the options that make B, not --help") from None
    except click.exceptions.ClickException as exc:
        raise ConfigError(f"--vs {quoted(vs)}: {exc.format_message()}") from None
    typed = {
        name: value for name, value in sub.params.items() if name != "vs" and _given(sub, name)
    }
    other = sorted(set(typed) - CHANGEABLE)
    if other:
        flags = {p.name: p.opts[0] for p in ctx.command.params if p.opts}
        names = ", ".join(flags.get(n, n) for n in other)
        raise ConfigError(f"--vs changes the configuration only; give {names} outside it")
    hints = inspect.signature(compare).parameters
    return {k: _as_typed(hints[k].annotation, v) if k in hints else v for k, v in typed.items()}


def _as_typed(annotation: Any, value: Any) -> Any:
    """A value click parsed for --vs, of the type the command's parameter declares (a path
    as a ``Path``, a choice as its enum), as Typer gives A's own options: B goes through
    the same checks as A.

    >>> _as_typed(opt.Backend, "numpy"), _as_typed(opt.MaskFile, "m.npy")
    (<BackendName.numpy: 'numpy'>, PosixPath('m.npy'))
    """
    if value is None:
        return None
    kind = annotation
    if typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    kinds = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
    kind = kinds[0] if len(kinds) == 1 else None
    if typing.get_origin(kind) is list and isinstance(value, list | tuple):
        return [_as_typed(typing.get_args(kind)[0], v) for v in value]
    if kind is Path:
        return Path(value)
    if isinstance(kind, type) and issubclass(kind, Enum) and not isinstance(value, kind):
        return kind(value)
    return value


class _Typed:
    """B's context: an option counts as typed when A typed it or --vs did (a preset's sizes
    give way to both)."""

    def __init__(self, ctx: typer.Context, changed: dict[str, Any]) -> None:
        self._ctx, self._changed = ctx, changed
        self.params = {**ctx.params, **changed}

    def get_parameter_source(self, name: str) -> click.core.ParameterSource | None:
        if name in self._changed:
            return click.core.ParameterSource.COMMANDLINE
        return self._ctx.get_parameter_source(name)


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _flat(groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {k: v for d in groups.values() for k, v in d.items()}


def _no_check(config: AttentionConfig) -> None:
    """compare shows any valid configuration: nothing beyond AttentionConfig's own checks."""
