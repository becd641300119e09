"""``attntrace report --out report.html``: one self-contained HTML page of a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.commands.cmd_run import (
    across_devices,
    check_batch_item,
    check_layers,
    check_token,
    trace_from_options,
    training_options,
    with_serving,
    with_whole_model,
)
from attntrace.cli.configure import with_option_groups
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors
from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import ConfigError
from attntrace.text import plain

Out = Annotated[
    Path,
    typer.Option(
        "--out",
        "-o",
        metavar="FILE.html",
        help="Where to write the page.",
        dir_okay=False,
        show_default=False,
    ),
]


@app.command(epilog=EPILOG)
@cli_errors
@with_option_groups
def report(
    ctx: typer.Context,
    *,
    out: Out,
    sizes: dict[str, Any],
    mask: opt.MaskFile = None,
    backend: opt.Backend = opt.BackendName.numpy,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    batch_item: opt.BatchItem = 0,
    computation: dict[str, Any],
    count: opt.Count = opt.CountName.flops,
    layers: opt.Layers = None,
    files: dict[str, Any],
    model: dict[str, Any],
    serving: dict[str, Any],
    parallel: dict[str, Any],
    backward: opt.Backward = False,
    explain: opt.Explain = False,
    lang: opt.Lang = None,
    prompt: opt.Prompt = None,
    token: opt.Token = None,
) -> None:
    """Write one self-contained HTML page: steps, flow diagram, heat maps, costs, config.

    Takes run's size, variant, preset, file, serving, --tp/--cp and --layers options (the
    whole model's figures: --layers, else the layer count of --preset, --hf-config or --model;
    with --past, the serving figures, and --page-size's paged cache; with --tp/--cp, one
    rank's steps, its cost and its collectives). The page fetches
    nothing (no scripts, fonts or links), so it opens offline and can be kept as a CI artifact.

    \b
    Example:
      [bold]attntrace report --out report.html --preset llama-3-8b --seq 16[/]
    """
    from attntrace.files.output import write_output
    from attntrace.learn import check_lang
    from attntrace.render.report import render_report

    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out}: the file name must end in .html")

    def validate(config: AttentionConfig) -> None:
        check_batch_item(batch_item, config)
        check_layers(layers)
        check_token(token, config, None, backend)

    trace = trace_from_options(
        ctx,
        model,
        validate,
        {"weights", "masked"},
        **sizes,
        **numbers,
        **computation,
        **files,
        mask=mask,
        backend=backend,
        max_memory=max_memory,
        training=training_options(backward, False, None),
        page_size=serving["page_size"],
        layout=across_devices(parallel, serving, layers),
        prompt=prompt,
    )
    trace = with_whole_model(trace, layers, model)
    trace = with_serving(trace, serving)  # as run's: figures, and --page-size's steps
    language = check_lang(lang.value if lang is not None else None)
    words = language if explain else None
    page = render_report(
        trace,
        batch_item=batch_item,
        count=count.value,
        explain=words,
        lang=language,
        token=token,
    )
    write_output(out, page.encode("utf-8"))
    typer.echo(f"wrote {plain(out)}")
