"""The serving figures of ``run`` (``--past``, ``--peak-flops``, ``--memory``...): the roofline
of this step beside the prefill of the same tokens, each step's traffic as traced, and the KV
cache a server holds. Reads :class:`attntrace.engine.serving.ServingFigures`; computes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.engine.serving import (
    DEFAULT_MACHINE,
    Machine,
    PagedFigures,
    ServingFigures,
    Traffic,
    requests_note,
)
from attntrace.render.table import _table
from attntrace.trace import Trace
from attntrace.units import format_bytes, format_count, format_rate, in_unit

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table


def serving_pieces(
    trace: Trace, count: str = "flops", *, tight: bool = False
) -> list[RenderableType]:
    """The serving tables of ``trace`` (none without figures): roofline, steps, KV cache.

    >>> import dataclasses, io
    >>> from rich.console import Console
    >>> from attntrace import AttentionConfig, trace_attention
    >>> from attntrace.engine.serving import serving_figures
    >>> t = trace_attention(AttentionConfig(seq=1, past=4095, hidden=64, heads=4), "shape")
    >>> t = dataclasses.replace(t, serving=serving_figures(t))
    >>> console = Console(file=io.StringIO(), width=100)
    >>> for piece in serving_pieces(t):
    ...     console.print(piece)
    >>> print(console.file.getvalue().splitlines()[0].rstrip())
    roofline of one layer (fused kernels)
    """
    from rich.console import NewLine

    f = trace.serving
    if not isinstance(f, ServingFigures):
        return []
    pieces: list[RenderableType] = [
        roofline_table(trace, f, count, tight=tight),
        NewLine(),
        traffic_table(f.steps, count, tight=tight),
        NewLine(),
        cache_table(f, tight=tight),
    ]
    if f.paged is not None:
        pieces += [NewLine(), paged_table(f.paged, tight=tight)]
    return pieces


def roofline_table(trace: Trace, f: ServingFigures, count: str, *, tight: bool = False) -> Table:
    """This step (and the prefill of the same N + S tokens) fused: FLOPs, bytes, intensity,
    the side of the ridge and the roofline's time."""
    m = f.machine
    cfg = trace.config
    here = f"decode: S={cfg.seq} new, N={cfg.past:,} cached; " if cfg.past else ""
    also = f"prefill: the {cfg.positions:,} tokens at once; " if f.prefill else ""
    table = _table(
        "roofline of one layer (fused kernels)",
        tight=tight,
        caption=f"{here}{also}{m.name}: {format_rate(m.peak_flops, 'FLOP/s')}"
        f"{peak_dtype_note(m, cfg.dtype)}, "
        f"{format_rate(m.bandwidth, 'B/s')}, ridge {m.ridge:,.0f} FLOPs/B "
        "(--peak-flops, --bandwidth); below the ridge: memory-bound",
    )
    unit = "MACs" if count == "macs" else "FLOPs"
    for name, justify in (
        ("phase", "left"),
        ("kernel", "left"),
        (unit, "right"),
        ("read", "right"),
        ("written", "right"),
        (f"{unit}/B", "right"),
        ("bound", "left"),
        ("time", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    phases = [("decode" if cfg.past else "prefill", f.step)]
    if f.prefill:
        phases.append(("prefill", f.prefill))
    for phase, kernels in phases:
        for i, t in enumerate(kernels):
            table.add_row(phase if i == 0 else "", *_traffic_cells(t, m, count))
    return table


#: An H100 SXM's dense peak for the dtypes whose bytes the roofline may count (NVIDIA's data
#: sheet): the default machine's peak is its 16-bit tensor-core one.
H100_PEAKS = {"float32": "67T (FP32; TF32 tensor cores 495T)", "float64": "67T (FP64 tensor cores)"}


def peak_dtype_note(m: Machine, dtype: str) -> str:
    """Which peak the default machine's is, when the bytes counted are another dtype's: the
    roofline of float32 bytes against a bf16 peak says so, and which peak to give instead.

    >>> from attntrace.engine.serving import machine
    >>> print(peak_dtype_note(machine(), "float32"))
     (its dense bf16 peak; these bytes are float32: --peak-flops 67T (FP32; TF32 tensor cores 495T))
    >>> peak_dtype_note(machine(), "bfloat16"), peak_dtype_note(machine(peak_flops=1e15), "float32")
    ('', '')
    """
    if m.name != DEFAULT_MACHINE or dtype not in H100_PEAKS:
        return ""
    return f" (its dense bf16 peak; these bytes are {dtype}: --peak-flops {H100_PEAKS[dtype]})"


def _traffic_cells(t: Traffic, m: Machine, count: str) -> list[str]:
    intensity = in_unit(t.flops, count) / t.moved if t.moved else 0.0
    return [
        t.name,
        format_count(in_unit(t.flops, count)),
        format_bytes(t.read),
        format_bytes(t.written),
        f"{intensity:,.1f}",
        m.bound(t).removesuffix("-bound"),
        _seconds(m.seconds(t)),
    ]


def _seconds(s: float) -> str:
    """A short time: ``12.3 µs``, ``4.56 ms``, ``1.2 s``.

    >>> _seconds(1.23e-5), _seconds(0.00456), _seconds(1.2)
    ('12.3 µs', '4.56 ms', '1.2 s')
    """
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def traffic_table(steps: tuple[Traffic, ...], count: str, *, tight: bool = False) -> Table:
    """Each step as traced (materialised): FLOPs, bytes read and written, intensity."""
    unit = "MACs" if count == "macs" else "FLOPs"
    table = _table(
        "memory traffic as traced (every step materialised; views move nothing)",
        show_footer=True,
        tight=tight,
    )
    flops = sum(t.flops for t in steps)
    read, written = sum(t.read for t in steps), sum(t.written for t in steps)
    table.add_column("step", footer="total")
    table.add_column(unit, justify="right", footer=format_count(in_unit(flops, count)))
    table.add_column("read", justify="right", footer=format_bytes(read))
    table.add_column("written", justify="right", footer=format_bytes(written))
    total = in_unit(flops, count) / (read + written) if read + written else 0.0
    table.add_column(f"{unit}/B", justify="right", footer=f"{total:,.2f}")
    for t in steps:
        if t.moved or t.flops:
            ratio = in_unit(t.flops, count) / t.moved if t.moved else 0.0
            table.add_row(
                t.name,
                format_count(in_unit(t.flops, count)),
                format_bytes(t.read),
                format_bytes(t.written),
                f"{ratio:,.2f}",
            )
    return table


def cache_table(f: ServingFigures, *, tight: bool = False) -> Table:
    """The KV cache per token and per request of N + S tokens for each cache dtype, and the
    requests that fit in --memory."""
    c = f.cache
    layers = f"{c.layers} layers" if c.layers > 1 else "1 layer (add --layers L)"
    table = _table(
        f"KV cache of {layers}, requests of {c.context:,} tokens",
        tight=tight,
        caption=requests_note(c),
    )
    table.add_column("cache dtype")
    table.add_column("per token", justify="right")
    table.add_column("per request", justify="right")
    memory = format_bytes(c.memory) if c.memory is not None else "--memory"
    table.add_column(f"requests in {memory}", justify="right")
    for r in c.rows:
        fits = f"{r.fits:,}" if r.fits is not None else "-"
        table.add_row(r.dtype, format_bytes(r.per_token), format_bytes(r.per_request), fits)
    return table


def paged_table(p: PagedFigures, *, tight: bool = False) -> Table:
    """The paged cache of one layer: block table, pool, gather, and the waste in last blocks."""
    from rich.markup import escape

    from attntrace.units import format_shape

    table = _table(
        f"paged KV cache of one layer, blocks of P={p.page_size} tokens",
        tight=tight,
        caption=escape("gather: k[b] = k_pool[block_table[b]].reshape(-1, g, d)[:L_b], v alike"),
    )
    table.add_column("what")
    table.add_column("shape", justify="right")
    table.add_column("bytes", justify="right")
    lengths = ", ".join(f"{n:,}" for n in p.lengths[:4]) + (", ..." if len(p.lengths) > 4 else "")
    blocks = ", ".join(f"{n:,}" for n in p.blocks[:4]) + (", ..." if len(p.blocks) > 4 else "")
    table.add_row(f"tokens L_b ({lengths}) in blocks ({blocks})", "", "")
    table.add_row(
        "block table (B, ⌈max L / P⌉), int32",
        format_shape(p.table_shape),
        format_bytes(p.table_bytes),
    )
    table.add_row(
        "k_pool, v_pool (num_blocks, P, g, d)",
        format_shape(p.pool_shape),
        format_bytes(p.pool_bytes),
    )
    table.add_row("gathered k, v (B, g, max L, d)", format_shape(p.gathered_shape), "")
    table.add_row(
        f"waste: {p.waste_tokens:,} empty slots in last blocks", "", format_bytes(p.waste_bytes)
    )
    table.add_row("a contiguous cache padded to max L", "", format_bytes(p.padded_bytes))
    return table
