"""``attntrace run``: trace one attention and print it."""

from __future__ import annotations

import sys

from attntrace.cli import options as opt
from attntrace.cli.app import EPILOG, app, cli_errors, console
from attntrace.config import AttentionConfig
from attntrace.errors import ConfigError


@app.command(epilog=EPILOG)
@cli_errors
def run(
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = 768,
    heads: opt.Heads = 12,
    backend: opt.Backend = opt.BackendName.numpy,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    max_memory: opt.MaxMemory = None,
    head: opt.Head = 0,
    values: opt.Values = False,
    fmt: opt.Format = opt.OutputFormat.table,
    no_color: opt.NoColor = False,
) -> None:
    """Run multi-head self-attention and print the shape of every step.

    Example: [bold]attntrace run --heads 12 --hidden 768[/]  prints
    (3, 768) -> (3, 12, 64) -> (12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768),
    the weight matrices and the attention weights of one head.
    Add --batch 2 for a leading batch axis, --backend torch to run on PyTorch,
    --hidden 4 --heads 2 --values to see every number.
    For scripts: --format json | jq '.steps[] | select(.name=="scores") | .shape'
    """
    from attntrace.attention import trace_attention
    from attntrace.memory import parse_size
    from attntrace.render import text_renderer
    from attntrace.render.table import render_trace

    config = AttentionConfig(batch=batch, seq=seq, hidden=hidden, heads=heads, dtype=dtype.value, seed=seed)
    check_head(head, config)
    check_values(values, fmt)
    budget = parse_size(max_memory) if max_memory is not None else None
    trace = trace_attention(config, backend.value, max_memory=budget)
    if fmt is opt.OutputFormat.table:
        render_trace(trace, console(no_color), head=head, values=values)
    else:
        sys.stdout.write(text_renderer(fmt.value)(trace))


def check_head(head: int, config: AttentionConfig) -> None:
    """--head must name one of the config's heads."""
    if not 0 <= head < config.heads:
        raise ConfigError(f"--head {head} does not exist; use 0 to {config.heads - 1}")


def check_values(values: bool, fmt: opt.OutputFormat) -> None:
    """--values prints numbers in the table view only."""
    if values and fmt is not opt.OutputFormat.table:
        raise ConfigError(f"--values only works with --format table, not {fmt.value}; drop --values")
