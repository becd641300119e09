"""Two configurations side by side (``attntrace compare``): steps aligned by name, the changes
highlighted, the figures beside each other; the CLI builds B from A and --vs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.tools.side_by_side import side_by_side

runner = CliRunner()


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["compare", *args], env={"COLUMNS": "140", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def test_twelve_heads_against_eight_keep_flops_and_parameters_and_change_d() -> None:
    a = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "shape")
    b = trace_attention(AttentionConfig(seq=3, hidden=768, heads=8), "shape")
    pair = side_by_side(a, b)
    totals = {t.name: t for t in pair.totals}
    assert totals["parameters"].a == totals["parameters"].b == 4 * (768 * 768 + 768)
    assert totals["score bytes held at once"].ratio == pytest.approx(8 / 12)
    # the projections and the matmuls cost the same: only the softmax's h·S·S differs
    assert abs(totals["FLOPs"].a - totals["FLOPs"].b) < 0.001 * totals["FLOPs"].a
    settings = {name: (x, y) for name, x, y in pair.settings}
    assert settings["heads"] == ("12", "8")
    assert settings["head_dim"] == ("64", "96")
    changed = {p.name for p in pair.steps if p.changed}
    assert {"q_heads", "scores", "scaled", "context"} <= changed
    assert not {"x", "q_proj", "merged", "output"} & changed
    assert [p.name for p in pair.steps] == list(a.names)


def test_steps_of_one_configuration_only_fall_where_they_are() -> None:
    a = trace_attention(AttentionConfig(seq=4, hidden=16, heads=4), "shape")
    b = trace_attention(
        AttentionConfig(seq=4, hidden=16, heads=4, kv_heads=2, causal=True), "shape"
    )
    pair = side_by_side(a, b)
    names = [p.name for p in pair.steps]
    assert names == list(b.names)  # every step of a is in b here, in b's order
    only_b = [p.name for p in pair.steps if p.a is None]
    assert only_b == ["k_rep", "v_rep", "mask", "masked"]
    assert all(p.b is not None for p in pair.steps)


def test_the_cli_makes_b_from_a_and_vs_and_writes_json() -> None:
    code, out, err = run_cli("--hidden", "768", "--heads", "12", "--vs", "--heads 8", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "attntrace.compare/1"
    assert (doc["a"]["heads"], doc["b"]["heads"]) == (12, 8)
    assert doc["a"]["hidden"] == doc["b"]["hidden"] == 768
    scores = next(s for s in doc["steps"] if s["name"] == "scores")
    assert (scores["a"]["shape"], scores["b"]["shape"]) == ([12, 3, 3], [8, 3, 3])
    assert doc["totals"]["parameters"]["ratio"] == 1.0


def test_the_table_names_what_changes() -> None:
    code, out, err = run_cli("--seq", "8", "--hidden", "64", "--heads", "4", "--vs", "--causal")
    assert code == 0, err
    assert "│ causal  │ false │ true │" in out
    assert "where(mask, scaled, -inf)" in out
    assert "softmax(scaled, dim=-1) → softmax(masked, dim=-1)" in out
    assert "B grouped" not in out
    assert "B multi-head causal self-attention" in out


@pytest.mark.parametrize(
    ("vs", "message"),
    [
        ("--format json", "--vs changes the configuration only; give --format outside it"),
        ("--heads", "requires an argument"),
        ("--heads 7", "--hidden 768 is not divisible by --heads 7"),
        ("", "--vs needs the options that make B"),
        ("'--heads", "quote it as one argument"),
    ],
)
def test_a_bad_vs_is_one_line_and_exit_2(vs: str, message: str) -> None:
    code, out, err = run_cli(f"--vs={vs}")
    assert code == 2
    assert out == ""
    assert message in err
    assert err.strip().count("\n") == 0
