"""--page-size on every command that traces: run, report, check and verify carry the paged
cache's steps (block_table, k_pool, v_pool, k_paged, v_paged) and report its figures; one line
and exit 2 for a --page-size without --past, or out of 1 to 65,536."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.engine.paged import PAGED_STEPS
from attntrace.schemas import trace_schema

runner = CliRunner()
# batch 2, h=4 over g=2, d=4, N+S = 7+2 = 9 keys; the second sequence holds 4 of them
RAGGED = (
    *("--batch", "2", "--seq", "2", "--past", "7", "--hidden", "16", "--heads", "4"),
    *("--kv-heads", "2", "--causal", "--rope", "--key-lengths", "9,4", "--page-size", "4"),
)


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "120"})
    return result.exit_code, result.stdout, result.stderr


def test_report_shows_the_paged_steps_and_figures(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    code, _, err = invoke("report", *RAGGED, "--out", str(page))
    assert (code, err) == (0, "")
    html = page.read_text(encoding="utf-8")
    for name in PAGED_STEPS:
        assert f">{name}<" in html
    assert "(4, 4, 2, 4)" in html  # the pool: 3 + 1 blocks of P=4 tokens, g=2, d=4
    assert "paged KV cache of one layer, blocks of P=4 tokens" in html
    assert "waste: 3 empty slots in last blocks" in html  # (12 - 9) + (4 - 4)


def test_check_expects_the_paged_steps() -> None:
    code, out, _ = invoke(
        "check", *RAGGED, "--expect", "k_paged=B,g,N+S,d", "--expect", "block_table=B,3"
    )
    assert code == 0, out
    code, out, _ = invoke("check", *RAGGED, "--expect", "k_pool=4,4,g,d", "--format", "json")
    assert code == 0
    assert json.loads(out)["checks"][0]["status"] == "passed"
    code, out, _ = invoke("check", *RAGGED, "--expect", "k_paged=B,g,N,d")
    assert code == 1
    assert "(2, 2, 9, 4)" in out


def test_a_golden_of_run_with_page_size_is_checked_with_it(tmp_path: Path) -> None:
    code, out, _ = invoke("run", *RAGGED, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    assert [s["name"] for s in doc["steps"]][-5:] == list(PAGED_STEPS)
    golden = tmp_path / "g.json"
    golden.write_text(out, encoding="utf-8")
    assert invoke("check", *RAGGED, "--golden", str(golden))[0] == 0
    unpaged = RAGGED[:-2]  # without --page-size 4
    code, out, _ = invoke("check", *unpaged, "--golden", str(golden))
    assert code == 1
    assert "k_paged" in out


def test_verify_finds_the_gather_equal_to_the_unpaged_cache() -> None:
    pytest.importorskip("torch")
    code, out, err = invoke("verify", *RAGGED, "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["ok"]
    assert {s["name"] for s in doc["steps"]} >= set(PAGED_STEPS)  # numpy against torch
    gathers = [r for r in doc["references"] if r["right"].endswith("(bit-equal)")]
    assert [(r["name"], r["left"]) for r in gathers] == [
        ("k_paged", "numpy"),
        ("v_paged", "numpy"),
        ("k_paged", "torch"),
        ("v_paged", "torch"),
    ]
    assert all(r["ok"] and r["max_abs"] == 0.0 and r["shape"] == [2, 2, 9, 4] for r in gathers)


EXTRA = {"run": (), "report": ("--out", "r.html"), "check": ("--expect", "k_paged=1"), "verify": ()}


@pytest.mark.parametrize("command", list(EXTRA))
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--past", "3", "--page-size", "0"),
            "--page-size must be a whole number from 1 to 65,536",
        ),
        (("--past", "3", "--page-size", "-1"), "got -1"),
        (("--past", "3", "--page-size", "65537"), "got 65537"),
        (("--past", "3", "--page-size", "99999999999999999999"), "got 99999999999999999999"),
        (("--page-size", "4"), "--page-size pages the KV cache of a --past step; add --past N"),
    ],
)
def test_a_bad_page_size_is_one_line(
    command: str,
    args: tuple[str, ...],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(
        command, "--seq", "1", "--hidden", "8", "--heads", "2", *args, *EXTRA[command]
    )
    assert code == 2, out
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("other", [("--spec", "s.toml"), ("--trace", "m.py:Attn")])
def test_check_pages_only_its_own_trace(other: tuple[str, ...]) -> None:
    code, _, err = invoke("check", "--past", "3", "--page-size", "4", *other)
    assert code == 2
    assert f"--page-size pages run's own trace, not {other[0]}'s" in err


def test_the_shape_backend_pages_any_length() -> None:
    args = ("run", "--preset", "llama-3-70b", "--past", "1048575", "--seq", "1", "--backend")
    code, out, _ = invoke(*args, "shape", "--page-size", "16", "--format", "json")
    assert code == 0
    steps = {s["name"]: s for s in json.loads(out)["steps"]}
    assert steps["block_table"]["shape"] == [65536]  # 2^20 tokens in blocks of 16
    assert steps["k_pool"]["shape"] == [65536, 16, 8, 128]
    assert steps["k_paged"]["shape"] == [8, 1048576, 128]
