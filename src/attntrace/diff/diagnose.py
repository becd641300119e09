"""The diagnosis at the first divergence: each bug of :mod:`attntrace.diff.bugs` that could
have happened by then is applied to the reference, and the bug whose mistaken numbers the user's
code holds is named, at the line of the user's first tensor that shows it."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attntrace.attention import trace_attention
from attntrace.diff.align import DIFFERS, MATCH, Row, UserSteps
from attntrace.diff.bugs import Bug, Setting, catalogue
from attntrace.masks import MaskWarning
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

    from attntrace.diff.user import UserStep


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong at the first divergence (``bug`` None: no known bug explains it)."""

    step: str  # the first reference step the user's code gets wrong
    bug: str | None  # Bug.key, e.g. "softmax-axis-2"
    name: str  # what the user did, or "no known bug reproduces it"
    fix: str
    location: str  # the user's line: file:line
    source: str  # the expression on it
    max_abs: float  # the user's tensor against the reference at the step
    max_rel: float
    explained_abs: float = math.nan  # the user's tensor against the mistaken reference (≈ 0 when explained)


def diagnose(setting: Setting, rows: Sequence[Row], user: UserSteps,
             tensors: Mapping[str, Any]) -> Diagnosis | None:
    """The diagnosis of the first row that differs, or None when every row is fine."""
    first = next((r for r in rows if r.status == DIFFERS), None)
    if first is None:
        return None
    order = {r.step.name: i for i, r in enumerate(rows)}
    used = {r.user.index for r in rows if r.status == MATCH and r.user is not None}
    status = {r.step.name: r.status for r in rows}
    closest: tuple[float, Bug] | None = None
    for bug in catalogue(setting):
        if order.get(bug.at, math.inf) > order[first.step.name]:
            continue  # happens after the divergence: cannot explain it
        if bug.needs_match and status.get(bug.needs_match) != MATCH:
            continue
        found = _test(bug, setting, tensors, user, used, (order, order[first.step.name]))
        if isinstance(found, Diagnosis):
            return found
        if found < (closest[0] if closest else math.inf):
            closest = (found, bug)
    return _unexplained(first, closest)


def _test(bug: Bug, s: Setting, tensors: Mapping[str, Any], user: UserSteps, used: set[int],
          where: tuple[Mapping[str, int], int]) -> Diagnosis | float:
    """Apply ``bug`` to the reference; a Diagnosis when a user tensor that matches no reference
    step holds its numbers at or after the divergence, else how close it came (max abs). The
    line blamed is that of the first user tensor holding any of its numbers."""
    order, divergence = where
    mistaken = _run(bug, s, tensors)
    changed = [m for m in mistaken.steps if m.value is not None and not _same(m.value, s.ref[m.name].value, user)]
    blame: tuple[str, UserStep] | None = None
    for m in changed:
        hit = user.find(m.value, m.axes)  # type: ignore[arg-type]
        if hit is None:
            continue
        blame = blame or (m.name, hit[0])
        if order.get(m.name, -1) < divergence:
            continue
        fresh = hit if hit[0].index not in used else user.find(m.value, m.axes, skip=used)  # type: ignore[arg-type]
        if fresh is not None:
            step, who = blame
            return Diagnosis(step, bug.key, bug.name, bug.fix, who.location, who.source,
                             *_numbers(who, s.ref[step], user), explained_abs=fresh[1].max_abs)
    return _distance(changed, user)


def _run(bug: Bug, s: Setting, tensors: Mapping[str, Any]) -> Trace:
    config = s.config if bug.scale is None else replace(s.config, scale=bug.scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)
        return trace_attention(config, "numpy", tensors={**tensors, **bug.tensors}, replace=bug.replace)


def _same(a: np.ndarray, b: np.ndarray | None, user: UserSteps) -> bool:
    from attntrace.diff.match import agree

    if b is None or a.shape != b.shape:
        return False
    found = agree(a, b, (), user.tol)
    return found is not None and found.ok


def _numbers(who: UserStep, ref: Any, user: UserSteps) -> tuple[float, float]:
    from attntrace.diff.match import agree

    found = agree(who.value, ref.value, ref.axes, user.tol)
    return (found.max_abs, found.max_rel) if found is not None else (math.inf, math.inf)


def _distance(changed: Sequence[Any], user: UserSteps) -> float:
    """How close the user's tensors come to the first changed step (for "closest" in a report)."""
    from attntrace.diff.match import agree

    if not changed:
        return math.inf
    m = changed[0]
    gaps = [a.max_abs for u in user.steps if (a := agree(u.value, m.value, m.axes, user.tol)) is not None]
    return min(gaps, default=math.inf)


def _unexplained(row: Row, closest: tuple[float, Bug] | None) -> Diagnosis:
    who = row.user
    abs_, rel = (row.agreement.max_abs, row.agreement.max_rel) if row.agreement else (math.nan, math.nan)
    near = f"; the closest known bug, {closest[1].name}, is off by {closest[0]:.3g}" if closest else ""
    missing = "" if who is not None else f"; the user's code has no tensor in the role of {row.step.name}"
    return Diagnosis(row.step.name, None, f"no known bug reproduces it{near}{missing}",
                     f"compare {row.step.name} with the reference: {row.step.op}", who.location if who else "",
                     who.source if who else "", abs_, rel)
