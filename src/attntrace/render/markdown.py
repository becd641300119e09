"""``--format markdown``: pipe tables ready for a README or a pull-request comment."""

from __future__ import annotations

from collections.abc import Sequence

from attntrace.memory import format_bytes
from attntrace.render.table import format_axes, format_shape
from attntrace.trace import Trace


def render_markdown(trace: Trace) -> str:
    """A caption line, the steps table and the parameters table (with a total row).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> text = render_markdown(trace_attention(AttentionConfig(), "shape"))
    >>> print(text.splitlines()[0])
    **attntrace** multi-head self-attention: S=3, H=768, h=12, d=64 (shape backend, float32)
    >>> print(text.splitlines()[15])
    | 11 | scores | `q @ k_t` | (12, 3, 3) | (h, S, S) | float32 | 432 B |
    """
    cfg = trace.config
    sizes = ", ".join(f"{axis}={size}" for axis, size in cfg.axis_sizes().items())
    caption = f"**attntrace** multi-head self-attention: {sizes} ({trace.backend} backend, {cfg.dtype})"
    steps = pipe_table(
        ("#", "step", "op", "shape", "axes", "dtype", "bytes"),
        [(str(s.index), s.name, f"`{s.op}`", format_shape(s.shape), format_axes(s.axes), s.dtype,
          format_bytes(s.nbytes) + (" (view)" if s.view else "")) for s in trace.steps],
        right=(0, 3, 6),
    )
    params = pipe_table(
        ("parameter", "shape", "axes", "count", "bytes"),
        [*((p.name, format_shape(p.shape), format_axes(p.axes), f"{p.numel:,}", format_bytes(p.nbytes)) for p in trace.parameters),
         ("**total**", "", "", f"**{trace.param_count:,}**", f"**{format_bytes(trace.param_bytes)}**")],
        right=(1, 3, 4),
    )
    return f"{caption}\n\n{steps}\n{params}"


def pipe_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
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
