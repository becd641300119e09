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

import itertools
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
    return _side_inputs_placed(trace, boxes)


def _side_inputs_placed(trace: Trace, boxes: list[Box]) -> list[Box]:
    """Each side input (the mask, the RoPE tables: a step made from nothing drawn) moved to
    the free lane of its row whose lines cross no arrow they do not feed (the RoPE tables'
    line over the v → v_rep arrow read as RoPE feeding v), the nearest to what it feeds; then
    the lanes renumbered from 0.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(kv_heads=4, rope=True, causal=True), "shape")
    >>> crossings(t, layout(t))
    []
    """
    names = {b.step.name for b in boxes}
    for i, box in enumerate(boxes):
        step = box.step
        if step.phase == "backward" or any(n in names for n in inputs(trace, step)):
            continue
        users = [b for b in boxes if step.name in inputs(trace, b.step)]
        if not users:
            continue
        taken = {(b.row, b.lane) for b in boxes if b is not box}
        lanes = [b.lane for b in boxes]
        aim = sum(u.lane for u in users) / len(users)

        def cost(lane: int, i: int = i, box: Box = box, aim: float = aim) -> tuple[int, float]:
            moved = [*boxes[:i], Box(box.step, box.row, lane), *boxes[i + 1 :]]
            wrong = [c for c in crossings(trace, moved) if box.step.name in c]
            return len(wrong), abs(lane - aim)

        free = [
            lane for lane in range(min(lanes) - 2, max(lanes) + 3) if (box.row, lane) not in taken
        ]
        boxes[i] = Box(step, box.row, min(free, key=cost))
    low = min(b.lane for b in boxes)
    return [Box(b.step, b.row, b.lane - low) for b in boxes]


Point = tuple[int, int]


def route(src: Box, dst: Box) -> list[Point]:
    """The corners of the line from ``src``'s bottom to ``dst``'s top: down, across in the gap
    above ``dst`` (mid-gap between adjacent rows), down."""
    x1, y1 = src.x + BOX_W // 2, src.y + BOX_H
    x2, y2 = dst.x + BOX_W // 2, dst.y
    if x1 == x2:
        return [(x1, y1), (x2, y2)]
    mid = (y1 + y2) // 2 if dst.row == src.row + 1 else y2 - GAP_Y // 2
    return [(x1, y1), (x1, mid), (x2, mid), (x2, y2)]


def crossings(trace: Trace, boxes: list[Box]) -> list[tuple[str, str, str, str]]:
    """The pairs of lines that cross where neither feeds what the other arrow goes into,
    as (from, to, from, to).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(causal=True), "shape")
    >>> crossings(t, layout(t))
    []
    """
    where = {b.step.name: b for b in boxes}
    lines = [
        (i, b.step.name, route(where[i], b))
        for b in boxes
        for i in inputs(trace, b.step)
        if i in where
    ]
    feeds: dict[str, set[str]] = {}
    for src, dst, _ in lines:
        feeds.setdefault(src, set()).add(dst)
    found = []
    for k, (a, b, pa) in enumerate(lines):
        for c, d, pc in lines[k + 1 :]:
            if d in feeds[a] or b in feeds[c] or {a, b} & {c, d}:
                continue  # lines into the same step, or one line's step feeding the other
            if _cross(pa, pc):
                found.append((a, b, c, d))
    return found


def _cross(p: list[Point], q: list[Point]) -> bool:
    """Whether two lines of horizontal and vertical segments cross (touching ends aside)."""
    return any(_hv(s, t) or _hv(t, s) for s in itertools.pairwise(p) for t in itertools.pairwise(q))


def _hv(h: tuple[Point, Point], v: tuple[Point, Point]) -> bool:
    """Whether horizontal segment ``h`` passes through the inside of vertical segment ``v``."""
    (hx1, hy), (hx2, hy2) = h
    (vx, vy1), (vx2, vy2) = v
    if hy != hy2 or vx != vx2:
        return False
    return min(hx1, hx2) < vx < max(hx1, hx2) and min(vy1, vy2) < hy < max(vy1, vy2)


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


def render_flow_svg(trace: Trace, lang: str = "en") -> str:
    """The diagram of ``trace`` as one SVG document (no scripts, no external references); its
    title in ``lang``.

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
        f"{escape(_title(trace, lang))}</text>",
        *_loop_frame(boxes, lang),
        *(_edge(where[i], b) for b in boxes for i in inputs(trace, b.step) if i in where),
        *(_box(b) for b in boxes),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _loop_words(times: int, lang: str) -> str:
    """``tile loop: up to 4 tiles`` in ``lang``."""
    from attntrace.learn.lang import check_lang, message

    return message("word.tile_loop", check_lang(lang), times=times)


def _title(trace: Trace, lang: str = "en") -> str:
    from attntrace.learn.lang import check_lang
    from attntrace.render.table import describe_in

    sizes = "  ".join(f"{axis}={size}" for axis, size in trace.config.axis_sizes().items())
    layout = trace.config.parallel
    rank = f"  (rank {layout.rank} of {layout.ranks})" if layout is not None else ""
    return f"attntrace: {describe_in(trace.config, check_lang(lang))}  {sizes}{rank}"


#: How a collective's op begins (--tp, --cp): drawn orange, as data that moves between ranks.
COLLECTIVE_OPS = ("all_reduce(", "all_gather(", "reduce_scatter(", "all_to_all(", "send_recv(")


def _edge(src: Box, dst: Box) -> str:
    (x1, y1), *corners = route(src, dst)
    path = f"M {x1} {y1} " + " ".join(
        f"V {y}" if x == prev[0] else f"H {x}"
        for prev, (x, y) in zip([(x1, y1), *corners], corners, strict=False)
    )
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


def _loop_frame(boxes: list[Box], lang: str = "en") -> list[str]:
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
        f"{escape(_loop_words(times, lang))}</text>",
    ]
