"""The Rich rendering of a capture of the user's code: one row per op, the chain of shapes,
and, when a shape was wrong, the failing line with its operands and the rule that broke."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    console.print(
        Text.assemble(("attntrace trace", "bold"), f"  {inert(title)}  ", (_sizes(capture), "cyan"))
    )
    if steps:
        console.print(Text(" → ".join(format_shape(s) for s in chain(steps)), style="cyan"))
    console.print()
    console.print(
        captured_table(steps, console.width)
        if steps
        else Text("no tensor operations recorded", style="dim")
    )


def _sizes(capture: Capture) -> str:
    sizes = capture.axis_sizes()
    order = [*(k for k in _ORDER if k in sizes), *(k for k in sizes if k not in _ORDER)]
    return "  ".join(f"{k}={sizes[k]}" for k in order)


_ORDER = ("B", "S", "N", "H", "M", "h", "g", "d")


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
    """One row per op: index, step, role, file:line, source, operand shapes → shape, axes, dtype.

    When every op is in one file the line column shows the line number only (the file is in the
    title), and the dtype moves into the title when there is one and the console is narrow.
    """
    files = {s.location.rpartition(":")[0] for s in steps if ":" in s.location}
    dtypes = {s.dtype for s in steps}
    dtype_column = width >= 120
    title = "steps of " + (inert(files.pop()) if len(files) == 1 else "your code")
    title += "" if dtype_column else f" ({', '.join(sorted(dtypes))}; wider terminal for more)"
    one_file = title.startswith("steps of ") and not title.startswith("steps of your code")
    table = _table(title)
    widest = max((len(format_shape(x.shape)) for x in steps), default=5)
    axes_width = max((len(format_axes(x.axes)) for x in steps), default=4)
    inputs = width >= 110  # operand shapes too when there is room
    table.add_column("#", justify="right", style="dim", min_width=len(str(len(steps))))
    table.add_column("step", style="bold", no_wrap=True, max_width=12)
    table.add_column("role", style="green", no_wrap=True, max_width=13)  # context_heads
    table.add_column("line", style="dim", no_wrap=True, justify="right" if one_file else "left")
    table.add_column("code", overflow="ellipsis", no_wrap=True, min_width=8,
                     max_width=_code_width(steps, width, axes_width, one_file, inputs))
    table.add_column(
        "operands → shape" if inputs else "shape",
        justify="right",
        style="cyan",
        no_wrap=True,
        min_width=widest,
    )
    table.add_column("axes", style="magenta", no_wrap=True, min_width=axes_width)
    if dtype_column:
        table.add_column("dtype", style="dim", no_wrap=True)
    for s in steps:
        shapes = " ".join(format_shape(i) for i in s.input_shapes)
        where = s.location.rpartition(":")[2] if one_file and ":" in s.location else s.location
        cells = [
            str(s.index),
            inert(s.name),
            s.role,
            inert(where),
            inert(s.source),
            f"{shapes} → {format_shape(s.shape)}" if shapes and inputs else format_shape(s.shape),
            format_axes(s.axes),
        ]
        table.add_row(*cells, *([s.dtype] if dtype_column else []))
    return table


def _code_width(steps: Sequence[CapturedStep], width: int, axes_width: int, one_file: bool,
                inputs: bool) -> int:
    """The code column's width: a quarter of the console (16 at least), less when the other
    columns need the room, so that Rich never squeezes the index, line or axes columns."""
    def widest(header: str, cells: Iterable[str], cap: int = 1 << 30) -> int:
        return max(len(header), min(cap, max(map(len, cells), default=0)))

    where = (s.location.rpartition(":")[2] if one_file else s.location for s in steps)
    shapes = (f"{' '.join(map(format_shape, s.input_shapes))} → {format_shape(s.shape)}"
              if inputs and s.input_shapes else format_shape(s.shape) for s in steps)
    others = [widest("#", [str(len(steps) - 1)]), widest("step", (s.name for s in steps), 12),
              widest("role", (s.role for s in steps), 13), widest("line", where),
              widest("operands → shape" if inputs else "shape", shapes), max(4, axes_width),
              *([widest("dtype", (s.dtype for s in steps))] if width >= 120 else [])]
    spacing = 2 * (len(others) + 1) - 1  # one space of padding per column, one between two
    return max(8, min(max(16, width // 4), width - sum(others) - spacing))


def render_failure(failure: Failure, explanation: Explanation | None, console: Console) -> None:
    """The failing line, every operand with its shape and axes, the rule and the fix."""
    console.print()
    head = "shape error" if explanation is not None else "error"
    console.print(
        Text.assemble(
            (f"{head} at {inert(failure.site.location)}", "bold red"),
            "  ",
            (inert(failure.site.source), "bold"),
        )
    )
    for k, o in enumerate(failure.operands):
        console.print(
            Text(
                f"  {inert(o.name or f'operand {k}'):<16} {format_shape(o.shape):<18} "
                f"{format_axes(o.axes) if o.axes else ''}"
            )
        )
    if explanation is not None:
        console.print(Text.assemble(("  rule: ", "bold"), inert(explanation.rule)))
        if explanation.fix:
            console.print(Text.assemble(("  fix:  ", "bold green"), inert(explanation.fix)))
    error = failure.error
    console.print(Text(f"  {type(error).__name__}: {inert(_first_line(error))}", style="red"))


def render_error(
    error: BaseException, frames: Sequence[tuple[str, int, str, str]], console: Console
) -> None:
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


def render_document(capture: Capture, fmt: str) -> str:
    """``--format json`` (schema attntrace.capture/1), ``csv`` (the csv of ``run``, same
    columns) or ``markdown`` (the table of the terminal as a pipe table)."""
    if fmt == "json":
        import json

        return json.dumps(capture.to_dict(), indent=2) + "\n"
    if fmt == "csv":
        from attntrace.render.csv_out import render_csv

        return render_csv(capture)
    from attntrace.render.markdown import pipe_table
    from attntrace.text import plain

    rows = [
        (
            str(s.index),
            plain(s.name),
            s.role,
            plain(s.location),
            f"`{plain(s.source)}`",
            " ".join(format_shape(i) for i in s.input_shapes),
            format_shape(s.shape),
            format_axes(s.axes),
            s.dtype,
        )
        for s in capture.steps
    ]
    header = ("#", "step", "role", "line", "code", "operands", "shape", "axes", "dtype")
    return pipe_table(header, rows, right=(0, 5, 6))
