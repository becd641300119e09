"""From raw events to named axes and reference roles (a pass over the recorded graph)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attntrace.capture import axes as ax
from attntrace.capture.events import Event, Shape

Axes = tuple[str, ...]


def propagate(events: Sequence[Event], given: Mapping[str, int]) -> tuple[list[Axes], ax.Sizes]:
    """The axes of every event. Two passes: the second knows the sizes the first found
    (the head_dim found by q's split names k's projection ``g·d``)."""
    sizes = ax.Sizes(dict(given))
    found = _pass(events, sizes)
    learned = {k: v for k, v in sizes.known.items() if k in ("h", "d", "g")}
    sizes = ax.Sizes({**learned, **given})
    found = _pass(events, sizes)
    return found, sizes


def _pass(events: Sequence[Event], sizes: ax.Sizes) -> list[Axes]:
    out: list[Axes] = []
    for e in events:
        out.append(axes_of(e, operand_axes(e, out, sizes), sizes))
    return out


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


def axes_of(e: Event, ops: list[tuple[Axes, Shape]], sizes: ax.Sizes) -> Axes:  # noqa: PLR0911
    """The output axes of one event by the rule of its kind."""
    shape, kind, p = e.shape, e.kind, e.params
    if kind == "create" or not ops:
        return ax.root(e, sizes) if kind == "create" else tuple(sizes.letter(n) for n in shape)
    first = ops[0]
    weight = kind == "matmul" and len(ops) == 2 and e.inputs[1] is None and len(ops[1][1]) == 2
    if kind == "linear" or weight:  # x @ W with W from outside: a projection
        return ax.linear(shape, first, sizes)
    if kind == "matmul" and len(ops) >= 2:
        return ax.matmul(shape, first, ops[1], sizes)
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
