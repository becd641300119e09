"""Option types shared by the commands (Annotated aliases), and their choices."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

SIZES = "Sizes"
OUTPUT = "Output"
FILES = "Files"


class BackendName(StrEnum):
    """Backends the CLI offers."""

    numpy = "numpy"
    torch = "torch"
    shape = "shape"


class DTypeName(StrEnum):
    """dtypes the CLI offers (bfloat16 only on torch)."""

    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"


Batch = Annotated[int | None, typer.Option(help="B, batch size; omit for the unbatched (S, H) layout.", rich_help_panel=SIZES)]
Seq = Annotated[int, typer.Option(help="S, sequence length (tokens).", rich_help_panel=SIZES)]
Hidden = Annotated[int, typer.Option(help="H, model width; must be divisible by --heads.", rich_help_panel=SIZES)]
Heads = Annotated[int, typer.Option(help="h, number of attention heads; head_dim d = H / h.", rich_help_panel=SIZES)]
Backend = Annotated[BackendName, typer.Option(help="numpy (default), torch (pip install 'attntrace[torch]'), or shape (shapes only, any size).")]
DType = Annotated[DTypeName, typer.Option(help="Element type; bfloat16 needs --backend torch.")]
Seed = Annotated[int, typer.Option(help="Seed of x and the weights; the same seed gives the same values on every backend.")]
MaxMemory = Annotated[str | None, typer.Option(help="Refuse runs needing more than this, e.g. 8GiB [default: half the available memory].")]
Head = Annotated[int, typer.Option(help="Which head's attention weights to show.", rich_help_panel=OUTPUT)]
Values = Annotated[bool, typer.Option("--values", help="Also print the numbers of every tensor small enough to read.", rich_help_panel=OUTPUT)]
Scale = Annotated[str, typer.Option(help="Factor on the scores: sqrt (1/√d, the paper), none (unscaled, as the study notes' worked example) or a number.")]
Weights = Annotated[Path | None, typer.Option(help="Projection weights: .npz, .safetensors, .pt/.pth/.bin (attntrace, nn.MultiheadAttention, q_proj/o_proj or BERT names); sets --hidden.", rich_help_panel=FILES)]
LayerPrefix = Annotated[str | None, typer.Option(help="Which layer of --weights, e.g. model.layers.0.self_attn.", rich_help_panel=FILES)]
Input = Annotated[Path | None, typer.Option("--input", help="x from a .npy file, (S, H) or (B, S, H); sets --seq and --batch.", rich_help_panel=FILES)]
Save = Annotated[Path | None, typer.Option(help="Write every step and parameter to FILE.npz (atomically).", rich_help_panel=FILES)]
