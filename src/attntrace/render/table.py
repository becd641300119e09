"""The Rich rendering of a trace: steps table, parameter table, attention heat map, values."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attntrace.config import AttentionConfig
from attntrace.costs import count as in_unit
from attntrace.costs import format_count, format_terms
from attntrace.memory import format_bytes
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

#: Sequences up to this length get the full heat map; longer ones a summary.
HEATMAP_MAX_SEQ = 16
#: Tensors with at most this many elements have their values printed by --values.
VALUES_MAX_NUMEL = 256


def format_shape(shape: tuple[int, ...]) -> str:
    """A shape as a Python tuple: ``(12, 3, 64)``, ``(768,)``."""
    return str(tuple(shape))


def format_axes(axes: tuple[str, ...]) -> str:
    """Axis letters as a tuple: ``(h, S, d)``."""
    return "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"


def render_trace(trace: Trace, console: Console, *, head: int = 0, values: bool = False, count: str = "flops") -> None:
    """Print the whole table view of ``trace`` on ``console``; ``count`` is flops or macs."""
    console.print(title_line(trace))
    console.print(flow_line(trace))
    console.print()
    console.print(steps_table(trace, console.width))
    console.print()
    console.print(costs_table(trace, count))
    console.print()
    console.print(params_table(trace))
    if (cache := kv_cache_line(trace)) is not None:
        console.print(cache)
    console.print()
    console.print(attention_view(trace, head))
    for note in trace.notes:
        console.print(Text(f"warning: {note}", style="yellow"))
    if values:
        console.print()
        console.print(values_view(trace))


def title_line(trace: Trace) -> Text:
    """One line naming the config: sizes, backend, dtype."""
    cfg = trace.config
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    algorithm = f"  flash Br={cfg.tile_sizes()['Br']} Bc={cfg.tile_sizes()['Bc']}" if cfg.algorithm == "flash" else ""
    return Text.assemble(("attntrace", "bold"), f"  {describe(cfg)}  {sizes}  ",
                         (f"{trace.backend} {cfg.dtype}{algorithm}", "cyan"))


def costs_table(trace: Trace, count: str = "flops") -> Table:
    """What each step costs: FLOPs (or MACs) with the formula, and the bytes of its tensor.

    Views cost nothing and own no memory; tile steps (flash) show one tile's bytes and the
    number of tiles, and their FLOPs summed over every tile. The footer holds the totals.
    """
    unit = "MACs" if count == "macs" else "FLOPs"
    table = _table(f"costs ({unit}; 1 MAC = 2 FLOPs)", show_footer=True)
    table.add_column("#", justify="right", style="dim")
    table.add_column("step", "total", style="bold")
    table.add_column(unit, format_count(in_unit(trace.total_flops, count)), justify="right", no_wrap=True)
    table.add_column("formula", overflow="fold")
    table.add_column("bytes", f"peak {format_bytes(trace.peak_bytes)}", justify="right", no_wrap=True)
    table.add_column("tiles", justify="right", style="dim", no_wrap=True)
    for step in trace.steps:
        if step.view:
            continue
        table.add_row(str(step.index), step.name, format_count(in_unit(step.flops, count)), format_terms(step.terms, count),
                      format_bytes(step.nbytes), str(step.repeat) if step.repeat > 1 else "")
    table.caption = (f"peak: activations alive at once; parameters {format_bytes(trace.param_bytes)}; "
                     f"KV cache {format_bytes(trace.kv_cache_bytes_per_token)} per token")
    table.caption_justify = "left"
    return table


#: The steps whose shapes tell the story of the study notes' card, in order.
FLOW_STEPS = ("x", "q_heads", "q", "scores", "context", "context_heads", "output")


def flow_line(trace: Trace) -> Text:
    """The card's chain of shapes: (3, 768) → (3, 12, 64) → (12, 3, 64) → (12, 3, 3) → …"""
    shapes = [format_shape(trace[name].shape) for name in FLOW_STEPS if name in trace]
    return Text(" → ".join(shapes), style="cyan")


def describe(cfg: AttentionConfig) -> str:
    """The kind of attention in words, e.g. ``grouped-query causal self-attention with RoPE``.

    >>> describe(AttentionConfig())
    'multi-head self-attention'
    >>> describe(AttentionConfig(kv_heads=1, causal=True, rope=True, bias=False))
    'multi-query causal self-attention with RoPE, no bias'
    """
    kind = "multi-head" if not cfg.grouped else "multi-query" if cfg.groups == 1 else "grouped-query"
    words = [kind, *(["causal"] if cfg.causal else []), "cross-attention" if cfg.cross else "self-attention"]
    extras = [*(["RoPE"] if cfg.rope else []), *(["key padding"] if cfg.key_lengths is not None else []),
              *(["no bias"] if not cfg.bias else [])]
    return " ".join(words) + (" with " + ", ".join(extras) if extras else "")


def kv_cache_line(trace: Trace) -> Text | None:
    """The KV-cache bytes per token and layer, when kv-heads are set (else None)."""
    cfg = trace.config
    if cfg.kv_heads is None:
        return None
    full = 2 * cfg.heads * cfg.head_dim * cfg.itemsize
    return Text(f"KV cache: 2 (k, v) x g={cfg.groups} x d={cfg.head_dim} x {cfg.itemsize} B = "
                f"{format_bytes(cfg.kv_cache_bytes_per_token)} per token and layer "
                f"({full // cfg.kv_cache_bytes_per_token}x less than {format_bytes(full)} with h={cfg.heads} kv-heads)")


def steps_table(trace: Trace, width: int = 80) -> Table:
    """One row per step: index, name, operation, shape, named axes, dtype.

    When every step has the same dtype and the console is narrower than 100 columns, the
    dtype goes into the title instead of a column, so the table fits 80 columns.
    """
    dtypes = {step.dtype for step in trace.steps}
    dtype_column = len(dtypes) > 1 or width >= 100
    title = "steps" if dtype_column else f"steps (every tensor {dtypes.pop()})"
    table = _table(title)
    table.add_column("#", justify="right", style="dim")
    table.add_column("step", style="bold")
    table.add_column("op", overflow="fold")
    table.add_column("shape", justify="right", style="cyan", no_wrap=True)
    table.add_column("axes", style="magenta", no_wrap=True)
    if dtype_column:
        table.add_column("dtype", style="dim", no_wrap=True)
    for step in trace.steps:
        cells = [str(step.index), step.name, step.op, format_shape(step.shape), format_axes(step.axes)]
        table.add_row(*cells, *([step.dtype] if dtype_column else []))
    return table


def _table(title: str, *, show_footer: bool = False) -> Table:
    """A compact table: one space between columns, a rule under the header, no outer box."""
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0),
                 title_justify="left", title_style="bold", show_footer=show_footer)


def params_table(trace: Trace) -> Table:
    """One row per weight and bias, with a total."""
    table = _table("parameters", show_footer=True)
    table.add_column("name", "total", style="bold")
    table.add_column("shape", justify="right", style="cyan")
    table.add_column("axes", style="magenta")
    table.add_column("count", f"{trace.param_count:,}", justify="right")
    table.add_column("bytes", format_bytes(trace.param_bytes), justify="right")
    for p in trace.parameters:
        table.add_row(p.name, format_shape(p.shape), format_axes(p.axes), f"{p.numel:,}", format_bytes(p.nbytes))
    return table


def attention_view(trace: Trace, head: int) -> RenderableType:
    """The attention weights of one head: a heat map when short, a summary when long."""
    where = f"head {head}" + (" of batch item 0" if trace.config.batched else "")
    if "weights" not in trace:
        return Text(f"attention weights, {where}: never formed whole by --algorithm {trace.config.algorithm} (tile by tile)", style="dim")
    step = trace["weights"]
    if step.value is None:
        return Text(f"attention weights, {where}: no values on the {trace.backend} backend", style="dim")
    index = (0, head) if trace.config.batched else (head,)
    matrix = step.value[index]  # (S, N)
    masked = trace["masked"].value if "masked" in trace else None  # (B, h, S, N): -inf where masked
    hidden = None if masked is None else masked[index] == float("-inf")  # (S, N)
    if max(matrix.shape) <= HEATMAP_MAX_SEQ:
        rule = "each row sums to 1" if hidden is None else "masked keys: ·; each row sums to 1, or 0 if every key is masked"
        return heatmap(matrix, f"attention weights, {where} (rows: queries, columns: keys; {rule})", hidden)
    return weights_summary(matrix, where)


def heatmap(matrix: np.ndarray, title: str, hidden: np.ndarray | None = None) -> Group:
    """A grid of the numbers, each cell shaded by its value (darker = more attention);
    cells where ``hidden`` is True (masked keys) show a dim ``·``."""
    rows, cols = matrix.shape
    compact = cols > 8  # two decimals without the leading zero keep 16 columns within 80
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("", style="dim", justify="right")
    for j in range(cols):
        table.add_column(f"k{j}", justify="right", header_style="dim")
    table.add_column("sum", justify="right", style="dim")
    for i in range(rows):
        cells = [Text("·", style="dim") if hidden is not None and hidden[i, j] else _heat_cell(float(v), compact)
                 for j, v in enumerate(matrix[i])]
        table.add_row(f"q{i}", *cells, f"{float(matrix[i].sum()):.2f}")
    return Group(Text(title, style="italic"), table)


def _heat_cell(value: float, compact: bool) -> Text:
    if not math.isfinite(value):  # NaN or ±inf: shown, never shaded
        return Text(f"{value}", style="bold red")
    text = f"{value:.2f}" if compact else f"{value:.3f}"
    if compact and value < 0.995:
        text = text[1:]  # ".42"
    level = int(55 + 200 * min(max(value, 0.0), 1.0))
    style = Style(bgcolor=f"rgb({level // 3},{level // 2},{level})", color="white" if value < 0.5 else "black")
    return Text(text, style=style)


def weights_summary(matrix: np.ndarray, where: str) -> Text:
    """What a long attention matrix looks like, in a few numbers."""
    import numpy as np

    seq = matrix.shape[-1]  # N, the keys a row spreads over
    row_sums = matrix.sum(axis=-1)
    row_sums = row_sums[row_sums > 0]  # rows with every key masked are zeros
    top = np.unravel_index(int(np.argmax(matrix)), matrix.shape)
    entropy = float(-(matrix * np.log(np.clip(matrix, 1e-30, None))).sum(axis=-1).mean())
    lines = [
        f"attention weights, {where}: {matrix.shape}, summarised (S > {HEATMAP_MAX_SEQ})",
        f"  rows sum to 1 within {float(np.abs(row_sums - 1).max(initial=0.0)):.1e}",
        f"  largest weight {float(matrix[top]):.4f} (query {top[0]} -> key {top[1]})",
        f"  mean row entropy {entropy:.3f} nats (uniform attention: ln {seq} = {np.log(seq):.3f})",
    ]
    return Text("\n".join(lines))


def values_view(trace: Trace) -> RenderableType:
    """The numbers of every step and parameter small enough to read (as the notes print them)."""
    import numpy as np

    parts: list[RenderableType] = [Text(f"values (tensors of at most {VALUES_MAX_NUMEL} elements)", style="bold")]
    for record in (*trace.steps, *trace.parameters):
        if record.value is None or record.numel > VALUES_MAX_NUMEL:
            continue
        body = np.array2string(record.value, precision=4, suppress_small=True, max_line_width=78)
        parts.append(Text.assemble((f"{record.name} {format_shape(record.shape)}", "bold cyan"), "\n", body))
    if len(parts) == 1:
        parts.append(Text(f"every tensor has more than {VALUES_MAX_NUMEL} elements; try smaller sizes, e.g. --hidden 4 --heads 2", style="dim"))
    return Group(*parts)
