"""``attntrace verify``: compare numpy, torch, nn.MultiheadAttention and SDPA."""

from __future__ import annotations

import typer
from rich.console import Console

from attntrace.cli import options as opt
from attntrace.cli.app import app, cli_errors
from attntrace.config import parse_scale
from attntrace.errors import EXIT_CHECK_FAILED


@app.command()
@cli_errors
def verify(
    ctx: typer.Context,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = 768,
    heads: opt.Heads = 12,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    scale: opt.Scale = "sqrt",
    max_memory: opt.MaxMemory = None,
    weights: opt.Weights = None,
    layer_prefix: opt.LayerPrefix = None,
    input_file: opt.Input = None,
) -> None:
    """Check the trace against PyTorch's own attention; exit 1 beyond tolerance.

    numpy vs torch at every step, and the output and attention weights vs
    nn.MultiheadAttention and F.scaled_dot_product_attention.

    Example: [bold]attntrace verify --heads 12 --hidden 768 --dtype float64[/]
    Exit 0 when every difference is within the dtype's tolerance, 1 when one is not,
    2 when torch is missing. Needs torch: pip install 'attntrace\\[torch]'.
    """
    from attntrace.cli.run import config_from_files
    from attntrace.memory import parse_size
    from attntrace.render.verify import render_verify
    from attntrace.verify import verify_attention

    sizes = {"batch": batch, "seq": seq, "hidden": hidden, "heads": heads, "dtype": dtype.value, "seed": seed, "scale": parse_scale(scale)}
    config, tensors = config_from_files(ctx, sizes, weights, layer_prefix, input_file)
    budget = parse_size(max_memory) if max_memory is not None else None
    report = verify_attention(config, tensors=tensors, max_memory=budget)
    render_verify(report, Console())
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)
