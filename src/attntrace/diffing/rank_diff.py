"""``attntrace diff --nproc N``: every rank of the user's parallel attention beside the same
rank of the reference's rank view, run from the weights the user's ranks hold, and the
sharding bug named at the first step (and rank) that differs.

1. the ranks' own parameters are joined into the global weights in Megatron's layout
   (:mod:`attntrace.diffing.rank_weights`); a copy that is not one is the first finding;
2. the reference's ranks are simulated on numpy from those weights and the ranks' x
   (:func:`attntrace.diffing.sharding_bugs.replay`), every value kept;
3. each rank's tensors are aligned with its reference rank by value
   (:func:`attntrace.diffing.align.align`), and each rank's output compared;
4. at the first rank whose output differs, each bug of the sharding catalogue is replayed and
   the one whose mistaken numbers the code holds is named, at the line of the first tensor
   that shows it.

MATCH when every rank returns its reference rank's output; DIFFERS otherwise; CANNOT TELL
when the weights cannot be read (:class:`~attntrace.errors.CannotTellError`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attntrace.diffing.align import DIFFERS, Row, UserSteps, align
from attntrace.diffing.rank_weights import Joined, Mismatch, join, join_x
from attntrace.diffing.sharding_bugs import (
    CHOICES,
    COPIES,
    ROUND,
    ShardingBug,
    catalogue,
    replay,
)
from attntrace.diffing.user_side import UserStep
from attntrace.diffing.verdict import CANNOT_TELL
from attntrace.diffing.verdict import DIFFERS as VERDICT_DIFFERS
from attntrace.diffing.verdict import MATCH as VERDICT_MATCH
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

    from attntrace.config.attention_config import AttentionConfig
    from attntrace.diffing.match import Agreement
    from attntrace.diffing.verdict import Read
    from attntrace.sharding.rank import RankRun
    from attntrace.tools.verify import Tolerance


@dataclass(frozen=True)
class RankCapture:
    """What one rank of the user's code gave: its x, its output, its parameters (a DTensor's
    local shard) and every tensor it made (in program order, with values and lines)."""

    rank: int
    x: np.ndarray
    output: np.ndarray
    params: dict[str, np.ndarray]
    steps: tuple[UserStep, ...] = ()


@dataclass(frozen=True)
class Finding:
    """The first difference: the rank, the step, the sharding bug (None: none known reproduces
    it), the user's line and the fix."""

    rank: int
    step: str
    bug: str | None
    name: str
    fix: str
    location: str = ""
    source: str = ""
    max_abs: float = math.nan
    called: str = ""  # the location is in a helper: "in apply_rope, called at ring.py:81"


@dataclass(frozen=True)
class RankDiffReport:
    """Every rank's aligned steps, each rank's output against its reference rank's, and the
    finding at the first difference."""

    config: AttentionConfig
    target: str
    verdict: str  # MATCH, DIFFERS or CANNOT TELL (diffing.verdict's words)
    rows: tuple[tuple[Row, ...], ...] = ()  # index = rank
    outputs: tuple[float, ...] = ()  # max |diff| of each rank's output
    finding: Finding | None = None
    read: tuple[Read, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)  # "w_q" -> "q_proj.weight"
    cannot_tell: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == VERDICT_MATCH

    @property
    def exit_code(self) -> int:
        from attntrace.errors import EXIT_CANNOT_TELL, EXIT_CHECK_FAILED, EXIT_OK

        return {VERDICT_MATCH: EXIT_OK, CANNOT_TELL: EXIT_CANNOT_TELL}.get(
            self.verdict, EXIT_CHECK_FAILED
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "schema": "attntrace.rank-diff/1",
            "target": self.target,
            "verdict": self.verdict,
            "ranks": self.config.parallel.ranks if self.config.parallel else len(self.rows),
            "layout": dataclasses.asdict(self.config.parallel) if self.config.parallel else None,
            "outputs_max_abs": [_num(v) for v in self.outputs],
            "finding": None if self.finding is None else _finding_dict(self.finding),
            "read": [r.to_dict() for r in self.read],
            "weights": self.sources,
            "cannot_tell": self.cannot_tell,
            "steps": [
                [{"step": r.step.name, "status": r.status, "line": _line(r)} for r in rows]
                for rows in self.rows
            ],
        }


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {**dataclasses.asdict(f), "max_abs": _num(f.max_abs)}


def _line(row: Row) -> str:
    return row.user.location if row.user is not None else ""


def diff_ranks(
    config: AttentionConfig,
    captures: Sequence[RankCapture],
    *,
    target: str = "",
    read: tuple[Read, ...] = (),
    explicit: Collection[str] = (),
) -> RankDiffReport:
    """The report of the user's ranks ``captures`` (index = rank) under ``config.parallel``;
    ``explicit``: the options the user typed (a choice no flag stated is CANNOT TELL)."""
    from attntrace.tools.verify import tolerance

    layout = config.parallel
    assert layout is not None
    assert len(captures) == layout.ranks
    joined = join(config, layout, [c.params for c in captures])
    config = dataclasses.replace(config, bias="b_q" in joined.tensors or "b_o" in joined.tensors)
    tensors = {**joined.tensors, "x": join_x(layout, [c.x for c in captures])}
    base = RankDiffReport(config, target, VERDICT_DIFFERS, read=read, sources=joined.sources)
    tol = tolerance(config)
    users = [UserSteps(_with_output(c), tol) for c in captures]
    if joined.mismatch is not None:
        return dataclasses.replace(base, finding=_copy_finding(joined, captures, users))
    runs = replay(config, tensors)
    traces = [_trace(config, run) for run in runs]
    rows = tuple(align(t, u) for t, u in zip(traces, users, strict=True))
    outputs = tuple(_output_gap(run, c, tol) for run, c in zip(runs, captures, strict=True))
    report = dataclasses.replace(base, rows=rows, outputs=outputs)
    pairs = zip(outputs, runs, captures, strict=True)
    if all(gap == 0.0 or _close(run, c, tol) for gap, run, c in pairs):
        return dataclasses.replace(report, verdict=VERDICT_MATCH)
    first = _first(rows, outputs)
    finding = _diagnose(config, tensors, traces, users, first)
    choice = CHOICES.get(finding.bug or "")
    if choice is not None and choice not in explicit:
        does, flag = ("applies no", "--no-causal") if config.causal else ("applies a", "--causal")
        why = (
            f"the code {does} causal mask ({finding.location or 'its output'}), and no flag "
            f"said whether the model is causal: the model's choice or a bug; pass {flag} if "
            "that is the model's choice"
        )
        return dataclasses.replace(report, verdict=CANNOT_TELL, finding=finding, cannot_tell=why)
    return dataclasses.replace(report, finding=finding)


def _with_output(c: RankCapture) -> list[UserStep]:
    """The rank's steps, its output last as ``returned`` (align's convention)."""
    steps = list(c.steps)
    if not steps or steps[-1].name != "returned":
        steps.append(UserStep(index=len(steps), name="returned", value=c.output))
    return steps


def _trace(config: AttentionConfig, run: RankRun[Any]) -> Trace:
    return Trace(config=config, backend="numpy", steps=run.rec.finish(), parameters=())


def _output_gap(run: RankRun[Any], c: RankCapture, tol: Tolerance) -> float:
    """max |diff| of the rank's output against its reference rank's (inf: other shapes)."""
    import numpy as np

    ref = np.asarray(run.output)
    out = np.asarray(c.output, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(out - ref))) if ref.size else 0.0


def _close(run: RankRun[Any], c: RankCapture, tol: Tolerance) -> bool:
    import numpy as np

    from attntrace.diffing.match import agree

    ref = np.asarray(run.output)
    found = agree(c.output, ref, run.rec.finish()[-1].axes, tol, exact=True)
    return found is not None and found.ok


@dataclass(frozen=True)
class _First:
    rank: int
    index: int  # the reference step's place (len(rows): only the output differs)
    row: Row | None


#: The steps a collective makes: what a rank receives, wrong when another rank's work is.
RECEIVED = ("_all_reduce", "_all_gather", "_reduce_scatter", "_all_to_all", "_ring_recv")


def _first(rows: Sequence[Sequence[Row]], outputs: Sequence[float]) -> _First:
    """The rank whose own first differing step (not one a collective received: another rank's
    mistake arrives there) comes earliest, the lowest rank at a tie; with the first of its rows
    that differs at a tensor of the code."""
    best: _First | None = None
    for rank, rank_rows in enumerate(rows):
        differ = [i for i, r in enumerate(rank_rows) if r.status == DIFFERS]
        received = _received(rank_rows)
        own = [i for i in differ if rank_rows[i].step.name not in received]
        at = (own or differ or [len(rank_rows)])[0]
        seen = next((r for r in rank_rows if r.status == DIFFERS and r.user), None)
        if (seen is None and outputs[rank] == 0.0) or (best is not None and at >= best.index):
            continue
        best = _First(rank, at, seen)
    return best or _First(0, len(rows[0]), None)


def _received(rows: Sequence[Row]) -> set[str]:
    """The steps a collective made, and those made from them alone (a view of a received k)."""
    out: set[str] = set()
    for row in rows:
        inputs = row.step.inputs
        if row.step.name.split(ROUND)[0].endswith(RECEIVED) or (
            inputs and all(n in out for n in inputs)
        ):
            out.add(row.step.name)
    return out


def _diagnose(
    config: AttentionConfig,
    tensors: dict[str, np.ndarray],
    traces: Sequence[Trace],
    users: Sequence[UserSteps],
    first: _First,
) -> Finding:
    """The bug whose replay the code's ranks hold (all outputs reproduced first, else the
    first tensor at the divergence), else what is known of the divergence."""
    partial: Finding | None = None
    for bug in catalogue(config):
        runs = replay(config, tensors, bug)
        mistaken = [_trace(dataclasses.replace(config, **bug.config), r) for r in runs]
        found = _test(bug, traces, mistaken, users, first)
        if found is None:
            continue
        if all(_reproduced(m, u) for m, u in zip(mistaken, users, strict=True)):
            return found
        partial = partial or found
    return partial or _unexplained(first, traces)


def _test(
    bug: ShardingBug,
    ref: Sequence[Trace],
    mistaken: Sequence[Trace],
    users: Sequence[UserSteps],
    first: _First,
) -> Finding | None:
    """A Finding when a tensor of the first rank that differs holds numbers the mistake
    changes; the line blamed is that of the first such tensor in the rank's program order."""
    rank = first.rank
    user, good, bad = users[rank], ref[rank], mistaken[rank]
    hits: list[tuple[UserStep, str, Agreement]] = []
    for m in bad.steps:
        if m.value is None or (m.name in good and _same(m.value, good[m.name].value, user.tol)):
            continue
        hits.extend((who, m.name, found) for who, found in _holders(user, m.value, m.axes))
    if not hits:
        return None
    who, step, _ = min(hits, key=lambda h: h[0].index)
    gap = _gap(who, good[step] if step in good else None, user.tol)  # noqa: SIM401 (a Trace)
    return Finding(
        rank, step, bug.key, bug.name, bug.fix, who.location, who.source, gap, who.called
    )


def _holders(
    user: UserSteps, value: np.ndarray, axes: tuple[str, ...], most: int = 8
) -> list[tuple[UserStep, Agreement]]:
    """Every tensor of the user's holding ``value`` (up to ``most``), in any layout: the first
    in program order may be the helper's own (a reshape in ``seq_to_heads``) while the one
    ``find`` prefers is its caller's view in the reference's layout."""
    found: list[tuple[UserStep, Agreement]] = []
    skip: set[int] = set()
    while len(found) < most and (hit := user.find(value, axes, skip=skip)) is not None:
        found.append(hit)
        skip.add(hit[0].index)
    return found


def _same(a: np.ndarray, b: np.ndarray | None, tol: Tolerance) -> bool:
    from attntrace.diffing.match import same

    return b is not None and a.shape == b.shape and same(a, b, tol)


def _gap(who: UserStep, step: Any, tol: Tolerance) -> float:
    from attntrace.diffing.match import agree

    if step is None or step.value is None:
        return math.nan
    found = agree(who.value, step.value, step.axes, tol)
    return found.max_abs if found is not None else math.nan


def _reproduced(mistaken: Trace, user: UserSteps) -> bool:
    from attntrace.diffing.match import agree

    out, returned = mistaken.steps[-1], user.steps[-1]
    if out.value is None:
        return False
    found = agree(returned.value, out.value, out.axes, user.tol)
    return found is not None and found.ok


def _unexplained(first: _First, traces: Sequence[Trace]) -> Finding:
    row = first.row
    if row is None:
        return Finding(
            first.rank,
            "output",
            None,
            f"rank {first.rank}'s output differs and no known sharding bug reproduces it",
            "compare the rank's steps with the reference: attntrace trace FILE:NAME --nproc N",
        )
    assert row.user is not None
    gap = row.agreement.max_abs if row.agreement is not None else math.nan
    return Finding(
        first.rank,
        row.step.name,
        None,
        "no known sharding bug reproduces it",
        f"compare {row.step.name} with the reference's rank {first.rank}: {row.step.op}",
        row.user.location,
        row.user.source,
        gap,
        row.user.called,
    )


def _copy_finding(
    joined: Joined, captures: Sequence[RankCapture], users: Sequence[UserSteps]
) -> Finding:
    """The finding of a parameter that should be a copy and is not: at the rank's first tensor
    made from it (its projection), when the code's steps show one."""
    m = joined.mismatch
    assert m is not None
    key, name, fix = COPIES[m.kind]
    step = f"{m.param[-1]}_proj" if m.param[-1] in "qkv" else "output"
    who = _made_from(captures[m.rank], users[m.rank], joined, m)
    return Finding(
        rank=m.rank,
        step=step,
        bug=key,
        name=name.format(rank=m.rank, like=m.like) + f" ({joined.sources.get(m.param, m.param)}; "
        f"{m.why})",
        fix=fix,
        location=who.location if who else "",
        source=who.source if who else "",
        called=who.called if who else "",
    )


def _made_from(c: RankCapture, user: UserSteps, joined: Joined, m: Mismatch) -> UserStep | None:
    """The rank's tensor made from the mismatched weight: x @ w.T (+ b)."""
    import numpy as np

    name = joined.sources.get(f"w_{m.param[-1]}")
    if name is None or m.param[-1] not in "qkv" or name not in c.params:
        return None  # a fused qkv: its tensor is not looked for
    w = np.asarray(c.params[name], dtype=np.float64)
    bias_name = joined.sources.get(f"b_{m.param[-1]}")
    made = np.asarray(c.x, dtype=np.float64) @ w.T  # (B, S, width)
    if bias_name is not None and bias_name in c.params:
        made = made + np.asarray(c.params[bias_name], dtype=np.float64)
    axes = tuple("BSH"[-made.ndim :])
    hit = user.find(made, axes)
    return hit[0] if hit is not None else None


__all__ = ["Finding", "RankCapture", "RankDiffReport", "diff_ranks"]
