"""``attntrace run``: trace one attention and print it."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.app import EPILOG, app, cli_errors, console
from attntrace.cli.configure import config_from_files, origin_line, with_model_options
from attntrace.config import AttentionConfig
from attntrace.errors import ConfigError


@app.command(epilog=EPILOG)
@cli_errors
@with_model_options
def run(
    ctx: typer.Context,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = None,
    heads: opt.Heads = None,
    mask: opt.MaskFile = None,
    backend: opt.Backend = opt.BackendName.numpy,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    scale: opt.Scale = "sqrt",
    max_memory: opt.MaxMemory = None,
    head: opt.Head = 0,
    batch_item: opt.BatchItem = 0,
    values: opt.Values = False,
    values_limit: opt.ValuesLimit = 256,
    fmt: opt.Format = opt.OutputFormat.table,
    no_color: opt.NoColor = False,
    algorithm: opt.Algorithm = opt.AlgorithmName.eager,
    block_size: opt.BlockSize = 128,
    threads: opt.Threads = None,
    count: opt.Count = opt.CountName.flops,
    weights: opt.Weights = None,
    layer_prefix: opt.LayerPrefix = None,
    input_file: opt.Input = None,
    save: opt.Save = None,
    *,
    model: dict[str, Any],
) -> None:
    """Run multi-head attention and print the shape of every step.

    Example: [bold]attntrace run --heads 12 --hidden 768[/]  prints
    (3, 768) -> (3, 12, 64) -> (12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768),
    the weight matrices and the attention weights of one head.
    Add --batch 2 for a leading batch axis, --backend torch to run on PyTorch,
    --hidden 4 --heads 2 --values to see every number,
    --causal, --kv-heads 4, --rope or --preset llama-3-8b for the attention of real models.
    Any size with --backend shape (no arrays): --preset llama-3-70b --seq 131072.
    --weights model.safetensors to trace real weights, --save trace.npz to keep every tensor.
    For scripts: --format json | jq '.steps[] | select(.name=="scores") | .shape'
    """
    from attntrace.attention import trace_attention
    from attntrace.masks import MaskWarning, load_mask
    from attntrace.memory import parse_size
    from attntrace.render import text_renderer
    from attntrace.render.table import render_trace

    config, tensors = config_from_files(
        ctx, weights, layer_prefix, input_file, **model, batch=batch, seq=seq, hidden=hidden, heads=heads,
        dtype=dtype, seed=seed, scale=scale, algorithm=algorithm, block_size=block_size,
    )
    check_head(head, config)
    check_batch_item(batch_item, config)
    check_values(values, fmt)
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    keep = True if values or save else {"weights", "masked"} if fmt.view else False  # only what is shown
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)  # the renderers show Trace.notes instead
        trace = trace_attention(config, backend.value, mask=user_mask, max_memory=budget,
                                keep_values=keep, tensors=tensors, threads=threads)
    if origin := origin_line(ctx, model, config):
        trace = dataclasses.replace(trace, origin=origin)
    if save is not None:
        from attntrace.files import save_trace

        save_trace(trace, save)
    view: dict[str, Any] = {"head": head, "batch_item": batch_item, "values": values, "values_limit": values_limit, "count": count.value}
    if fmt is opt.OutputFormat.table:
        render_trace(trace, console(no_color), **view)
    elif fmt.picture:
        from attntrace.render.export import export_trace

        sys.stdout.write(export_trace(trace, fmt.value, **view))
    else:
        sys.stdout.write(text_renderer(fmt.value, count.value)(trace))


def check_head(head: int, config: AttentionConfig) -> None:
    """--head must name one of the config's heads."""
    if not 0 <= head < config.heads:
        raise ConfigError(f"--head {head} does not exist; use 0 to {config.heads - 1}")


def check_batch_item(item: int, config: AttentionConfig) -> None:
    """--batch-item must name one of the batch's items (only 0 without --batch)."""
    size = config.batch if config.batch is not None else 1
    if not 0 <= item < size:
        fix = f"use 0 to {size - 1}" if config.batch is not None else "add --batch or drop --batch-item"
        raise ConfigError(f"--batch-item {item} does not exist; {fix}")


def check_values(values: bool, fmt: opt.OutputFormat) -> None:
    """--values prints numbers in the table view only (and its svg and html pictures)."""
    if values and not fmt.view:
        raise ConfigError(f"--values only works with --format table, svg or html, not {fmt.value}; drop --values")
