"""The Rich rendering of a capture of the user's code: one row per op, the chain of shapes,
and, when a shape was wrong, the failing line with its operands and the rule that broke."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.render.table import _table, format_axes, format_shape
from attntrace.text import inert

if TYPE_CHECKING:
    from attntrace.capture import Capture, CapturedStep, Failure
    from attntrace.capture.explain import Explanation


def render_capture(capture: Capture, console: Console, *, title: str = "") -> None:
    """The chain of shapes and the steps table."""
    steps = capture.steps
    console.print(Text.assemble(("attntrace trace", "bold"), f"  {inert(title)}  ",
                                (_sizes(capture), "cyan")))
    if steps:
        console.print(Text(" → ".join(format_shape(s) for s in chain(steps)), style="cyan"))
    console.print()
    console.print(captured_table(steps, console.width) if steps else Text("no tensor operations recorded", style="dim"))


def _sizes(capture: Capture) -> str:
    return "  ".join(f"{k}={v}" for k, v in capture.axis_sizes().items())


def chain(steps: Sequence[CapturedStep]) -> list[tuple[int, ...]]:
    """The shapes along the path of the last step: back through each op's first operand to
    the tensor it started from, then in order, each shape once per change."""
    by_name = {s.name: s for s in steps}
    path: list[tuple[int, ...]] = []
    step: CapturedStep | None = steps[-1]
    while step is not None:
        if not path or path[-1] != step.shape:
            path.append(step.shape)
        step = by_name.get(step.inputs[0]) if step.inputs else None
    return path[::-1]


def captured_table(steps: Sequence[CapturedStep], width: int = 120) -> Table:
    """One row per op: index, step, role, file:line, source, operand shapes → shape, axes, dtype."""
    table = _table("steps (your code)")
    table.add_column("#", justify="right", style="dim")
    table.add_column("step", style="bold")
    table.add_column("role", style="green")
    table.add_column("line", style="dim", no_wrap=True)
    table.add_column("code", overflow="fold", max_width=max(24, width // 3))
    table.add_column("shapes", justify="right", style="cyan", overflow="fold")
    table.add_column("axes", style="magenta", no_wrap=True)
    table.add_column("dtype", style="dim", no_wrap=True)
    for s in steps:
        shapes = " ".join(format_shape(i) for i in s.input_shapes)
        table.add_row(str(s.index), inert(s.name), s.role, inert(s.location), inert(s.source),
                      f"{shapes} → {format_shape(s.shape)}" if shapes else format_shape(s.shape),
                      format_axes(s.axes), s.dtype)
    return table


def render_failure(failure: Failure, explanation: Explanation | None, console: Console) -> None:
    """The failing line, every operand with its shape and axes, the rule and the fix."""
    console.print()
    head = "shape error" if explanation is not None else "error"
    console.print(Text.assemble((f"{head} at {inert(failure.site.location)}", "bold red"), "  ",
                                (inert(failure.site.source), "bold")))
    for k, o in enumerate(failure.operands):
        console.print(Text(f"  {inert(o.name or f'operand {k}'):<16} {format_shape(o.shape):<18} "
                           f"{format_axes(o.axes) if o.axes else ''}"))
    if explanation is not None:
        console.print(Text.assemble(("  rule: ", "bold"), inert(explanation.rule)))
        if explanation.fix:
            console.print(Text.assemble(("  fix:  ", "bold green"), inert(explanation.fix)))
    error = failure.error
    console.print(Text(f"  {type(error).__name__}: {inert(_first_line(error))}", style="red"))


def render_error(error: BaseException, frames: Sequence[tuple[str, int, str, str]], console: Console) -> None:
    """Another exception of the user's code: its type and message, the user's frames only."""
    console.print()
    console.print(Text("Traceback (your code only):", style="bold red"))
    for filename, line, func, text in frames:
        console.print(Text(f'  File "{inert(filename)}", line {line}, in {inert(func)}'))
        if text:
            console.print(Text(f"    {inert(text)}"))
    console.print(Text(f"{type(error).__name__}: {inert(_first_line(error))}", style="red"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
