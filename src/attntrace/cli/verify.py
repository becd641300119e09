"""``attntrace verify``: compare numpy, torch, nn.MultiheadAttention and SDPA."""

from __future__ import annotations

from typing import Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import with_model_options
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.errors import EXIT_CHECK_FAILED


@app.command()
@cli_errors
@with_model_options
def verify(
    ctx: typer.Context,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = None,
    heads: opt.Heads = None,
    mask: opt.MaskFile = None,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    scale: opt.Scale = "sqrt",
    max_memory: opt.MaxMemory = None,
    algorithm: opt.Algorithm = opt.AlgorithmName.eager,
    block_size: opt.BlockSize = None,
    weights: opt.Weights = None,
    layer_prefix: opt.LayerPrefix = None,
    input_file: opt.Input = None,
    input_kv: opt.InputKv = None,
    *,
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

    config, tensors = config_from_files(
        ctx, weights, layer_prefix, input_file, input_kv, **model, batch=batch, seq=seq,
        hidden=hidden, heads=heads,
        dtype=dtype, seed=seed, scale=scale, algorithm=algorithm, block_size=block_size,
    )
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    report = verify_attention(config, tensors=tensors, mask=user_mask, max_memory=budget)
    render_verify(report, console())
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)
