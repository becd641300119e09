"""Option types shared by the commands (Annotated aliases), and their choices."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
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


class OutputFormat(StrEnum):
    """What ``run`` prints: the Rich table, or one document for scripts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


Batch = Annotated[int | None, typer.Option(help="B, batch size; omit for the unbatched (S, H) layout.", rich_help_panel=SIZES)]
Seq = Annotated[int, typer.Option(help="S, sequence length (tokens).", rich_help_panel=SIZES)]
Hidden = Annotated[int, typer.Option(help="H, model width; must be divisible by --heads.", rich_help_panel=SIZES)]
Heads = Annotated[int, typer.Option(help="h, number of attention heads; head_dim d = H / h.", rich_help_panel=SIZES)]
Backend = Annotated[BackendName, typer.Option(help="numpy (default), torch (pip install 'attntrace\\[torch]'), or shape (shapes only, any size).")]
DType = Annotated[DTypeName, typer.Option(help="Element type; bfloat16 needs --backend torch.")]
Seed = Annotated[int, typer.Option(help="Seed of x and the weights; the same seed gives the same values on every backend.")]
MaxMemory = Annotated[str | None, typer.Option(help="Refuse runs needing more than this, e.g. 8GiB \\[default: half the available memory].")]
Head = Annotated[int, typer.Option(help="Which head's attention weights to show.", rich_help_panel=OUTPUT)]
Values = Annotated[bool, typer.Option("--values", help="Also print the numbers of every tensor small enough to read.", rich_help_panel=OUTPUT)]
Format = Annotated[OutputFormat, typer.Option("--format", "-f", help="table (Rich, for people), or one document on stdout for scripts: json (schema attntrace.trace/1), csv (one row per step), markdown.", rich_help_panel=OUTPUT)]
NoColor = Annotated[bool, typer.Option("--no-color", help="No colours (also when NO_COLOR is set); output that is not a terminal never has any.", rich_help_panel=OUTPUT)]
CheckBackend = Annotated[BackendName, typer.Option(help="shape (default: no compute, any size, same shapes), numpy or torch.")]
CHECKS = "Checks"
Expect = Annotated[list[str] | None, typer.Option("--expect", "-e", metavar="STEP=SHAPE", help="Expected shape of a step, repeatable: scores=12,3,3, scores=12x3x3 or with axis letters scores=h,S,S (B S H h d).", rich_help_panel=CHECKS, show_default=False)]
Golden = Annotated[Path | None, typer.Option(metavar="FILE.json", help="Compare the shapes and dtypes of every step and parameter with a trace saved by: attntrace run --format json > FILE.json", rich_help_panel=CHECKS, show_default=False)]
Spec = Annotated[Path | None, typer.Option(metavar="FILE.toml", help="Check many configs at once; each \\[config.NAME] table gives sizes and an expect table. Replaces the size options.", rich_help_panel=CHECKS, show_default=False)]
