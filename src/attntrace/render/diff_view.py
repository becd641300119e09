"""The Rich rendering of a diff: reference steps beside the user's, the first step that
differs highlighted, then the diagnosis (or the verdict)."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.diffing.align import DIFFERS, FUSED, MATCH, Row
from attntrace.diffing.diff_report import DiffReport
from attntrace.render.table import _table
from attntrace.text import plain
from attntrace.units import format_shape

#: The mark of each row status.
MARKS = {
    MATCH: Text("✓", style="green"),
    DIFFERS: Text("✗", style="bold red"),
    FUSED: Text("–", style="dim"),
    "not seen": Text("–", style="dim"),
}


def render_diff(report: DiffReport, console: Console) -> None:
    """Print the title, the aligned table and the diagnosis."""
    cfg, tol = report.config, report.tolerance
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    console.print(
        Text.assemble(
            ("attntrace diff", "bold"),
            "  ",
            plain(report.target),
            "  ",
            sizes,
            "  ",
            (cfg.dtype, "cyan"),
        )
    )
    if report.weights:  # none when nothing ran (CANNOT TELL before the run)
        console.print(
            Text(
                f"same input and weights (from {plain(report.weights)}) on both sides; "
                f"rtol {tol.rtol:.1e} atol {tol.atol:.1e}",
                style="dim",
            )
        )
    for note in report.notes:
        console.print(Text(plain(note), style="dim"))
    for read in report.read:  # what the module said, no flag having said it
        overrides = "; a flag overrides it" if read.overridable else ""
        console.print(Text(f"{plain(str(read))}{overrides}", style="dim"))
    if report.rows:
        console.print(diff_table(report, console.width))
    console.print(diagnosis_text(report))
    if report.backward is not None:  # diff --backward
        from attntrace.render.gradient_view import render_gradients

        render_gradients(report.backward, report.config.dtype, console)


def diff_table(report: DiffReport, width: int = 200) -> Table:
    """One row per reference step: its shape, the user's step, line and shape, the numbers.

    Below 100 columns the table is tight and, when every step is in one file, ``where`` shrinks
    to the line number (the file is named in the verdict under the table)."""
    tight = width < 100
    places = [r.user.location for r in report.rows if r.user is not None and ":" in r.user.location]
    one_file = tight and len({p.rsplit(":", 1)[0] for p in places}) == 1
    table = _table("reference step by step beside the code under test", tight=tight)
    for name, justify in (
        ("#", "right"),
        ("reference", "left"),
        ("shape", "right"),
        ("user step", "left"),
        ("line" if one_file else "where", "right" if one_file else "left"),
        ("user shape", "right"),
        ("max abs", "right"),
        ("max rel", "right"),
        ("ok", "center"),
    ):
        just: Any = justify
        names = name in ("user step", "where")  # the cells that give way when space runs out
        table.add_column(
            name, justify=just, no_wrap=not names, overflow="ellipsis", min_width=len(name)
        )
    first = report.first
    for i, row in enumerate(report.rows):
        style = (
            "bold red reverse"
            if row is first
            else "dim"
            if row.status not in (MATCH, DIFFERS)
            else None
        )
        table.add_row(
            str(i),
            row.step.name,
            format_shape(row.step.shape),
            *_user_cells(row, one_file),
            MARKS[row.status],
            style=style,
        )
    return table


def _user_cells(row: Row, line_only: bool = False) -> tuple[Text | str, ...]:
    u, a = row.user, row.agreement
    if u is None:
        return (
            Text(row.status if row.status != DIFFERS else "(missing)", style="dim"),
            "",
            "",
            "",
            "",
        )
    name = plain(u.name)  # the layout it was compared in is in the JSON
    numbers = (f"{a.max_abs:.1e}", f"{a.max_rel:.1e}") if a is not None else ("", "")
    where = u.location
    if line_only:  # "file.py:18" -> "18"; the given input has no line
        where = where.rsplit(":", 1)[1] if ":" in where else "-"
    return (Text(name), Text(plain(where)), format_shape(u.shape), *numbers)


def diagnosis_text(report: DiffReport) -> Text:
    """The verdict: every step matches, the first divergence with the bug, line and fix, or
    CANNOT TELL with what is missing and what would decide."""
    if report.undecided is not None:
        return _cannot_tell(report)
    if all(r.ok for r in report.rows):  # the gradients have their own verdict
        shown = sum(r.status == MATCH for r in report.rows)
        return Text(
            f"MATCH: all {shown} steps the code makes agree with the reference within the "
            f"{report.config.dtype} tolerance",
            style="bold green",
        )
    d = report.diagnosis
    assert d is not None  # a report with a differing row has one
    where = (
        f" at {plain(d.location)}" + (f": {plain(d.source)}" if d.source else "")
        if d.location
        else ""
    )
    # named where the code raised: no numbers at all (a NaN in the code's numbers has them)
    raised = d.bug is not None and math.isnan(d.max_abs) and math.isnan(d.explained_abs)
    lines = Text.assemble(
        ("DIFFERS", "bold red"),
        f" from step {d.step}{where}\n",
        "" if raised else _how_far(report, d.step, d.max_abs, d.max_rel),
    )
    if d.bug is None:
        lines.append(f"  {d.name}\n", style="yellow")
    else:
        how = (
            "the code raised after it"
            if raised
            else f"applied to the reference it reproduces the code to {d.explained_abs:.1e}"
        )
        lines.append_text(Text.assemble("  bug: ", (d.name, "bold"), f" ({how})\n"))
    lines.append(f"  fix: {d.fix}")
    if report.nonfinite:
        lines.append(f"\n  numbers: {plain(report.nonfinite)}")
    return lines


def _cannot_tell(report: DiffReport) -> Text:
    """CANNOT TELL: what is missing, the one flag or file that would decide, and the step
    where the code and the reference part (when they ran)."""
    why = report.undecided
    assert why is not None
    d = report.diagnosis
    lines = Text.assemble(("CANNOT TELL", "bold yellow"), f": {plain(why.missing)}\n")
    if d is not None and d.location:
        at = f"{plain(d.location)}" + (f": {plain(d.source)}" if d.source else "")
        lines.append(f"  the code and the reference part at step {d.step} ({at})\n")
    if report.nonfinite:
        lines.append(f"  numbers: {plain(report.nonfinite)}\n")
    lines.append(f"  to decide: {plain(why.remedy) if why.remedy else 'nothing attntrace takes'}")
    return lines


def _how_far(report: DiffReport, step: str, max_abs: float, max_rel: float) -> str:
    """The distance of the first differing step, or its two shapes where they differ (a
    cache returned without the new tokens: (B, g, N, d) against (B, g, N+S, d))."""
    row = next((r for r in report.rows if r.step.name == step and r.user is not None), None)
    if (
        row is not None
        and row.user is not None
        and row.user.shape != row.step.shape
        and (row.agreement is None or math.isinf(row.agreement.max_abs))
    ):  # no layout of one is the other (a (5, 2, 32) for a (2, 5, 32) is a layout)
        return (
            f"  user vs reference: shapes differ, {format_shape(row.user.shape)} against "
            f"{format_shape(row.step.shape)}\n"
        )
    return f"  user vs reference: max abs {max_abs:.3g}, max rel {max_rel:.3g}\n"


def render_diff_json(report: DiffReport) -> str:
    """The document of :meth:`DiffReport.to_dict` as indented JSON, ending in a newline."""
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
