"""The Rich rendering of the worked example: each matrix with its values, then the notes."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from attntrace.tools.demo import DemoStep


def render_demo(
    title: str,
    steps: tuple[DemoStep, ...],
    console: Console,
    *,
    sentences: Mapping[str, str] | None = None,
    given: str = "given",
) -> None:
    """Print a heading and every matrix of ``steps``, one under the other, each with its
    sentence from ``sentences`` (by step name) when given."""
    console.print(Text(title, style="bold underline"))
    console.print(Group(*(matrix_view(s, (sentences or {}).get(s.name), given) for s in steps)))


def matrix_view(step: DemoStep, sentence: str | None = None, given: str = "given") -> Group:
    """``name = op`` (and ``sentence``) and the matrix: as integers when all are whole, else by
    :func:`format_number`."""
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1, 0, 2))
    whole = all(float(v).is_integer() for v in step.value.flat)
    for _ in range(step.value.shape[1]):
        table.add_column(justify="right")
    for row in step.value:
        table.add_row(*(str(int(v)) if whole else format_number(float(v)) for v in row))
    head = Text.assemble(
        (step.name, "bold cyan"), f" = {step.op}" if step.op != "given" else f" ({given})"
    )
    words = [Text(f"  {sentence}", "dim")] if sentence else []
    return Group(head, *words, table)


def format_number(value: float) -> str:
    """Four decimals, or three significant digits for values below 0.001 (which four
    decimals would show as 0).

    >>> format_number(16.0), format_number(0.98200786), format_number(6.03e-06)
    ('16.0000', '0.9820', '6.03e-06')
    """
    return f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.2e}"
