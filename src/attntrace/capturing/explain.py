"""Why a shape was wrong: the rule the failing op has, in words with the operands' named axes,
and the fix when a known attention mistake fits (K not transposed, heads not merged back …)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attntrace.capturing.axes import Mixing
from attntrace.capturing.events import Event, Failure, Operand
from attntrace.units import format_bytes

_SHAPE_WORDS = (
    "shape",
    "size",
    "dimension",
    "broadcast",
    "mat1 and mat2",
    "mismatch",
    "subscript",
    "operand",
    "axis",
    "out of range",
    "reshape",
    "match",
    "invalid for input",
)


@dataclass(frozen=True)
class Explanation:
    """The rule that broke (one sentence) and, when a known pattern fits, the fix."""

    rule: str
    fix: str = ""
    kind: str = "shape error"  # the heading: "shape error" or "out of memory"
    first: str = ""  # the first step whose axes went wrong, lines before the crash


#: Letters a product of q and kᵀ should never end with twice: heads or features, not tokens.
_NOT_TOKENS = {"h": "heads", "g": "kv heads", "d": "head features", "H": "features"}


def first_wrong_axes(steps: Sequence[Any]) -> str:
    """The first step (of ``steps``: :class:`~attntrace.capturing.record.CapturedStep`) whose
    two last axes are the same letter of heads or features — scores over heads (B, S, h, h)
    where they should be over tokens (B, h, S, S) — as one line; "" when there is none.

    >>> from attntrace.capturing.record import CapturedStep
    >>> s = CapturedStep("matmul_4", (2, 6, 4, 4), "float32", axes=("B", "S", "h", "h"),
    ...                  location="a.py:10", source="q @ k.transpose(-2, -1)")
    >>> first_wrong_axes([s])  # doctest: +ELLIPSIS
    'matmul_4 at a.py:10 (q @ k.transpose(-2, -1)) is (B, S, h, h): a product over heads...'
    """
    from attntrace.units import format_axes

    for step in steps:
        axes = tuple(step.axes)
        if len(axes) >= 3 and axes[-1] == axes[-2] and axes[-1] in _NOT_TOKENS:
            what = _NOT_TOKENS[axes[-1]]
            return (
                f"{step.name} at {step.location} ({step.source}) is {format_axes(axes)}: a "
                f"product over {what}, not over the tokens; its operands still had S before "
                f"{axes[-1]}: move the heads before S first (.transpose(1, 2) after the view, "
                "np.swapaxes(t, 1, 2) in numpy) so that the scores are (B, h, S, S)"
            )
    return ""


def with_first_wrong(explanation: Explanation | None, steps: Sequence[Any]) -> Explanation | None:
    """A shape error's explanation with :func:`first_wrong_axes` of the steps before it."""
    if explanation is None or explanation.kind != "shape error":
        return explanation
    first = first_wrong_axes(steps)
    return replace(explanation, first=first, fix="") if first else explanation  # the cure


def told(failure: Failure) -> Explanation | None:
    """What trace says of an op that raised: a shape error's rule and fix, a failed
    allocation's size and fix; None for any other error (a dtype mismatch among them, which
    torch words like a shape error)."""
    if is_memory_error(failure.error):
        return _memory(failure)
    if is_shape_error(failure) and not dtype_mismatch(failure.error):
        return explain(failure)
    return None


def dtype_mismatch(error: BaseException) -> bool:
    """True when torch refused operands of different dtypes (which its messages word like a
    shape error: ``mat1 and mat2 must have the same dtype``).

    >>> dtype_mismatch(RuntimeError("mat1 and mat2 must have the same dtype, but got Double"))
    True
    >>> dtype_mismatch(RuntimeError("mat1 and mat2 shapes cannot be multiplied (5x64 and 32x64)"))
    False
    """
    text = str(error)
    return "same dtype" in text or "expected scalar type" in text.lower()


#: How numpy and torch say that an allocation failed.
_MEMORY_WORDS = (
    "unable to allocate",
    "can't allocate memory",
    "out of memory",
    "not enough memory",
)


def is_memory_error(error: BaseException) -> bool:
    """True for a failed allocation: MemoryError (numpy's ``_ArrayMemoryError``) or torch's
    ``DefaultCPUAllocator: can't allocate memory``.

    >>> is_memory_error(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    True
    """
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and any(w in str(error).lower() for w in _MEMORY_WORDS)
    )


def _memory(failure: Failure) -> Explanation:
    """The size the op asked for, when the message says it, and the sizes to lower."""
    text = str(failure.error)
    asked = re.search(r"allocate (\d+) bytes", text)
    size = re.search(r"allocate ([\d.]+ [KMGTPE]i?B)", text)
    amount = (
        format_bytes(int(asked.group(1)))
        if asked
        else size.group(1).replace(". ", " ")
        if size
        else ""
    )  # numpy: "298. GiB"
    what = f"{amount}, more" if amount else "more memory"
    return Explanation(
        f"{failure.func} asked for {what} than this machine can give",
        "use smaller sizes (--seq, --batch for FILE.py:NAME; a script's own): the (S, S) "
        "scores grow with S², the other tensors with S",
        kind="out of memory",
    )


def is_shape_error(failure: Failure) -> bool:
    """True when the failing op raised because of its operands' shapes."""
    error = failure.error
    text = str(error).lower()
    return isinstance(error, RuntimeError | ValueError | IndexError) and any(
        w in text for w in _SHAPE_WORDS
    )


def explain(failure: Failure) -> Explanation:  # noqa: PLR0911  (one rule per kind)
    """The :class:`Explanation` of a shape error (a general one when no rule fits)."""
    ops = failure.operands
    if failure.kind == "linear" and failure.params.get("x") == 1 and len(ops) == 3:
        return _matmul(ops[1], ops[2])  # addmm(bias, x, w): x @ w, then + bias
    if failure.kind == "linear" and len(ops) >= 2:
        return _linear(ops[0], ops[-1])
    if failure.kind == "matmul" and len(ops) >= 2:
        return _matmul(ops[0], ops[1])
    if failure.kind == "reshape" and ops:
        return _reshape(ops[0], str(failure.error))
    if failure.kind == "einsum":
        return _einsum(failure)
    if failure.kind == "sdpa" and len(ops) >= 3:
        return _sdpa(ops[0], ops[1], ops[2])
    if failure.kind in ("permute", "reduce") or isinstance(failure.error, IndexError):
        return _axis(failure)
    if len(ops) >= 2:
        return _broadcast(failure.func, ops)
    return Explanation(f"{failure.func} cannot take {_list(ops)}")


def _ax(o: Operand, k: int) -> str:
    """``d=64``: the letter and size of axis k of an operand."""
    size = o.shape[k]
    letter = o.axes[k] if o.axes and o.axes[k] not in ("?", "1") else ""
    return f"{letter}={size}" if letter else str(size)


def _name(o: Operand, fallback: str) -> str:
    return o.name or fallback


def _list(ops: tuple[Operand, ...]) -> str:
    return ", ".join(f"{_name(o, 'operand')} {o.shape}" for o in ops)


def _matmul(a: Operand, b: Operand) -> Explanation:
    na, nb = _name(a, "the left operand"), _name(b, "the right operand")
    if len(a.shape) < 1 or len(b.shape) < 1:
        return Explanation("matmul needs operands with at least one axis")
    kb = -2 if len(b.shape) >= 2 else -1
    if a.shape[-1] != b.shape[kb]:
        rule = (
            f"matmul contracts the last axis of {na} ({_ax(a, -1)}) with the second-to-last of "
            f"{nb} ({_ax(b, kb)}); {a.shape[-1]} ≠ {b.shape[kb]}"
        )
        return Explanation(rule, _matmul_fix(a, b, na, nb))
    rule = (
        f"matmul broadcasts the leading (batch) axes: {na} has {a.shape[:-2]}, {nb} has "
        f"{b.shape[:-2]}, and they do not match from the right"
    )
    return Explanation(rule, _heads_first_fix(a, b, na, nb))


def _matmul_fix(a: Operand, b: Operand, na: str, nb: str) -> str:
    if len(b.shape) == 2 and a.shape[-1] == b.shape[-1] and "S" not in b.axes:
        return (
            f"{nb} is stored (out, in) as torch does: use {na} @ {nb}.T "
            f"(a weight for x @ W is (in, out))"
        )
    if len(b.shape) >= 2 and a.shape[-1] == b.shape[-1]:
        wanted = (*a.axes[:-2], a.axes[-1], "N" if "N" in b.axes else "S")  # K^T: (…, d, S)
        if (
            len(b.axes) == len(wanted)
            and b.axes[:-2] != a.axes[:-2]
            and sorted(b.axes) == sorted(wanted)
        ):  # transposed, but over other axes
            return (
                f"{nb} is ({', '.join(b.axes)}), but K^T must be ({', '.join(wanted)}): "
                "transpose only K's last two axes, K.transpose(-2, -1) (numpy: "
                "np.swapaxes(K, -1, -2)), not the heads with S"
            )
        return (
            f"K is not transposed: multiply by {nb}.transpose(-2, -1) "
            f"(numpy: np.swapaxes({nb}, -1, -2)); "
            f"scores are {na} (…, S, d) @ K^T (…, d, S)"
        )
    return ""


def _heads_first_fix(a: Operand, b: Operand, na: str, nb: str) -> str:
    for o, name in ((a, na), (b, nb)):
        if "h" in o.axes and len(o.axes) >= 3 and o.axes.index("h") == len(o.axes) - 2:
            return (
                f"heads first: {name} is (…, S, h, d); transpose(-3, -2) it to (…, h, S, d) "
                "before the matmul"
            )
    return ""


def _sdpa(q: Operand, k: Operand, v: Operand) -> Explanation:
    nq, nk, nv = _name(q, "q"), _name(k, "k"), _name(v, "v")
    if q.shape[-1] != k.shape[-1]:
        rule = (
            f"scaled_dot_product_attention contracts the last axis of {nq} ({_ax(q, -1)}) "
            f"with the last axis of {nk} ({_ax(k, -1)}); {q.shape[-1]} ≠ {k.shape[-1]}"
        )
        return Explanation(
            rule, "q and k must both be (…, h, S, d) with one d: split their heads the same way"
        )
    if len(k.shape) >= 2 and len(v.shape) >= 2 and k.shape[-2] != v.shape[-2]:
        rule = (
            f"scaled_dot_product_attention needs as many keys as values: {nk} has "
            f"{_ax(k, -2)}, {nv} has {_ax(v, -2)}"
        )
        return Explanation(rule)
    rule = (
        f"scaled_dot_product_attention broadcasts the leading axes: {nq} {q.shape[:-2]}, "
        f"{nk} {k.shape[:-2]}, {nv} {v.shape[:-2]}"
    )
    return Explanation(rule, _heads_first_fix(q, k, nq, nk))


def _linear(x: Operand, w: Operand) -> Explanation:
    nx = _name(x, "the input")
    need = w.shape[-1]
    rule = (
        f"linear maps the last axis of {nx} ({_ax(x, -1)}) with a weight of shape {w.shape} "
        f"(out, in): in_features is {need}, the input has {x.shape[-1]}"
    )
    fix = ""
    if (
        len(x.shape) >= 3
        and x.shape[-3] * x.shape[-1] == need
        and x.axes[-3:-2] in (("h",), ("g",))
    ):
        fix = (
            "heads not merged back: transpose (…, h, S, d) to (…, S, h, d), "
            "then reshape to (…, S, h·d)"
        )
    elif len(x.shape) >= 2 and x.shape[-2] * x.shape[-1] == need:
        fix = f"heads not merged back: reshape {nx} to (…, {need}) (h·d = H) first"
    return Explanation(rule, fix)


def _reshape(x: Operand, message: str) -> Explanation:
    nx = _name(x, "the input")
    size = math.prod(x.shape)
    if "stride" in message or "contiguous" in message or "view size is not compatible" in message:
        return Explanation(
            f"view needs {nx} {x.shape} contiguous in memory; after a transpose it is not",
            "call .contiguous() before .view(…), or use .reshape(…)",
        )
    target = _target(message)
    if target is None:
        return Explanation(f"reshape keeps the number of elements: {nx} {x.shape} has {size}")
    known = [n for n in target if n > 0]
    rule = (
        f"reshape keeps the number of elements: {nx} {x.shape} has {size}, the new shape "
        f"{tuple(target)} has {math.prod(known)}{'×?' if len(known) < len(target) else ''}"
    )
    return Explanation(rule, _reshape_fix(x, target))


def _reshape_fix(x: Operand, target: list[int]) -> str:
    hidden = x.shape[-1]
    if 1 < len(target) < len(x.shape):
        keep = len(target) - 1
        merged = (*x.shape[:keep], math.prod(x.shape[keep:]))
        return f"merging the heads back keeps every element: reshape to {merged}"
    for n in target:
        if n == hidden and len(target) > len(x.shape):
            return (
                f"H used where d was meant: the head axis of the split is H // h "
                f"(a size {hidden} axis is the whole hidden size)"
            )
    if len(target) >= 2 and math.prod(target[-2:]) != hidden and hidden % target[-2] == 0:
        parts = f"(…, {target[-2]}, {hidden // target[-2]})"
        return f"the last two sizes must multiply to H={hidden}: use (…, h, H // h) = {parts}"
    return ""


def _target(message: str) -> list[int] | None:
    m = re.search(r"shape '?\[([-\d, ]+)\]'?", message) or re.search(
        r"into shape \(([-\d, ]+)\)", message
    )
    if m is None:
        return None
    return [int(n) for n in m.group(1).replace(" ", "").split(",") if n]


def _broadcast(func: str, ops: tuple[Operand, ...]) -> Explanation:
    a, b = ops[0], ops[1]
    na, nb = _name(a, "the left operand"), _name(b, "the right operand")
    for k in range(1, min(len(a.shape), len(b.shape)) + 1):
        if a.shape[-k] != b.shape[-k] and 1 not in (a.shape[-k], b.shape[-k]):
            rule = (
                f"{func} broadcasts from the right: axis -{k} of {na} ({_ax(a, -k)}) meets "
                f"{_ax(b, -k)} of {nb}; sizes must be equal or 1"
            )
            fix = ""
            if sorted(a.shape) == sorted(b.shape):
                fix = f"the axes are in a different order: transpose {nb} to {a.shape} first"
            elif len(b.shape) < len(a.shape) or b.shape[-1] != a.shape[-1]:
                fix = f"{nb} must line up with the last axes of {na} {a.shape}; add size-1 axes"
            return Explanation(rule, fix)
    return Explanation(f"{func} cannot broadcast {_list(ops)}")


def _axis(failure: Failure) -> Explanation:
    ops = failure.operands
    rank = len(ops[0].shape) if ops else 0
    return Explanation(
        f"{failure.func} names an axis that {_name(ops[0], 'the tensor') if ops else 'it'} "
        f"of rank {rank} does not have (valid: -{rank} … {rank - 1})"
    )


def _einsum(failure: Failure) -> Explanation:
    eq = str(failure.params.get("equation", ""))
    ops = failure.operands
    if "->" not in eq:
        return Explanation(f"einsum cannot combine {_list(ops)}")
    subs = eq.replace(" ", "").split("->")[0].split(",")
    seen: dict[str, tuple[int, str]] = {}
    for o, sub in zip(ops, subs, strict=False):
        for k, letter in enumerate(sub):
            if k >= len(o.shape):
                return Explanation(
                    f"einsum gives {_name(o, 'an operand')} {len(sub)} subscripts '{sub}' "
                    f"but it has {len(o.shape)} axes {o.shape}"
                )
            if letter in seen and seen[letter][0] != o.shape[k]:
                first = seen[letter]
                rule = (
                    f"einsum subscript '{letter}' is {first[1]} in one operand but "
                    f"{_ax(o, k)} in {_name(o, 'another')}; a shared subscript needs one size"
                )
                return Explanation(rule, "check the subscripts' order against each operand's axes")
            seen.setdefault(letter, (o.shape[k], _ax(o, k)))
    return Explanation(f"einsum '{eq}' cannot combine {_list(ops)}")


def mixing_note(location: str, source: str, mixing: Mixing) -> str:
    """The warning of a reshape that mixes axes: where, what, and the transpose it lacks.

    >>> from attntrace.capturing.axes import Mixing
    >>> mixing_note("a.py:3", "x.reshape(2, 4, 5, 16)",
    ...             Mixing(("S", "h", "d"), (5, 4, 16), (4, 5, 16), ("h", "S", "d")))
    'a.py:3: x.reshape(2, 4, 5, 16) reshapes (S, h, d) (5, 4, 16) to (4, 5, 16), mixing the \
axes: reshape to (5, 4, 16), then transpose to (h, S, d)'
    """
    names = ", ".join(mixing.axes)
    what = (
        f"{location}: {source} reshapes ({names}) {_shape(mixing.sizes)} to "
        f"{_shape(mixing.after)}, mixing the axes"
    )
    if mixing.needed is None:
        return f"{what}: its sizes do not line up with them; check the sizes it is given"
    order = ", ".join(mixing.needed)
    if len(mixing.after) > len(mixing.axes) - 1:  # a split: split first, then move the axes
        return f"{what}: reshape to {_shape(mixing.sizes)}, then transpose to ({order})"
    return f"{what}: transpose to ({order}) first, then reshape"


def contradicted_notes(
    given: Mapping[str, int], events: Sequence[Event], found: Sequence[tuple[str, ...]]
) -> list[str]:
    """A warning for each size given to ``--axes`` that the code contradicts: the first op
    whose axis of that letter has another size (propagation names axes by what the ops do,
    so the code's size is the one shown).

    >>> from attntrace.capturing.source import Site
    >>> site = Site("a.py:4", "x.view(3, 8, 96)")
    >>> split = Event(index=0, name="view_1", kind="reshape", func="view", shape=(3, 8, 96),
    ...               dtype="float32", inputs=(None,), input_shapes=(), site=site)
    >>> contradicted_notes({"h": 12, "d": 96}, [split], [("S", "h", "d")])
    ['--axes h=12, but h is 8 at a.py:4: x.view(3, 8, 96) makes (3, 8, 96) (S, h, d); the \
axes are named by what the code does']
    """
    notes = []
    for letter, size in given.items():
        hit = next(
            (
                (e, axes)
                for e, axes in zip(events, found, strict=True)
                for a, n in zip(axes, e.shape, strict=True)
                if a == letter and n != size
            ),
            None,
        )
        if hit is not None:
            e, axes = hit
            actual = e.shape[axes.index(letter)]
            notes.append(
                f"--axes {letter}={size}, but {letter} is {actual} at "
                f"{e.site.location}: {e.site.source} makes {_shape(e.shape)} "
                f"({', '.join(axes)}); the axes are named by what the code does"
            )
    return notes


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
