"""``attntrace verify --tp T --cp C [--nproc N]``: the ranks simulated, or run as N processes
on torch.distributed (gloo); bad sizes fail before any process starts, and nothing is left
behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app

pytest.importorskip("torch", reason="verify runs the ranks on torch")

runner = CliRunner()
SMALL = ("--hidden", "32", "--heads", "4", "--kv-heads", "2", "--seq", "16", "--batch", "1")


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["verify", *SMALL, *args], env={"COLUMNS": "100"})
    return result.exit_code, result.stdout, result.stderr


def leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("attntrace-ranks-*")}


@pytest.fixture(autouse=True)
def own_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Temporary folders of this test's own: a run beside it (another xdist worker) makes and
    removes its own, which would read as one left behind here."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_simulated_ranks_match_one_device() -> None:
    code, out, err = invoke("--causal", "--rope", "--tp", "2", "--cp", "2", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    (ref,) = doc["references"]
    assert (ref["name"], ref["right"], ref["ok"]) == ("output", "one device", True)
    assert ref["shape"] == [1, 16, 32]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tp", "2", "--cp", "2", "--nproc", "3"), "use --nproc 4"),
        (("--nproc", "2"), "--nproc starts one process a rank; add --tp T and/or --cp C"),
        (("--tp", "3", "--nproc", "3"), "--tp values that work: 1, 2, 4"),
        (("--tp", "2", "--nproc", "2", "--backward"), "--backward is not verified across"),
    ],
)
def test_bad_sizes_fail_before_any_process_starts(args: tuple[str, ...], message: str) -> None:
    before = leftovers()
    code, _, err = invoke(*args)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert leftovers() == before  # no folder made, so no process started


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout",
    [("--tp", "2", "--nproc", "2"), ("--tp", "2", "--cp", "2", "--sp", "--nproc", "4")],
)
def test_processes_on_gloo_match_the_simulation_and_leave_nothing(layout: tuple[str, ...]) -> None:
    import psutil

    children = set(psutil.Process().children(recursive=True))
    before = leftovers()
    code, out, err = invoke("--causal", "--rope", *layout, "--timeout", "300", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    names = {s["name"] for s in doc["steps"]}
    assert {"q", "o_partial", "output"} <= names
    assert "o_reduce_scatter" in names if "--sp" in layout else "o_all_reduce" in names
    assert all(s["ok"] for s in doc["steps"])
    assert doc["references"][0]["ok"]
    assert leftovers() == before
    assert set(psutil.Process().children(recursive=True)) == children
