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

from attntrace.tools.verify import Tolerance

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
        return Fingerprint(numel=int(a.size), masked=0, total=0.0, size=0.0, peak=0.0)
    kept, total, size, peak = 0, 0.0, 0.0, 0.0
    for block in blocks(a.shape):  # float64 a block at a time: no copy of the whole tensor
        part = a[block]
        with np.errstate(invalid="ignore"):
            values = part[np.isfinite(part) & (part > MASKED_BELOW)].astype(np.float64)
        kept += int(values.size)
        total += float(values.sum())
        size += float(np.abs(values).sum())
        peak = max(peak, float(np.abs(values).max(initial=0.0)))
    return Fingerprint(
        numel=int(a.size), masked=int(a.size) - kept, total=total, size=size, peak=peak
    )


#: Elements compared at once: the float64 temporaries of a comparison stay a few MiB each.
BLOCK = 2**18


def blocks(shape: tuple[int, ...], limit: int = BLOCK) -> Iterator[tuple[int | slice, ...]]:
    """Indices that cut an array of ``shape`` into blocks of at most ``limit`` elements (one
    block when it is small), leading axes first, so each block is a view.

    >>> [b for b in blocks((2, 3, 4), limit=8)]
    [(0, slice(0, 2, None)), (0, slice(2, 4, None)), (1, slice(0, 2, None)), (1, slice(2, 4, None))]
    >>> list(blocks((2, 3)))
    [()]
    """
    k = next(k for k in range(len(shape) + 1) if math.prod(shape[k:]) <= limit)
    if k == 0:
        yield ()
        return
    step = max(1, limit // math.prod(shape[k:]))
    for lead in itertools.product(*(range(n) for n in shape[: k - 1])):
        for start in range(0, shape[k - 1], step):
            yield (*lead, slice(start, start + step))


@dataclass(frozen=True)
class Agreement:
    """How a user's tensor compares with a reference step, in its best layout."""

    layout: str  # "" (same layout), "permute(0, 2, 1, 3)" or "reshape"
    max_abs: float  # NaN when the user's tensor has NaN where the reference has a number
    max_rel: float
    ok: bool
    nan: int = 0  # elements NaN in the user's tensor where the reference has a number
    inf: int = 0  # elements ±inf (or masked) in the user's tensor where the reference has not


def agree(
    user: np.ndarray, ref: np.ndarray, axes: tuple[str, ...], tol: Tolerance, *, exact: bool = False
) -> Agreement | None:
    """``user`` against ``ref`` (axis letters ``axes``) in the first layout that matches, else
    the numbers of the closest layout; None when no layout has ``ref``'s shape. ``exact``: the
    same layout only.

    >>> import numpy as np
    >>> ref = np.arange(6.0).reshape(2, 3)
    >>> agree(ref.T.copy(), ref, ("S", "H"), Tolerance(1e-4, 1e-5))
    Agreement(layout='permute(1, 0)', max_abs=0.0, max_rel=0.0, ok=True, nan=0, inf=0)
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
        if best is None or _closer(found.max_abs, best.max_abs):
            best = found
    return best


def _closer(a: float, b: float) -> bool:
    """``a`` is nearer than ``b`` (NaN is the farthest of all)."""
    return not math.isnan(a) and (math.isnan(b) or a < b)


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
    """:func:`attntrace.tools.verify.compare` of ``user`` against ``ref`` (same shape), block by
    block in float64, with masked scores (both at most MASKED_BELOW) and NaN on both sides
    counted as equal. Two passes: the scale ``m`` of the tolerance is the whole tensor's."""
    import numpy as np

    parts = [(user[block], ref[block]) for block in blocks(ref.shape)]  # views: no copies
    m = 1.0
    for _, b in (_float64(u, r) for u, r in parts):
        m = max(m, float(np.abs(b[np.isfinite(b)]).max(initial=0.0)))
    max_abs, max_rel, ok, nan, inf = 0.0, 0.0, True, 0, 0
    for a, b in (_float64(u, r) for u, r in parts):
        with np.errstate(invalid="ignore"):
            diff = np.where(a == b, 0.0, np.abs(a - b))  # NaN or inf where they differ so
        size = np.abs(np.where(np.isfinite(b), b, 0.0))
        rel = diff / np.maximum(size, m * tol.atol / tol.rtol)
        max_abs, max_rel = _peak(max_abs, diff), _peak(max_rel, rel)
        ok = ok and bool(np.all(diff <= tol.atol * m + tol.rtol * size))  # False for NaN, inf
        nan += int(np.count_nonzero(np.isnan(a) & ~np.isnan(b)))
        inf += int(np.count_nonzero(np.isinf(a) & np.isfinite(b)))
    return Agreement(layout, max_abs, max_rel, ok, nan, inf)


def _peak(so_far: float, values: np.ndarray) -> float:
    """The largest of ``so_far`` and ``values``, NaN when either holds NaN (never hidden by a
    comparison that NaN fails: a row of NaN reads nan, not 0).

    >>> import numpy as np
    >>> _peak(0.0, np.array([1.0, np.nan])), _peak(2.0, np.array([1.0]))
    (nan, 2.0)
    """
    import numpy as np

    if math.isnan(so_far) or bool(np.isnan(values).any()):
        return math.nan
    return max(so_far, float(values.max(initial=0.0)))


def _float64(user: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A block of both in float64, with what both mask (or both leave NaN) set to 0."""
    import numpy as np

    a, b = user.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        both = (np.isnan(a) & np.isnan(b)) | ((a <= MASKED_BELOW) & (b <= MASKED_BELOW))
    a[both] = b[both] = 0.0
    return a, b
