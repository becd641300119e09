"""``attntrace run``: trace one attention and print it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from attntrace.cli import options as opt
from attntrace.cli.app import app, cli_errors
from attntrace.config import AttentionConfig, parse_scale
from attntrace.errors import ConfigError


@app.command()
@cli_errors
def run(
    ctx: typer.Context,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = 768,
    heads: opt.Heads = 12,
    backend: opt.Backend = opt.BackendName.numpy,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    scale: opt.Scale = "sqrt",
    max_memory: opt.MaxMemory = None,
    head: opt.Head = 0,
    values: opt.Values = False,
    weights: opt.Weights = None,
    layer_prefix: opt.LayerPrefix = None,
    input_file: opt.Input = None,
    save: opt.Save = None,
) -> None:
    """Run multi-head self-attention and print the shape of every step.

    Example: [bold]attntrace run --heads 12 --hidden 768[/]  prints
    (3, 768) -> (3, 12, 64) -> (12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768),
    the weight matrices and the attention weights of one head.
    Add --batch 2 for a leading batch axis, --backend torch to run on PyTorch,
    --hidden 4 --heads 2 --values to see every number, --weights model.safetensors
    to trace real weights, --save trace.npz to keep every tensor.
    """
    from attntrace.attention import trace_attention
    from attntrace.memory import parse_size
    from attntrace.render.table import render_trace

    sizes = {"batch": batch, "seq": seq, "hidden": hidden, "heads": heads, "dtype": dtype.value, "seed": seed, "scale": parse_scale(scale)}
    config, tensors = config_from_files(ctx, sizes, weights, layer_prefix, input_file)
    check_head(head, config)
    budget = parse_size(max_memory) if max_memory is not None else None
    trace = trace_attention(config, backend.value, max_memory=budget, tensors=tensors)
    if save is not None:
        from attntrace.files import save_trace

        save_trace(trace, save)
    render_trace(trace, Console(), head=head, values=values)


def config_from_files(
    ctx: typer.Context, sizes: dict[str, Any], weights: Path | None, layer_prefix: str | None, input_file: Path | None
) -> tuple[AttentionConfig, dict[str, Any]]:
    """The config from the options, with --weights / --input filling in the sizes not typed."""
    if weights is None and input_file is None:
        if layer_prefix is not None:
            raise ConfigError("--layer-prefix picks a layer of --weights; add --weights FILE")
        return AttentionConfig(**sizes), {}
    from attntrace.files import load_weights, read_npy, resolve_run

    explicit = {name for name in sizes if _typed(ctx, name)}
    loaded = load_weights(weights, layer_prefix) if weights is not None else None
    if loaded is None and layer_prefix is not None:
        raise ConfigError("--layer-prefix picks a layer of --weights; add --weights FILE")
    x = read_npy(input_file) if input_file is not None else None
    return resolve_run(sizes, explicit, loaded, x)


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (on the command line or from the environment)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def check_head(head: int, config: AttentionConfig) -> None:
    """--head must name one of the config's heads."""
    if not 0 <= head < config.heads:
        raise ConfigError(f"--head {head} does not exist; use 0 to {config.heads - 1}")
