"""The Rich rendering of a trace: steps table, parameter table, attention heat map, values."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attntrace.config import AttentionConfig
from attntrace.costs import count as in_unit
from attntrace.costs import format_count, format_terms
from attntrace.memory import format_bytes
from attntrace.render.pooling import POOLING, Pooled, pool
from attntrace.render.terminal import RULE_BOX
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

#: Sequences up to this length get the full heat map; longer ones are pooled into this many blocks.
HEATMAP_MAX_SEQ = 16
#: Tensors with at most this many elements have their values printed by --values.
VALUES_MAX_NUMEL = 256


def format_shape(shape: tuple[int, ...]) -> str:
    """A shape as a Python tuple: ``(12, 3, 64)``, ``(768,)``."""
    return str(tuple(shape))


def format_axes(axes: tuple[str, ...]) -> str:
    """Axis letters as a tuple: ``(h, S, d)``."""
    return "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"


def render_trace(trace: Trace, console: Console, *, head: int = 0, values: bool = False,
                 count: str = "flops", batch_item: int = 0,
                 values_limit: int = VALUES_MAX_NUMEL) -> None:
    """Print the whole table view of ``trace`` on ``console``; ``count`` is flops or macs.

    ``head`` and ``batch_item`` pick the attention weights shown; ``values`` prints the numbers
    of every tensor of at most ``values_limit`` elements.
    """
    console.print(title_line(trace))
    if trace.origin:
        console.print(Text(trace.origin, style="dim"))
    console.print(flow_line(trace, console.width, "->" if console.options.ascii_only else "→"))
    console.print()
    console.print(steps_table(trace, console.width))
    console.print()
    console.print(costs_table(trace, count, tight=console.width < TIGHT_WIDTH))
    console.print()
    console.print(params_table(trace, tight=console.width < TIGHT_WIDTH))
    if (cache := kv_cache_line(trace)) is not None:
        console.print(cache)
    if (whole := whole_model_table(trace, count, tight=console.width < TIGHT_WIDTH)) is not None:
        console.print()
        console.print(whole)
    console.print()
    console.print(attention_view(trace, head, batch_item=batch_item, width=console.width))
    for note in trace.notes:
        console.print(Text(f"warning: {note}", style="yellow"))
    if values:
        console.print()
        console.print(values_view(trace, values_limit))


def title_line(trace: Trace) -> Text:
    """One line naming the config: sizes, backend, dtype."""
    cfg = trace.config
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    algorithm = f"  flash Br={cfg.tile_sizes()['Br']} Bc={cfg.tile_sizes()['Bc']}" if cfg.algorithm == "flash" else ""
    return Text.assemble(("attntrace", "bold"), f"  {describe(cfg)}  {sizes}  ",
                         (f"{trace.backend} {cfg.dtype}{algorithm}", "cyan"))


def costs_table(trace: Trace, count: str = "flops", *, tight: bool = False) -> Table:
    """What each step costs: FLOPs (or MACs) with the formula, and the bytes of its tensor.

    Views cost nothing and own no memory; tile steps (flash) show one tile's bytes and the
    number of tiles, and their FLOPs summed over every tile. The footer holds the totals.
    """
    unit = "MACs" if count == "macs" else "FLOPs"
    table = _table(f"costs ({unit}; 1 MAC = 2 FLOPs)", show_footer=True, tight=tight)
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
                     f"KV cache {format_bytes(trace.kv_cache_bytes_per_token)} per token "
                     f"({trace.config.dtype})")
    table.caption_justify = "left"
    return table


#: The steps whose shapes tell the story of the study notes' card, in order.
FLOW_STEPS = ("x", "q_heads", "q", "scores", "context", "context_heads", "output")


def flow_line(trace: Trace, width: int = 10_000, arrow: str = "→") -> Text:
    """The card's chain of shapes: (3, 768) → (3, 12, 64) → (12, 3, 64) → (12, 3, 3) → …,
    wrapped after an arrow so that no line is wider than ``width`` and no shape is cut.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> print(flow_line(trace_attention(AttentionConfig(), "shape"), 40, "->"))
    (3, 768) -> (3, 12, 64) -> (12, 3, 64)
    -> (12, 3, 3) -> (12, 3, 64) ->
    (3, 12, 64) -> (3, 768)
    """
    shapes = [format_shape(trace[name].shape) for name in FLOW_STEPS if name in trace]
    lines = [shapes[0]]
    for shape in shapes[1:]:
        if len(lines[-1]) + len(arrow) + len(shape) + 2 <= width:
            lines[-1] += f" {arrow} {shape}"
        elif len(lines[-1]) + len(arrow) + 1 <= width:  # the arrow ends the line
            lines[-1] += f" {arrow}"
            lines.append(shape)
        else:  # the arrow starts the next one
            lines.append(f"{arrow} {shape}")
    return Text("\n".join(lines), style="cyan", no_wrap=True)


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
    return Text(f"KV cache: 2 (k, v) x g={cfg.groups} x d={cfg.head_dim} x {cfg.itemsize} B "
                f"({cfg.dtype}) = "
                f"{format_bytes(cfg.kv_cache_bytes_per_token)} per token and layer "
                f"({full // cfg.kv_cache_bytes_per_token}x less than {format_bytes(full)} "
                f"with h={cfg.heads} kv-heads)")


def whole_model_line(trace: Trace, count: str = "flops") -> Text | None:
    """The attention of all L layers (run --layers L, or --model's layer count), else None.

    >>> import dataclasses
    >>> from attntrace import AttentionConfig, trace_attention
    >>> from attntrace.costs import model_figures
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")
    >>> t = dataclasses.replace(t, whole_model=model_figures(t, 3))
    >>> print(whole_model_line(t))  # doctest: +NORMALIZE_WHITESPACE
    whole model, L=3 layers at B=1, S=4: attention parameters 864, KV cache 768 B (float32),
    8.64 k FLOPs per forward
    """
    f = trace.whole_model
    if f is None:
        return None
    unit = "MACs" if count == "macs" else "FLOPs"
    keys = trace.config.labels().keys  # S, or N for cross-attention
    return Text(f"whole model, L={f.layers} layers at B={f.batch}, {keys}={f.keys}: attention "
                f"parameters {format_count(f.params)}, KV cache {format_bytes(f.kv_cache_bytes)} "
                f"({f.dtype}), {format_count(in_unit(f.flops, count))} {unit} per forward")


def whole_model_table(trace: Trace, count: str = "flops", *, tight: bool = False) -> Table | None:
    """The figures of :func:`whole_model_line` as a table of three rows (None without them)."""
    f = trace.whole_model
    if f is None:
        return None
    keys = trace.config.labels().keys
    table = _table(f"whole model: L={f.layers} layers like this one, B={f.batch}, {keys}={f.keys}",
                   tight=tight)
    table.add_column("attention of all layers")
    table.add_column("", justify="right")
    table.add_column("", style="dim")
    unit = "MACs" if count == "macs" else "FLOPs"
    table.add_row("parameters", format_count(f.params), f"{f.params:,}")
    cache, flops = format_bytes(f.kv_cache_bytes), format_count(in_unit(f.flops, count))
    table.add_row(f"KV cache ({f.dtype})", cache, "L·B·N·2·g·d·bytes")
    table.add_row(f"{unit} per forward", flops, "L x the total above")
    return table


def steps_table(trace: Trace, width: int = 80) -> Table:
    """One row per step: index, name, operation, shape, named axes (and dtype when they differ).

    The same columns at every width: the most common dtype goes into the title, a dtype column
    (when some step differs, as the bool mask) shows only the others.
    An op too long for its column wraps between its terms (``wrap_op``), never inside a name.
    """
    dtypes = [step.dtype for step in trace.steps]
    common = max(set(dtypes), key=dtypes.count)  # the title names it; the column only the others
    dtype_column = len(set(dtypes)) > 1
    title = (f"steps ({common} unless the dtype column says otherwise)" if dtype_column
             else f"steps (every tensor {common})")
    rows = [[str(s.index), s.name, s.op, format_shape(s.shape), format_axes(s.axes),
             *([s.dtype if s.dtype != common else ""] if dtype_column else [])]
            for s in trace.steps]
    headers = ["#", "step", "op", "shape", "axes", "dtype"]
    tight = width < TIGHT_WIDTH
    gap = 1 if tight else 2  # the box's space between columns, and the padding unless tight
    fixed = sum(max(len(headers[i]), *(len(r[i]) for r in rows)) + gap
                for i in range(len(rows[0])) if i != 2)
    op_width = max(width - fixed - gap + 1, 1)
    table = _table(title, tight=tight)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("step", style="bold", no_wrap=True)
    table.add_column("op", overflow="fold")
    table.add_column("shape", justify="right", style="cyan", no_wrap=True)
    table.add_column("axes", style="magenta", no_wrap=True)
    if dtype_column:
        table.add_column("dtype", style="dim", no_wrap=True)
    for row in rows:
        table.add_row(*row[:2], wrap_op(row[2], op_width), *row[3:])
    return table


def wrap_op(op: str, width: int) -> str:
    """``op`` in lines of at most ``width`` characters, broken only after a space, after ``(``
    or before a ``.`` that starts an attribute: a name or a number is never cut.

    >>> print(wrap_op("q * cos + rotate_half(q) * sin", 16))
    q * cos +
    rotate_half(q) *
    sin
    >>> print(wrap_op("k_rot.repeat_interleave(2, dim=0)", 22))
    k_rot
    .repeat_interleave(2,
    dim=0)
    """
    if len(op) <= width:
        return op
    lines = [""]
    for piece in _OP_BREAKS.split(op):
        if lines[-1] and len((lines[-1] + piece).rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines)


#: Where an op may wrap: after a space or "(", before a "." that does not follow a digit.
_OP_BREAKS = re.compile(r"(?<= )|(?<=\()|(?<!\d)(?=\.)")


#: Terminals narrower than this get one space between columns instead of two.
TIGHT_WIDTH = 80


def _table(title: str, *, show_footer: bool = False, tight: bool = False) -> Table:
    """A compact table: two spaces between columns (one when ``tight``), a rule under the
    header, no outer box."""
    return Table(title=title, box=RULE_BOX, show_edge=False, padding=(0, 0 if tight else 1, 0, 0),
                 title_justify="left", title_style="bold", show_footer=show_footer)


def params_table(trace: Trace, *, tight: bool = False) -> Table:
    """One row per weight and bias, with a total."""
    table = _table("parameters", show_footer=True, tight=tight)
    table.add_column("name", "total", style="bold")
    table.add_column("shape", justify="right", style="cyan")
    table.add_column("axes", style="magenta")
    table.add_column("count", f"{trace.param_count:,}", justify="right")
    table.add_column("bytes", format_bytes(trace.param_bytes), justify="right")
    for p in trace.parameters:
        table.add_row(p.name, format_shape(p.shape), format_axes(p.axes), f"{p.numel:,}", format_bytes(p.nbytes))
    return table


def attention_view(trace: Trace, head: int, *, batch_item: int = 0,
                   width: int = 80) -> RenderableType:
    """The attention weights of one head and batch item as a heat map; beyond S = 16 (or N = 16)
    pooled into blocks that fit ``width`` columns, followed by a few summary numbers."""
    where = f"head {head}" + (f" of batch item {batch_item}" if trace.config.batched else "")
    if "weights" not in trace:
        return Text(f"attention weights, {where}: never formed whole by --algorithm {trace.config.algorithm} (tile by tile)", style="dim")
    step = trace["weights"]
    if not step.has_values:
        return Text(f"attention weights, {where}: no values on the {trace.backend} backend", style="dim")
    index = (batch_item, head) if trace.config.batched else (head,)
    matrix = step.part(index)  # (S, N): of a recipe, this head's alone
    assert matrix is not None
    masked = trace["masked"].part(index) if "masked" in trace else None  # (S, N): -inf where masked
    hidden = None if masked is None else masked == float("-inf")  # (S, N)
    rule = ("each row sums to 1" if hidden is None
            else "masked keys: ·; each row sums to 1, or 0 if every key is masked")
    if max(matrix.shape) <= HEATMAP_MAX_SEQ:
        full = pool(matrix, matrix.shape[0], matrix.shape[1], hidden)
        return heatmap(full, f"attention weights, {where} (rows: queries, columns: keys; {rule})")
    pooled = fit_pool(matrix, hidden, width)
    sizes = f"{pooled.values.shape[0]}x{pooled.values.shape[1]} blocks"
    masks = "; every key masked: ·" if hidden is not None else ""
    title = f"attention weights, {where}: {matrix.shape} pooled into {sizes} ({POOLING}{masks})"
    return Group(heatmap(pooled, title), weights_summary(matrix))


def fit_pool(matrix: np.ndarray, hidden: np.ndarray | None, width: int) -> Pooled:
    """The most blocks (at most 16 x 16) whose heat map fits ``width`` columns."""
    for blocks in range(min(HEATMAP_MAX_SEQ, matrix.shape[1]), 1, -1):
        pooled = pool(matrix, HEATMAP_MAX_SEQ, blocks, hidden)
        if heatmap_width(pooled) <= width:
            return pooled
    return pool(matrix, HEATMAP_MAX_SEQ, 1, hidden)


def heatmap_width(pooled: Pooled) -> int:
    """Columns the heat map of ``pooled`` takes: labels, cells, the sum column, one space each."""
    rows, cols = pooled.values.shape
    compact = cols > 8
    label = max(len(pooled.row_label(r)) for r in range(rows))
    cells = [max(len(pooled.col_label(c)),
                 *(len(_cell_text(float(v), compact)) for v in pooled.values[:, c]))
             for c in range(cols)]
    return int(label + sum(cells) + len("1.00") + cols + 1)


def heatmap(pooled: Pooled, title: str) -> Group:
    """A grid of the numbers, each cell shaded by its value (darker = more attention);
    cells (or blocks) whose every key is masked show a dim ``·``."""
    values, hidden = pooled.values, pooled.hidden
    rows, cols = values.shape
    compact = cols > 8  # two decimals without the leading zero keep 16 columns within 80
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("", style="dim", justify="right")
    for j in range(cols):
        table.add_column(pooled.col_label(j), justify="right", header_style="dim")
    table.add_column("sum", justify="right", style="dim", min_width=3)
    for i in range(rows):
        cells = [Text("·", style="dim") if hidden is not None and hidden[i, j] else _heat_cell(float(v), compact)
                 for j, v in enumerate(values[i])]
        table.add_row(pooled.row_label(i), *cells, f"{float(values[i].sum()):.2f}")
    return Group(Text(title, style="italic"), table)


def _cell_text(value: float, compact: bool) -> str:
    text = f"{value:.2f}" if compact else f"{value:.3f}"
    return text[1:] if compact and value < 0.995 else text  # ".42"


def _heat_cell(value: float, compact: bool) -> Text:
    if not math.isfinite(value):  # NaN or ±inf: shown, never shaded
        return Text(f"{value}", style="bold red")
    text = _cell_text(value, compact)
    level = int(55 + 200 * min(max(value, 0.0), 1.0))
    style = Style(bgcolor=f"rgb({level // 3},{level // 2},{level})", color="white" if value < 0.5 else "black")
    return Text(text, style=style)


def weights_summary(matrix: np.ndarray) -> Text:
    """What a long attention matrix looks like, in a few numbers."""
    import numpy as np

    seq = matrix.shape[-1]  # N, the keys a row spreads over
    row_sums = matrix.sum(axis=-1)
    row_sums = row_sums[row_sums > 0]  # rows with every key masked are zeros
    top = np.unravel_index(int(np.argmax(matrix)), matrix.shape)
    entropy = float(-(matrix * np.log(np.clip(matrix, 1e-30, None))).sum(axis=-1).mean())
    lines = [
        f"  rows sum to 1 within {float(np.abs(row_sums - 1).max(initial=0.0)):.1e}",
        f"  largest weight {float(matrix[top]):.4f} (query {top[0]} -> key {top[1]})",
        f"  mean row entropy {entropy:.3f} nats (uniform attention: ln {seq} = {np.log(seq):.3f})",
    ]
    return Text("\n".join(lines))


def values_view(trace: Trace, limit: int = VALUES_MAX_NUMEL) -> RenderableType:
    """The numbers of every step and parameter of at most ``limit`` elements (as the notes print
    them), then the names of the tensors skipped for being larger."""
    import numpy as np

    parts: list[RenderableType] = [
        Text(f"values (tensors of at most {limit:,} elements; --values-limit)", style="bold")]
    skipped = []
    for record in (*trace.steps, *trace.parameters):
        if not record.has_values:
            continue
        if record.numel > limit:  # before reading: a recipe is not made to be skipped
            skipped.append(f"{record.name} {format_shape(record.shape)}")
            continue
        value = record.value
        assert value is not None  # has_values
        body = np.array2string(value, precision=4, suppress_small=True, max_line_width=78)
        parts.append(Text.assemble((f"{record.name} {format_shape(record.shape)}", "bold cyan"), "\n", body))
    if skipped:
        parts.append(Text(f"skipped (more than {limit:,} elements): " + ", ".join(skipped),
                          style="dim"))
    if len(parts) == 1 + bool(skipped):
        parts.append(Text(f"every tensor has more than {limit:,} elements; "
                          "raise --values-limit or try "
                          "smaller sizes, e.g. --hidden 4 --heads 2", style="dim"))
    return Group(*parts)
