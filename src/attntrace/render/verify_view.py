"""The Rich rendering of a verify report: backend against backend per step, then both against
the PyTorch references, then one verdict line."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.render.table import _table
from attntrace.tools.verify import Comparison, VerifyReport
from attntrace.units import format_shape


def render_verify(report: VerifyReport, console: Console) -> None:
    """Print both comparison tables and the verdict."""
    cfg, tol = report.config, report.tolerance
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    console.print(
        Text.assemble(
            ("attntrace verify", "bold"),
            f"  {sizes}  ",
            (cfg.dtype, "cyan"),
            f"  rtol {tol.rtol:.1e} atol {tol.atol:.1e}",
        )
    )
    if report.steps:  # (none when the ranks are simulated alone: verify --tp/--cp)
        left, right = report.steps[0].left, report.steps[0].right
        title = f"every step, {left} vs {right}"
        console.print(comparison_table(title, report.steps, with_ref=False))
    ranks = any(c.right == "one device" for c in report.references)  # verify --tp/--cp
    console.print(
        comparison_table(
            "the output gathered from the ranks vs one device"
            if ranks
            else "output and attention weights vs PyTorch's own attention"
            + (
                " (and every gradient vs autograd)"
                if any(c.name == "d_x" for c in report.references)
                else ""
            ),
            report.references,
            with_ref=True,
        )
    )
    for reason in dict.fromkeys(c.skipped for c in report.references if c.skipped):
        console.print(Text(f"n/a: {reason}", style="dim"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    console.print(verdict(report))


def comparison_table(title: str, rows: tuple[Comparison, ...], *, with_ref: bool) -> Table:
    """One row per comparison: names, shape, max abs and max rel difference, ok."""
    table = _table(title)
    table.add_column("tensor", style="bold")
    if with_ref:
        table.add_column("backend")
        table.add_column("reference")
    table.add_column("shape", justify="right", style="cyan", no_wrap=True)
    table.add_column("max abs", justify="right")
    table.add_column("max rel", justify="right")
    table.add_column("ok", justify="center")
    for c in rows:
        names = [c.name, c.left, c.right] if with_ref else [c.name]
        if c.skipped:
            table.add_row(
                *names, format_shape(c.shape), "n/a", "n/a", Text("–", style="dim"), style="dim"
            )
            continue
        mark = Text("✓", style="green") if c.ok else Text("✗", style="bold red")
        table.add_row(*names, format_shape(c.shape), f"{c.max_abs:.2e}", f"{c.max_rel:.2e}", mark)
    return table


def verdict(report: VerifyReport) -> Text:
    """``PASS: ...`` or ``FAIL: ...`` naming the comparisons beyond the tolerance."""
    total = report.compared
    skipped = len(report.steps) + len(report.references) - total
    na = f" ({skipped} n/a)" if skipped else ""
    if report.ok:
        return Text(
            f"PASS: all {total} comparisons within the {report.config.dtype} tolerance{na}",
            style="bold green",
        )
    bad = ", ".join(f"{c.name} ({c.left} vs {c.right})" for c in report.failures[:4])
    more = f" and {len(report.failures) - 4} more" if len(report.failures) > 4 else ""
    return Text(
        f"FAIL: {len(report.failures)} of {total} comparisons beyond the tolerance: {bad}{more}",
        style="bold red",
    )
