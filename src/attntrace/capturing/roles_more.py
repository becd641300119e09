"""The roles read from a pattern of several ops, after each op's own role is found
(:mod:`attntrace.capturing.roles`): the RoPE tables given to the code (``rope_cos``,
``rope_sin``), the q/k norm (RMSNorm written out, or a LayerNorm/RMSNorm module or function:
``q_norm``, ``k_norm``), the soft-cap ``c·tanh(s/c)`` (``capped``) and T5's relative position
bias added to the scores (``position_bias``, ``biased``) rather than a mask, and the mask given
to the code (``mask``: a 4-D additive or boolean tensor added to the scores, filled in with
``masked_fill``/``where``, or passed to SDPA as ``attn_mask``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from attntrace.capturing.events import Event

Axes = tuple[str, ...]
#: Gives an event a role unless it has one or the role is given.
Give = Callable[[int, str], None]

#: The lineages of q and k before the scores (roles.py's names).
_BASES = {
    **{f"q{s}": "q" for s in ("_proj", "_heads", "")},
    **{f"k{s}": "k" for s in ("_proj", "_heads", "")},
}
#: Module rows and functions that normalise their input over its last axis.
_NORMS = ("layernorm", "rmsnorm", "layer_norm", "rms_norm", "qwen3rmsnorm")
_EPS_OPS = ("add", "add_", "rsqrt", "sqrt", "reciprocal", "pow", "to", "float", "type_as")
_SCALE_OPS = ("mul", "mul_", "multiply", "div", "div_", "truediv", "true_divide", "divide")


def refine(
    events: Sequence[Event], axes: Sequence[Axes], out: list[str], line: Mapping[int, str]
) -> list[str]:
    """``out`` (one role per event) with the roles of the patterns above added where the
    events play them and the role is not given yet.

    >>> refine([], [], [], {})
    []
    """
    out = list(out)
    given = set(filter(None, out))

    def give(index: int, role: str) -> None:
        if role not in given and not out[index]:
            out[index] = role
            given.add(role)

    _tables(events, axes, line, give)
    _norms(events, line, give)
    _capped(events, line, give)
    _bias(events, axes, out, line, give)
    _mask(events, axes, out, line, give)
    return out


def _tables(
    events: Sequence[Event], axes: Sequence[Axes], line: Mapping[int, str], give: Give
) -> None:
    """Inputs (S, d) (with leading 1s or B) that multiply q or k: cos first, then sin."""
    tables = [
        e.index
        for e in events
        if e.kind == "create" and e.index > 0 and axes[e.index][-2:] == ("S", "d")
    ]
    used = []
    for e in events:
        if e.kind != "elementwise" or e.func not in ("mul", "mul_", "multiply"):
            continue
        bases = {_BASES.get(line.get(i or 0, "")) for i in e.inputs if i is not None}
        if not bases & {"q", "k"}:
            continue
        for i in e.inputs:
            root = _root_of(events, i)
            if root in tables and root not in used:
                used.append(root)
    for index, role in zip(used, ("rope_cos", "rope_sin"), strict=False):
        give(index, role)


def _root_of(events: Sequence[Event], index: int | None) -> int | None:
    """The input event a tensor was made from by views alone (unsqueeze, reshape)."""
    while index is not None and events[index].kind == "reshape" and events[index].inputs:
        index = events[index].inputs[0]
    return index if index is not None and events[index].kind == "create" else None


def _norms(events: Sequence[Event], line: Mapping[int, str], give: Give) -> None:
    """A norm of q or k: a norm module/function on it, or its RMS written out (its mean over
    the last axis, then x times the reciprocal): the last op of the chain plays q_norm."""
    stat: set[int] = set()  # ops computed from a statistic over q's or k's last axis
    normed: dict[int, str] = {}  # ops of the normalised q or k (times weight …), by base
    for e in events:
        ins = [i for i in e.inputs if i is not None]
        base = next((_BASES.get(line.get(i, "")) for i in ins if line.get(i, "") in _BASES), None)
        if base and e.func.lower() in _NORMS and len(e.shape) >= 2:
            normed[e.index] = base  # nn.LayerNorm, F.layer_norm, an RMSNorm module
            continue
        if e.kind == "reduce" and base and e.shape[-1:] == (1,):
            stat.add(e.index)
            continue
        if ins and all(i in stat for i in ins) and e.func in _EPS_OPS:
            stat.add(e.index)  # + eps, rsqrt, sqrt
            continue
        if e.kind != "elementwise" or not ins:
            continue
        if base and any(i in stat for i in ins) and e.func in _SCALE_OPS:
            normed[e.index] = base  # x * rsqrt(mean(x²) + eps)
        elif ins[0] in normed and len(ins) == 1 and e.func in ("to", "type_as", "float"):
            normed[e.index] = normed[ins[0]]  # .to(dtype); a scalar (q * scale) ends it
        elif (
            len(e.inputs) >= 2 and any(i in normed for i in ins) and e.func in (*_SCALE_OPS, "add")
        ):
            normed[e.index] = normed[next(i for i in ins if i in normed)]  # weight * x, + bias
    last: dict[str, int] = {}
    for index, base in normed.items():
        last[base] = max(last.get(base, index), index)
    for base in ("q", "k"):
        if base in last:
            give(last[base], f"{base}_norm")


def _capped(events: Sequence[Event], line: Mapping[int, str], give: Give) -> None:
    """``c · tanh(s / c)`` on the scores: the product after the tanh plays capped."""
    tanh = {
        e.index
        for e in events
        if e.func == "tanh" and any(line.get(i or -1, "") == "scores" for i in e.inputs)
    }
    for e in events:
        if e.func in ("mul", "mul_", "multiply") and any(i in tanh for i in e.inputs):
            give(e.index, "capped")
            return


def _bias(
    events: Sequence[Event],
    axes: Sequence[Axes],
    out: list[str],
    line: Mapping[int, str],
    give: Give,
) -> None:
    """The scores plus a tensor with a heads axis that is not q's or k's (T5's relative
    position bias): that tensor plays position_bias and the sum biased, not masked."""
    for e in events:
        if out[e.index] != "masked" or e.func.removesuffix("_") != "add":
            continue
        others = [i for i in e.inputs if i is not None and line.get(i, "") != "scores"]
        if len(others) == 1 and "h" in axes[others[0]] and axes[others[0]][-2:] == ("S", "S"):
            out[e.index] = ""
            give(others[0], "position_bias")
            give(e.index, "biased")
            return


def _mask(
    events: Sequence[Event],
    axes: Sequence[Axes],
    out: Sequence[str],
    line: Mapping[int, str],
    give: Give,
) -> None:
    """An input (made by views alone) that the ``masked`` op combines with the scores, or that
    SDPA takes beside q, k and v (its ``attn_mask``): that input plays mask."""
    for e in events:
        if out[e.index] == "masked":
            others = [i for i in e.inputs if i is not None and line.get(i, "") != "scores"]
        elif e.kind == "sdpa" and out[e.index] == "context":
            others = [i for i in e.inputs[3:4] if i is not None]  # (q, k, v, attn_mask)
        else:
            continue
        for i in others:
            root = _root_of(events, i)
            if root is not None and root > 0 and axes[root][-1:] in (("S",), ("N",)):
                give(root, "mask")
                return
