"""The Rich view of two configurations side by side (``attntrace compare``): the settings that
differ, the steps (those whose shape or op changes highlighted), and the figures beside each
other with their ratio."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from attntrace.render.table import describe
from attntrace.tools.side_by_side import SideBySide, StepPair, Total
from attntrace.units import format_axes, format_bytes, format_count, format_shape

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from attntrace.trace import Step, Trace

#: How a row of the steps table is drawn: changed in both, in A only, in B only.
CHANGED, ONLY_A, ONLY_B = "bold yellow", "red", "green"


def render_compare(pair: SideBySide, console: Console) -> None:
    """Print the two titles, the settings that differ, the steps and the figures."""
    from rich.console import NewLine
    from rich.text import Text

    console.print(Text.assemble(("A ", "bold"), _title(pair.a)))
    console.print(Text.assemble(("B ", "bold"), _title(pair.b)))
    console.print(NewLine())
    if pair.settings:
        console.print(settings_table(pair))
    else:
        console.print(Text("A and B have the same settings", "dim"))
    console.print(NewLine())
    console.print(steps_table(pair))
    console.print(NewLine())
    console.print(totals_table(pair))


def render_compare_json(pair: SideBySide) -> str:
    """:meth:`SideBySide.to_dict` as indented JSON, ending in a newline."""
    return json.dumps(pair.to_dict(), indent=2, allow_nan=False) + "\n"


def _title(trace: Trace) -> str:
    sizes = "  ".join(f"{axis}={n}" for axis, n in trace.axis_sizes().items())
    return f"{describe(trace.config)}  {sizes}  {trace.backend} {trace.config.dtype}"


def settings_table(pair: SideBySide) -> Table:
    """The settings that differ: name, in A, in B."""
    from rich.table import Table

    table = Table(title="what changes", title_justify="left", title_style="bold")
    table.add_column("setting", style="bold")
    table.add_column("A")
    table.add_column("B", style=CHANGED)
    for name, a, b in pair.settings:
        table.add_row(name, a, b)
    return table


def steps_table(pair: SideBySide) -> Table:
    """Every step of either, with its shape in each; a step whose shape or op changes in
    yellow (with B's op), one of A only in red, one of B only in green."""
    from rich.table import Table

    changed = sum(p.changed for p in pair.steps)
    table = Table(
        title=f"steps ({changed} of {len(pair.steps)} change: yellow; red: A only, green: B only)",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("step", style="bold")
    table.add_column("shape in A", justify="right")
    table.add_column("shape in B", justify="right")
    table.add_column("axes (B)")
    table.add_column("op, where it changes (A → B)", overflow="fold")
    for p in pair.steps:
        table.add_row(
            p.name, _shape(p.a), _shape(p.b), format_axes(_either(p).axes), _op(p), style=_style(p)
        )
    return table


def totals_table(pair: SideBySide) -> Table:
    """FLOPs, parameters and bytes of A and B, and B / A."""
    from rich.table import Table

    table = Table(title="costs", title_justify="left", title_style="bold")
    table.add_column("")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("B / A", justify="right")
    for t in pair.totals:
        style = "" if t.a == t.b else CHANGED
        table.add_row(t.name, _figure(t, t.a), _figure(t, t.b), _ratio(t), style=style)
    return table


def _either(p: StepPair) -> Step:
    step = p.b if p.b is not None else p.a
    assert step is not None  # a pair holds at least one step
    return step


def _style(p: StepPair) -> str:
    if not p.changed:
        return ""
    return ONLY_A if p.b is None else ONLY_B if p.a is None else CHANGED


def _op(p: StepPair) -> str:
    """``A's op → B's op`` where the op changes; the op of a step of one trace only."""
    if p.a is None or p.b is None:
        return _either(p).op
    return "" if p.a.op == p.b.op else f"{p.a.op} → {p.b.op}"


def _shape(step: Step | None) -> str:
    return "—" if step is None else format_shape(step.shape)


def _figure(total: Total, value: int) -> str:
    return format_bytes(value) if total.unit == "bytes" else format_count(value)


def _ratio(total: Total) -> str:
    ratio = total.ratio
    if ratio is None:
        return ""
    return "same" if total.a == total.b else f"{ratio:.4g}x"
