"""``attntrace verify``: compare numpy, torch, nn.MultiheadAttention and SDPA."""

from __future__ import annotations

import typer
from rich.console import Console

from attntrace.cli import options as opt
from attntrace.cli.app import app, cli_errors
from attntrace.errors import EXIT_CHECK_FAILED


@app.command()
@cli_errors
def verify(
    ctx: typer.Context,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: opt.Hidden = None,
    heads: opt.Heads = None,
    kv_seq: opt.KvSeq = None,
    kv_hidden: opt.KvHidden = None,
    kv_heads: opt.KvHeads = None,
    head_dim: opt.HeadDim = None,
    bias: opt.Bias = None,
    causal: opt.Causal = None,
    key_lengths: opt.KeyLengths = None,
    mask: opt.MaskFile = None,
    rope: opt.Rope = None,
    rope_base: opt.RopeBase = None,
    preset: opt.Preset = None,
    hf_config: opt.HfConfig = None,
    dtype: opt.DType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    scale: opt.Scale = "sqrt",
    max_memory: opt.MaxMemory = None,
    algorithm: opt.Algorithm = opt.AlgorithmName.eager,
    block_size: opt.BlockSize = 128,
    weights: opt.Weights = None,
    layer_prefix: opt.LayerPrefix = None,
    input_file: opt.Input = None,
) -> None:
    """Check the trace against PyTorch's own attention; exit 1 beyond tolerance.

    numpy vs torch at every step, and the output and attention weights vs
    nn.MultiheadAttention and F.scaled_dot_product_attention, for every variant
    (masks, cross, GQA, RoPE, presets, --algorithm flash).

    Example: [bold]attntrace verify --preset llama-3-8b --hidden 256 --heads 8 --kv-heads 2 --seq 16 --dtype float64[/]
    Exit 0 when every difference is within the dtype's tolerance, 1 when one is not,
    2 when torch is missing. Needs torch: pip install 'attntrace\\[torch]'.
    """
    from attntrace.cli.configure import check_rope_base, config_from_files, option_fields
    from attntrace.masks import load_mask
    from attntrace.memory import parse_size
    from attntrace.render.verify import render_verify
    from attntrace.verify import verify_attention

    fields = option_fields(
        batch=batch, seq=seq, hidden=hidden, heads=heads, dtype=dtype, seed=seed, scale=scale, kv_seq=kv_seq,
        kv_hidden=kv_hidden, kv_heads=kv_heads, head_dim=head_dim, bias=bias, causal=causal, key_lengths=key_lengths,
        rope=rope, rope_base=rope_base, algorithm=algorithm, block_size=block_size,
    )
    config, tensors = config_from_files(ctx, fields, weights, layer_prefix, input_file, preset=preset, hf_config=hf_config)
    check_rope_base(rope_base, config)
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    report = verify_attention(config, tensors=tensors, mask=user_mask, max_memory=budget)
    render_verify(report, Console())
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)
