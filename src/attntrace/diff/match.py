"""Numbers that agree up to a layout: a tensor of the user's code against a reference step.

The user may keep a tensor in another layout than the reference (heads last instead of first,
(S, h, d) not yet merged to (S, H)): a tensor matches a step when some permutation of its axes
(or, with a different number of axes, a reshape) gives the step's values within the verify
tolerance. Axes with the same letter keep their order (the two S of the scores): ``scoresᵀ``
is a bug, not a layout. Masked scores agree when both are -inf or very negative (-1e9, the
dtype's minimum) at the same places, and NaN agrees with NaN.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attntrace.verify import Tolerance, compare

if TYPE_CHECKING:
    import numpy as np

#: Scores at or below this count as masked (users write -1e9, -1e4 or finfo.min for -inf).
MASKED_BELOW = -1e4


@dataclass(frozen=True)
class Fingerprint:
    """Sums that no permutation or reshape changes: a cheap test before the element-wise one."""

    numel: int
    masked: int  # elements that are NaN or at most MASKED_BELOW
    total: float  # sum of the other elements
    size: float  # sum of their absolute values
    peak: float  # their largest absolute value

    def may_match(self, ref: Fingerprint, tol: Tolerance) -> bool:
        """False when the sums alone prove that no layout of this tensor can match ``ref``."""
        if (self.numel, self.masked) != (ref.numel, ref.masked):
            return False
        slack = ref.numel * tol.atol * max(1.0, ref.peak) + tol.rtol * ref.size
        return abs(self.total - ref.total) <= slack * 1.01 + 1e-12


def fingerprint(a: np.ndarray) -> Fingerprint:
    """The :class:`Fingerprint` of ``a``.

    >>> import numpy as np
    >>> fingerprint(np.array([[1.0, -np.inf], [2.0, -3.0]]))
    Fingerprint(numel=4, masked=1, total=0.0, size=6.0, peak=3.0)
    """
    import numpy as np

    if a.dtype == np.bool_:  # a mask may be stored either way round (True = keep or = masked)
        return Fingerprint(int(a.size), 0, 0.0, 0.0, 0.0)
    with np.errstate(invalid="ignore"):
        plain = np.isfinite(a) & (a > MASKED_BELOW)
    kept = a[plain].astype(np.float64, copy=False)
    size = float(np.abs(kept).sum())
    return Fingerprint(
        int(a.size),
        int(a.size - kept.size),
        float(kept.sum()),
        size,
        float(np.abs(kept).max(initial=0.0)),
    )


@dataclass(frozen=True)
class Agreement:
    """How a user's tensor compares with a reference step, in its best layout."""

    layout: str  # "" (same layout), "permute(0, 2, 1, 3)" or "reshape"
    max_abs: float
    max_rel: float
    ok: bool


def agree(
    user: np.ndarray, ref: np.ndarray, axes: tuple[str, ...], tol: Tolerance, *, exact: bool = False
) -> Agreement | None:
    """``user`` against ``ref`` (axis letters ``axes``) in the first layout that matches, else
    the numbers of the closest layout; None when no layout has ``ref``'s shape. ``exact``: the
    same layout only.

    >>> import numpy as np
    >>> ref = np.arange(6.0).reshape(2, 3)
    >>> agree(ref.T.copy(), ref, ("S", "H"), Tolerance(1e-4, 1e-5))
    Agreement(layout='permute(1, 0)', max_abs=0.0, max_rel=0.0, ok=True)
    >>> agree(ref.T.copy(), ref.reshape(3, 2), ("S", "S"), Tolerance(1e-4, 1e-5)).ok
    False
    """
    best: Agreement | None = None
    for layout, view in layouts(user, ref.shape, axes):
        if exact and layout.lstrip("~"):
            continue
        found = _compare(view, ref, tol, layout)
        if found.ok:
            return found
        if best is None or found.max_abs < best.max_abs:
            best = found
    return best


def layouts(
    user: np.ndarray, shape: tuple[int, ...], axes: tuple[str, ...]
) -> Iterator[tuple[str, np.ndarray]]:
    """The views of ``user`` that have ``shape``: itself, permutations that keep the order of
    axes sharing a letter, or a reshape when the number of axes differs (and, for a boolean
    mask, the same of its negation, written ``~``)."""
    if user.dtype.kind == "b":  # a boolean mask may mean True = masked: judge what it does
        yield from ((f"~{layout}", view) for layout, view in _layouts(~user, shape, axes))
    yield from _layouts(user, shape, axes)


def _layouts(
    user: np.ndarray, shape: tuple[int, ...], axes: tuple[str, ...]
) -> Iterator[tuple[str, np.ndarray]]:
    if tuple(user.shape) == tuple(shape):
        yield "", user
    if user.ndim != len(shape):
        if user.size == math.prod(shape):
            yield "reshape", user.reshape(shape)
        return
    for order in itertools.permutations(range(user.ndim)):
        if list(order) == sorted(order) or tuple(user.shape[i] for i in order) != tuple(shape):
            continue
        if _keeps_letters(order, axes):
            yield f"permute{order}", user.transpose(order)


def _keeps_letters(order: tuple[int, ...], axes: tuple[str, ...]) -> bool:
    """Axes i < j of the same letter come from user axes in the same order."""
    return all(
        order[i] < order[j]
        for i, j in itertools.combinations(range(len(order)), 2)
        if i < len(axes) and j < len(axes) and axes[i] == axes[j]
    )


def same(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> bool:
    """``a`` equals ``b`` within ``tol``, element by element in the same layout."""
    return _compare(a, b, tol, "").ok


def _compare(user: np.ndarray, ref: np.ndarray, tol: Tolerance, layout: str) -> Agreement:
    import numpy as np

    a, b = user.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        both = (np.isnan(a) & np.isnan(b)) | ((a <= MASKED_BELOW) & (b <= MASKED_BELOW))
    a[both] = b[both] = 0.0
    c = compare("", "", "", a, b, tol)
    return Agreement(layout, c.max_abs, c.max_rel, c.ok)
