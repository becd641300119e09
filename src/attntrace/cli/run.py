"""``attntrace run``: trace one attention and print it."""

from __future__ import annotations

from rich.console import Console

from attntrace.cli import options as opt
from attntrace.cli.app import app, cli_errors
from attntrace.config import AttentionConfig
from attntrace.errors import ConfigError


@app.command()
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
    algorithm: opt.Algorithm = opt.AlgorithmName.eager,
    block_size: opt.BlockSize = 128,
    count: opt.Count = opt.CountName.flops,
) -> None:
    """Run multi-head self-attention and print the shape of every step.

    Example: [bold]attntrace run --heads 12 --hidden 768[/]  prints
    (3, 768) -> (3, 12, 64) -> (12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768),
    the weight matrices and the attention weights of one head.
    Add --batch 2 for a leading batch axis, --backend torch to run on PyTorch,
    --hidden 4 --heads 2 --values to see every number.
    Any size with --backend shape (no arrays): --heads 64 --hidden 8192 --seq 131072.
    """
    from attntrace.attention import trace_attention
    from attntrace.memory import parse_size
    from attntrace.render.table import render_trace

    config = AttentionConfig(batch=batch, seq=seq, hidden=hidden, heads=heads, dtype=dtype.value, seed=seed,
                             algorithm=algorithm.value, block_size=block_size)
    check_head(head, config)
    budget = parse_size(max_memory) if max_memory is not None else None
    keep = True if values else {"weights"}  # only what is rendered: the heat map's weights
    trace = trace_attention(config, backend.value, max_memory=budget, keep_values=keep)
    render_trace(trace, Console(), head=head, values=values, count=count.value)


def check_head(head: int, config: AttentionConfig) -> None:
    """--head must name one of the config's heads."""
    if not 0 <= head < config.heads:
        raise ConfigError(f"--head {head} does not exist; use 0 to {config.heads - 1}")
