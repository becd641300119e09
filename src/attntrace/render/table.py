"""The Rich rendering of a trace: steps table, parameter table, attention heat map, values.

Every part is a Rich renderable (a ``rich.text.Text``, a ``rich.table.Table``): the functions
that return them (``steps_table``, ``costs_table``, ``attention_view``...) are the view's
pieces, and :func:`render_trace` prints them in order. Rich lays out every table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attntrace.config.attention_config import AttentionConfig
from attntrace.engine.parallel import map_parts
from attntrace.render.pooling import POOLING, Pooled, block_starts, pool, span_labels
from attntrace.trace import ModelFigures, Records, Trace
from attntrace.units import (
    format_axes,
    format_bytes,
    format_count,
    format_shape,
    format_terms,
    in_unit,
)

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

    from attntrace.learn import Lang

#: Sequences up to this length get the full heat map; longer ones are pooled into this many blocks.
HEATMAP_MAX_SEQ = 16
#: Tensors with at most this many elements have their values printed by --values.
VALUES_MAX_NUMEL = 256


def render_trace(
    trace: Trace,
    console: Console,
    *,
    head: int = 0,
    values: bool = False,
    count: str = "flops",
    batch_item: int = 0,
    values_limit: int = VALUES_MAX_NUMEL,
    explain: bool = False,
    lang: Lang = "en",
) -> None:
    """Print the whole table view of ``trace`` on ``console``; ``count`` is flops or macs.

    ``head`` and ``batch_item`` pick the attention weights shown; ``values`` prints the numbers
    of every tensor of at most ``values_limit`` elements; ``explain`` says what each step does
    (:mod:`attntrace.learn`); ``lang`` is the language of those words and the steps' headers.

    >>> import io
    >>> from rich.console import Console
    >>> from attntrace import AttentionConfig, trace_attention
    >>> console = Console(file=io.StringIO(), width=80)
    >>> render_trace(trace_attention(AttentionConfig(), "shape"), console)
    >>> print("\\n".join(line.rstrip() for line in console.file.getvalue().splitlines()[:8]))
    attntrace  multi-head self-attention  S=3  H=768  h=12  d=64  shape float32
    (3, 768) → (3, 12, 64) → (12, 3, 64) → (12, 3, 3) → (12, 3, 64) → (3, 12, 64) →
    (3, 768)
    <BLANKLINE>
    steps (every tensor float32)
     #  step           op                                 shape  axes
    ───────────────────────────────────────────────────────────────────────
     0  x              x                               (3, 768)  (S, H)
    """
    pieces = trace_pieces(
        trace,
        console.width,
        "->" if console.options.ascii_only else "→",
        head=head,
        values=values,
        count=count,
        batch_item=batch_item,
        values_limit=values_limit,
        explain=explain,
        lang=lang,
        palette=console.color_system or "truecolor",
    )
    for piece in pieces:
        console.print(piece)


def trace_pieces(
    trace: Trace,
    width: int,
    arrow: str = "→",
    *,
    head: int = 0,
    values: bool = False,
    count: str = "flops",
    batch_item: int = 0,
    values_limit: int = VALUES_MAX_NUMEL,
    explain: bool = False,
    lang: Lang = "en",
    palette: str = "truecolor",
) -> list[RenderableType]:
    """The parts of the table view at console ``width``, in order (see :func:`render_trace`);
    ``palette`` is the console's colour system (the heat map's colours are chosen for it)."""
    from rich.console import NewLine
    from rich.text import Text

    tight = width < TIGHT_WIDTH
    pieces: list[RenderableType] = [title_line(trace, lang)]
    if trace.origin:
        pieces.append(Text(trace.origin, "dim"))
    words: list[RenderableType] = (
        [NewLine(), explain_table(trace, lang, tight=tight)] if explain else []
    )
    pieces.append(flow_line(trace, width, arrow))
    if trace.training is not None:  # --backward: the gradient's path back
        pieces.append(flow_line(trace, width, arrow, BACKWARD_FLOW_STEPS, "backward: "))
    pieces += [
        NewLine(),
        steps_table(trace, width, lang),
        *words,
        NewLine(),
        costs_table(trace, count, tight=tight, lang=lang),
        NewLine(),
        params_table(trace, tight=tight, lang=lang),
    ]
    if (cache := kv_cache_line(trace)) is not None:
        pieces.append(cache)
    if (whole := whole_model_table(trace, count, tight=tight)) is not None:
        pieces += [NewLine(), whole]
    if (training := training_table(trace, tight=tight)) is not None:
        pieces += [NewLine(), training]
    pieces += [NewLine(), *_attention(trace, head, batch_item, width, palette, lang)]
    pieces += [Text(f"warning: {note}", "yellow") for note in trace.notes]
    if values:
        pieces += [NewLine(), *_values(trace, values_limit)]
    return pieces


def title_line(trace: Trace, lang: Lang = "en") -> Text:
    """One line naming the config (in ``lang``): sizes, backend, dtype.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> print(title_line(trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")))
    attntrace  multi-head self-attention  S=4  H=8  h=2  d=4  shape float32
    """
    from rich.text import Text

    cfg = trace.config
    sizes = "  ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    algorithm = (
        f"  flash Br={cfg.tile_sizes()['Br']} Bc={cfg.tile_sizes()['Bc']}"
        if cfg.algorithm == "flash"
        else ""
    )
    return Text.assemble(
        ("attntrace", "bold"),
        f"  {describe_in(cfg, lang)}  {sizes}  ",
        (f"{trace.backend} {cfg.dtype}{algorithm}", "cyan"),
    )


def costs_table(
    trace: Trace, count: str = "flops", *, tight: bool = False, lang: Lang = "en"
) -> Table:
    """What each step costs: FLOPs (or MACs) with the formula, and the bytes of its tensor.

    Views cost nothing and own no memory; tile steps (flash) show one tile's bytes and the
    number of tiles, and their FLOPs summed over every tile. The footer holds the totals.

    >>> import io
    >>> from rich.console import Console
    >>> from attntrace import AttentionConfig, trace_attention
    >>> console = Console(file=io.StringIO(), width=80)
    >>> console.print(costs_table(trace_attention(AttentionConfig(), "shape")))
    >>> print("\\n".join(line.rstrip() for line in console.file.getvalue().splitlines()[:5]))
    costs (FLOPs; 1 MAC = 2 FLOPs)
     #  step       FLOPs  formula                 bytes  tiles
    ───────────────────────────────────────────────────────────
     0  x              0  0                    9.00 KiB
     1  q_proj    3.54 M  2·S·H·H + S·H        9.00 KiB
    """
    from attntrace.learn import message

    unit = "MACs" if count == "macs" else "FLOPs"
    caption = message(
        "ui.costs_caption",
        lang,
        params=format_bytes(trace.param_bytes),
        kv=format_bytes(trace.kv_cache_bytes_per_token),
        dtype=trace.config.dtype,
    )
    total = format_count(in_unit(trace.total_flops, count))
    peak = message("ui.peak", lang, bytes=format_bytes(trace.peak_bytes))
    title = message("ui.costs_title", lang, unit=unit)
    table = _table(title, show_footer=True, tight=tight, caption=caption)
    table.add_column("#", justify="right", style="dim")
    table.add_column(message("ui.step", lang), message("ui.total", lang), style="bold")
    table.add_column(unit, total, justify="right", no_wrap=True)
    table.add_column(message("ui.formula", lang), overflow="fold")
    table.add_column(message("ui.bytes", lang), peak, justify="right", no_wrap=True)
    table.add_column(message("ui.tiles", lang), justify="right", style="dim", no_wrap=True)
    for step in trace.steps:
        if step.view:
            continue
        table.add_row(
            str(step.index),
            step.name,
            format_count(in_unit(step.flops, count)),
            format_terms(step.terms, count),
            format_bytes(step.nbytes),
            str(step.repeat) if step.repeat > 1 else "",
        )
    return table


#: The steps whose shapes tell the story of the study notes' card, in order.
FLOW_STEPS = ("x", "q_heads", "q", "scores", "context", "context_heads", "output")


#: The backward's path through the same shapes, d_output back to d_x.
BACKWARD_FLOW_STEPS = (
    "d_output",
    "d_context_heads",
    "d_context",
    "d_scores",
    "d_q",
    "d_q_heads",
    "d_x",
)


def flow_line(
    trace: Trace,
    width: int = 10_000,
    arrow: str = "→",
    steps: tuple[str, ...] = FLOW_STEPS,
    lead: str = "",
) -> Text:
    """The card's chain of shapes: (3, 768) → (3, 12, 64) → (12, 3, 64) → (12, 3, 3) → …,
    wrapped after an arrow so that no line is wider than ``width`` and no shape is cut.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> print(flow_line(trace_attention(AttentionConfig(), "shape"), 40, "->"))
    (3, 768) -> (3, 12, 64) -> (12, 3, 64)
    -> (12, 3, 3) -> (12, 3, 64) ->
    (3, 12, 64) -> (3, 768)
    """
    from rich.text import Text

    shapes = [format_shape(trace[name].shape) for name in steps if name in trace]
    lines = [lead + shapes[0]]
    for shape in shapes[1:]:
        if len(lines[-1]) + len(arrow) + len(shape) + 2 <= width:
            lines[-1] += f" {arrow} {shape}"
        elif len(lines[-1]) + len(arrow) + 1 <= width:  # the arrow ends the line
            lines[-1] += f" {arrow}"
            lines.append(shape)
        else:  # the arrow starts the next one
            lines.append(f"{arrow} {shape}")
    return Text("\n".join(lines), "cyan", no_wrap=True)


def describe(cfg: AttentionConfig) -> str:
    """The kind of attention in words, e.g. ``grouped-query causal self-attention with RoPE``.

    >>> describe(AttentionConfig())
    'multi-head self-attention'
    >>> describe(AttentionConfig(kv_heads=1, causal=True, rope=True, bias=False))
    'multi-query causal self-attention with RoPE, no bias'
    >>> describe(AttentionConfig(seq=1, past=4096, causal=True))
    'multi-head causal self-attention; decode step against a KV cache of 4,096'
    """
    kind = (
        "multi-head" if not cfg.grouped else "multi-query" if cfg.groups == 1 else "grouped-query"
    )
    words = [
        kind,
        *(["causal"] if cfg.causal else []),
        "cross-attention" if cfg.cross else "self-attention",
    ]
    extras = [
        *(["RoPE"] if cfg.rope else []),
        *(["ALiBi"] if cfg.alibi else []),
        *(["key padding"] if cfg.key_lengths is not None else []),
        *(["no bias"] if not cfg.bias else []),
    ]
    # --past: S new tokens against the cache (one token: a decode step)
    step = "" if not cfg.past else "; decode step" if cfg.seq == 1 else f"; {cfg.seq} new tokens"
    cache = f" against a KV cache of {cfg.past:,}" if cfg.past else ""
    return " ".join(words) + (" with " + ", ".join(extras) if extras else "") + step + cache


def describe_in(cfg: AttentionConfig, lang: Lang = "en") -> str:
    """:func:`describe` in ``lang``.

    >>> describe_in(AttentionConfig(kv_heads=4, causal=True, rope=True), "zh")
    '分组查询因果自注意力，带 RoPE'
    >>> describe_in(AttentionConfig(seq=1, past=4096, causal=True), "zh")
    '多头因果自注意力；解码一步，KV 缓存中已有 4,096 个词'
    """
    if lang == "en":
        return describe(cfg)
    from attntrace.learn.lang import message

    kind = "multi" if not cfg.grouped else "mqa" if cfg.groups == 1 else "gqa"
    words = message(f"describe.{kind}", lang) + (message("describe.causal", lang) * cfg.causal)
    words += message("describe.cross" if cfg.cross else "describe.self", lang)
    extras = [
        *(["RoPE"] if cfg.rope else []),
        *(["ALiBi"] if cfg.alibi else []),
        *([message("describe.padding", lang)] if cfg.key_lengths is not None else []),
        *([message("describe.no_bias", lang)] if not cfg.bias else []),
    ]
    if extras:
        words += message("describe.with", lang, extras="、".join(extras))
    if cfg.past:
        key = "describe.decode" if cfg.seq == 1 else "describe.new_tokens"
        words += message(key, lang, S=cfg.seq, past=f"{cfg.past:,}")
    return words


def kv_cache_line(trace: Trace) -> Text | None:
    """The KV-cache bytes per token and layer, when kv-heads are set (else None).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> print(kv_cache_line(trace_attention(AttentionConfig(kv_heads=4), "shape")))
    ... # doctest: +NORMALIZE_WHITESPACE
    KV cache: 2 (k, v) x g=4 x d=64 x 4 B (float32) = 2.00 KiB per token and layer
    (3x less than 6.00 KiB with h=12 kv-heads)
    """
    from rich.text import Text

    cfg = trace.config
    if cfg.parallel is not None:  # a rank's trace: the kv-heads this rank holds
        kv, one = cfg.parallel.kv_heads(cfg), cfg.kv_cache_bytes()
        return Text(
            f"KV cache on this rank: 2 (k, v) x {kv} kv-head(s) x d={cfg.head_dim} x "
            f"{cfg.itemsize} B ({cfg.dtype}) = {format_bytes(trace.kv_cache_bytes_per_token)} "
            f"per token and layer (one device: {format_bytes(one)} with g={cfg.groups})"
        )
    if cfg.kv_heads is None:
        return None
    per_token = cfg.kv_cache_bytes()
    full = replace(cfg, kv_heads=None).kv_cache_bytes()  # the same attention without groups
    return Text(
        f"KV cache: 2 (k, v) x g={cfg.groups} x d={cfg.head_dim} x {cfg.itemsize} B "
        f"({cfg.dtype}) = {format_bytes(per_token)} per token and layer "
        f"({full // per_token}x less than {format_bytes(full)} with h={cfg.heads} kv-heads)"
    )


def whole_model_line(trace: Trace, count: str = "flops") -> Text | None:
    """The attention of all L layers (run --layers L, or --model's layer count), else None.

    >>> import dataclasses
    >>> from attntrace import AttentionConfig, trace_attention
    >>> from attntrace.trace import model_figures
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")
    >>> t = dataclasses.replace(t, whole_model=model_figures(t, 3))
    >>> print(whole_model_line(t))  # doctest: +NORMALIZE_WHITESPACE
    whole model, L=3 layers at B=1, S=4: attention parameters 864, KV cache 768 B (float32),
    8.64 k FLOPs per forward
    """
    from rich.text import Text

    f = trace.whole_model
    if f is None:
        return None
    unit = "MACs" if count == "macs" else "FLOPs"
    keys = trace.config.labels().keys  # S, or N for cross-attention
    return Text(
        f"whole model, L={f.layers} layers at B={f.batch}, {keys}={f.keys}: attention "
        f"parameters {format_count(f.params)}, KV cache {format_bytes(f.kv_cache_bytes)} "
        f"({f.dtype}), {format_count(in_unit(f.flops, count))} {unit} per forward"
    )


def whole_model_table(trace: Trace, count: str = "flops", *, tight: bool = False) -> Table | None:
    """The figures of :func:`whole_model_line` as a table of three rows (None without them)."""
    title = whole_model_title(trace)
    if title is None:
        return None
    table = _table(title, tight=tight)
    table.add_column("attention of all layers")
    table.add_column("", justify="right")
    table.add_column("", style="dim")
    for row in whole_model_rows(trace, count):
        table.add_row(*row)
    return table


def training_table(trace: Trace, *, tight: bool = False) -> Table | None:
    """The figures of the backward (--backward) as a table; None without them."""
    if trace.training is None:
        return None
    from attntrace.render.training import training_rows

    table = _table(f"training: d_output {trace.training.d_output}", tight=tight)
    table.add_column("backward")
    table.add_column("", justify="right")
    table.add_column("", style="dim")
    for row in training_rows(trace):
        table.add_row(*row)
    return table


def whole_model_title(trace: Trace) -> str | None:
    """The heading of the whole-model figures (None without them)."""
    f = trace.whole_model
    if f is None:
        return None
    keys = trace.config.labels().keys
    return f"whole model: L={f.layers} layers like this one, B={f.batch}, {keys}={f.keys}"


def whole_model_rows(trace: Trace, count: str = "flops") -> list[tuple[str, str, str]]:
    """The whole-model figures as (what, how much, how it is counted) rows; none without them.

    >>> import dataclasses
    >>> from attntrace import AttentionConfig, trace_attention
    >>> from attntrace.trace import model_figures
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")
    >>> whole_model_rows(dataclasses.replace(t, whole_model=model_figures(t, 3)))[0]
    ('parameters', '864', '864')
    """
    f = trace.whole_model
    if f is None:
        return []
    unit = "MACs" if count == "macs" else "FLOPs"
    cache, flops = format_bytes(f.kv_cache_bytes), format_count(in_unit(f.flops, count))
    return [
        ("parameters", format_count(f.params), f"{f.params:,}"),
        (f"KV cache ({f.dtype})", cache, "L·B·N·2·g·d·bytes"),
        (f"{unit} per forward", flops, "L x the forward steps above"),
        *_whole_training_rows(f, count),
    ]


def _whole_training_rows(f: ModelFigures, count: str) -> list[tuple[str, str, str]]:
    """--backward: what every layer keeps for the backward, its FLOPs, per training token."""
    if f.saved_bytes is None or f.backward_flops is None or f.train_flops_per_token is None:
        return []
    unit = "MACs" if count == "macs" else "FLOPs"
    return [
        ("saved for the backward", format_bytes(f.saved_bytes), "L x one layer's"),
        (f"{unit} per backward", format_count(in_unit(f.backward_flops, count)), "L x one layer's"),
        (
            f"{unit} per training token",
            format_count(in_unit(round(f.train_flops_per_token), count)),
            "L x (forward + backward) / (B·S)",
        ),
    ]


def explain_table(trace: Trace, lang: Lang = "en", *, tight: bool = False) -> Table:
    """What each step does, in words with this run's numbers: one row per step.

    >>> import io
    >>> from rich.console import Console
    >>> from attntrace import AttentionConfig, trace_attention
    >>> console = Console(file=io.StringIO(), width=80)
    >>> console.print(explain_table(trace_attention(AttentionConfig(), "shape"), "zh"))
    >>> print("\\n".join(line.rstrip() for line in console.file.getvalue().splitlines()[:4]))
    每一步做什么
     #  步骤           解释
    ────────────────────────────────────────────────────────────────────────────────
     0  x              输入：3 个词，每个词编码为 768 维的向量（词嵌入），每行一个
    """
    from attntrace.learn import explain_trace, message

    table = _table(message("ui.explanations", lang), tight=tight)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column(message("ui.step", lang), style="bold", no_wrap=True)
    table.add_column(message("ui.explanation", lang), overflow="fold", ratio=1)
    from attntrace.render.prose import Prose

    for step, text in zip(trace.steps, explain_trace(trace, lang).values(), strict=True):
        table.add_row(str(step.index), step.name, Prose(text))  # never breaks inside a tuple
    return table


def roles_table(records: Records, lang: Lang = "en") -> Table | None:
    """What each step of the user's code that plays a reference step does, on the user's line
    (``attntrace trace --explain``); None when no step plays one."""
    from attntrace.learn import message
    from attntrace.learn.words import explain_roles
    from attntrace.render.prose import Prose

    words = explain_roles(records, lang)
    if not words:
        return None
    table = _table(message("ui.explanations", lang))
    table.add_column(message("ui.step", lang), style="bold", no_wrap=True)
    table.add_column(message("ui.role", lang), style="magenta", no_wrap=True)
    table.add_column(message("ui.line", lang), style="dim", no_wrap=True)
    table.add_column(message("ui.explanation", lang), overflow="fold", ratio=1)
    for step in records.steps:
        if step.name in words:
            where = getattr(step, "location", "")
            table.add_row(step.name, getattr(step, "role", ""), where, Prose(words[step.name]))
    return table


def steps_table(trace: Trace, width: int = 80, lang: Lang = "en") -> Table:
    """One row per step: index, name, operation, shape, named axes (and dtype when they differ).

    The same columns at every width: the most common dtype goes into the title, a dtype column
    (when some step differs, as the bool mask) shows only the others.
    An op too long for its column wraps between its terms (``wrap_op``), never inside a name.
    """
    dtypes = [step.dtype for step in trace.steps]
    common = max(set(dtypes), key=dtypes.count)  # the title names it; the column only the others
    dtype_column = len(set(dtypes)) > 1
    from rich.cells import cell_len

    from attntrace.learn import message

    key = "ui.steps_title_mixed" if dtype_column else "ui.steps_title"
    title = message(key, lang, dtype=common)
    rows = [
        [
            str(s.index),
            s.name,
            s.op,
            format_shape(s.shape),
            format_axes(s.axes),
            *([s.dtype if s.dtype != common else ""] if dtype_column else []),
        ]
        for s in trace.steps
    ]
    words = {key: message(f"ui.{key}", lang) for key in ("step", "op", "shape", "axes", "dtype")}
    headers = ["#", *words.values()]
    tight = width < TIGHT_WIDTH
    gap = 1 if tight else 2  # the box's space between columns, and the padding unless tight
    fixed = sum(
        max(cell_len(headers[i]), *(len(r[i]) for r in rows)) + gap
        for i in range(len(rows[0]))
        if i != 2
    )
    op_width = max(width - fixed - gap + 1, 1)
    table = _table(title, tight=tight)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column(words["step"], style="bold", no_wrap=True)
    table.add_column(words["op"], overflow="fold")
    table.add_column(words["shape"], justify="right", style="cyan", no_wrap=True)
    table.add_column(words["axes"], style="magenta", no_wrap=True)
    if dtype_column:
        table.add_column(words["dtype"], style="dim", no_wrap=True)
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


def _table(
    title: str, *, show_footer: bool = False, tight: bool = False, caption: str | None = None
) -> Table:
    """A compact table: two spaces between columns (one when ``tight``), a rule under the
    header, no outer box; the title and the ``caption`` (if any) left-justified."""
    from rich.table import Table

    from attntrace.render.terminal import RULE_BOX

    return Table(
        title=title,
        box=RULE_BOX,
        show_edge=False,
        padding=(0, 0 if tight else 1, 0, 0),
        title_justify="left",
        title_style="bold",
        show_footer=show_footer,
        caption=caption,
        caption_justify="left",
    )


def params_table(trace: Trace, *, tight: bool = False, lang: Lang = "en") -> Table:
    """One row per weight and bias, with a total."""
    from attntrace.learn import message

    table = _table(message("ui.parameters", lang), show_footer=True, tight=tight)
    table.add_column(message("ui.name", lang), message("ui.total", lang), style="bold")
    table.add_column(message("ui.shape", lang), justify="right", style="cyan")
    table.add_column(message("ui.axes", lang), style="magenta")
    table.add_column(message("ui.count", lang), f"{trace.param_count:,}", justify="right")
    table.add_column(message("ui.bytes", lang), format_bytes(trace.param_bytes), justify="right")
    for p in trace.parameters:
        table.add_row(
            p.name,
            format_shape(p.shape),
            format_axes(p.axes),
            f"{p.numel:,}",
            format_bytes(p.nbytes),
        )
    return table


def attention_view(
    trace: Trace, head: int, *, batch_item: int = 0, width: int = 80
) -> RenderableType:
    """The attention weights of one head and batch item as a heat map; beyond S = 16 (or N = 16)
    pooled into blocks that fit ``width`` columns, followed by a few summary numbers."""
    from rich.console import Group

    pieces = _attention(trace, head, batch_item, width)
    return pieces[0] if len(pieces) == 1 else Group(*pieces)


def _attention(
    trace: Trace,
    head: int,
    batch_item: int,
    width: int,
    palette: str = "truecolor",
    lang: Lang = "en",
) -> list[RenderableType]:
    """The parts of :func:`attention_view`: a title and a heat map (and a summary when
    pooled), or one line saying why there is none."""
    from rich.text import Text

    from attntrace.learn.lang import message

    key = "ui.where_item" if trace.config.batched else "ui.where_head"
    where = message(key, lang, head=head, item=batch_item)
    if "weights" not in trace:
        why = message("ui.weights_tiled", lang, algorithm=trace.config.algorithm)
        return [Text(message("ui.weights_none", lang, where=where, why=why), "dim")]
    step = trace["weights"]
    if not step.has_values:
        why = message("ui.weights_no_values", lang, backend=trace.backend)
        return [Text(message("ui.weights_none", lang, where=where, why=why), "dim")]
    index = (batch_item, head) if trace.config.batched else (head,)
    matrix = step.part(index)  # (S, N): of a recipe, this head's alone
    assert matrix is not None
    masked = trace["masked"].part(index) if "masked" in trace else None  # (S, N): -inf where masked
    hidden = None if masked is None else masked == float("-inf")  # (S, N)
    rule = message("ui.weights_rule" if hidden is None else "ui.weights_rule_masked", lang)
    if max(matrix.shape) <= HEATMAP_MAX_SEQ:
        full = pool(matrix, matrix.shape[0], matrix.shape[1], hidden, trace.tokens)
        title = message("ui.weights_title", lang, where=where, rule=rule)
        return _heatmap(full, title, palette)
    pooled = fit_pool(matrix, hidden, width, trace.tokens)
    sizes = f"{pooled.values.shape[0]}x{pooled.values.shape[1]} blocks"
    masks = "; every key masked: ·" if hidden is not None else ""
    title = f"attention weights, {where}: {matrix.shape} pooled into {sizes} ({POOLING}{masks})"
    return [*_heatmap(pooled, title, palette), weights_summary(matrix)]


def fit_pool(
    matrix: np.ndarray,
    hidden: np.ndarray | None,
    width: int,
    tokens: tuple[str, ...] | None = None,
) -> Pooled:
    """The most blocks (at most 16 x 16) whose heat map fits ``width`` columns. Block counts
    whose labels alone are too wide are passed over without pooling the matrix."""
    label = max(map(len, span_labels("q", matrix.shape[0], HEATMAP_MAX_SEQ)))
    for blocks in range(min(HEATMAP_MAX_SEQ, matrix.shape[1]), 1, -1):
        starts = block_starts(matrix.shape[1], blocks)
        narrowest = label + sum(max(len(f"k{j}"), 3) for j in starts) + len("1.00") + len(starts)
        if narrowest + 1 > width:  # every cell's text is at least 3 wide: it cannot fit
            continue
        pooled = pool(matrix, HEATMAP_MAX_SEQ, blocks, hidden, tokens)
        if heatmap_width(pooled) <= width:
            return pooled
    return pool(matrix, HEATMAP_MAX_SEQ, 1, hidden, tokens)


def heatmap_width(pooled: Pooled) -> int:
    """Columns the heat map of ``pooled`` takes: labels, cells, the sum column, one space each."""
    rows, cols = pooled.values.shape
    compact = cols > 8
    label = max(len(pooled.row_label(r)) for r in range(rows))
    cells = [
        max(
            len(pooled.col_label(c)),
            *(len(_cell_text(float(v), compact)) for v in pooled.values[:, c]),
        )
        for c in range(cols)
    ]
    return int(label + sum(cells) + len("1.00") + cols + 1)


def _heatmap(pooled: Pooled, title: str, palette: str = "truecolor") -> list[RenderableType]:
    """The title, then a grid of the numbers, each cell shaded by its value (darker = more
    attention); cells (or blocks) whose every key is masked show a dim ``·``."""
    from rich.table import Table
    from rich.text import Text

    values, hidden = pooled.values, pooled.hidden
    rows, cols = values.shape
    compact = cols > 8  # two decimals without the leading zero keep 16 columns within 80
    table = Table(box=None, show_edge=False, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("", style="dim", justify="right")
    for j in range(cols):
        table.add_column(_label(pooled.col_label(j)), justify="right", header_style="dim")
    table.add_column("sum", justify="right", style="dim", min_width=3)
    shown = values.tolist()  # Python floats: far quicker to format, one by one, than numpy's
    masked = hidden.tolist() if hidden is not None else None
    sums = [float(row.sum()) for row in values]  # as each row was summed before
    for i in range(rows):
        cells = [
            Text("·", "dim")
            if masked is not None and masked[i][j]
            else _heat_cell(v, compact, palette)
            for j, v in enumerate(shown[i])
        ]
        table.add_row(_label(pooled.row_label(i)), *cells, f"{sums[i]:.2f}")
    return [Text(title, "italic"), table]


def _label(text: str) -> str:
    r"""A row or column label made safe for Rich (a prompt's token may hold ``[b]``), cut to six
    characters.

    >>> _label("[b]old"), _label("international")
    ('\\[b]old', 'inter…')
    """
    from attntrace.render.heatmap_svg import short
    from attntrace.text import inert

    return inert(short(text))


def _cell_text(value: float, compact: bool) -> str:
    text = f"{value:.2f}" if compact else f"{value:.3f}"
    return text[1:] if compact and value < 0.995 else text  # ".42"


#: The heat map on a 16-colour terminal: (ink, background) from weight 0 to 1 in five steps,
#: each pair legible in every theme (the background is always set: a light or dark terminal
#: shows the same cells). A blue ramp downsampled to 16 colours would be one grey for all.
STANDARD_HEAT: tuple[tuple[str, str], ...] = (
    ("bright_white", "black"),
    ("bright_white", "blue"),
    ("black", "cyan"),
    ("black", "yellow"),
    ("black", "bright_white"),
)


def heat_style(value: float, palette: str = "truecolor") -> str:
    """The Rich style of a cell of weight ``value`` on a console of colour system ``palette``
    (standard and windows: :data:`STANDARD_HEAT`; 256 and truecolor: a blue ramp).

    >>> heat_style(0.0, "standard"), heat_style(1.0, "standard")
    ('bright_white on black', 'black on bright_white')
    >>> heat_style(1.0)
    'rgb(0,0,0) on rgb(85,127,255)'
    """
    v = min(max(value, 0.0), 1.0)
    if palette in ("standard", "windows"):
        ink, paper = STANDARD_HEAT[min(int(v * len(STANDARD_HEAT)), len(STANDARD_HEAT) - 1)]
        return f"{ink} on {paper}"
    level = int(55 + 200 * v)
    r, g, b = level // 3, level // 2, level
    # ink picked by the cell's luminance (sRGB weights, roughly): white on dark, black on light
    light = 0.2126 * (r / 255) ** 2.2 + 0.7152 * (g / 255) ** 2.2 > 0.1
    ink = "rgb(0,0,0)" if light else "rgb(255,255,255)"
    return f"{ink} on rgb({r},{g},{b})"


def _heat_cell(value: float, compact: bool, palette: str = "truecolor") -> Text:
    """A cell: its text shaded by the value (or bold red if not finite)."""
    from rich.text import Text

    if not math.isfinite(value):  # NaN or ±inf: shown, never shaded
        return Text(f"{value}", "bold red")
    return Text(_cell_text(value, compact), heat_style(value, palette))


@dataclass(frozen=True)
class _RowFacts:
    """What :func:`weights_summary` needs of some whole rows of an attention matrix."""

    rows: int  # how many
    sums: np.ndarray  # (rows,): each row's sum
    top: int  # the flat index of the rows' largest weight (the first of equals)
    largest: float  # that weight
    entropies: np.ndarray  # (rows,): each row's -sum(p log p)


def _row_facts(part: np.ndarray) -> _RowFacts:
    """The facts of the rows of ``part`` (r, N), in one pass each over them."""
    import numpy as np

    top = int(np.argmax(part))
    # log(p + tiny): 0 log 0 counts 0, and p + tiny is p for every weight that adds to the
    # entropy (np.maximum(p, tiny) took 3x as long as the add)
    logs = np.add(part, 1e-30, dtype=np.promote_types(part.dtype, np.float32))  # float16: wider
    np.log(logs, out=logs)
    entropies = -np.einsum("ij,ij->i", part, logs)  # -sum(p log p) of each row, in one pass
    return _RowFacts(part.shape[0], part.sum(axis=-1), top, float(part.flat[top]), entropies)


def weights_summary(matrix: np.ndarray) -> Text:
    """What a long attention matrix looks like, in a few numbers."""
    import numpy as np
    from rich.text import Text

    seq = matrix.shape[-1]  # N, the keys a row spreads over
    parts = map_parts(_row_facts, matrix, keep=(-1,))  # rows of the matrix, on every core
    starts = np.cumsum([0, *(p.rows for p in parts)])
    found = [p.largest for p in parts]  # the first NaN, else the largest, as np.argmax
    best = next((i for i, x in enumerate(found) if math.isnan(x)), int(np.argmax(found)))
    top = divmod(int(starts[best]) * seq + parts[best].top, seq)  # (query, key)
    row_sums = np.concatenate([p.sums for p in parts])  # (S,)
    row_sums = row_sums[row_sums > 0]  # rows with every key masked are zeros
    entropy = float(np.concatenate([p.entropies for p in parts]).mean())
    lines = [
        f"  rows sum to 1 within {float(np.abs(row_sums - 1).max(initial=0.0)):.1e}",
        f"  largest weight {parts[best].largest:.4f} (query {top[0]} -> key {top[1]})",
        f"  mean row entropy {entropy:.3f} nats (uniform attention: ln {seq} = {np.log(seq):.3f})",
    ]
    return Text("\n".join(lines))


def _values(trace: Trace, limit: int = VALUES_MAX_NUMEL) -> list[RenderableType]:
    """The numbers of every step and parameter of at most ``limit`` elements (as the notes print
    them), one piece per tensor, then the names of the tensors skipped for being larger."""
    import numpy as np
    from rich.text import Text

    parts: list[RenderableType] = [
        Text(f"values (tensors of at most {limit:,} elements; --values-limit)", "bold")
    ]
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
        parts.append(
            Text.assemble((f"{record.name} {format_shape(record.shape)}", "bold cyan"), "\n", body)
        )
    if skipped:
        parts.append(Text(f"skipped (more than {limit:,} elements): " + ", ".join(skipped), "dim"))
    if len(parts) == 1 + bool(skipped):
        parts.append(
            Text(
                f"every tensor has more than {limit:,} elements; raise --values-limit or try "
                "smaller sizes, e.g. --hidden 4 --heads 2",
                "dim",
            )
        )
    return parts
