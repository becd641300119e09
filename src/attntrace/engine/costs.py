"""What each step costs, derived from the backend operations that produced it.

A :class:`CostMeter` stands in front of a backend: every operation the algorithm calls is
charged by a rule keyed by the operation's name, so a step added later costs its FLOPs without
new code. FLOPs count one multiply and one add as 2 (1 MAC = 2 FLOPs):

=====================  ====================================  =========================
operation              FLOPs                                 e.g.
=====================  ====================================  =========================
linear(x, W, b)        2·numel(out)·in_features + numel(out)  ``2·S·H·H + S·H``
matmul(a, b)           2·numel(out)·K (K contracted)          ``2·h·S·S·d`` (scores)
scale, exp, binary     1 per output element                   ``h·S·S``
softmax                5 per element (max, -, exp, sum, /)    ``5·h·S·S``
reduce_max/sum         1 per input element                    ``h·Br·Bc``
views, copies, fills   0 (repeat_interleave, rotate_half, rotate_pairs are copies)
any other operation    1 per output element
=====================  ====================================  =========================

The formula is kept as terms ``(coefficient, "h·S·S·d")`` in the step's axis letters.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from attntrace.units import Terms

if TYPE_CHECKING:
    from attntrace.backends.base import Backend
    from attntrace.trace import Step

T = TypeVar("T")
Shape = tuple[int, ...]

#: FLOPs per element of a softmax over the last axis: max, subtract, exp, sum, divide.
SOFTMAX_FLOPS_PER_ELEMENT = 5

#: Backend attributes that are not operations (never charged).
_NOT_OPS = frozenset(
    {
        "tensor",
        "shape",
        "dtype",
        "to_numpy",
        "check_dtype",
        "name",
        "dtypes",
        "computes",
        "one_thread_each",
    }
)
#: Operations that move or allocate memory without arithmetic.
_FREE_OPS = frozenset(
    {
        "reshape",
        "transpose",
        "narrow",
        "full",
        "write",
        "contiguous",
        "repeat_interleave",
        "rotate_half",
        "rotate_part",
        "rotate_pairs",
    }
)  # copies, and a sign flip counted as a copy
#: Elementwise operations and their FLOPs per output element.
_PER_ELEMENT = {
    "scale": 1,
    "exp": 1,
    "log": 1,
    "binary": 1,
    "rms_norm": 4,
    "softmax": SOFTMAX_FLOPS_PER_ELEMENT,
    "softmax_": SOFTMAX_FLOPS_PER_ELEMENT,
}


@dataclass(frozen=True)
class Charge:
    """One operation's cost, before its letters are known: ``coef`` per element of ``shape``,
    times the size of one contracted axis (``k`` elements, the last axis of tensor ``k_of``)."""

    coef: int
    shape: Shape
    k: int = 1
    k_of: object = None  # the input whose last axis is contracted, or None


class CostMeter(Generic[T]):
    """A backend proxy: operations run on ``backend`` and their charges wait in ``pending``
    until the recorder turns them into the next step's FLOPs. Each thread has its own pending
    charges (flash runs query blocks on several threads)."""

    def __init__(self, backend: Backend[T]) -> None:
        self.backend = backend
        self._local = threading.local()
        self._ops: dict[str, Callable[..., Any]] = {}

    @property
    def pending(self) -> list[Charge]:
        """This thread's charges since the last :meth:`take`."""
        local = self._local
        if not hasattr(local, "pending"):
            local.pending, local.inputs = [], []
        out: list[Charge] = local.pending
        return out

    @property
    def inputs(self) -> list[object]:
        """The tensors this thread's pending operations read."""
        self.pending  # noqa: B018  (creates this thread's lists)
        out: list[object] = self._local.inputs
        return out

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.backend, name)
        if name in _NOT_OPS or name.startswith("_") or not callable(attr):
            return attr
        if name not in self._ops:
            self._ops[name] = self._metered(name, attr)
        return self._ops[name]

    def _metered(self, name: str, op: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            out = op(*args, **kwargs)
            if out is None:  # an in-place write: it feeds no step
                return out
            self.inputs.extend(a for a in args if _is_tensor(a))
            charge = self._charge(name, args, out)
            if charge is not None:
                self.pending.append(charge)
            return out

        return run

    def _charge(self, name: str, args: Sequence[Any], out: Any) -> Charge | None:
        """The rule for operation ``name`` (see the module docstring)."""
        if name in _FREE_OPS or out is None:
            return None
        shape = self.backend.shape(out)
        if name == "linear":
            k = self.backend.shape(args[1])[-1]
            bias = len(args) > 2 and args[2] is not None
            self.pending.append(Charge(2, shape, k, args[0]))
            return Charge(1, shape) if bias else None
        if name == "matmul":
            return Charge(2, shape, self.backend.shape(args[0])[-1], args[0])
        if name.startswith("reduce"):
            return Charge(1, shape, self.backend.shape(args[0])[-1], args[0])
        return Charge(_PER_ELEMENT.get(name, 1), shape)

    def charge(self, name: str, *args: Any, out: Any) -> None:
        """Charge operation ``name`` as if it ran on ``args`` giving ``out`` (for a step whose
        maths was folded into another, e.g. the scale folded into q)."""
        self.inputs.extend(a for a in args if _is_tensor(a))
        charge = self._charge(name, args, out)
        if charge is not None:
            self.pending.append(charge)

    def discard(self) -> None:
        """Forget the pending charges (not the inputs): their maths is charged elsewhere."""
        self.pending.clear()

    def take(self) -> tuple[list[Charge], list[object]]:
        """The charges and inputs since the last call, clearing them."""
        charges, inputs = self.pending, self.inputs
        self._local.pending, self._local.inputs = [], []
        return charges, inputs


def _is_tensor(value: object) -> bool:
    return hasattr(value, "shape") and not isinstance(value, (tuple, list))


class Registry:
    """Which recorded step (name, axes) each live tensor object is, for naming the inputs of the
    next step and the letter of a contracted axis. Entries are weak where the type allows."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Callable[[], object], str, tuple[str, ...]]] = {}

    def add(self, value: object, name: str, axes: tuple[str, ...]) -> None:
        try:
            ref: Callable[[], object] = weakref.ref(value)
        except TypeError:  # plain objects such as shape tensors: a strong reference is harmless
            ref = _Strong(value)
        self._entries[id(value)] = (ref, name, axes)

    def lookup(self, value: object) -> tuple[str, tuple[str, ...]] | None:
        entry = self._entries.get(id(value))
        if entry is None or entry[0]() is not value:
            return None
        return entry[1], entry[2]


@dataclass(frozen=True)
class _Strong:
    value: object

    def __call__(self) -> object:
        return self.value


def resolve(
    charges: Iterable[Charge],
    shape: Shape,
    axes: tuple[str, ...],
    registry: Registry,
    contract: str | None = None,
) -> tuple[int, Terms]:
    """FLOPs and formula terms of ``charges`` for a step of ``shape`` with ``axes``.

    Letters come from the step's axes when a charge has the step's shape (else the sizes are
    written out); a contracted axis takes the last letter of its recorded input, else ``contract``.
    """
    flops, terms = 0, []
    for c in charges:
        flops += c.coef * math.prod(c.shape) * c.k
        letters = list(axes) if c.shape == shape else [str(n) for n in c.shape]
        if c.k_of is not None:
            found = registry.lookup(c.k_of)
            letter = found[1][-1] if found and found[1] else contract
            letters.append(letter or str(c.k))
        ordered = sorted(letters, key=_letter_rank)
        # a sum of axes (--past: N+S) is one factor: written (N+S)
        terms.append((c.coef, "·".join(f"({a})" if "+" in a or "-" in a else a for a in ordered)))
    return flops, _merge_terms(terms)


#: The order of axis letters in a formula (sizes written out go last).
AXIS_ORDER: tuple[str, ...] = ("B", "h", "g", "S", "N", "Br", "Bc", "H", "d")


def _letter_rank(letter: str) -> int:
    if "+" in letter:  # --past: the keys N+S (or W-1+S) rank as N
        letter = "N"
    return AXIS_ORDER.index(letter) if letter in AXIS_ORDER else len(AXIS_ORDER)


def _merge_terms(terms: list[tuple[int, str]]) -> Terms:
    merged: dict[str, int] = {}
    for coef, letters in terms:
        merged[letters] = merged.get(letters, 0) + coef
    return tuple((coef, letters) for letters, coef in merged.items())


def peak_live_bytes(steps: Sequence[Step]) -> int:
    """The most bytes alive at once when every non-view step is a new buffer, freed after the
    last step that reads it (or a view of it); the last step stays alive.

    >>> from attntrace.trace import Step
    >>> a = Step("a", (4,), "float32")
    >>> b = Step("b", (4,), "float32", index=1, inputs=("a",))
    >>> c = Step("c", (2,), "float32", index=2, inputs=("b",))
    >>> peak_live_bytes([a, b, c])
    32
    """
    owner: dict[str, str] = {}
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        owner[step.name] = (
            owner.get(step.inputs[0], step.inputs[0]) if step.view and step.inputs else step.name
        )
        for name in step.inputs:
            if name in owner:
                last[owner[name]] = i
        last.setdefault(owner[step.name], i)
    last[owner[steps[-1].name]] = len(steps)
    born = {step.name: i for i, step in enumerate(steps) if owner[step.name] == step.name}
    # a view of nothing (flash's mask, made tile by tile) holds no memory
    size = {step.name: 0 if step.view else step.nbytes for step in steps if step.name in born}
    return (
        max(sum(size[n] for n, b in born.items() if b <= i <= last[n]) for i in range(len(steps)))
        if steps
        else 0
    )
