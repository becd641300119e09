"""The diagnosis at the first divergence: each bug of :mod:`attntrace.diffing.bugs` that could
have happened by then is applied to the reference, and the bug whose mistaken numbers the user's
code holds is named, at the line of the user's first tensor that shows it."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attntrace.diffing.align import DIFFERS, MATCH, ROW_SHIFTED, Row, UserSteps
from attntrace.diffing.bugs import Bug, Setting, catalogue
from attntrace.engine.attention import trace_attention
from attntrace.engine.masks import MaskWarning
from attntrace.trace import Step, Trace

if TYPE_CHECKING:
    import numpy as np

    from attntrace.diffing.match import Agreement
    from attntrace.diffing.user_side import UserStep


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
    explained_abs: float = (
        math.nan
    )  # the user's tensor against the mistaken reference (≈ 0 when explained)
    layout: str = ""  # the layout the code holds the mistaken numbers in ("permute(1, 0, 2)")


def diagnose(
    setting: Setting, rows: Sequence[Row], user: UserSteps, tensors: Mapping[str, Any]
) -> tuple[Diagnosis | None, Trace | None]:
    """The diagnosis of the first row that differs (None when every row is fine), and the
    reference with the bug applied (None when no bug explains it)."""
    differ = [r for r in rows if r.status == DIFFERS]
    if not differ:
        return None, None
    first = next((r for r in differ if r.user is not None), differ[0])  # the first the code shows
    returned = next((r for r in differ if r.user is not None and r.user.name == "returned"), None)
    opaque = returned is not None and not any(
        r.status == MATCH for r in rows[1:] if r is not returned
    )  # nothing between x and the output is seen right: only the output can be judged
    if opaque:
        assert returned is not None
        first = returned
    order = {r.step.name: i for i, r in enumerate(rows)}
    used = {r.user.index for r in rows if r.status == MATCH and r.user is not None}
    copies = _copies(user, used)  # k_embed.to(dtype) is the k_rot matched: no new evidence
    status = {r.step.name: r.status for r in rows}
    closest: tuple[float, Bug] | None = None
    partial: tuple[Diagnosis, Trace] | None = None  # the first to reproduce the divergence only
    at = len(rows) if opaque else order[first.step.name]
    possible = [b for b in catalogue(setting) if order.get(b.at, math.inf) <= at]  # not after it
    possible.sort(key=lambda b: at - order[b.at])  # the bugs that start at the divergence first
    for bug in possible:
        if bug.needs_match and status.get(bug.needs_match) != MATCH:
            continue
        mistaken = _run(bug, setting, tensors)
        # no tensor of the code holds the right scaled scores: the scale is missing or wrong
        # where the scores are made (``q @ k.T`` with no ``* scaling``), not where they are used
        blamed = bug
        if bug.at == "scaled" and status.get("scaled") != MATCH:
            blamed = replace(bug, blame_first=True)
        found = _test(
            blamed, setting, mistaken, user, used, (order, order[first.step.name]), copies
        )
        if found is None:
            gap = _gap(first, mistaken, user)
            if gap < (closest[0] if closest else math.inf):
                closest = (gap, bug)
        elif _reproduces_output(mistaken, user):
            return found, mistaken  # the whole run explained: the one bug there is
        elif partial is None and not opaque:  # with only the output seen, it must reproduce it
            partial = (found, mistaken)
        del mistaken  # one replayed trace alive at a time (each holds every step's values)
    ends = {user.steps[0].shape, user.steps[-1].shape}
    inner = sum(s.shape not in ends for s in user.steps[1:-1])  # per-head tensors and the like
    return partial or (_unexplained(first, closest, hidden=opaque, seen=inner), None)


def counterparts(rows: Sequence[Row], mistaken: Trace, user: UserSteps) -> tuple[Row, ...]:
    """``rows`` with each row that differs showing the user's tensor that holds the mistaken
    reference's numbers for that step (the tensor that plays the step, bug and all)."""
    from attntrace.diffing.match import agree

    out = []
    for row in rows:
        m = mistaken[row.step.name] if row.status == DIFFERS and row.step.name in mistaken else None
        hit = _find(user, m, set()) if m is not None and m.value is not None else None
        if hit is None or row.step.value is None:
            out.append(row)
            continue
        numbers = agree(hit[0].value, row.step.value, row.step.axes, user.tol)
        out.append(Row(row.step, DIFFERS, hit[0], numbers))
    return tuple(out)


def _reproduces_output(mistaken: Trace, user: UserSteps) -> bool:
    """Whether the mistaken reference's output is what the user's code returned."""
    from attntrace.diffing.match import agree

    out, returned = mistaken["output"], user.steps[-1]
    found = agree(returned.value, out.value, out.axes, user.tol) if out.value is not None else None
    return found is not None and found.ok


def _gap(row: Row, mistaken: Trace, user: UserSteps) -> float:
    """How far the user's tensor at the divergence is from the mistaken reference's there."""
    from attntrace.diffing.match import agree

    step = mistaken[row.step.name] if row.step.name in mistaken else None  # noqa: SIM401 (a Trace)
    if row.user is None or step is None or step.value is None:
        return math.inf
    found = agree(row.user.value, step.value, step.axes, user.tol)
    return found.max_abs if found is not None else math.inf


def _test(
    bug: Bug,
    s: Setting,
    mistaken: Trace,
    user: UserSteps,
    used: set[int],
    where: tuple[Mapping[str, int], int],
    copies: Set[int] = frozenset(),
) -> Diagnosis | None:
    """A Diagnosis when a user tensor that matches no reference step holds the numbers of the
    ``mistaken`` reference at or after the divergence (a copy of a matched tensor, one of
    ``copies``, is no such proof). The line blamed is that of the first user tensor holding
    any of its changed numbers."""
    order, divergence = where
    changed = [
        m
        for m in mistaken.steps
        if m.value is not None
        and not (m.name in s.ref and _same(m.value, s.ref[m.name].value, user))
    ]
    late = (m for m in changed if order.get(m.name, -1) >= divergence)
    proof = next((hit for m in late if (hit := _find(user, m, used | copies)) is not None), None)
    if proof is None:  # the usual case, tried first: no blame is looked for
        return None
    shift = s.config.alibi  # ALiBi's bias steps, up to a constant per query row
    hits = {m.name: (_find(user, m, set(), shift), _find(user, m, used, shift)) for m in changed}
    firsts = [(m.name, hit[0]) for m in changed if (hit := hits[m.name][0]) is not None]
    fresh = [(m.name, hit[0]) for m in changed if (hit := hits[m.name][1]) is not None]
    step, who = (firsts if bug.blame_first else fresh)[0]
    # a step the mistake adds (the mask of an unasked-for causal) is set against the
    # reference's step at the place of the mistake
    max_abs, max_rel = _numbers(who, s.ref[step] if step in s.ref else s.ref[bug.at], user)
    return Diagnosis(
        step=step,
        bug=bug.key,
        name=bug.name,
        fix=bug.fix,
        location=who.location,
        source=who.source,
        max_abs=max_abs,
        max_rel=max_rel,
        explained_abs=proof[1].max_abs,
        layout=_layout(who, mistaken[step], user) if step in mistaken else "",
    )


def _layout(who: UserStep, step: Step, user: UserSteps) -> str:
    """The layout in which the code's tensor ``who`` holds the mistaken ``step``."""
    from attntrace.diffing.match import agree

    if step.value is None:
        return ""
    found = agree(who.value, step.value, step.axes, user.tol)
    return found.layout if found is not None and found.ok else ""


def _find(
    user: UserSteps, m: Step, skip: set[int], shift: bool = False
) -> tuple[UserStep, Agreement] | None:
    """The user's tensor holding step ``m``'s values (leaving out ``skip``, and the tensors
    that play another step: a replayed k is the user's k, never the user's v that happens to
    hold the same numbers, as torch's ``mha(x, x.roll(1, 1), x)`` has); ``shift``: an ALiBi
    bias step may hold them up to a constant per query row (:data:`ROW_SHIFTED`)."""
    assert m.value is not None
    skip = set(skip) | _other_roles(user, m.name)
    hit = user.find(m.value, m.axes, skip=skip)
    if hit is None and shift and m.name in ROW_SHIFTED:
        return user.find_shifted(m.value, m.axes, skip=skip)
    return hit


def _copies(user: UserSteps, used: set[int]) -> set[int]:
    """The user's tensors that hold the very values of a tensor already matched to a step
    (``k_embed.to(original_dtype)`` beside ``k_embed``): a bug's replay found in one proves
    nothing the match did not (ESM's q_rot replayed from k is the k_rot it copies)."""
    from attntrace.diffing.match import same

    matched = [(u, p) for u, p in zip(user.steps, user.prints, strict=True) if u.index in used]
    return {
        u.index
        for u, p in zip(user.steps, user.prints, strict=True)
        if u.index not in used
        and u.name != "returned"  # what the code returns is the evidence (no o_proj: merged)
        and any(
            p == q and m.shape == u.shape and same(u.value, m.value, user.tol) for m, q in matched
        )
    }


def _other_roles(user: UserSteps, name: str) -> set[int]:
    """The indices of the user's tensors in a role other than ``name``, when one of them plays
    ``name`` itself (else none: the code's roles do not say where the step is). A projection's
    role is where it is cut from (``q, v, k = c_attn(x).split(H, 2)``: the second part is
    ``k_proj``), which is what a swap changes: those roles do not rule a tensor out."""
    if name.endswith("_proj") or not any(u.role == name for u in user.steps):
        return set()
    return {u.index for u in user.steps if u.role and u.role != name}


def _run(bug: Bug, s: Setting, tensors: Mapping[str, Any]) -> Trace:
    config = replace(s.config, **bug.config)
    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):  # a mistake may well make NaN
        warnings.simplefilter("ignore", MaskWarning)
        return trace_attention(
            config, "numpy", tensors={**tensors, **bug.tensors}, replace=bug.replace
        )


def _same(a: np.ndarray, b: np.ndarray | None, user: UserSteps) -> bool:
    """Whether the mistaken step ``a`` equals the reference's ``b`` (same layout, same values)."""
    from attntrace.diffing.match import same

    return b is not None and a.shape == b.shape and same(a, b, user.tol)


def _numbers(who: UserStep, ref: Any, user: UserSteps) -> tuple[float, float]:
    from attntrace.diffing.match import agree

    found = agree(who.value, ref.value, ref.axes, user.tol)
    return (found.max_abs, found.max_rel) if found is not None else (math.inf, math.inf)


def _unexplained(
    row: Row, closest: tuple[float, Bug] | None, hidden: bool = False, seen: int = 0
) -> Diagnosis:
    """No known bug reproduces the divergence at ``row``; ``hidden``: no step before it matches
    (``seen``: how many ops of the code were recorded; none: a C++ op or a fused kernel
    attntrace does not open made it from x; SDPA and flex_attention are opened), so the report
    says only that."""
    who = row.user
    abs_, rel = (
        (row.agreement.max_abs, row.agreement.max_rel) if row.agreement else (math.nan, math.nan)
    )
    near = (
        f" (a guess, not a finding: the nearest known bug, {closest[1].name}, "
        f"is still off by {closest[0]:.3g})"
        if closest and math.isfinite(closest[0])
        else ""
    )
    missing = (
        "" if who is not None else f"; the user's code has no tensor in the role of {row.step.name}"
    )
    if hidden and who is not None and seen > 0:
        return Diagnosis(
            step=row.step.name,
            bug=None,
            name="the output differs and no tensor the code makes holds a step of the "
            f"reference ({seen} recorded inside); no known bug reproduces it{near}",
            fix="check the sizes and choices diff used (heads, causal, scale, RoPE) against "
            "the model, then compare the steps one by one (attntrace trace)",
            location=who.location,
            source=who.source,
            max_abs=abs_,
            max_rel=rel,
        )
    if hidden and who is not None:
        return Diagnosis(
            step=row.step.name,
            bug=None,
            name="the output differs, and only the output is visible: the steps inside are not "
            "visible (an opaque op made it from x: a C++ extension or a GPU kernel such as "
            "flash_attn's; scaled_dot_product_attention and flex_attention calls are opened), "
            f"so where it goes wrong cannot be told; no known bug reproduces it{near}",
            fix="run attntrace trace on it to see its ops, or compute the attention step by "
            "step (math path) to compare each step",
            location=who.location,
            source=who.source,
            max_abs=abs_,
            max_rel=rel,
        )
    return Diagnosis(
        step=row.step.name,
        bug=None,
        name=f"no known bug reproduces it{near}{missing}",
        fix=f"compare {row.step.name} with the reference: {row.step.op}",
        location=who.location if who else "",
        source=who.source if who else "",
        max_abs=abs_,
        max_rel=rel,
    )
