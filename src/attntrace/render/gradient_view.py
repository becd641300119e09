"""The Rich rendering of ``attntrace diff --backward``'s gradients: each of the reference's
beside the user's, the first that differs highlighted, then the verdict with the backward bug
(:mod:`attntrace.diffing.backward_diff`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.diffing.backward_diff import MATCH, GradientReport
from attntrace.render.table import _table
from attntrace.text import plain
from attntrace.units import format_shape

__all__ = ["gradient_table", "gradient_verdict", "render_gradients"]


def render_gradients(section: GradientReport, dtype: str, console: Console) -> None:
    """Print the gradients' table and verdict (or why none was compared)."""
    if section.skipped is not None:
        console.print(Text(f"backward not compared: {plain(section.skipped)}", style="yellow"))
        return
    for note in section.notes:
        console.print(Text(plain(note), style="dim"))
    console.print(gradient_table(section, console.width))
    console.print(gradient_verdict(section, dtype))


def gradient_table(section: GradientReport, width: int = 200) -> Table:
    """One row per gradient: its shape, the user's shape and the numbers."""
    table = _table("gradients from the same d_output", tight=width < 100)
    for name, justify in (
        ("gradient", "left"),
        ("shape", "right"),
        ("user shape", "right"),
        ("max abs", "right"),
        ("max rel", "right"),
        ("ok", "center"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in section.rows:
        numbers = (
            (f"{row.max_abs:.1e}", f"{row.max_rel:.1e}")
            if row.max_abs is not None and row.max_rel is not None
            else ("", "")
        )
        mark = Text("✓", style="green") if row.ok else Text("✗", style="bold red")
        table.add_row(
            row.name,
            format_shape(row.shape),
            format_shape(row.user_shape) if row.user_shape is not None else row.status,
            *numbers,
            mark,
            style="bold red reverse" if row.name == section.first else None,
        )
    return table


def gradient_verdict(section: GradientReport, dtype: str) -> Text:
    """MATCH, or the first gradient that differs and the backward bug that explains it."""
    if section.ok:
        shown = sum(r.status == MATCH for r in section.rows)
        return Text(
            f"MATCH: all {shown} gradients agree with the reference's backward within the "
            f"{dtype} tolerance",
            style="bold green",
        )
    lines = Text.assemble(("DIFFERS", "bold red"), f" from gradient {section.first}\n")
    if section.bug is None:
        lines.append(
            "  no backward bug of the catalogue reproduces it; compare your backward with "
            "`attntrace run --backward` step by step",
            style="yellow",
        )
        return lines
    lines.append_text(
        Text.assemble(
            "  bug: ",
            (section.bug.name, "bold"),
            " (applied to the reference's backward it reproduces every gradient)\n",
        )
    )
    lines.append(f"  fix: {section.bug.fix}")
    return lines
