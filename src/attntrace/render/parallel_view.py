"""The rank view's figures (``run --tp T --cp C``): what one rank holds and computes beside
the single device, and every collective with its shapes and bytes. Reads
:class:`attntrace.sharding.figures.RankFigures`; computes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.render.table import _table
from attntrace.sharding.figures import RankFigures
from attntrace.trace import Trace
from attntrace.units import format_bytes, format_count, format_shape, in_unit

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from attntrace.tools.sweep_ranks import RankSweep


def parallel_pieces(trace: Trace, count: str = "flops") -> list[RenderableType]:
    """The two tables of a rank trace (none for a single-device trace).

    >>> import io
    >>> from rich.console import Console
    >>> from attntrace import AttentionConfig
    >>> from attntrace.config.parallel_layout import ParallelLayout
    >>> from attntrace.sharding import trace_parallel
    >>> cfg = AttentionConfig(seq=4, hidden=16, heads=4, parallel=ParallelLayout(tp=2))
    >>> console = Console(file=io.StringIO(), width=100)
    >>> for piece in parallel_pieces(trace_parallel(cfg, "shape")):
    ...     console.print(piece)
    >>> print(console.file.getvalue().splitlines()[0].rstrip())
    rank 0 of 2 per layer
    """
    from rich.console import NewLine

    f = trace.parallel
    if not isinstance(f, RankFigures):
        return []
    pieces: list[RenderableType] = [cost_table(f, count)]
    if f.collectives:
        pieces += [NewLine(), collectives_table(f)]
    return pieces


def cost_table(f: RankFigures, count: str = "flops") -> Table:
    """The rank's FLOPs, memory and traffic beside one device's."""
    lay = f.layout
    split = f"T={lay.tp}" + (" (+SP)" if lay.sp else "") + f", C={lay.cp}"
    if lay.cp > 1:
        split += f" ({lay.cp_kind})"
    unit = "MACs" if count == "macs" else "FLOPs"
    checked = (
        f"; gathered output vs one device: max |diff| {f.max_error:.2e}"
        if f.max_error is not None
        else ""
    )
    table = _table(
        f"rank {lay.rank} of {lay.ranks} per layer",
        caption=f"tp rank {lay.tp_rank}, cp rank {lay.cp_rank}; {split}; all ranks: "
        f"{format_count(in_unit(f.summed_flops, count))} {unit} = one device + redundancy"
        f"{checked}",
    )
    for name, justify in (("", "left"), ("this rank", "right"), ("one device", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    unit = "MACs" if count == "macs" else "FLOPs"
    table.add_row(
        unit, format_count(in_unit(f.flops, count)), format_count(in_unit(f.single_flops, count))
    )
    table.add_row("weights", format_bytes(f.weight_bytes), format_bytes(f.single_weight_bytes))
    table.add_row("KV cache", format_bytes(f.kv_cache_bytes), format_bytes(f.single_kv_cache_bytes))
    table.add_row("peak memory", format_bytes(f.peak_bytes), format_bytes(f.single_peak_bytes))
    table.add_row("activations", format_bytes(f.activation_bytes), "")
    table.add_row("sent + received", format_bytes(f.comm_bytes), "0 B")
    for what, flops in f.redundancy:
        table.add_row(
            f"[dim]{what}[/]",
            "",
            f"[dim]{'+' if flops >= 0 else '−'}{format_count(in_unit(abs(flops), count))}[/]",
        )
    return table


def collectives_table(f: RankFigures) -> Table:
    """Each collective: its step, group, the shapes in and out, bytes sent and received."""
    table = _table(
        "collectives of this rank",
        caption="bytes sent per call (the ring algorithm, NCCL's), as many received; "
        "× count per layer",
    )
    for name, justify in (
        ("step", "left"),
        ("kind", "left"),
        ("group", "left"),
        ("in", "right"),
        ("out", "right"),
        ("sent", "right"),
        ("× count", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in f.collectives:
        table.add_row(
            c.step,
            c.kind,
            f"{c.group}×{c.size}",
            format_shape(c.shape_in),
            format_shape(c.shape_out),
            format_bytes(c.sent),
            str(c.count),
        )
    return table


def rank_sweep_table(sweep: RankSweep, count: str = "flops", dtype: str = "float32") -> Table:
    """``sweep --tp/--cp``: rank 0's cost per layout, one device's FLOPs beside it."""
    unit = "MACs" if count == "macs" else "FLOPs"
    skipped = f"; {len(sweep.skipped)} layout(s) left out (sizes that do not divide)"
    table = _table(
        f"rank 0 per layer (bytes of {dtype})",
        caption="comm: bytes sent + received (ring algorithm)" + (skipped if sweep.skipped else ""),
    )
    past = any(p.past for p in sweep.points)  # decode sweeps: the cache's N
    columns = ("S", *("N",) * past, "h", "T", "C", unit, "one device", "peak", "weights")
    for name in (*columns, "KV cache", "comm"):
        table.add_column(name, justify="right")
    for p in sweep.points:
        table.add_row(
            str(p.seq),
            *(f"{p.past:,}",) * past,
            str(p.heads),
            f"{p.tp}{'+SP' if p.sp else ''}",
            f"{p.cp}{f' {p.cp_kind}' if p.cp > 1 else ''}",
            format_count(in_unit(p.flops, count)),
            format_count(in_unit(p.single_flops, count)),
            format_bytes(p.peak_bytes),
            format_bytes(p.weight_bytes),
            format_bytes(p.kv_cache_bytes),
            format_bytes(p.comm_bytes),
        )
    return table
