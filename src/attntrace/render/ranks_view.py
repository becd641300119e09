"""``trace --nproc N``: every rank's steps in one table, one row where all ranks agree and one
row per group of ranks where they differ (the ``ranks`` column says which), the collectives
with what they move; ``--format json``: the document ``attntrace.ranks/1``, each rank's steps.
Reads the ranks' captures; computes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from attntrace.render.table import _table
from attntrace.text import inert, plain
from attntrace.units import format_axes, format_bytes, format_shape

if TYPE_CHECKING:
    from attntrace.capturing.record import Capture, CapturedStep

#: The ``schema`` value of the document of ``trace --nproc N --format json``.
RANKS_SCHEMA_ID = "attntrace.ranks/1"


@dataclass(frozen=True)
class RankRow:
    """One row: the ranks it stands for ("all", or "0,2") and their step (None: the ranks
    recorded no step at this index)."""

    ranks: str
    step: CapturedStep | None
    moves: str


def moves(step: CapturedStep | None, collective: Mapping[str, Any] | None, peer: bool) -> str:
    """What a collective step moves: ``×2 ↑1.8 KiB ↓1.8 KiB`` (the ranks of its group, bytes
    sent and received; ``peer``: the rank it sends to or receives from, shown where the row is
    one rank's; DTensor's placements).

    >>> moves(None, {"kind": "send_recv", "ranks": 2, "peer": 1, "bytes_sent": 64,
    ...              "bytes_received": 0, "placements": None}, True)
    '×2 →1 ↑64 B'
    """
    if not collective:
        return ""
    parts = [f"×{collective['ranks']}"]
    if peer and collective.get("peer") is not None:
        arrow = "→" if collective.get("bytes_sent") else "←"
        parts.append(f"{arrow}{collective['peer']}")
    if collective.get("bytes_sent"):
        parts.append(f"↑{format_bytes(int(collective['bytes_sent']))}")
    if collective.get("bytes_received"):
        parts.append(f"↓{format_bytes(int(collective['bytes_received']))}")
    if collective.get("placements"):
        parts.append(str(collective["placements"]))
    return " ".join(parts)


def rank_rows(
    steps: Sequence[Sequence[CapturedStep]],
    collectives: Sequence[Sequence[Mapping[str, Any] | None]],
) -> list[RankRow]:
    """The rows of the table: step ``i`` of every rank, one row when all ranks show it alike
    (name, op, shapes, axes, role, line, what it moves but the peer), else one per group of
    ranks that do. ``collectives[r][i]``: rank r's step i's collective record, or None.

    >>> rank_rows([[], []], [[], []])
    []
    """
    out: list[RankRow] = []
    for i in range(max((len(s) for s in steps), default=0)):
        groups: dict[tuple[Any, ...], list[int]] = {}
        for r, mine in enumerate(steps):
            s = mine[i] if i < len(mine) else None
            c = collectives[r][i] if s is not None else None
            groups.setdefault(_key(s, c), []).append(r)
        if len(groups) == 1:
            r = next(iter(groups.values()))[0]
            s = steps[r][i] if i < len(steps[r]) else None
            out.append(RankRow("all", s, moves(s, collectives[r][i] if s else None, False)))
            continue
        for ranks in groups.values():
            r = ranks[0]
            s = steps[r][i] if i < len(steps[r]) else None
            c = collectives[r][i] if s is not None else None
            out.append(RankRow(",".join(map(str, ranks)), s, moves(s, c, len(ranks) == 1)))
    return out


def _key(s: CapturedStep | None, c: Mapping[str, Any] | None) -> tuple[Any, ...]:
    if s is None:
        return ()
    moved = tuple(sorted((k, str(v)) for k, v in (c or {}).items() if k != "peer"))
    return (s.name, s.op, s.shape, s.axes, s.role, s.location, s.input_shapes, moved)


def render_ranks(
    captures: Sequence[Capture],
    collectives: Sequence[Sequence[Mapping[str, Any] | None]],
    console: Console,
    *,
    title: str = "",
    numbers: Sequence[int] | None = None,
    world: int | None = None,
    note: str = "",
) -> None:
    """The heading, the table of every rank's steps, and each rank's traffic; ``numbers``:
    the ranks shown (``--rank R``) of ``world``; ``note``: a line under the heading (how x was
    handed to the ranks)."""
    from attntrace.render.capture_view import _sizes

    n = world or len(captures)
    shown = list(numbers) if numbers is not None else list(range(len(captures)))
    which = f"{n} ranks" if len(shown) == n else ", ".join(f"rank {r}" for r in shown) + f" of {n}"
    head = Text.assemble(("attntrace trace", "bold"), f"  {plain(title)}  ", (which, "bold"))
    if captures:
        head.append(f"  {_sizes(captures[0])}", style="cyan")
    console.print(head)
    if note:
        console.print(Text(note, style="dim"))
    console.print()
    rows = rank_rows([c.steps for c in captures], collectives)
    if not rows:
        console.print(Text("no tensor operations recorded", style="dim"))
        return
    console.print(ranks_table(rows, console.width))
    console.print(traffic_line(collectives, shown))
    for r, c in zip(shown, captures, strict=True):
        for said in (*c.notes, *getattr(c, "remarks", ())):
            console.print(Text(f"note: rank {r}: {plain(said)}", style="dim"))


def ranks_table(rows: Sequence[RankRow], width: int = 120) -> Table:
    """One row per :class:`RankRow`: #, ranks, step, role, line, operands → shape, axes (the
    axes a rank holds a part of, ``h/2``, ``S/4``, stand out), moves."""
    files = {r.step.location.rpartition(":")[0] for r in rows if r.step and ":" in r.step.location}
    one_file = len(files) == 1
    table = _table("steps of " + (inert(next(iter(files))) if one_file else "your code"))
    columns = [("#", "dim", "right"), ("ranks", "yellow", "left"), ("step", "bold", "left")]
    columns += [("role", "green", "left"), ("line", "dim", "right" if one_file else "left")]
    inputs = width >= 130  # operand shapes too when there is room
    columns += [("operands → shape" if inputs else "shape", "cyan", "right")]
    columns += [("axes", "magenta", "left"), ("moves", "blue", "left")]
    for name, style, justify in columns:
        table.add_column(
            name,
            style=style,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=name != "moves",
            overflow="fold" if name == "moves" else "ellipsis",
        )
    for row in rows:
        s = row.step
        if s is None:
            table.add_row("", row.ranks, Text("(no step)", style="dim"), "", "", "", "", "")
            continue
        where = s.location.rpartition(":")[2] if one_file and ":" in s.location else s.location
        shapes = " ".join(format_shape(i) for i in s.input_shapes)
        shape = (
            f"{shapes} → {format_shape(s.shape)}" if shapes and inputs else format_shape(s.shape)
        )
        table.add_row(
            str(s.index),
            row.ranks,
            inert(s.name),
            s.role,
            inert(where),
            shape,
            _axes(s.axes),
            row.moves,
        )
    return table


def _axes(axes: Sequence[str]) -> Text:
    """The axes, those a rank holds a part of (``h/2``, ``h/2·d``) in bold."""
    out = Text()
    for k, a in enumerate(axes):
        out.append((" " if k else "") + a, style="bold underline" if "/" in a else "")
    return out if axes else Text(format_axes(tuple(axes)))


def traffic_line(
    collectives: Sequence[Sequence[Mapping[str, Any] | None]], numbers: Sequence[int] = ()
) -> Text:
    """Each rank's collectives and bytes sent and received, one line (``numbers``: the ranks
    shown, default 0 to N-1).

    >>> print(traffic_line([[{"bytes_sent": 10, "bytes_received": 10}], [None]]))
    collectives: rank 0: 1, ↑10 B ↓10 B; rank 1: none
    """
    parts = []
    for r, mine in zip(numbers or range(len(collectives)), collectives, strict=True):
        got = [c for c in mine if c]
        if not got:
            parts.append(f"rank {r}: none")
            continue
        sent = sum(int(c.get("bytes_sent") or 0) for c in got)
        received = sum(int(c.get("bytes_received") or 0) for c in got)
        parts.append(f"rank {r}: {len(got)}, ↑{format_bytes(sent)} ↓{format_bytes(received)}")
    return Text("collectives: " + "; ".join(parts), style="blue")


def ranks_document(
    captures: Sequence[Capture],
    collectives: Sequence[Sequence[Mapping[str, Any] | None]],
    failures: Sequence[dict[str, Any] | None],
    failed: Mapping[str, Any] | None,
    *,
    world: int,
    numbers: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The document ``attntrace.ranks/1``: each rank's capture document (``capture/1``'s keys
    but ``schema``), its steps each with ``collective`` (null, or kind, ranks, peer, bytes,
    placements), and ``failure`` (null, or the rank that failed first and the one line);
    ``numbers``: the ranks shown (``--rank R``), of ``world``."""
    ranks = []
    for k, c in enumerate(captures):
        doc = c.document(None)
        doc.pop("schema")
        doc["failure"] = failures[k]
        for step, moved in zip(doc["steps"], collectives[k], strict=True):
            step["collective"] = dict(moved) if moved else None
        ranks.append({"rank": numbers[k] if numbers else k, **doc})
    return {"schema": RANKS_SCHEMA_ID, "world": world, "ranks": ranks, "failure": failed}
