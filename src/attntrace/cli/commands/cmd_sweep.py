"""``attntrace sweep``: costs over a grid of sizes, eager beside flash."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import override_options, with_option_groups
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.errors import ConfigError


class SweepFormat(StrEnum):
    """Output formats of the sweep."""

    table = "table"
    json = "json"
    csv = "csv"


SeqList = Annotated[
    str, typer.Option("--seq", help="S values, comma-separated.", rich_help_panel=opt.SIZES)
]
HeadsList = Annotated[
    str | None,
    typer.Option(
        "--heads",
        help="h values, comma-separated \\[default: 12, or the preset's].",
        rich_help_panel=opt.SIZES,
        show_default=False,
    ),
]
HiddenList = Annotated[
    str | None,
    typer.Option(
        "--hidden",
        help="H values, comma-separated \\[default: 768, or the preset's].",
        rich_help_panel=opt.SIZES,
        show_default=False,
    ),
]
Algorithms = Annotated[
    str | None,
    typer.Option(
        "--algorithms",
        help="Which algorithms to run at every size, comma-separated \\[default: eager,flash].",
        rich_help_panel=opt.COST,
        show_default=False,
    ),
]
Format = Annotated[
    SweepFormat,
    typer.Option(
        "--format", "-f", help="table (with bar charts), json or csv.", rich_help_panel=opt.OUTPUT
    ),
]
SweepBackend = Annotated[
    opt.BackendName, typer.Option(help="shape (default: any size, no arrays), numpy or torch.")
]


@app.command()
@cli_errors
@with_option_groups
@override_options(past=opt.PastList, tp=opt.TpList, cp=opt.CpList)
def sweep(
    seq: SeqList = "128,512,2048,8192",
    heads: HeadsList = None,
    hidden: HiddenList = None,
    batch: opt.Batch = None,
    dtype: opt.DType = opt.DTypeName.float32,
    backend: SweepBackend = opt.BackendName.shape,
    algorithms: Algorithms = None,
    block_size: opt.BlockSize = None,
    count: opt.Count = opt.CountName.flops,
    max_memory: opt.MaxMemory = None,
    layers: opt.Layers = None,
    layer_prefix: opt.LayerPrefix = None,
    output: Format = SweepFormat.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    backward: opt.Backward = False,
    *,
    model: dict[str, Any],
    parallel: dict[str, Any],
    lang: opt.Lang = None,
) -> None:
    """FLOPs, score bytes and peak memory over several sizes, eager beside flash.

    [bold]attntrace sweep --seq 128,512,2048,8192[/] shows the (S, S) scores growing 4x per
    doubling of S under eager, and flash's tile staying put. Takes run's variant, preset and
    model options (--model with --layer and --layer-prefix), e.g. --preset llama-3-70b
    --seq 4096,131072; --seq 1 --past 4096,131072 sweeps decode steps over context lengths.
    --tp 1,2,4,8 --cp 1,4,16 [--sp] [--cp-kind ulysses]: rank 0's cost on each layout.
    """
    import sys

    from rich.console import Console
    from rich.progress import Progress

    from attntrace.cli.configure import resolve_options
    from attntrace.config.attention_config import ALGORITHMS
    from attntrace.tools.sweep import (
        parse_algorithms,
        parse_list,
        run_sweep,
        sweep_configs,
        to_csv,
        to_json,
    )
    from attntrace.units import parse_size

    err = Console(stderr=True)
    pasts = model.pop("past")  # sweep --past 1024,4096: context lengths of a decode step
    base = resolve_options(
        **model, batch=batch, dtype=dtype, block_size=block_size, layer_prefix=layer_prefix
    )
    configs = sweep_configs(
        base,
        parse_list(seq, "--seq"),
        parse_list(heads, "--heads") if heads is not None else [base.heads],
        parse_list(hidden, "--hidden") if hidden is not None else [base.hidden],
        parse_algorithms(algorithms) if algorithms is not None else list(ALGORITHMS),
        parse_list(pasts, "--past") if pasts is not None else [],
    )
    if any(parallel[k] for k in ("tp", "cp", "sp")):
        _sweep_ranks(configs, parallel, output, count.value, base.dtype)
        return
    budget = parse_size(max_memory) if max_memory is not None else None
    n_layers = sweep_layers(layers, model)
    # a bar only on a terminal: a transient bar still ends a piped stderr with a blank line
    with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("sweep", total=len(configs))
        points = run_sweep(
            configs, backend.value, budget, lambda: progress.advance(task), n_layers, backward
        )
    if output is SweepFormat.table:
        from attntrace.render.sweep_view import sweep_view

        console().print(sweep_view(points, count.value, base.dtype))
    else:
        sys.stdout.write(to_json(points) + "\n" if output is SweepFormat.json else to_csv(points))


def _sweep_ranks(
    configs: list[Any], parallel: dict[str, Any], output: SweepFormat, count: str, dtype: str
) -> None:
    """sweep --tp/--cp: rank 0 of each configuration on each layout (shape backend)."""
    import sys

    from attntrace.tools.sweep import parse_list
    from attntrace.tools.sweep_ranks import ranks_csv, ranks_json, sweep_ranks

    if parallel["rank"]:
        raise ConfigError("sweep shows rank 0 of each layout; drop --rank")
    tps = parse_list(parallel["tp"], "--tp") if parallel["tp"] is not None else [1]
    cps = parse_list(parallel["cp"], "--cp") if parallel["cp"] is not None else [1]
    kind = parallel["cp_kind"].value if parallel["cp_kind"] is not None else "ring"
    ranks = sweep_ranks(configs, tps, cps, sp=parallel["sp"], cp_kind=kind)
    if not ranks.points:
        raise ConfigError("no layout of the sweep divides the sizes: " + ranks.skipped[0])
    if output is SweepFormat.table:
        from attntrace.render.parallel_view import rank_sweep_table

        console().print(rank_sweep_table(ranks, count, dtype))
        for line in ranks.skipped:
            console().print(f"left out: {line}", style="dim", markup=False, highlight=False)
    else:
        sys.stdout.write(
            ranks_json(ranks) + "\n" if output is SweepFormat.json else ranks_csv(ranks)
        )


def sweep_layers(layers: int | None, model: dict[str, Any]) -> int | None:
    """L of --layers, else the layer count of --model, --hf-config or --preset (or None)."""
    from attntrace.cli.commands.cmd_run import check_layers
    from attntrace.config.presets import layer_count

    check_layers(layers)
    sources = {k: model.get(k) for k in ("preset", "hf_config", "model_dir")}
    return layers if layers is not None else layer_count(**sources)
