"""The Rich rendering of a capture of the user's code: one row per op, the chain of shapes,
and, when a shape was wrong, the failing line with its operands and the rule that broke."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.render.csv_out import CSV_COLUMNS
from attntrace.render.table import _table
from attntrace.text import inert, plain
from attntrace.units import format_axes, format_shape, format_shape_x

if TYPE_CHECKING:
    from attntrace.capturing.explain import Explanation
    from attntrace.capturing.session import Capture, CapturedStep, Failure


def render_capture(capture: Capture, console: Console, *, title: str = "") -> None:
    """The chain of shapes and the steps table."""
    steps = capture.steps
    console.print(
        Text.assemble(("attntrace trace", "bold"), f"  {plain(title)}  ", (_sizes(capture), "cyan"))
    )
    if steps:
        console.print(Text(" → ".join(format_shape(s) for s in chain(steps)), style="cyan"))
    console.print()
    console.print(
        captured_table(steps, console.width)
        if steps
        else Text("no tensor operations recorded", style="dim")
    )
    for note in capture.notes:  # a reshape that mixes axes: the shapes fit, the values do not
        console.print(Text(f"warning: {plain(note)}", style="yellow"))
    for note in getattr(capture, "remarks", ()):  # what attntrace did to see the steps
        console.print(Text(f"note: {plain(note)}", style="dim"))


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
    inputs = width >= 110  # operand shapes too when there is room
    cells = [_cells(s, one_file, inputs, dtype_column) for s in steps]
    widths = _widths(cells, width, inputs, dtype_column)
    styles = {
        "#": "dim",
        "step": "bold",
        "role": "green",
        "line": "dim",
        "code": "",
        "shape": "cyan",
        "axes": "magenta",
        "dtype": "dim",
    }
    right = {"#", "shape"} | ({"line"} if one_file else set())
    for name, wide in widths.items():
        header = "operands → shape" if name == "shape" and inputs else name
        table.add_column(
            header,
            style=styles[name],
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if name in right else "left",
            min_width=wide,
            max_width=wide,
        )
    for row in cells:
        row["line"] = _tail(row["line"], widths["line"])  # file:line keeps its line number
        table.add_row(*(row[name] for name in widths))
    return table


def _tail(text: str, width: int) -> str:
    """``text`` cut from the left to ``width``: ``…ling_llama.py:243``."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def _cells(s: CapturedStep, one_file: bool, inputs: bool, dtype: bool) -> dict[str, str]:
    """The text of each column of one step's row."""
    shapes = " ".join(format_shape(i) for i in s.input_shapes)
    where = s.location.rpartition(":")[2] if one_file and ":" in s.location else s.location
    return {
        "#": str(s.index),
        "step": inert(s.name),
        "role": s.role,
        "line": inert(where),
        "code": inert(s.source),
        "shape": f"{shapes} → {format_shape(s.shape)}"
        if shapes and inputs
        else format_shape(s.shape),
        "axes": format_axes(s.axes),
        **({"dtype": s.dtype} if dtype else {}),
    }


#: The columns that give way on a narrow console, in order, each down to 8 wide ("#" then goes
#: altogether): the shapes and axes, what the table is for, are never cut.
_GIVE_WAY = ("code", "line", "step", "role")


def _widths(
    cells: Sequence[dict[str, str]], width: int, inputs: bool, dtype: bool
) -> dict[str, int]:
    """Each column's width: as wide as its longest cell (step 12, role 13, code a quarter
    of the console at most), less for those of :data:`_GIVE_WAY` where the console is narrow."""
    names = ["#", "step", "role", "line", "code", "shape", "axes", *(["dtype"] if dtype else [])]
    caps = {"step": 12, "role": 13, "code": max(16, width // 4)}  # role: context_heads
    headers = {"shape": "operands → shape" if inputs else "shape"}
    widths = {
        n: min(caps.get(n, width), max([len(headers.get(n, n)), *(len(row[n]) for row in cells)]))
        for n in names
    }
    excess = sum(widths.values()) + 2 * len(widths) - 1 - width  # a space of padding, one between
    for name in _GIVE_WAY:
        cut = max(0, min(excess, widths[name] - 8))
        widths[name] -= cut
        excess -= cut
    if excess > 0:
        del widths["#"]
    return widths


def render_failure(failure: Failure, explanation: Explanation | None, console: Console) -> None:
    """The failing line, every operand with its shape and axes, the rule and the fix."""
    console.print()
    head = explanation.kind if explanation is not None else "error"
    console.print(
        Text.assemble(
            (f"{head} at {plain(failure.site.location)}", "bold red"),
            "  ",
            (plain(failure.site.source), "bold"),
        )
    )
    for k, o in enumerate(failure.operands):
        console.print(
            Text(
                f"  {plain(o.name or f'operand {k}'):<16} {format_shape(o.shape):<18} "
                f"{format_axes(o.axes) if o.axes else ''}"
            )
        )
    if explanation is not None:
        console.print(Text.assemble(("  rule: ", "bold"), plain(explanation.rule)))
        if explanation.fix:
            console.print(Text.assemble(("  fix:  ", "bold green"), plain(explanation.fix)))
        if explanation.first:  # where the axes went wrong, lines before the crash
            console.print(Text.assemble(("  first wrong: ", "bold"), plain(explanation.first)))
    error = failure.error
    console.print(Text(f"  {type(error).__name__}: {plain(_first_line(error))}", style="red"))


def render_error(
    error: BaseException, frames: Sequence[tuple[str, int, str, str]], console: Console
) -> None:
    """Another exception of the user's code: its type and message, the user's frames only."""
    console.print()
    console.print(Text("Traceback (your code only):", style="bold red"))
    for (filename, line, func, text), repeats in _runs(frames):
        console.print(Text(f'  File "{plain(filename)}", line {line}, in {plain(func)}'))
        if text:
            console.print(Text(f"    {plain(text)}"))
        if repeats:  # a recursion: one frame, not a thousand (as Python prints it)
            console.print(Text(f"  [Previous line repeated {repeats} more times]", style="dim"))
    console.print(Text(f"{type(error).__name__}: {plain(_first_line(error))}", style="red"))


Frame = tuple[str, int, str, str]  # file, line, function, source text


def _runs(frames: Sequence[Frame]) -> list[tuple[Frame, int]]:
    """Each frame with how many times it repeats right after it, runs of equal frames as one.

    >>> _runs([("a.py", 2, "f", "f()")] * 3 + [("a.py", 5, "g", "")])
    [(('a.py', 2, 'f', 'f()'), 2), (('a.py', 5, 'g', ''), 0)]
    """
    out: list[tuple[Frame, int]] = []
    for frame in frames:
        if out and out[-1][0] == frame:
            out[-1] = (frame, out[-1][1] + 1)
        else:
            out.append((frame, 0))
    return out


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def render_document(
    capture: Capture,
    fmt: str,
    error: BaseException | None = None,
    frames: Sequence[Frame] = (),
) -> str:
    """``--format json`` (schema attntrace.capture/2; ``failure``: what ``error`` broke),
    ``csv`` (:func:`render_capture_csv`) or ``markdown`` (the table of the terminal as a pipe
    table)."""
    if fmt == "json":
        import json

        return json.dumps(capture.document(error, frames), indent=2) + "\n"
    if fmt == "csv":
        return render_capture_csv(capture)
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


#: The CSV header of a capture: the columns of ``run``'s CSV, then the step's role.
CAPTURE_CSV_COLUMNS = (*CSV_COLUMNS, "role")


def render_capture_csv(capture: Capture) -> str:
    """The steps as CSV: ``run``'s columns (``view``, ``flops``, ``formula`` and ``nonfinite``
    empty, as a capture does not know them) and ``role`` (empty when none).

    >>> import attntrace, numpy as np
    >>> with attntrace.capture() as t:
    ...     x = t.track(np.ones((3, 8)))
    >>> render_capture_csv(t).splitlines()[1].split(",")[3:]
    ['3x8', 'S H', 'float64', '192', '', '', '', '', 'x']
    """
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CAPTURE_CSV_COLUMNS)
    for s in capture.steps:
        unknown = ["", "", "", ""]  # view, flops, formula, nonfinite
        writer.writerow(
            [
                s.index,
                s.name,
                s.op,
                format_shape_x(s.shape),
                " ".join(s.axes),
                s.dtype,
                s.nbytes,
                *unknown,
                s.role,
            ]
        )
    return out.getvalue()
