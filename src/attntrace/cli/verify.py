"""``attntrace verify``: compare numpy, torch, nn.MultiheadAttention and SDPA."""

from __future__ import annotations

from typing import Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import with_option_groups
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.errors import EXIT_CHECK_FAILED


@app.command()
@cli_errors
@with_option_groups
def verify(
    ctx: typer.Context,
    *,
    sizes: dict[str, Any],
    mask: opt.MaskFile = None,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    computation: dict[str, Any],
    files: dict[str, Any],
    model: dict[str, Any],
) -> None:
    """Check the trace against PyTorch's own attention; exit 1 beyond tolerance.

    numpy vs torch at every step, and the output and attention weights vs
    nn.MultiheadAttention and F.scaled_dot_product_attention, for every variant
    (masks, cross, GQA, RoPE, presets, --algorithm flash).

    Example: [bold]attntrace verify --preset llama-3-8b --hidden 256 --heads 8 --kv-heads 2 --seq 16 --dtype float64[/]
    Exit 0 when every difference is within the dtype's tolerance, 1 when one is not,
    2 when torch is missing. Needs torch: pip install 'attntrace\\[torch]'.
    """
    from attntrace.cli.configure import config_from_files
    from attntrace.masks import load_mask
    from attntrace.memory import parse_size
    from attntrace.render.verify import render_verify
    from attntrace.verify import verify_attention

    config, tensors = config_from_files(ctx, **files, **model, **sizes, **numbers, **computation)
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    report = verify_attention(config, tensors=tensors, mask=user_mask, max_memory=budget)
    render_verify(report, console())
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)
