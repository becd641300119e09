"""``trace --nproc N``'s table and document from ranks' captures made here: one row where the
ranks agree, a row per group of ranks where they differ, the document valid against
``attntrace.ranks/1``; and the options refused before anything runs."""

from __future__ import annotations

import io
from typing import Any

import jsonschema
import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import attntrace
from attntrace.cli import app
from attntrace.render.ranks_view import rank_rows, ranks_document, render_ranks
from attntrace.schemas import ranks_schema
from paths import REPO

runner = CliRunner()
REDUCE = {
    "kind": "all_reduce",
    "ranks": 2,
    "peer": None,
    "bytes_sent": 96,
    "bytes_received": 96,
    "placements": None,
}


def _rank(seq: int) -> Any:
    """A rank's capture: x (seq, 8) projected; its last step stands for a collective."""
    with attntrace.capture() as t:
        x = t.track(np.ones((seq, 8)))
        y = x @ np.ones((8, 8))
        _ = y + 1.0
    return t


@pytest.fixture(scope="module")
def ranks() -> list[Any]:
    return [_rank(3), _rank(3), _rank(5)]


def _moved(t: Any) -> list[dict[str, Any] | None]:
    return [None] * (len(t.steps) - 1) + [dict(REDUCE)]


def test_one_row_where_ranks_agree_and_a_row_per_group_where_they_differ(ranks: list[Any]) -> None:
    rows = rank_rows([t.steps for t in ranks], [_moved(t) for t in ranks])
    shown = [(r.ranks, r.step.name, r.step.shape) for r in rows if r.step]
    assert shown == [
        ("0,1", "ones_1", (3, 8)),
        ("2", "ones_1", (5, 8)),
        ("0,1", "x", (3, 8)),
        ("2", "x", (5, 8)),
        ("all", "ones_2", (8, 8)),  # the weight: the same on every rank
        ("0,1", "y", (3, 8)),
        ("2", "y", (5, 8)),
        ("0,1", "add_1", (3, 8)),
        ("2", "add_1", (5, 8)),
    ]
    assert rows[-1].moves == "×2 ↑96 B ↓96 B"  # one rank: its peer too (none for an all_reduce)
    alike = rank_rows([t.steps for t in ranks[:2]], [_moved(t) for t in ranks[:2]])
    assert [r.ranks for r in alike] == ["all"] * 5


def test_a_rank_with_fewer_steps_shows_none_there(ranks: list[Any]) -> None:
    short = ranks[0].steps[:1]
    rows = rank_rows([ranks[0].steps, short], [_moved(ranks[0]), [None]])
    assert [(r.ranks, r.step is None) for r in rows[1:]] == [("0", False), ("1", True)] * 4


def test_the_table_names_the_ranks_and_their_traffic(ranks: list[Any]) -> None:
    out = Console(file=io.StringIO(), width=120, no_color=True)
    render_ranks(ranks[:2], [_moved(t) for t in ranks[:2]], out, title="a.py:Attn")
    text = out.file.getvalue()  # type: ignore[attr-defined]
    head = ["attntrace", "trace", "a.py:Attn", "2", "ranks", "S=3", "H=8"]
    assert text.splitlines()[0].split() == head
    assert "collectives: rank 0: 1, ↑96 B ↓96 B; rank 1: 1, ↑96 B ↓96 B" in text


def test_the_document_is_valid_and_keeps_the_ranks_shown(ranks: list[Any]) -> None:
    doc = ranks_document(
        ranks[1:],
        [_moved(t) for t in ranks[1:]],
        [None, None],
        {"rank": 2, "line": "rank 2 raised ValueError"},
        world=3,
        numbers=[1, 2],
    )
    jsonschema.Draft202012Validator(ranks_schema()).validate(doc)
    assert [r["rank"] for r in doc["ranks"]] == [1, 2]
    assert doc["world"] == 3
    assert doc["ranks"][1]["steps"][-1]["collective"]["bytes_sent"] == 96
    assert doc["ranks"][1]["steps"][0]["collective"] is None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rank", "1"], "--rank shows one rank of --nproc N; add --nproc N"),
        (["--nproc", "1"], "--nproc 1 is not a number of ranks; give 2 to 16"),
        (["--nproc", "2", "--rank", "2"], "--rank 2 is not a rank of --nproc 2; give 0 to 1"),
        (["--nproc", "2", "--past", "4"], "--nproc does not take --past; drop it"),
        (["--nproc", "2", "--format", "csv"], "trace --nproc prints a table or json, not csv"),
    ],
)
def test_nproc_options_are_refused_in_one_line(args: list[str], said: str) -> None:
    target = str(REPO / "tests" / "data" / "distributed" / "tp_megatron.py") + ":Attn"
    result = runner.invoke(app, ["trace", target, *args])
    assert result.exit_code == 2
    assert said in result.output
    assert "Traceback" not in result.output


def test_nproc_needs_a_name_not_a_script() -> None:
    script = str(REPO / "tests" / "data" / "distributed" / "ring_trace.py")
    result = runner.invoke(app, ["trace", script, "--nproc", "2"])
    assert result.exit_code == 2
    assert "--nproc needs FILE.py:NAME" in result.output
