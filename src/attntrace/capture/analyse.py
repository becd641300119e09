"""From raw events to named axes and reference roles (a pass over the recorded graph)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from attntrace.capture import axes as ax
from attntrace.capture.events import Event, Shape

Axes = tuple[str, ...]


def propagate(events: Sequence[Event], given: Mapping[str, int]) -> tuple[list[Axes], ax.Sizes]:
    """The axes of every event. Two passes: the second knows the sizes the first found
    (the head_dim found by q's split names k's projection ``g·d``)."""
    sizes = ax.Sizes(dict(given))
    fused = cut_in_parts(events)
    found = _pass(events, sizes, fused)
    learned = {k: v for k, v in sizes.known.items() if k in ("h", "d", "g")}
    sizes = ax.Sizes({**learned, **given})
    found = _pass(events, sizes, fused)
    return found, sizes


def _pass(events: Sequence[Event], sizes: ax.Sizes, fused: Mapping[int, int]) -> list[Axes]:
    out: list[Axes] = []
    for e in events:
        out.append(axes_of(e, operand_axes(e, out, sizes), sizes, fused))
    return out


def cut_in_parts(events: Sequence[Event]) -> dict[int, int]:
    """The events whose output later ops cut in three (q, k, v) or two (k, v) along its last
    axis, with the number of parts: by one split or chunk, or by slices that tile it
    (``qkv[..., :H]``, …)."""
    found: dict[int, int] = {}
    cuts: dict[int, set[tuple[int, int]]] = {}
    for e in events:
        source = e.inputs[0] if e.inputs else None
        if source is None or not _narrower(e):
            continue
        if e.params.get("parts") in (2, 3):
            found[source] = e.params["parts"]
        elif (cut := e.params.get("last")) is not None:
            cuts.setdefault(source, set()).add(cut)
    for source, pieces in cuts.items():
        starts, stops = zip(*sorted(pieces), strict=True)
        width = events[source].shape[-1]
        if len(pieces) in (2, 3) and starts == (0, *stops[:-1]) and stops[-1] == width:
            found[source] = len(pieces)
    return {**_viewed_in_two(events), **found}


def _viewed_in_two(events: Sequence[Event]) -> dict[int, int]:
    """The projections viewed to (…, 2, g, d) whose axis of two a later op takes apart
    (``kv(x).view(B, S, 2, g, d).unbind(2)``): k and v packed, each with 2 for its parts."""
    views: dict[int, tuple[int, int]] = {}  # reshape -> (projection, the axis of two)
    found: dict[int, int] = {}
    for e in events:
        source = e.inputs[0] if e.inputs else None
        if source is None:
            continue
        if e.kind == "reshape" and events[source].kind == "linear":
            lead = len(e.input_shapes[0]) - 1
            if len(e.shape) == lead + 3 and e.shape[:lead] == e.input_shapes[0][:lead] \
                    and e.shape[lead] == 2:
                views[e.index] = (source, lead)
        elif source in views and e.params.get("parts") == 2:
            projection, axis = views[source]
            viewed = events[source].shape
            if e.shape == (*viewed[:axis], *viewed[axis + 1:]):  # unbind along the two
                found[projection] = 2
    return found


def _narrower(e: Event) -> bool:
    """True when ``e`` keeps its operand's rank and shortens its last axis (a cut of it)."""
    before = e.input_shapes[0]
    return len(before) == len(e.shape) > 0 and e.shape[-1] < before[-1]


def _part_of_fused(e: Event, ops: list[tuple[Axes, Shape]]) -> bool:
    """True for a split part or slice of a fused projection's last axis (q, k or v)."""
    cut = "last" in e.params or e.params.get("parts") in (2, 3)
    return cut and _narrower(e) and ops[0][0][-1] in ax.FUSED


def operand_axes(e: Event, known: Sequence[Axes], sizes: ax.Sizes) -> list[tuple[Axes, Shape]]:
    """(axes, shape) of each tensor operand; an operand from outside is named by its sizes."""
    return [
        (
            known[i]
            if i is not None and i < len(known) and len(known[i]) == len(s)
            else tuple(sizes.letter(n) for n in s),
            s,
        )
        for i, s in zip(e.inputs, e.input_shapes, strict=True)
    ]


def axes_of(  # noqa: PLR0911  (a table)
    e: Event,
    ops: list[tuple[Axes, Shape]],
    sizes: ax.Sizes,
    fused: Mapping[int, int] | None = None,
) -> Axes:
    """The output axes of one event by the rule of its kind; the projections in ``fused``
    are cut in parts afterwards (q, k and v at once, or k and v)."""
    shape, kind, p = e.shape, e.kind, e.params
    if kind == "create" or not ops:
        return ax.root(e, sizes) if kind == "create" else tuple(sizes.letter(n) for n in shape)
    first = ops[p.get("x", 0)] if len(ops) > p.get("x", 0) else ops[0]  # addmm: x is second
    weight = kind == "matmul" and len(ops) == 2 and e.inputs[1] is None and len(ops[1][1]) == 2
    if kind == "linear" or weight:  # x @ W with W from outside: a projection
        if fused and e.index in fused:
            return ax.fused_projection(shape, first, sizes, fused[e.index])
        return ax.linear(shape, first, sizes)
    if _part_of_fused(e, ops):
        start = p["last"][0] if "last" in p else p.get("part")
        return ax.fused_part(shape, first, start == 0, sizes)
    if kind == "matmul" and len(ops) >= 2:
        return ax.matmul(shape, first, ops[1], sizes)
    if (picks := p.get("picks")) is not None and len(picks) == len(shape):
        return ax.picked(first, shape, picks, sizes)  # t[:, :, None], t[0], t[..., :half]
    if kind == "reshape":
        return ax.split(first[0], first[1], shape, sizes)
    if kind == "permute" and p.get("order") is not None and len(p["order"]) == len(first[0]):
        return ax.permute(first[0], p["order"])
    if kind == "reduce":
        return ax.reduce(first[0], first[1], shape, p.get("dims"), sizes)
    if kind == "einsum":
        return ax.einsum(str(p.get("equation", "")), shape, ops, sizes)
    if kind == "repeat":
        return ax.repeat(first[0], first[1], shape, sizes)
    if kind == "sdpa" and len(ops) >= 3 and len(shape) == len(first[1]):
        return (*first[0][:-1], ops[2][0][-1])
    return ax.broadcast(shape, ops, sizes)


@dataclass(frozen=True)
class Mixed:
    """A reshape of the user's code that mixes axes (see :class:`axes.Mixing`)."""

    event: Event
    mixing: ax.Mixing


def mixed_reshapes(events: Sequence[Event], found: Sequence[Axes], sizes: ax.Sizes) -> list[Mixed]:
    """The reshapes whose groups of axes cut across each other, found with the final axes."""
    out = []
    for e in events:
        if e.kind != "reshape" or not e.inputs or e.inputs[0] is None:
            continue
        axes, shape = operand_axes(e, found, sizes)[0]
        mixed: list[ax.Mixing] = []
        ax.split(axes, shape, e.shape, ax.Sizes(dict(sizes.known)), mixed)
        out += [Mixed(e, m) for m in mixed]
    return out
