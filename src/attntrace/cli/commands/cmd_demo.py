"""``attntrace demo``: the study notes' worked example, unscaled and scaled."""

from __future__ import annotations

from rich.text import Text

from attntrace.cli.typer_app import app, cli_errors, console


@app.command()
@cli_errors
def demo() -> None:
    """Walk through the study notes' worked 3×3 example, unscaled and scaled.

    Query, Key, Value -> scores -> softmax -> output, first unscaled as the notes compute
    it, then scaled by 1/√d.

    \b
    Reproduce any part on real sizes with:
      [bold]attntrace run --scale none --hidden 4 --heads 2 --values[/]
    """
    from attntrace.render.demo_view import render_demo
    from attntrace.tools.demo import overflow_example, scaling_effect, sqrt_scale, worked_example

    out = console()
    render_demo(
        "1. As the notes compute it: weights = softmax(Query @ Key.T), no scaling",
        worked_example(),
        out,
    )
    out.print()
    render_demo(
        f"2. Scaled as in the Transformer: softmax(Query @ Key.T / √3), factor {sqrt_scale():.4f}",
        worked_example(sqrt_scale())[3:],
        out,
    )  # Query, Key, Value as above
    out.print()
    out.print(Text("What the scaling changes, and why", style="bold underline"))
    note, ours = overflow_example()
    lines = [
        *scaling_effect(),
        "The notes' soft_max computes exp(z) directly: for the row [1000, 1000] it gives "
        f"{note.tolist()} "
        "(exp overflows to inf, inf/inf = nan). attntrace subtracts the row maximum first and "
        f"gives {ours.tolist()}.",
    ]
    for line in lines:
        out.print(Text(f"- {line}"))
