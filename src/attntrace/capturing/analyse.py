"""From raw events to named axes and reference roles (a pass over the recorded graph)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from attntrace.capturing import axes as ax
from attntrace.capturing.axes import UNKNOWN
from attntrace.capturing.events import Event, Shape

Axes = tuple[str, ...]


def propagate(
    events: Sequence[Event], given: Mapping[str, int], parts: int = 1
) -> tuple[list[Axes], ax.Sizes]:
    """The axes of every event. Two passes: the second knows the sizes the first found
    (the head_dim found by q's split names k's projection ``g·d``); ``parts``: the ranks of
    ``trace --nproc`` (a projection H/parts wide holds ``h/parts`` heads)."""
    sizes = ax.Sizes(dict(given), parts=parts)
    weights = _transposed_weights(events)
    fused = cut_in_parts(events, weights)
    masks = mask_roots(events)
    found = _pass(events, sizes, fused, weights, masks)
    learned = {k: v for k, v in sizes.known.items() if k in ("h", "d", "g")}
    sizes = ax.Sizes({**learned, **given}, parts=parts)
    found = _pass(events, sizes, fused, weights, masks)
    return found, sizes


def _pass(
    events: Sequence[Event],
    sizes: ax.Sizes,
    fused: Mapping[int, int],
    weights: frozenset[int],
    masks: frozenset[int] = frozenset(),
) -> list[Axes]:
    out: list[Axes] = []
    for e in events:
        if e.index in masks:  # a mask the code makes: its sizes say nothing about x's
            out.append(_mask_letters(e.shape, sizes))
            continue
        out.append(axes_of(e, operand_axes(e, out, sizes), sizes, fused, weights))
    return out


def _mask_letters(shape: Shape, sizes: ax.Sizes) -> Axes:
    """A mask's axes: its last two are queries and keys when their sizes are S and N (or S
    twice), whatever else has that size; the others by size.

    >>> _mask_letters((4, 4), ax.Sizes({"S": 4, "h": 4})), _mask_letters((16, 16), ax.Sizes())
    (('S', 'S'), ('?', '?'))
    """
    known = sizes.known
    tokens = {known[k]: k for k in ("N", "S") if k in known}  # S wins where N == S
    lead = tuple(sizes.letter(n) for n in shape[:-2])
    return lead + tuple(tokens.get(n, sizes.letter(n)) for n in shape[-2:])


#: The ops that make a mask out of a tensor (``torch.tril(torch.ones(T, T))``, ``np.tri``).
MASK_MAKERS = frozenset({"tril", "triu", "tri", "tril_", "triu_"})
#: The ops whose operand is a mask: those above, and an opened kernel's ``attn_mask`` step.
MASK_READERS = MASK_MAKERS | {"attn_mask"}


def mask_roots(events: Sequence[Event]) -> frozenset[int]:
    """The tensors the code creates to be a mask: made by ``tril``/``triu``/``tri``, or handed
    to one first (nanoGPT's registered ``bias`` buffer, ``torch.tril(torch.ones(T, T))``), or
    the mask an opened kernel reads (and the tensor given as its ``attn_mask``); never the
    input x, whatever their sizes.

    >>> from attntrace.capturing.source import Site
    >>> def ev(i, func, kind, inputs=()):
    ...     return Event(index=i, name=func, kind=kind, func=func, shape=(4, 4), dtype="f",
    ...                  inputs=inputs, input_shapes=((4, 4),) * len(inputs), site=Site("", 0, ""))
    >>> sorted(mask_roots([ev(0, "ones", "create"), ev(1, "tril", "elementwise", (0,)),
    ...                    ev(2, "randn", "create")]))
    [0]
    """
    used_by: dict[int, list[str]] = {}
    for e in events:
        for i in e.inputs:
            if i is not None:
                used_by.setdefault(i, []).append(e.func)
    return frozenset(
        e.index
        for e in events
        if e.kind == "create"
        and (
            e.func in MASK_MAKERS
            or any(f in MASK_READERS for f in used_by.get(e.index, ()))
            or e.params.get("step") == "mask"  # the mask an opened kernel reads
        )
    )


def read_flat(e: Event, ops: Sequence[tuple[Axes, Shape]]) -> bool:
    """``e`` gives its shape to a flat array of unknown size the code read (``np.frombuffer``,
    ``np.fromfile``): the reshape is where the input comes to be."""
    return (
        e.kind == "reshape"
        and len(ops) == 1
        and ops[0][0] == (ax.UNKNOWN,)
        and len(e.shape) in (2, 3)
        and e.inputs[:1] != (None,)
    )


def _transposed_weights(events: Sequence[Event]) -> frozenset[int]:
    """The transposes of a matrix from outside the code (``self.weight.T``): what
    ``x @ self.weight.T`` multiplies by is a projection's weights (Falcon's FalconLinear)."""
    return frozenset(
        e.index
        for e in events
        if e.kind == "permute"
        and len(e.shape) == 2
        and e.inputs
        and all(i is None for i in e.inputs)
    )


def _is_projection(e: Event, weights: frozenset[int] = frozenset()) -> bool:
    """True for a linear layer, or ``x @ W`` with W from outside (or one of ``weights``)."""
    if e.kind == "linear":
        return True
    return (
        e.kind == "matmul"
        and len(e.inputs) == 2
        and len(e.input_shapes[1]) == 2
        and (e.inputs[1] is None or e.inputs[1] in weights)
    )


def cut_in_parts(events: Sequence[Event], weights: frozenset[int] = frozenset()) -> dict[int, int]:
    """The events whose output later ops cut in three (q, k, v) or two (k, v) along its last
    axis, with the number of parts: by one split or chunk, or by slices that tile it
    (``qkv[..., :H]``, …); or, viewed to heads first, along an axis of the view."""
    found: dict[int, int] = {}
    cuts: dict[int, set[tuple[int, int]]] = {}
    for e in events:
        source = e.inputs[0] if e.inputs else None
        if source is None or not _narrower(e):
            continue
        if e.params.get("parts") in (2, 3):
            found[_through_unsqueeze(events, source)] = e.params["parts"]
        elif (cut := e.params.get("last")) is not None:
            cuts.setdefault(source, set()).add(cut)
    for source, pieces in cuts.items():
        starts, stops = zip(*sorted(pieces), strict=True)
        width = events[source].shape[-1]
        if len(pieces) in (2, 3) and starts == (0, *stops[:-1]) and stops[-1] == width:
            found[source] = len(pieces)
    return {**_viewed_in_parts(events, weights), **found}


def _through_unsqueeze(events: Sequence[Event], source: int) -> int:
    """The projection that ``source`` only adds axes of 1 to (GPTBigCode's
    ``c_attn(x).unsqueeze(1).split(…)``), else ``source`` itself."""
    e = events[source]
    inner = e.inputs[0] if e.inputs else None
    if e.kind != "reshape" or inner is None:
        return source
    before = events[inner]
    plain = [n for n in e.shape if n != 1] == [n for n in before.shape if n != 1]
    kept = plain and e.shape[-1:] == before.shape[-1:]  # the last axis, the one split
    return inner if kept and before.kind == "linear" else source


def _viewed_in_parts(events: Sequence[Event], weights: frozenset[int]) -> dict[int, int]:
    """The projections viewed to heads whose view a later op takes apart along a new axis
    other than the last: ``kv(x).view(B, S, 2, g, d).unbind(2)``, k and v packed (2 parts);
    or, wider than x, cut by three slices or indices along one axis (3 parts: Falcon's
    ``qkv.view(B, S, h, 3, d)[..., 0, :]``, ``qkv.view(B, S, h + 2, d)[..., :-2, :]``)."""
    views: dict[int, int] = {}  # reshape -> projection
    cuts: dict[tuple[int, int], set[int]] = {}  # (reshape, axis) -> the slices along it
    found: dict[int, int] = {}
    for e in events:
        source = e.inputs[0] if e.inputs else None
        if source is None:
            continue
        if e.kind == "reshape" and _is_projection(events[source], weights):
            lead = len(e.input_shapes[0]) - 1
            if len(e.shape) in (lead + 2, lead + 3) and e.shape[:lead] == e.input_shapes[0][:lead]:
                views[e.index] = source
        elif source in views and (axis := _taken_apart(e)) is not None:
            projection = views[source]
            lead = len(events[projection].shape) - 1
            two = len(e.input_shapes[0]) == lead + 3 and e.input_shapes[0][axis] == 2
            if e.params.get("parts") == 2 and axis == lead and two:
                found[projection] = 2  # unbind along the two: (…, 2, g, d)
            elif e.func == "getitem" and lead <= axis < len(e.input_shapes[0]) - 1:
                cuts.setdefault((source, axis), set()).add(e.index)
    for (view, _), taken in cuts.items():
        projection = views[view]
        wider = events[view].input_shapes[0][-1] > events[projection].input_shapes[0][-1]
        if wider and len(taken) == 3:
            found.setdefault(projection, 3)
    return found


def _taken_apart(e: Event) -> int | None:
    """The one axis along which ``e`` keeps part of its operand (a shorter axis, or one
    gone: ``t[..., 0, :]``, ``unbind``), every other axis as it was; else None."""
    before, after = e.input_shapes[0] if e.input_shapes else (), e.shape
    if len(after) == len(before):
        shorter = [k for k, (m, n) in enumerate(zip(before, after, strict=True)) if m != n]
        if len(shorter) == 1 and after[shorter[0]] < before[shorter[0]]:
            return shorter[0]
        return None
    gone = [k for k in range(len(before)) if (*before[:k], *before[k + 1 :]) == after]
    return gone[0] if gone else None


def _narrower(e: Event) -> bool:
    """True when ``e`` keeps its operand's rank and shortens its last axis (a cut of it)."""
    before = e.input_shapes[0]
    return len(before) == len(e.shape) > 0 and e.shape[-1] < before[-1]


def _part_of_fused(e: Event, ops: list[tuple[Axes, Shape]]) -> bool:
    """True for a split part or slice of a fused projection's last axis (q, k or v)."""
    cut = "last" in e.params or e.params.get("parts") in (2, 3)
    return cut and _narrower(e) and ops[0][0][-1] in ax.FUSED


def _fused_cut(e: Event, ops: list[tuple[Axes, Shape]], sizes: ax.Sizes) -> Axes | None:
    """The axes of a part of a fused projection (q, k or v) that ``e`` cuts from its last
    axis, or from its axis of heads once viewed (Falcon's ``qkv[..., :-2, :]``); else None."""
    p, first = e.params, ops[0]
    if _part_of_fused(e, ops):
        start = p["last"][0] if "last" in p else p.get("part")
        return ax.fused_part(e.shape, first, start == 0, sizes)
    along = p.get("along")
    if along is not None and len(e.shape) == len(first[1]) and first[0][along[0]] in ax.HEADS_FUSED:
        axis, start, stop = along
        return ax.heads_part(first[0], axis, start, stop, sizes)
    return None


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


def axes_of(  # noqa: PLR0911, PLR0912  (a table)
    e: Event,
    ops: list[tuple[Axes, Shape]],
    sizes: ax.Sizes,
    fused: Mapping[int, int] | None = None,
    weights: frozenset[int] = frozenset(),
) -> Axes:
    """The output axes of one event by the rule of its kind; the projections in ``fused``
    are cut in parts afterwards (q, k and v at once, or k and v); ``weights``: the
    transposed weights (``x @ self.weight.T`` is a projection)."""
    shape, kind, p = e.shape, e.kind, e.params
    if kind == "create" or not ops:
        return ax.root(e, sizes) if kind == "create" else tuple(sizes.letter(n) for n in shape)
    first = ops[p.get("x", 0)] if len(ops) > p.get("x", 0) else ops[0]  # addmm: x is second
    if kind == "collective":  # torch.distributed: the letters of what it reads, resized
        return _collected(shape, first, sizes)
    if _is_projection(e, weights):  # x @ W with W from outside: a projection
        if fused and e.index in fused:
            return ax.fused_projection(shape, first, sizes, fused[e.index])
        return ax.linear(shape, first, sizes)
    if (part := _fused_cut(e, ops, sizes)) is not None:
        return part
    if kind == "matmul" and len(ops) >= 2:
        return ax.matmul(shape, first, ops[1], sizes)
    if (picks := p.get("picks")) is not None and len(picks) == len(shape):
        return ax.picked(first, shape, picks, sizes)  # t[:, :, None], t[0], t[..., :half]
    if kind == "reshape" and read_flat(e, ops):  # np.frombuffer(b).reshape(S, H): the input
        return ax.root(e, sizes)
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
    if (joined := _concatenated(shape, ops, sizes)) is not None:
        return joined  # cat((k_cache, k), dim=-2): (B, g, N+S, d)
    return ax.broadcast(shape, ops, sizes)


def _collected(shape: Shape, first: tuple[Axes, Shape], sizes: ax.Sizes) -> Axes:
    """A collective's axes: those of the tensor it reads where the size is the same (an
    all_reduce, a send), the letter of the new size where it changed (an all_gather's S),
    a leading axis of the ranks for a list filled (``all_gather(parts, t)``: (n, ...)).

    >>> _collected((2, 4, 8), (("S", "H"), (4, 8)), ax.Sizes({"S": 8, "H": 8}))
    ('?', 'S', 'H')
    """
    axes, have = first
    lead = len(shape) - len(have)
    if lead not in (0, 1):
        return tuple(sizes.letter(n) for n in shape)
    kept = tuple(
        _resized(a, m, n, sizes) for a, m, n in zip(axes, have, shape[lead:], strict=False)
    )
    return (sizes.letter(shape[0]), *kept) if lead else kept


def _resized(letter: str, before: int, after: int, sizes: ax.Sizes) -> str:
    """An axis a collective resized: ``S·2`` gathered from 2 ranks, ``S/2`` scattered to them
    (``trace --nproc 2``), else the letter of the size.

    >>> _resized("S", 4, 8, ax.Sizes({"S": 4}, parts=2)), _resized("S", 8, 4, ax.Sizes(parts=2))
    ('S·2', 'S/2')
    >>> _resized("S·2", 8, 4, ax.Sizes(parts=2))  # scattered back
    'S'
    """
    n = sizes.parts
    if after == before:
        return letter
    if n > 1 and letter not in (UNKNOWN, "1") and after == before * n:
        return letter.removesuffix(f"/{n}") if letter.endswith(f"/{n}") else f"{letter}·{n}"
    if n > 1 and letter not in (UNKNOWN, "1") and before == after * n:
        return letter.removesuffix(f"·{n}") if letter.endswith(f"·{n}") else f"{letter}/{n}"
    return sizes.letter(after)


def _concatenated(shape: Shape, ops: list[tuple[Axes, Shape]], sizes: ax.Sizes) -> Axes | None:
    """The axes of a concatenation along one axis whose size no letter has (a KV cache and
    the new keys: N+S), the parts' letters joined by ``+``; else None.

    >>> _concatenated((2, 6, 8), [(("h", "N", "d"), (2, 5, 8)), (("h", "S", "d"), (2, 1, 8))],
    ...               ax.Sizes({"h": 2, "N": 5, "S": 1, "d": 8}))
    ('h', 'N+S', 'd')
    """
    if len(ops) < 2 or any(len(s) != len(shape) for _, s in ops):
        return None
    along = [k for k in range(len(shape)) if any(s[k] != shape[k] for _, s in ops)]
    if len(along) != 1 or sum(s[along[0]] for _, s in ops) != shape[along[0]]:
        return None
    k = along[0]
    parts = [a[k] for a, _ in ops]
    if sizes.letter(shape[k]) != ax.UNKNOWN or any(p in (ax.UNKNOWN, "1") for p in parts):
        return None
    joined = "+".join(parts)
    sizes.sums[joined] = shape[k]  # a mask sliced to it later is named by it
    return (*ops[0][0][:k], joined, *ops[0][0][k + 1 :])


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
