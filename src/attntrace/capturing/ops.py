"""What a captured call is: its display name, the axis rule it follows (its kind) and the
arguments that rule needs (the new order of a transpose, the reduced dims …)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

_MATMUL = frozenset({"matmul", "mm", "bmm", "dot", "rmatmul"})
_RESHAPE = frozenset(
    {
        "view",
        "reshape",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "view_as",
        "reshape_as",
        "expand_dims",
        "ravel",
    }
)
_PERMUTE = frozenset({"transpose", "swapaxes", "swapdims", "permute", "t", "T", "mT", "mH", "H"})
_REDUCE = frozenset(
    {
        "sum",
        "mean",
        "max",
        "min",
        "amax",
        "amin",
        "prod",
        "std",
        "var",
        "logsumexp",
        "argmax",
        "argmin",
        "nansum",
        "norm",
    }
)
#: Operator dunders and their readable names.
_DUNDER = {
    "truediv": "div",
    "rtruediv": "div",
    "floordiv": "floordiv",
    "radd": "add",
    "rsub": "sub",
    "rmul": "mul",
    "rpow": "pow",
    "iadd": "add_",
    "isub": "sub_",
    "imul": "mul_",
    "itruediv": "div_",
    "getitem": "getitem",
    "setitem": "setitem",
    "neg": "neg",
}


def torch_name(func: Any) -> str:
    """The name of a torch callable as the mode sees it: ``matmul``, ``__matmul__``, ``T`` …"""
    name = getattr(func, "__name__", "") or ""
    if name == "__get__":
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", "") or "get"
    return str(name)


def display(name: str) -> str:
    """The op name shown in a row: ``__matmul__`` -> ``matmul``, ``__truediv__`` -> ``div``.

    >>> display("__matmul__"), display("__rtruediv__"), display("softmax")
    ('matmul', 'div', 'softmax')
    """
    if name.startswith("__") and name.endswith("__"):
        bare = name[2:-2]
        return _DUNDER.get(bare, bare)
    return name


def part_params(params: Mapping[str, Any], k: int, parts: int) -> dict[str, Any]:
    """``params`` of the ``k``-th of ``parts`` tensors an op returned (``split``, ``chunk``):
    with ``part`` and ``parts`` when there are several.

    >>> part_params({}, 1, 3), part_params({"dims": (0,)}, 0, 1)
    ({'part': 1, 'parts': 3}, {'dims': (0,)})
    """
    return {**params, "part": k, "parts": parts} if parts > 1 else dict(params)


def in_place(name: str, kwargs: Mapping[str, Any]) -> bool:
    """True for ops that change a tensor in place (``masked_fill_``, ``__iadd__``, ``out=``)."""
    bare = name.strip("_")
    return (
        (name.endswith("_") and not name.endswith("__"))
        or name in ("__setitem__",)
        or bare in ("iadd", "isub", "imul", "itruediv")
        or kwargs.get("out") is not None
    )


def tensors(
    args: Sequence[Any], kwargs: Mapping[str, Any], test: Callable[[Any], bool]
) -> list[Any]:
    """The tensor operands in order, one level into lists and tuples (``torch.cat([a, b])``)."""
    out: list[Any] = []
    for value in [*args, *kwargs.values()]:
        if test(value):
            out.append(value)
        elif isinstance(value, list | tuple):
            out.extend(v for v in value if test(v))
    return out


def kind_of(name: str, operands: int) -> str:  # noqa: PLR0911  (a table)
    """The axis rule of an op name (``display`` names)."""
    if operands == 0:
        return "create"
    if name in _MATMUL:
        return "matmul"
    if name in _RESHAPE:
        return "reshape"
    if name in _PERMUTE:
        return "permute"
    if name in _REDUCE and operands == 1:
        return "reduce"
    if name in ("linear", "einsum"):
        return name
    if name in ("repeat_interleave", "repeat", "expand", "expand_as", "tile", "broadcast_to"):
        return "repeat"
    if name == "scaled_dot_product_attention":
        return "sdpa"
    return "elementwise"


def torch_kind(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any], operands: int
) -> tuple[str, dict[str, Any]]:
    """The kind and parameters of one torch call."""
    shown = display(name)
    kind = kind_of(shown, operands)
    rank = _rank(args)
    params: dict[str, Any] = {}
    if kind == "permute" and rank is not None:
        params["order"] = _torch_order(shown, args[1:], kwargs, rank)
    elif kind == "reduce":
        params["dims"] = _dims(args[1:2] or [kwargs.get("dim", kwargs.get("axis"))])
    elif kind == "einsum" and args and isinstance(args[0], str):
        params["equation"] = args[0]
    if shown == "rmatmul":
        params["swapped"] = True
    if shown == "addmm" and operands == 3:  # addmm(bias, x, w) = x @ w + bias: HF's Conv1D
        kind, params["x"] = "linear", 1
    if shown == "baddbmm" and operands == 3:  # Bloom: alibi.baddbmm(q, k_t) = alibi + q @ k_t
        kind, params["x"] = "matmul", 1
    if shown == "getitem" and len(args) > 1:
        params |= index_params(args[1], getattr(args[0], "shape", ()))
    return kind, params


def index_params(key: Any, shape: Sequence[int]) -> dict[str, Any]:
    """What ``t[key]`` picks, for the axes and roles: ``index``, the whole number it takes
    along the first axis; ``along``, the (axis, start, stop) of the one axis it takes a range
    of (see :func:`axis_range`); ``last``, the (start, stop) of the one range it cuts from the
    last axis of ``shape`` (``qkv[..., :H]``, ``qkv[:, :, H:2 * H]``); and ``picks``, where
    each axis comes from (see :func:`index_picks`).

    >>> index_params(1, (3, 4))["index"], index_params((Ellipsis, slice(4, None)), (2, 12))
    (1, {'along': (1, 4, 12), 'last': (4, 12), 'picks': (0, 1)})
    >>> index_params((slice(None), slice(0, 4)), (2, 12))["last"], index_params(None, (2, 3))
    ((0, 4), {'picks': (None, 0, 1)})
    """
    picks = {} if (kept := index_picks(key, len(shape))) is None else {"picks": kept}
    along = {} if (taken := axis_range(key, shape)) is None else {"along": taken}
    if (index := leading_index(key)) is not None:
        return {"index": index, **along, **picks}
    if (cut := last_range(key, shape)) is not None:
        return {**along, "last": cut, **picks}
    return {**along, **picks}


def index_picks(key: Any, rank: int) -> tuple[int | None, ...] | None:
    """For basic indexing (whole numbers, slices, None, ..., or one list of whole numbers and
    no whole number, so the list keeps its axis in place): the axis of the operand each axis
    of ``t[key]`` comes from, None for a new axis of size 1; else None.

    >>> index_picks((slice(None), slice(None), None), 4), index_picks((0, Ellipsis, None), 3)
    ((0, 1, None, 2, 3), (1, 2, None))
    >>> index_picks((Ellipsis, [-2], slice(None)), 4)
    (0, 1, 2, 3)
    """
    parts = key if isinstance(key, tuple) else (key,)
    basic = all(
        p is None or p is Ellipsis or isinstance(p, slice) or _whole(p) or _whole_list(p)
        for p in parts
    )
    used = sum(p is not None and p is not Ellipsis for p in parts)
    lists = sum(_whole_list(p) for p in parts)
    advanced = lists > 1 or (lists == 1 and any(_whole(p) for p in parts))
    if not basic or used > rank or sum(p is Ellipsis for p in parts) > 1 or advanced:
        return None
    out: list[int | None] = []
    axis = 0
    for p in parts:
        if p is Ellipsis:
            out += range(axis, axis + rank - used)
            axis += rank - used
        elif p is None:
            out.append(None)
        else:  # a slice or a list keeps its axis, a whole number drops it
            out += [] if _whole(p) else [axis]
            axis += 1
    return (*out, *range(axis, rank))


def axis_range(key: Any, shape: Sequence[int]) -> tuple[int, int, int] | None:
    """The (axis, start, stop) of the one axis of ``shape`` that ``t[key]`` takes a range
    of, every other axis kept whole: by a slice of step 1, a whole number (the axis goes) or
    a list of consecutive whole numbers (Falcon's ``qkv[..., [-2], :]``).

    >>> axis_range((Ellipsis, slice(None, -2), slice(None)), (2, 6, 16))
    (1, 0, 4)
    >>> axis_range((Ellipsis, [-2], slice(None)), (2, 6, 16)), axis_range((0, 1), (3, 4))
    ((1, 4, 5), None)
    """
    found = _one_part(key, len(shape))
    if found is None:
        return None
    axis, part = found
    taken = _range_of(part, int(shape[axis]))
    return None if taken is None else (axis, *taken)


def last_range(key: Any, shape: Sequence[int]) -> tuple[int, int] | None:
    """The (start, stop) a key cuts from the last axis (a slice, or a list that keeps the
    axis), every other axis kept whole."""
    found = _one_part(key, len(shape))
    if found is None or found[0] != len(shape) - 1 or _whole(found[1]):
        return None
    return _range_of(found[1], int(shape[-1]))


def _one_part(key: Any, rank: int) -> tuple[int, Any] | None:
    """The axis and the part of ``key`` for it, when ``key`` takes all of every other axis."""
    parts = key if isinstance(key, tuple) else (key,)
    if any(p is None for p in parts) or sum(p is Ellipsis for p in parts) > 1 or not rank:
        return None
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts = (*parts[:at], *[slice(None)] * (rank - len(parts) + 1), *parts[at + 1 :])
    parts = (*parts, *[slice(None)] * (rank - len(parts)))
    cut = [(k, p) for k, p in enumerate(parts) if not (isinstance(p, slice) and p == slice(None))]
    return cut[0] if len(parts) == rank and len(cut) == 1 else None


def _range_of(part: Any, size: int) -> tuple[int, int] | None:
    """The (start, stop) one part of a key takes from an axis of ``size``, else None."""
    if isinstance(part, slice):
        start, stop, step = part.indices(size)
        return (start, stop) if step == 1 and stop > start else None
    picked = [part] if _whole(part) else part if _whole_list(part) else []
    if not picked or not all(-size <= i < size for i in picked):
        return None
    first = [i % size for i in picked]
    return (first[0], first[-1] + 1) if first == list(range(first[0], first[-1] + 1)) else None


def _whole(part: Any) -> bool:
    return isinstance(part, int) and not isinstance(part, bool)


def _whole_list(part: Any) -> bool:
    return isinstance(part, list) and bool(part) and all(_whole(i) for i in part)


def leading_index(key: Any) -> int | None:
    """The whole number that ``t[key]`` picks along the first axis, else None.

    >>> leading_index(1), leading_index((2, slice(None))), leading_index(slice(0, 1))
    (1, 2, None)
    """
    first = key[0] if isinstance(key, tuple) and key else key
    return first if isinstance(first, int) and not isinstance(first, bool) else None


def _rank(args: Sequence[Any]) -> int | None:
    shape = getattr(args[0], "shape", None) if args else None
    return len(shape) if shape is not None else None


def _torch_order(
    name: str, rest: Sequence[Any], kwargs: Mapping[str, Any], rank: int
) -> tuple[int, ...] | None:
    if name in ("t", "T"):
        return tuple(reversed(range(rank)))
    if name in ("mT", "mH", "H"):
        return swap(rank, -2, -1)
    if name == "permute":
        dims = (
            rest[0]
            if len(rest) == 1 and isinstance(rest[0], list | tuple)
            else rest or kwargs.get("dims")
        )
        return _ints(dims, rank)
    a = rest[0] if len(rest) > 0 else kwargs.get("dim0", kwargs.get("axis0"))
    b = rest[1] if len(rest) > 1 else kwargs.get("dim1", kwargs.get("axis1"))
    return swap(rank, a, b) if isinstance(a, int) and isinstance(b, int) else None


def numpy_order(
    name: str, rest: Sequence[Any], kwargs: Mapping[str, Any], rank: int
) -> tuple[int, ...] | None:
    """The new order of a numpy transpose, swapaxes or ``.T``."""
    if name == "T":
        return tuple(reversed(range(rank)))
    if name == "swapaxes":
        a = rest[0] if rest else kwargs.get("axis1")
        b = rest[1] if len(rest) > 1 else kwargs.get("axis2")
        return swap(rank, a, b) if isinstance(a, int) and isinstance(b, int) else None
    axes = rest[0] if len(rest) == 1 else (rest or kwargs.get("axes"))
    if axes is None or axes == ():
        return tuple(reversed(range(rank)))
    return _ints(axes, rank)


def swap(rank: int, a: int, b: int) -> tuple[int, ...]:
    """The order that swaps axes ``a`` and ``b``.

    >>> swap(4, 1, 2), swap(3, -2, -1)
    ((0, 2, 1, 3), (0, 2, 1))
    """
    order = list(range(rank))
    a, b = a % rank, b % rank
    order[a], order[b] = order[b], order[a]
    return tuple(order)


def _ints(dims: Any, rank: int) -> tuple[int, ...] | None:
    try:
        out = tuple(int(d) % rank for d in dims)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return out if sorted(out) == list(range(rank)) else None


def _dims(values: Sequence[Any]) -> tuple[int, ...] | None:
    value = values[0] if values else None
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def reduce_dims(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The ``axis`` of a numpy reduction (positional or keyword)."""
    return _dims(args[1:2] or [kwargs.get("axis", kwargs.get("dim"))])
