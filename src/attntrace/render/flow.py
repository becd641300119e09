"""``run --plot-flow FILE.svg``: the data flow of a trace as a diagram, written as SVG by hand
(no Graphviz, no matplotlib).

Each step is a box with its name, shape and named axes, one row per depth (the longest path from
``x``) and one lane per path: x branches into the q, k and v lanes, which meet again at the
scores and the context. Views (no new memory) have a dashed border; the steps of the flash
algorithm's tile loop sit inside a loop frame that says how many times they run.

With ``--backward`` the gradient steps follow below the forward's, in their own rows counted
from ``d_output`` and in the lane of what they are the gradient of (``d_q`` under ``q``,
``d_w_k`` under the k lane), drawn in red; the forward steps a gradient reads (what the forward
keeps for the backward) reach it by a dashed arrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

from attntrace.trace import Step, Trace
from attntrace.units import format_axes, format_shape

BOX_W, BOX_H = 190, 58  # a step's box
GAP_X, GAP_Y = 40, 34  # between boxes
MARGIN = 30
#: Lanes by the first letter of a step name: the q, k and v paths; everything else in the middle.
_LANES = {"q": 0, "k": 1, "v": 2}
_CENTRE = 1


@dataclass(frozen=True)
class Box:
    """Where a step is drawn: its row (depth) and lane (column)."""

    step: Step
    row: int
    lane: int

    @property
    def x(self) -> int:
        return MARGIN + self.lane * (BOX_W + GAP_X)

    @property
    def y(self) -> int:
        return MARGIN + 30 + self.row * (BOX_H + GAP_Y)


def layout(trace: Trace) -> list[Box]:
    """A box for every step: row = depth from the inputs, lane = its path; a taken place moves
    the box one lane to the right.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> boxes = {b.step.name: (b.row, b.lane)
    ...          for b in layout(trace_attention(AttentionConfig(), "shape"))}
    >>> boxes["x"], boxes["q_proj"], boxes["k_proj"], boxes["v_proj"], boxes["scores"]
    ((0, 1), (1, 0), (1, 1), (1, 2), (5, 1))
    """
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max(
                (depth_of(i) for i in inputs(trace, trace[name]) if i in trace), default=-1
            )
        return depth[name]

    forward = [s for s in trace.steps if s.phase != "backward"]
    for step in forward:
        depth_of(step.name)
    for step in forward[1:]:  # a side input (mask, rope tables): just above its first use
        users = [depth[s.name] for s in forward if step.name in inputs(trace, s)]
        if not any(i in trace for i in inputs(trace, step)) and users:
            depth[step.name] = min(users) - 1
    depth |= _backward_rows(trace, 1 + max(depth.values(), default=-1))
    taken: set[tuple[int, int]] = set()
    boxes = []
    for step in trace.steps:
        row, lane = depth[step.name], _lane(step.name)
        while (row, lane) in taken:
            lane += 1
        taken.add((row, lane))
        boxes.append(Box(step, row, lane))
    return boxes


def _backward_rows(trace: Trace, first: int) -> dict[str, int]:
    """The rows of the gradient steps: from ``first`` (below the forward), each one below the
    gradients it is made from (the forward steps it reads do not push it down)."""
    rows: dict[str, int] = {}
    for step in trace.steps:
        if step.phase == "backward":
            made_from = [rows[i] for i in inputs(trace, step) if i in rows]
            rows[step.name] = 1 + max(made_from) if made_from else first
    return rows


#: Buffers that a later step writes into (flash: each finished query block lands in context).
_WRITTEN_BY = {"context": "o_block"}


def inputs(trace: Trace, step: Step) -> tuple[str, ...]:
    """The steps ``step`` is made from, plus the step that fills it when it is a buffer; a
    bias's gradient (``d_b_q``, a sum over rows of what its weight's gradient reads) is made
    from that same gradient (``d_q_proj``)."""
    if step.name.startswith("d_b_") and not step.inputs:
        weight = f"d_w_{step.name[4:]}"
        return trace[weight].inputs[:1] if weight in trace else ()
    writer = _WRITTEN_BY.get(step.name, "")
    return (*step.inputs, writer) if writer in trace and writer not in step.inputs else step.inputs


def _lane(name: str) -> int:
    if name.startswith(("d_w_", "d_b_")):  # a parameter's gradient: its projection's lane
        return _LANES.get(name[4], _CENTRE)
    if name.startswith("d_"):  # a gradient: the lane of what it is the gradient of
        return _lane(name[2:])
    if name in (
        "x",
        "scores",
        "scaled",
        "masked",
        "weights",
        "context",
        "context_heads",
        "merged",
        "output",
    ):
        return _CENTRE
    if name.startswith(("mask", "rope_")):
        return 3
    return _LANES.get(name[0], _CENTRE)


def render_flow_svg(trace: Trace) -> str:
    """The diagram of ``trace`` as one SVG document (no scripts, no external references).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> svg = render_flow_svg(trace_attention(AttentionConfig(), "shape"))
    >>> svg.startswith("<svg") and svg.count('class="step"') == 18
    True
    """
    boxes = layout(trace)
    where = {b.step.name: b for b in boxes}
    width = MARGIN * 2 + (max(b.lane for b in boxes) + 1) * (BOX_W + GAP_X) - GAP_X
    height = MARGIN * 2 + 30 + (max(b.row for b in boxes) + 1) * (BOX_H + GAP_Y) - GAP_Y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" '
        'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 4}" font-size="15" font-weight="bold" fill="#222">'
        f"{escape(_title(trace))}</text>",
        *_loop_frame(boxes),
        *(_edge(where[i], b) for b in boxes for i in inputs(trace, b.step) if i in where),
        *(_box(b) for b in boxes),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _title(trace: Trace) -> str:
    from attntrace.render.table import describe

    sizes = "  ".join(f"{axis}={size}" for axis, size in trace.config.axis_sizes().items())
    layout = trace.config.parallel
    rank = f"  (rank {layout.rank} of {layout.ranks})" if layout is not None else ""
    return f"attntrace: {describe(trace.config)}  {sizes}{rank}"


#: How a collective's op begins (--tp, --cp): drawn orange, as data that moves between ranks.
COLLECTIVE_OPS = ("all_reduce(", "all_gather(", "reduce_scatter(", "all_to_all(", "send_recv(")


def _edge(src: Box, dst: Box) -> str:
    x1, y1 = src.x + BOX_W // 2, src.y + BOX_H
    x2, y2 = dst.x + BOX_W // 2, dst.y
    mid = (y1 + y2) // 2 if dst.row == src.row + 1 else y2 - GAP_Y // 2
    path = f"M {x1} {y1} V {mid} H {x2} V {y2}" if x1 != x2 else f"M {x1} {y1} V {y2}"
    kept = src.step.phase != "backward" and dst.step.phase == "backward"  # read by the backward
    style = ' stroke-dasharray="4 3" opacity="0.55"' if kept else ""
    return (
        f'<path class="edge" data-from="{escape(src.step.name)}" '
        f'data-to="{escape(dst.step.name)}" d="{path}" '
        f'fill="none" stroke="#555" stroke-width="1.3"{style} marker-end="url(#arrow)"/>'
    )


def _box(b: Box) -> str:
    s = b.step
    back = s.phase == "backward"  # a gradient: red, as the backward path
    moves = s.op.startswith(COLLECTIVE_OPS)  # a collective: between the ranks
    fill = "#ffffff" if s.view else "#fbeeee" if back else "#fff1e0" if moves else "#eef4fb"
    stroke = "#a83b3b" if back else "#c0642b" if moves else "#3b6ea8"
    dash = ' stroke-dasharray="5 3"' if s.view else ""
    cx = b.x + BOX_W // 2
    return (
        f'<g class="step" data-name="{escape(s.name)}">'
        f'<rect x="{b.x}" y="{b.y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}"'
        f' stroke="{stroke}"'
        f' stroke-width="1.4"{dash}/>'
        f'<text x="{cx}" y="{b.y + 18}" text-anchor="middle" font-size="13" font-weight="bold"'
        ' fill="#1b2a3a">'
        f"{escape(s.name)}</text>"
        f'<text x="{cx}" y="{b.y + 35}" text-anchor="middle" font-size="12" fill="#006d77">'
        f"{escape(format_shape(s.shape))}</text>"
        f'<text x="{cx}" y="{b.y + 50}" text-anchor="middle" font-size="11" fill="#8a3b8f">'
        f"{escape(format_axes(s.axes))}</text>"
        "</g>"
    )


def _loop_frame(boxes: list[Box]) -> list[str]:
    """A dashed frame around the steps that run once per tile (flash), saying how often."""
    tiles = [b for b in boxes if b.step.repeat > 1]
    if not tiles:
        return []
    x0, y0 = min(b.x for b in tiles) - 12, min(b.y for b in tiles) - 22
    x1, y1 = max(b.x for b in tiles) + BOX_W + 12, max(b.y for b in tiles) + BOX_H + 10
    times = max(b.step.repeat for b in tiles)
    return [
        f'<rect class="loop" x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" rx="10" '
        'fill="#fff8e6" '
        'stroke="#c88a00" stroke-width="1.5" stroke-dasharray="8 4"/>',
        f'<text x="{x1 - 10}" y="{y0 + 15}" text-anchor="end" font-size="12" fill="#8a5a00">'
        f"tile loop: up to {times} tiles</text>",
    ]
