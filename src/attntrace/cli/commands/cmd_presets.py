"""``attntrace presets``: the real models --preset knows, with their attention sizes."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from rich import box
from rich.table import Table

from attntrace.cli import options as opt
from attntrace.cli.typer_app import app, cli_errors, console

#: The ``schema`` of ``attntrace presets --format json``.
PRESETS_SCHEMA = "attntrace.presets/1"


@app.command("presets")
@cli_errors
def presets(
    fmt: opt.PresetsFormat = opt.ListingFormatName.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    backward: opt.Backward = False,
    lang: opt.Lang = None,
) -> None:
    """List the real models --preset knows, with their attention sizes.

    Heads, kv-heads, hidden, head_dim, RoPE theta and the KV-cache bytes per token and layer
    in float16, each from the model's config.json; for models with a known layer count L, the
    KV cache of all layers at the context length (batch 1, float16); --backward: what all
    layers keep for the backward (eager), their backward FLOPs and FLOPs per training token.

    \b
    Example:
      [bold]attntrace run --preset llama-3-8b --seq 4 --backend shape[/]
    """
    from attntrace.config.presets import PRESETS
    from attntrace.units import format_bytes

    if fmt is opt.ListingFormatName.json:
        sys.stdout.write(json.dumps(presets_document(backward), indent=2) + "\n")
        return
    table = Table(
        title="presets (numbers from each model's config.json on the Hugging Face Hub)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
        title_justify="left",
        title_style="bold",
    )
    for name, justify in (
        ("preset", "left"),
        ("h", "right"),
        ("g", "right"),
        ("H", "right"),
        ("d", "right"),
        ("rope_theta", "right"),
        ("causal", "left"),
        ("KV/token", "right"),
        ("config.json of", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for p in PRESETS.values():
        theta = f"{p.rope_theta:g}" if p.rope_theta is not None else "-"
        table.add_row(
            p.name,
            str(p.heads),
            str(p.kv_heads),
            str(p.hidden),
            str(p.head_dim),
            theta,
            "yes" if p.causal else "no",
            format_bytes(p.kv_cache_bytes_per_token),
            p.repo,
        )
    console().print(table)
    console().print()
    console().print(_whole_models(backward))


def _whole_models(backward: bool = False) -> Table:
    """All layers of the presets whose layer count is known, at their context length."""
    from attntrace.config.presets import PRESETS
    from attntrace.units import format_bytes, format_count

    table = Table(
        title="whole model: attention of all L layers at the context length (batch 1, "
        "KV cache in float16; FLOPs of one forward over the full S x S)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
        title_justify="left",
        title_style="bold",
    )
    names = ["preset", "L", "context", "attn params", "KV cache", "attn FLOPs"]
    if backward:
        names += ["saved for bwd", "bwd FLOPs", "FLOPs/token"]
    for name in names:
        table.add_column(name, justify="left" if name == "preset" else "right")
    for p in PRESETS.values():
        if (f := p.model_figures(backward=backward)) is not None:
            training = (
                [
                    format_bytes(f.saved_bytes or 0),
                    format_count(f.backward_flops or 0),
                    format_count(round(f.train_flops_per_token or 0)),
                ]
                if backward
                else []
            )
            table.add_row(
                p.name,
                str(f.layers),
                str(f.keys),
                format_count(f.params),
                format_bytes(f.kv_cache_bytes),
                format_count(f.flops),
                *training,
            )
    return table


def presets_document(backward: bool = False) -> dict[str, Any]:
    """Every preset as ``--format json`` prints it (schema ``attntrace.presets/1``): the fields
    of :class:`attntrace.config.presets.Preset`, its KV-cache bytes per token and layer in
    float16, and
    ``whole_model`` (all layers at the context length, batch 1; null without a layer count).

    >>> doc = presets_document()
    >>> llama = next(p for p in doc["presets"] if p["name"] == "llama-3.1-8b")
    >>> llama["heads"], llama["kv_heads"], llama["whole_model"]["layers"]
    (32, 8, 32)
    """
    from attntrace.config.presets import PRESETS

    out = []
    for p in PRESETS.values():
        figures = p.model_figures(backward=backward)
        out.append(
            {
                **dataclasses.asdict(p),
                "kv_cache_bytes_per_token": p.kv_cache_bytes_per_token,
                "whole_model": figures.to_dict() if figures is not None else None,
            }
        )
    return {"schema": PRESETS_SCHEMA, "presets": out}
