"""``attntrace demo``: the study notes' worked example (or the learner's own matrices),
unscaled and scaled, each matrix with a sentence."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from attntrace.cli import options as opt
from attntrace.cli.typer_app import app, cli_errors, console


def _matrix_option(name: str, example: str) -> Any:
    """The option of one matrix of the walk-through (--query, --key, --value)."""
    return typer.Option(
        f"--{name}",
        metavar="ROWS|FILE.npy",
        help=f"Your own {name.capitalize()} matrix instead of the notes': rows split by ';', "
        f"numbers by ',' (e.g. '{example}'), or a .npy file.",
        show_default=False,
    )


Query = Annotated[str | None, _matrix_option("query", "1,0,2; 2,2,2; 2,1,3")]
Key = Annotated[str | None, _matrix_option("key", "0,1,1; 4,4,0; 2,3,1")]
Value = Annotated[str | None, _matrix_option("value", "1,2,3; 2,8,0; 2,6,3")]


@app.command()
@cli_errors
def demo(
    query: Query = None,
    key: Key = None,
    value: Value = None,
    lang: opt.Lang = None,
    no_color: opt.NoColor = False,
) -> None:
    """Walk through the study notes' worked 3×3 example, unscaled and scaled.

    Query, Key, Value -> scores -> softmax -> output, first unscaled as the notes compute
    it, then scaled by 1/√d; each matrix with a sentence, in English or Chinese (--lang).
    --query, --key and --value put your own numbers in the notes' place.

    \b
    Reproduce any part on real sizes with:
      [bold]attntrace run --scale none --hidden 4 --heads 2 --values[/]
    Your own numbers, in Chinese:
      [bold]attntrace demo --query '1,0; 0,1' --key '1,1; 0,2' --lang zh[/]
    """
    from attntrace.learn import check_lang, message
    from attntrace.render.demo_view import render_demo
    from attntrace.tools.demo import (
        example_of,
        overflow_example,
        scaling_effect,
        sqrt_scale,
        step_words,
        worked_example,
    )

    words = check_lang(lang.value if lang is not None else None)
    example = example_of(query, key, value)
    sentences = step_words(example, words)
    out = console(no_color)
    factor = f"{sqrt_scale(example):.4f}"
    d = example.sizes["d"]
    render_demo(
        message("demo.title_plain", words),
        worked_example(example=example),
        out,
        sentences=sentences,
        given=message("demo.given", words),
    )
    out.print()
    render_demo(
        message("demo.title_scaled", words, d=d, factor=factor),
        worked_example(sqrt_scale(example), example)[3:],
        out,
        sentences=sentences,
        given=message("demo.given", words),
    )  # Query, Key, Value as above
    out.print()
    out.print(Text(message("demo.why_title", words), style="bold underline"))
    note, ours = overflow_example()
    lines = [
        *scaling_effect(words, example),
        message("demo.overflow", words, note=note.tolist(), ours=ours.tolist()),
    ]
    for line in lines:
        out.print(Text(f"- {line}"))
