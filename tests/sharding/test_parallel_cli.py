"""``run --tp/--sp/--cp/--cp-kind/--rank`` on the command line: the rank's steps and figures,
JSON valid against the schema attntrace.trace/3, and one line + exit 2 for sizes that do not
divide, before anything is traced."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.schemas import trace_schema_3

runner = CliRunner()
#: Llama 3.1 405B's attention (config.json of meta-llama/Llama-3.1-405B): no preset yet.
LLAMA_405B = ("--hidden", "16384", "--heads", "128", "--kv-heads", "8", "--head-dim", "128")
LLAMA_405B += ("--no-bias", "--rope", "--rope-base", "500000", "--dtype", "bfloat16")


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "120"})
    return result.exit_code, result.stdout, result.stderr


def test_llama_405b_at_a_million_tokens_on_128_ranks() -> None:
    code, out, err = invoke(
        "run",
        *LLAMA_405B,
        "--batch",
        "1",
        "--seq",
        "1048576",
        "--causal",
        "--tp",
        "8",
        "--cp",
        "16",
        "--backend",
        "shape",
    )
    assert (code, err) == (0, "")
    assert "rank 0 of 128 per layer" in out
    assert "(1, 16, 65536, 128)" in out  # q: h/T = 128/8 heads, S/C = 2^20/16 tokens
    assert "(B, h/T, S/C, d)" in out
    assert "(1, 1, 65536, 128)" in out  # k: g = 8 = T, one kv-head a rank
    assert "scores_late" in out
    assert "(B, h/T, S/2C, S/C)" in out
    assert "o_all_reduce  all_reduce  tp×8" in out


def test_json_carries_the_rank_view_and_validates() -> None:
    code, out, err = invoke(
        "run",
        "--hidden",
        "64",
        "--heads",
        "8",
        "--kv-heads",
        "2",
        "--seq",
        "16",
        "--batch",
        "2",
        "--causal",
        "--rope",
        "--tp",
        "4",
        "--sp",
        "--cp",
        "2",
        "--cp-kind",
        "allgather",
        "--format",
        "json",
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    jsonschema.validate(doc, trace_schema_3())
    assert doc["schema"] == "attntrace.trace/3"
    assert doc["config"]["parallel"] == {
        "tp": 4,
        "sp": True,
        "cp": 2,
        "cp_kind": "allgather",
        "rank": 0,
    }
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["x"]["shape"] == [2, 2, 64]
    assert steps["x"]["axes"] == ["B", "S/CT", "H"]
    kinds = {c["step"]: c["kind"] for c in doc["parallel"]["collectives"]}
    assert kinds == {
        "x_all_gather": "all_gather",
        "k_all_gather": "all_gather",
        "v_all_gather": "all_gather",
        "o_reduce_scatter": "reduce_scatter",
    }
    assert doc["parallel"]["max_error"] < 1e-5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--heads", "12", "--hidden", "768", "--tp", "8"),
            "--tp values that work: 1, 2, 3, 4, 6, 12",
        ),
        (
            ("--heads", "4", "--hidden", "64", "--seq", "100", "--causal", "--cp", "16"),
            "--seq values that work: 96, 128",
        ),
        (("--heads", "4", "--hidden", "64", "--cp-kind", "ulysses"), "--cp-kind needs --cp C"),
        (
            ("--heads", "4", "--hidden", "64", "--seq", "4", "--tp", "2", "--backward"),
            "--backward is not traced across devices yet",
        ),
        (
            ("--heads", "4", "--hidden", "64", "--seq", "4", "--tp", "2", "--rank", "2"),
            "--rank 2 does not exist; use 0 to 1",
        ),
    ],
)
def test_bad_layouts_fail_in_one_line(args: tuple[str, ...], message: str) -> None:
    code, _, err = invoke("run", *args, "--backend", "shape")
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_sweep_over_t_and_c_shows_rank_zero_of_each_layout() -> None:
    code, out, err = invoke(
        "sweep",
        "--hidden",
        "64",
        "--heads",
        "8",
        "--seq",
        "16,32",
        "--causal",
        "--tp",
        "1,2,3",
        "--cp",
        "1,2",
        "--format",
        "json",
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    layouts = [(p["seq"], p["tp"], p["cp"]) for p in doc["points"]]
    assert layouts == [(s, t, c) for s in (16, 32) for t in (1, 2) for c in (1, 2)]
    one = {(p["seq"], p["tp"], p["cp"]): p for p in doc["points"]}
    assert one[16, 2, 1]["weight_bytes"] * 2 == one[16, 1, 1]["weight_bytes"] + 4 * 64  # b_o
    assert one[16, 1, 2]["comm_bytes"] == 2 * 2 * (8 * 8 * 8 * 4)  # k, v: sent + received
    assert len(doc["skipped"]) == 4  # T = 3 divides no 8 heads
    assert "--tp values that work: 1, 2, 4, 8" in doc["skipped"][0]


def test_sweep_whose_layouts_all_fail_says_why() -> None:
    code, _, err = invoke("sweep", "--hidden", "64", "--heads", "8", "--seq", "16", "--tp", "3")
    assert code == 2
    assert "no layout of the sweep divides the sizes" in err


def test_head_must_be_one_the_rank_holds() -> None:
    code, _, err = invoke(
        "run", "--hidden", "64", "--heads", "8", "--seq", "8", "--tp", "2", "--head", "5"
    )
    assert code == 2
    assert "--head 5 is not on this rank, which holds 4 heads; use 0 to 3" in err


def test_compare_one_device_with_rank_zero_of_t_8() -> None:
    code, out, err = invoke(
        "compare",
        "--hidden",
        "64",
        "--heads",
        "8",
        "--seq",
        "16",
        "--batch",
        "1",
        "--vs",
        "--tp 8",
        "--format",
        "json",
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert [s["name"] for s in doc["settings"]] == ["parallel"]
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["q"]["a"]["shape"] == [1, 8, 16, 8]
    assert steps["q"]["b"]["shape"] == [1, 1, 16, 8]  # h/T = 8/8 heads on rank 0
    assert steps["q"]["b"]["axes"] == ["B", "h/T", "S", "d"]
    assert steps["o_all_reduce"]["a"] is None
    assert steps["o_all_reduce"]["b"]["shape"] == [1, 16, 64]


def test_check_expects_a_ranks_shapes_in_its_letters(tmp_path: Path) -> None:
    sizes = ("--heads", "8", "--hidden", "64", "--seq", "16", "--causal", "--tp", "4", "--cp", "2")
    code, out, _ = invoke(
        "check", *sizes, "--expect", "q=h/T,S/C,d", "--expect", "scores_late=h/T,S/2C,S/C"
    )
    assert code == 0
    assert "2 passed, 0 failed" in out
    code, out, _ = invoke("check", *sizes, "--expect", "q=h,S,d")
    assert code == 1
    assert "(2, 8, 8) (h/T, S/C, d)" in out
    code, doc, _ = invoke("run", *sizes, "--backend", "shape", "--format", "json")
    (tmp_path / "rank.json").write_text(doc)
    code, out, _ = invoke("check", *sizes, "--golden", str(tmp_path / "rank.json"))
    assert code == 0, out
    code, out, _ = invoke(
        "check", *sizes[:-2], "--cp", "4", "--golden", str(tmp_path / "rank.json")
    )
    assert code == 1


def test_flow_picture_draws_the_collectives_of_the_rank(tmp_path: Path) -> None:
    svg = tmp_path / "flow.svg"
    code, _, err = invoke(
        "run",
        "--hidden",
        "64",
        "--heads",
        "8",
        "--seq",
        "16",
        "--causal",
        "--tp",
        "2",
        "--cp",
        "2",
        "--backend",
        "shape",
        "--plot-flow",
        str(svg),
    )
    assert (code, err) == (0, "")
    text = svg.read_text()
    assert "(rank 0 of 4)" in text
    for name in ("k_ring_recv", "v_ring_recv", "o_all_reduce"):
        box = text[text.index(f'data-name="{name}"') :].split("</g>")[0]
        assert 'fill="#fff1e0"' in box
    q = text[text.index('data-name="q_proj"') :].split("</g>")[0]
    assert 'fill="#fff1e0"' not in q


def test_simulating_too_many_bytes_is_refused_before_any_rank_runs() -> None:
    code, _, err = invoke(
        "run", "--hidden", "64", "--heads", "8", "--seq", "16", "--tp", "2", "--max-memory", "10KB"
    )
    assert code != 0
    assert "every rank's steps; scores (8, 16, 16) alone is 8.00 KiB" in err
    assert "or use --backend shape" in err
