"""Option types shared by the commands (Annotated aliases), and their choices."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

SIZES = "Sizes"
OUTPUT = "Output"


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


class AlgorithmName(StrEnum):
    """How the attention is computed."""

    eager = "eager"
    flash = "flash"


class CountName(StrEnum):
    """The unit of arithmetic cost: 1 MAC (multiply-accumulate) = 2 FLOPs."""

    flops = "flops"
    macs = "macs"


COST = "Cost and scale"

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
Algorithm = Annotated[AlgorithmName, typer.Option(help="eager (the whole (S, S) matrix) or flash (tile by tile, online softmax).", rich_help_panel=COST)]
BlockSize = Annotated[int, typer.Option(help="flash: rows of a query block (Br) and of a key/value block (Bc).", rich_help_panel=COST)]
Count = Annotated[CountName, typer.Option(help="Count arithmetic in flops or macs (1 MAC = 2 FLOPs).", rich_help_panel=COST)]
