"""attntrace demo prints the study notes' numbers; --scale none|sqrt|FLOAT reaches the scaled
step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, ConfigError, trace_attention
from attntrace.cli import app
from attntrace.config.attention_config import parse_scale
from attntrace.tools.demo import KEY, QUERY, VALUE, overflow_example, worked_example

NOTE_SCORES = [[2, 4, 4], [4, 16, 12], [4, 12, 10]]


def note_soft_max(z: np.ndarray) -> np.ndarray:
    """The note's soft_max, verbatim (fine for these small scores)."""
    t = np.exp(z)
    a: np.ndarray = np.exp(z) / np.expand_dims(np.sum(t, axis=-1), -1)
    return a


def note_output(scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    scores = np.array(QUERY) @ np.array(KEY).T
    weights = note_soft_max(scores * scale)
    return weights, weights @ np.array(VALUE)


def test_unscaled_example_gives_the_notes_numbers() -> None:
    steps = {s.name: s.value for s in worked_example()}
    assert list(steps) == ["Query", "Key", "Value", "scores", "weights", "output"]
    assert steps["scores"].tolist() == NOTE_SCORES
    weights, output = note_output()
    np.testing.assert_allclose(steps["weights"], weights, rtol=1e-12)
    np.testing.assert_allclose(steps["output"], output, rtol=1e-12)
    np.testing.assert_allclose(
        steps["output"][1], [1.99999397, 7.9639916, 0.05397641], rtol=1e-7
    )  # as the note prints


def test_scaled_example_divides_the_scores_by_sqrt_3() -> None:
    steps = {s.name: s.value for s in worked_example(1 / math.sqrt(3))}
    assert list(steps) == ["Query", "Key", "Value", "scores", "scaled", "weights", "output"]
    np.testing.assert_allclose(steps["scaled"], np.array(NOTE_SCORES) / math.sqrt(3), rtol=1e-12)
    weights, output = note_output(1 / math.sqrt(3))
    np.testing.assert_allclose(steps["weights"], weights, rtol=1e-12)
    np.testing.assert_allclose(steps["output"], output, rtol=1e-12)
    assert (
        steps["weights"].max(axis=-1)[1] < worked_example()[4].value.max(axis=-1)[1]
    )  # less peaked


def test_our_softmax_survives_what_overflows_the_notes() -> None:
    note, ours = overflow_example()
    assert np.isnan(note).all()
    assert ours.tolist() == [0.5, 0.5]


def rows(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_demo_command_prints_the_notes_matrices() -> None:
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    lines = rows(result.stdout)
    for row in (
        "2 4 4",
        "4 16 12",
        "4 12 10",  # scores
        "1.9366 6.6831 1.5951",
        "2.0000 7.9640 0.0540",
        "1.9997 7.7599 0.3584",  # output, unscaled
        "1.8639 6.3194 1.7042",  # output, scaled
        "6.03e-06 0.9820 0.0180",
    ):  # weights row 1
        assert row in lines, row
    assert "scaled = scores * 0.5774" in result.stdout
    assert "0.982 → 0.909" in result.stdout
    assert "[nan, nan]" in result.stdout
    assert "variance" in result.stdout


# --- --scale ---------------------------------------------------------------------------------


def test_parse_scale() -> None:
    assert (parse_scale("sqrt"), parse_scale("NONE"), parse_scale("0.25")) == (None, 1.0, 0.25)
    for bad in ("abc", "0", "-1", "inf", "nan"):
        with pytest.raises(ConfigError, match="--scale"):
            parse_scale(bad)


@pytest.mark.parametrize(
    ("scale", "op"),
    [(None, "scores / sqrt(4)"), (1.0, "scores * 1 (unscaled)"), (0.3, "scores * 0.3")],
)
def test_scale_reaches_the_scaled_step(compute_backend: str, scale: float | None, op: str) -> None:
    trace = trace_attention(
        AttentionConfig(seq=3, hidden=8, heads=2, scale=scale, dtype="float64"), compute_backend
    )
    factor = 0.5 if scale is None else scale
    assert trace["scaled"].op == op
    np.testing.assert_allclose(trace["scaled"].value, trace["scores"].value * factor, rtol=1e-12)
    expected = np.exp(trace["scaled"].value)
    np.testing.assert_allclose(
        trace["weights"].value, expected / expected.sum(-1, keepdims=True), rtol=1e-12
    )


@pytest.mark.slow
def test_run_scale_option() -> None:
    def invoke(*args: Any) -> Any:
        return CliRunner().invoke(app, ["run", "--hidden", "8", "--heads", "2", *args])

    assert "scores * 1 (unscaled)" in invoke("--scale", "none").stdout
    assert "scores * 0.125" in invoke("--scale", "0.125").stdout
    assert "scores / sqrt(4)" in invoke().stdout
    bad = invoke("--scale", "big")
    assert bad.exit_code == 2
    assert "--scale must be sqrt, none or a positive number" in bad.stderr


# --- your own numbers, in either language (issue 31) ------------------------------------------


def test_demo_takes_your_own_matrices_inline_and_from_npy(tmp_path: Any) -> None:
    q, k = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 1.0], [0.0, 2.0], [3.0, 0.0]])
    v = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.save(tmp_path / "v.npy", v.astype(np.int64))  # whole numbers, as the notes write them
    result = CliRunner().invoke(
        app,
        ["demo", "--query", "1,0; 0,1", "--key", "1 1; 0 2; 3 0", "--value", f"{tmp_path}/v.npy"],
        env={"COLUMNS": "200", "LANG": "C"},
    )
    assert result.exit_code == 0, result.output
    weights = np.exp(q @ k.T)
    weights /= weights.sum(-1, keepdims=True)
    expected = weights @ v  # an independent softmax, unscaled as the notes
    lines = rows(result.stdout)
    assert " ".join(f"{x:.4f}" for x in expected[0]) in lines
    assert "Row i, column j: query i · key j, the similarity score: (2, 2) @ (2, 3) → (2, 3)." in (
        " ".join(result.stdout.split())
    )
    assert "softmax(Query @ Key.T / √2), factor 0.7071" in result.stdout


def test_demo_speaks_chinese_with_the_notes_words() -> None:
    result = CliRunner().invoke(app, ["demo", "--lang", "zh"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for words in ("相似度分数", "归一化", "加权求和", "缩放改变了什么", "0.982 → 0.909"):
        assert words in result.stdout
    assert "4 16 12" in rows(result.stdout)  # the numbers as they are


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--query", "1,0; 0,1"], "--query has 2 numbers per row and --key 3"),
        (["--value", "1,2"], "--key has 3 rows and --value 1"),
        (["--query", "1,x"], "--query '1,x': write numbers"),
        (["--key", "1,2; 3"], "--key: every row needs the same count of numbers"),
        (["--query", "nan,1,2"], "--query: every number must be finite"),
        (["--query", "missing.npy"], "cannot read --query"),
    ],
)
def test_demo_refuses_matrices_that_do_not_fit_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["demo", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.strip().count("\n") == 0
