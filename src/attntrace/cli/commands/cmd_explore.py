"""``attntrace explore``: the interactive page (attntrace.explore), served on 127.0.0.1."""

from __future__ import annotations

from typing import Annotated

import typer

from attntrace.cli import options as opt
from attntrace.cli.typer_app import app, cli_errors
from attntrace.errors import ConfigError

Port = Annotated[
    int,
    typer.Option(help="The port on 127.0.0.1; 0 lets the system pick a free one.", min=0),
]
NoBrowser = Annotated[
    bool,
    typer.Option("--no-browser", help="Print the URL only; do not open a browser."),
]


@app.command()
@cli_errors
def explore(
    model_dir: opt.ModelDir = None,
    prompt: opt.Prompt = None,
    port: Port = 0,
    no_browser: NoBrowser = False,
    lang: opt.Lang = None,
) -> None:
    """Open an interactive page: turn the sizes and watch every shape follow.

    Its controls: B, S, H, h, g, RoPE, causal, window, past and the algorithm. Click a step
    for what it does (English or Chinese), its numbers at small sizes and its cost. The page
    is served on 127.0.0.1 with a token in its URL, fetches nothing from the network and asks
    attntrace's own engine for every shape. With --prompt (and --model DIR), click a token
    for its attention row in every head and layer. Ctrl-C stops it.

    \b
    Example:
      [bold]attntrace explore --model ./gpt2 --prompt 'The cat sat on the mat'[/]
    """
    from attntrace.explore import serve
    from attntrace.learn import check_lang

    if model_dir is not None and prompt is None:
        raise ConfigError("explore reads --model DIR with --prompt TEXT; add --prompt")
    words = check_lang(lang.value if lang is not None else None)
    serve(
        port=port,
        lang=words,
        model_dir=model_dir,
        prompt=prompt,
        open_browser=not no_browser,
        say=typer.echo,
    )
