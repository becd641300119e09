"""Alignment: each reference step gets the user's tensor that holds the same numbers (in some
layout, :mod:`attntrace.diffing.match`), found by value, not by name. A step the user never
materialised is *fused* when a later step that depends on it matches (``q @ k.T / 8`` in one
line), *not seen* when it is only a layout the user skips (the views ``q_heads``, ``k_t`` …,
the RoPE tables, the mask); any other step without a match *differs*.

ALiBi's bias is written by Bloom as ``slope·j`` and by MPT as ``slope·(j − N + 1)``, not
``slope·(j − i)``: the same bias plus a constant per query row, which the softmax ignores. With
--alibi the steps ``position_bias`` and ``biased`` are matched up to such a constant when they
match no other way (each row less its first entry on both sides; the row is ``shifted``), and
the report says so in a note (:data:`SHIFT_NOTE`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attntrace.diffing.match import Agreement, Fingerprint, agree, fingerprint, layouts
from attntrace.diffing.user_side import UserStep
from attntrace.tools.verify import Tolerance
from attntrace.trace import Step, Trace

if TYPE_CHECKING:
    import numpy as np

#: The statuses of a row, in the words the JSON uses.
MATCH, FUSED, NOT_SEEN, DIFFERS = "match", "fused", "not seen", "differs"
#: Steps a user need not make: tables and masks built another way are judged by what they do;
#: the KV cache a decode step is handed (--past) is an input, not made by the code.
OPTIONAL = frozenset({"rope_cos", "rope_sin", "mask", "k_cache", "v_cache"})
#: Steps that --alibi compares up to a constant per query row (softmax ignores one).
ROW_SHIFTED = ("position_bias", "biased")
#: The note of a diff with a shifted row.
SHIFT_NOTE = (
    "ALiBi: the module's bias is a constant per query row away from slope·(j − i) (Bloom's "
    "form slope·j, MPT's slope·(j − N + 1)), equal after softmax: {steps} compared up to that "
    "constant"
)


@dataclass(frozen=True)
class Row:
    """One reference step beside the user's tensor that plays it."""

    step: Step  # the reference step (name, shape, axes, value)
    status: str  # MATCH, FUSED, NOT_SEEN or DIFFERS
    user: UserStep | None = None  # the matching user tensor, or the one compared when it differs
    agreement: Agreement | None = (
        None  # numbers of user against reference, in the user's best layout
    )
    shifted: bool = False  # matched up to a constant per query row (ALiBi, ROW_SHIFTED)

    @property
    def ok(self) -> bool:
        return self.status != DIFFERS


class UserSteps:
    """The user's tensors with their fingerprints, looked up by value."""

    def __init__(self, steps: Sequence[UserStep], tol: Tolerance) -> None:
        self.steps, self.tol = tuple(steps), tol
        self.prints: list[Fingerprint] = [fingerprint(s.value) for s in self.steps]

    def find(
        self, value: np.ndarray, axes: tuple[str, ...], role: str = "", skip: Collection[int] = ()
    ) -> tuple[UserStep, Agreement] | None:
        """The user's tensor holding ``value`` (role ``role`` first, then in program order),
        leaving out the indices ``skip``."""
        ref, shape = fingerprint(value), tuple(value.shape)
        order = sorted(
            range(len(self.steps)),
            key=lambda i: (self.steps[i].role != role or not role, self.steps[i].shape != shape, i),
        )
        fits = [
            i
            for i in order
            if self.steps[i].index not in skip and self.prints[i].may_match(ref, self.tol)
        ]
        for exact in (True, False):  # the same layout anywhere before another layout
            for i in fits:
                found = agree(self.steps[i].value, value, axes, self.tol, exact=exact)
                if found is not None and found.ok:
                    return self.steps[i], found
        return None

    def find_shifted(
        self, value: np.ndarray, axes: tuple[str, ...], skip: Collection[int] = ()
    ) -> tuple[UserStep, Agreement] | None:
        """The user's tensor holding ``value`` up to a constant per row of its last axis (the
        keys'): each row less its first entry, on both sides."""
        ref = _centred(value)
        for step in self.steps:
            if step.index in skip or step.value.size != value.size or step.value.ndim < 2:
                continue
            found = agree(_centred(step.value), ref, axes, self.tol)
            if found is not None and found.ok:
                return step, found
        return None


def _centred(a: np.ndarray) -> np.ndarray:
    """Each row of the last axis less its first entry: a constant per row drops out.

    >>> import numpy as np
    >>> _centred(np.array([[1.0, 2.0], [5.0, 7.0]])).tolist()
    [[0.0, 1.0], [0.0, 2.0]]
    """
    out: np.ndarray = a - a[..., :1]
    return out


def align(ref: Trace, user: UserSteps) -> tuple[Row, ...]:
    """One :class:`Row` per reference step, in the reference's order."""
    found = {  # x is the input diff passed in (listed first), whatever the capture called it
        s.name: user.find(s.value, s.axes, "" if s.name == "x" else s.name)
        for s in ref.steps
        if s.value is not None
    }
    shifted = _shifted(ref, user, found)
    matched = {name for name, hit in found.items() if hit is not None}
    used = {hit[0].index for hit in found.values() if hit is not None}
    later = _descendants(ref)
    rows, last = [], -1
    for step in ref.steps:
        hit = found.get(step.name)
        if step.name == "output" and hit is not None and (wrong := _returned_differs(step, user)):
            rows.append(wrong)  # the output made inside, then changed before it is returned
            continue
        if hit is not None:
            rows.append(Row(step, MATCH, *hit, shifted=step.name in shifted))
            last = max(last, hit[0].index)
            continue
        if later[step.name] & matched or _inside_bias(step, ref):
            rows.append(Row(step, FUSED))
            continue
        row = _unmatched(step, user, used, last)
        if row.user is not None:
            used.add(row.user.index)
            last = max(last, row.user.index)
        rows.append(row)
    return tuple(rows)


def _shifted(
    ref: Trace, user: UserSteps, found: dict[str, tuple[UserStep, Agreement] | None]
) -> set[str]:
    """With --alibi, the bias steps found up to a constant per query row (written into
    ``found``): their names."""
    if not ref.config.alibi:
        return set()
    out = set()
    for name in ROW_SHIFTED:
        step = ref[name] if name in ref else None  # noqa: SIM401 (a Trace)
        if step is None or step.value is None or found.get(name) is not None:
            continue
        hit = user.find_shifted(step.value, step.axes)
        if hit is not None:
            found[name] = hit
            out.add(name)
    return out


def _inside_bias(step: Step, ref: Trace) -> bool:
    """With --alibi, a step before the bias that no tensor of the code holds: fused, as in
    Bloom's ``alibi.baddbmm(q, k_t, alpha=1/√d)`` (scores, scale and bias in one op); the first
    step a mistake there shows at is ``biased`` (the catalogue's scale bugs still apply)."""
    return ref.config.alibi and step.name in ("scores", "scaled", "position_bias")


def _returned_differs(step: Step, user: UserSteps) -> Row | None:
    """The row of the output when the value the code returns (its last step, ``returned``)
    does not hold the reference's output although a step inside does; else None."""
    last = user.steps[-1] if user.steps else None
    if last is None or last.name != "returned" or step.value is None:
        return None
    if (
        last.value.size != step.value.size
        or next(layouts(last.value, step.shape, step.axes), None) is None
    ):
        return None
    found = agree(last.value, step.value, step.axes, user.tol)
    return None if found is None or found.ok else Row(step, DIFFERS, last, found)


def _unmatched(step: Step, user: UserSteps, used: set[int], last: int) -> Row:
    """The user's tensor in the role of ``step``: capture's role, else the next unmatched tensor
    of a fitting shape after the last match; a layout-only step without one is not seen."""
    assert step.value is not None
    fits = [
        u
        for u in user.steps
        if u.index not in used
        and u.value.size == step.value.size
        and next(layouts(u.value, step.shape, step.axes), None) is not None
    ]
    pick = next((u for u in fits if u.role == step.name), None)
    pick = pick or next((u for u in fits if u.name == step.name and u.shape == step.shape), None)
    pick = pick or next((u for u in fits if u.index > last and u.shape == step.shape), None)
    if step.name in OPTIONAL or (pick is None and step.view):
        return Row(step, NOT_SEEN)  # built another way, or a layout the code skips
    if pick is None:
        return Row(step, DIFFERS)
    return Row(step, DIFFERS, pick, agree(pick.value, step.value, step.axes, user.tol))


def _descendants(ref: Trace) -> dict[str, set[str]]:
    """For each step, the steps computed from it (directly or not)."""
    below: dict[str, set[str]] = {s.name: set() for s in ref.steps}
    for step in reversed(ref.steps):
        for name in step.inputs:
            if name in below:
                below[name] |= {step.name} | below[step.name]
    return below


#: Under the header when the code returns its input plus the attention's output.
RESIDUAL_NOTE = (
    "the code returns x + output (its own residual connection): compared up to the output "
    "projection, the residual checked"
)


def residual(rows: Sequence[Row], user: UserSteps, x: np.ndarray) -> tuple[Row, ...] | None:
    """The rows with the output matched inside the code when what it returns is its input
    ``x`` (as given, before any norm of its own) plus the reference's output — a block's
    residual connection, not a bug; None when that is not the case.

    >>> import numpy as np
    >>> from attntrace.tools.verify import Tolerance
    >>> residual((), UserSteps((), Tolerance(1e-5, 1e-4)), np.zeros(3)) is None
    True
    """
    at = next((i for i, r in enumerate(rows) if r.step.name == "output"), None)
    if at is None or rows[at].status != DIFFERS or rows[at].user is None:
        return None
    row, returned = rows[at], rows[at].user
    if returned is None or returned.name != "returned" or row.step.value is None:
        return None
    if returned.value.shape != x.shape or row.step.value.size != x.size:
        return None
    inside = user.find(row.step.value, row.step.axes, "output")
    made = agree(returned.value, x + row.step.value.reshape(x.shape), row.step.axes, user.tol)
    if inside is None or made is None or not made.ok:
        return None
    return (*rows[:at], Row(row.step, MATCH, *inside), *rows[at + 1 :])
