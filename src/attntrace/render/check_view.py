"""The Rich rendering of check results: a table of what failed and a summary line."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.render.terminal import RULE_BOX
from attntrace.text import inert, plain
from attntrace.tools.check import CaseResult, summary


def render_results(
    results: Sequence[CaseResult], console: Console, *, spec: bool = False, verbose: bool = False
) -> None:
    """Print one line per config (spec mode), its error, the notes, the checks that passed
    (``verbose``), a table of failures and a summary."""
    for r in results:
        if spec:
            console.print(status_line(r))
        for note in r.notes:
            console.print(Text(f"note: {plain(note)}", style="yellow"))
        for name in r.passed:
            # a check of your code says which step it read, even when it passed
            if verbose or (r.targets and not spec and name.startswith("expect ")):
                target = f"  {r.target(name)}" if r.target(name) else ""
                console.print(Text.assemble(("  passed  ", "green"), plain(name + target)))
    if any(r.mismatches for r in results):
        console.print(failures_table(results, spec=spec))
    console.print(summary_line(results, spec=spec))


def status_line(r: CaseResult) -> Text:
    """``PASS  name  (3 checks)``, ``FAIL …`` or ``ERROR  name: why it could not be checked``."""
    if r.error:
        return Text.assemble(("ERROR", "bold red"), f"  {plain(r.name)}: {plain(r.error)}")
    word, style = ("PASS", "bold green") if r.ok else ("FAIL", "bold red")
    return Text.assemble(
        (word, style), f"  {plain(r.name)}  ({r.checked} check{'s' if r.checked != 1 else ''})"
    )


def failures_table(results: Sequence[CaseResult], *, spec: bool = False) -> Table:
    """One row per failed check: (config,) what, expected, actual (, the step of your code
    that the check read: ``check --trace``)."""
    table = Table(
        title="failed checks",
        box=RULE_BOX,
        show_edge=False,
        padding=(0, 1, 0, 0),
        title_justify="left",
        title_style="bold",
    )
    if spec:
        table.add_column("config", style="bold")
    table.add_column("step" if not spec else "check", style="bold")
    table.add_column("expected", style="green")
    table.add_column("actual", style="red")
    traced = any(r.targets for r in results)
    if traced:
        table.add_column("checked")
    for r in results:
        for m in r.mismatches:
            cells = [*([r.name] if spec else []), m.what, m.expected, m.actual]
            cells += [r.target(m.subject or m.what)] if traced else []
            # names from golden and spec files: no markup, no escapes
            table.add_row(*map(inert, cells))
    return table


def summary_line(results: Sequence[CaseResult], *, spec: bool = False) -> Text:
    """``N passed, M failed`` over configs (spec) or over the checks of one config.

    >>> summary_line([CaseResult("", 3, ())]).plain
    'ok: 3 passed, 0 failed'
    """
    if spec:
        text = summary(results)
    else:
        failed = sum(r.failed for r in results)
        text = f"{sum(r.checked for r in results) - failed} passed, {failed} failed"
    ok = all(r.ok for r in results)
    return Text(("ok: " if ok else "FAILED: ") + text, style="bold green" if ok else "bold red")
