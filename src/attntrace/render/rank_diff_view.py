"""``diff --nproc N``: one row per rank (its steps matched, the first that differs, its output
against its reference rank's), then the verdict and, at the first difference, the sharding bug
with its rank, line and fix; ``--format json``: :meth:`RankDiffReport.to_dict`. Reads the
report; computes nothing."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from rich.table import Table

from attntrace.text import plain

if TYPE_CHECKING:
    from rich.console import Console

    from attntrace.diffing.rank_diff import Finding, RankDiffReport


def render_rank_diff(report: RankDiffReport, console: Console) -> None:
    """The table, the notes and the verdict of ``report`` on ``console``."""
    console.print(_header(report), highlight=False, markup=False)
    for read in report.read:
        console.print(f"note: {plain(str(read))}", highlight=False, markup=False)
    if report.sources:
        console.print(f"note: {weights_line(report.sources)}", highlight=False, markup=False)
    if report.rows:
        console.print(_table(report))
    console.print(_verdict(report), highlight=False, markup=False)
    if report.finding is not None:
        for line in finding_lines(report.finding):
            console.print(line, highlight=False, markup=False)


def rank_diff_json(report: RankDiffReport) -> str:
    """The report as one JSON document."""
    return json.dumps(report.to_dict(), indent=2) + "\n"


def weights_line(sources: dict[str, str]) -> str:
    """Where the weights came from: each rank's modules, joined in Megatron's layout.

    >>> weights_line({"w_q": "attn.q_proj.weight", "b_q": "attn.q_proj.bias", "w_o": "o.weight"})
    "weights: each rank's attn.q_proj, o, joined in Megatron's layout"
    """
    modules = ", ".join(dict.fromkeys(plain(n.rsplit(".", 1)[0]) for n in sources.values()))
    return f"weights: each rank's {modules}, joined in Megatron's layout"


def _header(report: RankDiffReport) -> str:
    cfg, layout = report.config, report.config.parallel
    assert layout is not None
    parts = f"T={layout.tp}" if layout.cp == 1 else f"C={layout.cp} {layout.cp_kind}"
    batch = f"B={cfg.batch} " if cfg.batch is not None else ""
    return (
        f"attntrace diff {plain(report.target)} --nproc {layout.ranks}: {batch}S={cfg.seq} "
        f"H={cfg.hidden} h={cfg.heads} g={cfg.groups} {parts} {cfg.dtype}"
    )


def _table(report: RankDiffReport) -> Table:
    table = Table(box=None, pad_edge=False)
    for name, justify in (
        ("rank", "right"),
        ("steps matched", "right"),
        ("first that differs", "left"),
        ("output max |diff|", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, rows in enumerate(report.rows):
        compared = [r for r in rows if r.user is not None or r.status == "differs"]
        matched = sum(r.status == "match" for r in compared)
        first = next((r for r in rows if r.status == "differs" and r.user is not None), None)
        where = ""
        if first is not None and first.user is not None:
            where = f"{first.step.name} ({plain(first.user.location)})"
        table.add_row(str(rank), f"{matched} of {len(compared)}", where, _num(report.outputs[rank]))
    return table


def _num(v: float) -> str:
    return "nan" if math.isnan(v) else "inf" if math.isinf(v) else f"{v:.3g}"


def _verdict(report: RankDiffReport) -> str:
    if report.verdict == "match":
        return (
            f"MATCH: each of the {len(report.rows)} ranks returns its reference rank's output "
            f"(within the {report.config.dtype} tolerance)"
        )
    if report.verdict == "cannot tell":
        return f"CANNOT TELL: {plain(report.cannot_tell)}"
    f = report.finding
    assert f is not None
    return f"DIFFERS at rank {f.rank}, step {f.step}: {plain(f.name)}"


def finding_lines(f: Finding) -> list[str]:
    """Where the code shows the difference, and the fix.

    >>> from attntrace.diffing.rank_diff import Finding
    >>> finding_lines(Finding(1, "o_all_reduce", "tp-no-all-reduce", "…", "all-reduce it",
    ...                       "attn.py:80", "partial = F.linear(x, self.weight)"))
    ['  at attn.py:80 (rank 1): partial = F.linear(x, self.weight)', '  fix: all-reduce it']
    """
    lines = []
    if f.location:
        where = (
            f"{f.location} ({f.called}; rank {f.rank})"
            if f.called
            else f"{f.location} (rank {f.rank})"
        )
        lines.append(f"  at {plain(where)}: {plain(f.source.strip())}")
    lines.append(f"  fix: {plain(f.fix)}")
    return lines
