"""``--format markdown``: pipe tables ready for a README or a pull-request comment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attntrace.render.table import whole_model_line
from attntrace.trace import Step, Trace
from attntrace.units import (
    format_axes,
    format_bytes,
    format_count,
    format_shape,
    format_terms,
    in_unit,
)

if TYPE_CHECKING:
    from attntrace.learn import Lang


def render_markdown(trace: Trace, count: str = "flops", explain: Lang | None = None) -> str:
    """A caption line, the trace's notes as quoted warnings (e.g. the first step with
    non-finite values), the steps table (with the cost of each step in FLOPs, or MACs with
    ``count="macs"``, and a total row) and the parameters table (with a total row); with
    ``explain`` (a language), what each step does in words (:func:`explain_list`).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> text = render_markdown(trace_attention(AttentionConfig(), "shape"))
    >>> print(text.splitlines()[0])
    **attntrace** multi-head self-attention: S=3, H=768, h=12, d=64 (shape backend, float32)
    >>> print(text.splitlines()[15])  # doctest: +NORMALIZE_WHITESPACE
    | 11 | scores | `q @ k_t` | (12, 3, 3) | (h, S, S) | float32 | 432 B |
    13.82 k | `2·h·S·S·d` |
    """
    cfg = trace.config
    sizes = ", ".join(
        f"{axis}={size}" for axis, size in {**cfg.axis_sizes(), **cfg.tile_sizes()}.items()
    )
    caption = (
        f"**attntrace** multi-head self-attention: {sizes} ({trace.backend} backend, {cfg.dtype})"
    )
    notes = "".join(f"> **warning:** {note}\n\n" for note in trace.notes)
    whole = whole_model_line(trace, count)
    tail = f"\n{whole.plain}\n" if whole is not None else ""  # run --layers L
    words = f"\n{explain_list(trace, explain)}" if explain is not None else ""
    return f"{caption}\n\n{notes}{steps_table(trace, count)}{words}\n{params_table(trace)}{tail}"


def explain_list(trace: Trace, lang: Lang = "en") -> str:
    """A heading and one bullet per step: its name and what it does, with this run's numbers.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> print(explain_list(trace_attention(AttentionConfig(), "shape")).splitlines()[3])
    - **q_proj**: Multiplies each token's 768 numbers by the weight w_q (one linear layer \
for every token at once) to make its query, what the token looks for: (3, 768) → (3, 768).
    """
    from attntrace.learn import explain_trace, message

    lines = [f"- **{name}**: {text}" for name, text in explain_trace(trace, lang).items()]
    return f"**{message('ui.explanations', lang)}**\n\n" + "\n".join(lines) + "\n"


def steps_table(trace: Trace, count: str = "flops") -> str:
    """One row per step and a total row; a flash tile step shows one tile's shape, bytes and
    formula, and its FLOPs summed over every tile."""
    unit = "MACs" if count == "macs" else "FLOPs"
    rows = [
        (
            str(s.index),
            s.name,
            f"`{s.op}`",
            format_shape(s.shape),
            format_axes(s.axes),
            s.dtype,
            format_bytes(s.nbytes) + (" (view)" if s.view else ""),
            format_count(in_unit(s.flops, count)),
            _formula(s, count),
        )
        for s in trace.steps
    ]
    total = (
        "",
        "**total**",
        "",
        "",
        "",
        "",
        f"peak {format_bytes(trace.peak_bytes)}",
        f"**{format_count(in_unit(trace.total_flops, count))}**",
        "",
    )
    return pipe_table(
        ("#", "step", "op", "shape", "axes", "dtype", "bytes", unit, "formula"),
        [*rows, total],
        right=(0, 3, 6, 7),
    )


def _formula(step: Step, count: str) -> str:
    if not step.terms:
        return ""
    formula = f"`{format_terms(step.terms, count)}`"
    return f"{formula} per tile, {step.repeat} tiles" if step.repeat > 1 else formula


def params_table(trace: Trace) -> str:
    """One row per weight and bias, and a total row."""
    return pipe_table(
        ("parameter", "shape", "axes", "count", "bytes"),
        [
            *(
                (
                    p.name,
                    format_shape(p.shape),
                    format_axes(p.axes),
                    f"{p.numel:,}",
                    format_bytes(p.nbytes),
                )
                for p in trace.parameters
            ),
            (
                "**total**",
                "",
                "",
                f"**{trace.param_count:,}**",
                f"**{format_bytes(trace.param_bytes)}**",
            ),
        ],
        right=(1, 3, 4),
    )


def pipe_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()
) -> str:
    """A GitHub-flavoured markdown table; ``right`` lists the right-aligned columns.

    >>> print(pipe_table(["a", "b"], [["1", "x|y"]], right=[0]), end="")
    | a | b |
    | ---: | --- |
    | 1 | x\\|y |
    """
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = [_row(header), _row(align), *(_row(r) for r in rows)]
    return "\n".join(lines) + "\n"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
