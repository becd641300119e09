"""The Rich rendering of a sweep: a table, then a bar chart per metric, eager beside flash."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attntrace.tools.sweep import SweepPoint
from attntrace.units import format_bytes, format_count, in_unit

BAR_WIDTH = 36
_STYLE = {"eager": "red", "flash": "green"}


def _label(p: SweepPoint) -> str:
    return f"S={p.seq} h={p.heads} H={p.hidden}" + (f" N={p.past}" if p.past else "")


def sweep_table(points: Sequence[SweepPoint], count: str = "flops", dtype: str = "") -> Table:
    """One row per point; ``dtype`` (of every byte figure, the KV cache's too) in the title."""
    title = f"sweep (bytes of {dtype})" if dtype else "sweep"
    table = Table(
        title=title, title_justify="left", title_style="bold", box=None, padding=(0, 1, 0, 0)
    )
    past = any(p.past for p in points)  # sweep --past: the cache's N
    for name in ("S", *(["N"] if past else []), "h", "H", "algorithm"):
        table.add_column(name, justify="right" if len(name) == 1 else "left")
    unit = "MACs" if count == "macs" else "FLOPs"
    for name in (unit, "scores", "peak", "KV/token"):
        table.add_column(name, justify="right", no_wrap=True)
    backward = any(p.saved_bytes is not None for p in points)
    if backward:  # sweep --backward: what the forward keeps, and the backward's arithmetic
        table.add_column("saved", justify="right", no_wrap=True)
        table.add_column(f"bwd {unit}", justify="right", no_wrap=True)
    layers = next((p.whole_model.layers for p in points if p.whole_model is not None), None)
    if layers is not None:  # sweep --layers L: the whole model's cache and arithmetic
        table.add_column(f"KV x{layers}", justify="right", no_wrap=True)
        table.add_column(f"{unit} x{layers}", justify="right", no_wrap=True)
    for p in points:
        whole = p.whole_model
        model = (
            [format_bytes(whole.kv_cache_bytes), format_count(in_unit(whole.flops, count))]
            if whole is not None
            else []
        )
        table.add_row(
            str(p.seq),
            *([f"{p.past:,}"] if past else []),
            str(p.heads),
            str(p.hidden),
            Text(p.algorithm, style=_STYLE.get(p.algorithm, "")),
            format_count(in_unit(p.flops, count)),
            format_bytes(p.score_bytes),
            format_bytes(p.peak_bytes),
            format_bytes(p.kv_cache_bytes_per_token),
            *_backward_cells(p, count),
            *model,
        )
    return table


def _backward_cells(p: SweepPoint, count: str) -> list[str]:
    """The saved bytes and backward FLOPs of a point (none without --backward)."""
    if p.saved_bytes is None or p.backward_flops is None:
        return []
    return [format_bytes(p.saved_bytes), format_count(in_unit(p.backward_flops, count))]


def bar_chart(
    points: Sequence[SweepPoint],
    title: str,
    value: Callable[[SweepPoint], float],
    fmt: Callable[[float], str],
) -> Group:
    """Horizontal bars on a linear scale (the quadratic growth shows), one per point."""
    top = max((value(p) for p in points), default=0) or 1
    width = max(len(_label(p)) for p in points)
    lines = [Text(title, style="bold")]
    for p in points:
        n = value(p)
        bar = "█" * max(1, round(BAR_WIDTH * n / top)) if n else ""
        lines.append(
            Text.assemble(
                f"{_label(p):>{width}} ",
                (f"{p.algorithm:<5} ", "dim"),
                (bar, _STYLE.get(p.algorithm, "")),
                f" {fmt(n)}",
            )
        )
    return Group(*lines)


def sweep_view(
    points: Sequence[SweepPoint], count: str = "flops", dtype: str = ""
) -> RenderableType:
    """The table and the three bar charts."""
    unit = "MACs" if count == "macs" else "FLOPs"
    return Group(
        sweep_table(points, count, dtype),
        Text(""),
        bar_chart(points, unit, lambda p: in_unit(p.flops, count), format_count),
        Text(""),
        bar_chart(points, "score bytes held at once", lambda p: p.score_bytes, format_bytes),
        Text(""),
        bar_chart(points, "peak live activations", lambda p: p.peak_bytes, format_bytes),
        *(
            (
                Text(""),
                bar_chart(
                    points, "saved for the backward", lambda p: p.saved_bytes or 0, format_bytes
                ),
            )
            if any(p.saved_bytes is not None for p in points)
            else ()
        ),
    )
