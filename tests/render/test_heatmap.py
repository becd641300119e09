"""The terminal heat map at any length: pooled blocks beyond S = 16, --batch-item,
--values-limit."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.render.pooling import block_starts, pool
from attntrace.render.table import attention_view

runner = CliRunner()


def run_cli(*args: str, columns: int = 80) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def heat_rows(out: str) -> list[list[str]]:
    """The body rows of the heat map: label, cells…, sum."""
    start = out.index("attention weights")
    return [line.split() for line in out[start:].splitlines() if re.match(r"\s*q\d", line)]


def reference_pool(matrix: np.ndarray, rs: tuple[int, ...], cs: tuple[int, ...]) -> np.ndarray:
    """Loop version: mean over the queries of a block of the sum over its keys."""
    re_, ce = [*rs[1:], matrix.shape[0]], [*cs[1:], matrix.shape[1]]
    return np.array(
        [
            [matrix[r0:r1, c0:c1].sum(axis=1).mean() for c0, c1 in zip(cs, ce, strict=True)]
            for r0, r1 in zip(rs, re_, strict=True)
        ]
    )


@pytest.mark.parametrize(
    ("rows", "cols", "rb", "cb"),
    [(20, 20, 16, 16), (200, 37, 16, 9), (17, 300, 16, 14), (5, 5, 16, 16)],
)
def test_pool_equals_a_loop_and_keeps_row_sums(rows: int, cols: int, rb: int, cb: int) -> None:
    rng = np.random.default_rng(0)
    matrix = rng.random((rows, cols))
    matrix /= matrix.sum(axis=1, keepdims=True)
    p = pool(matrix, rb, cb)
    np.testing.assert_allclose(p.values, reference_pool(matrix, p.row_starts, p.col_starts))
    np.testing.assert_allclose(p.values.sum(axis=1), 1.0)
    assert len(p.row_starts) <= rb
    assert len(p.col_starts) <= cb
    assert p.row_starts == block_starts(rows, rb)


def test_blocks_whose_every_cell_is_masked_are_hidden() -> None:
    hidden = np.triu(np.ones((32, 32), dtype=bool), k=1)  # causal: key j > query i masked
    p = pool(np.where(hidden, 0.0, 1.0), 4, 4, hidden)
    assert p.hidden is not None
    assert p.hidden.tolist() == [[j > i for j in range(4)] for i in range(4)]


def test_long_sequence_shows_a_pooled_heat_map(golden: Callable[[str, str], None]) -> None:
    code, out, err = run_cli("run", "--seq", "40", "--hidden", "8", "--heads", "2", "--causal")
    assert code == 0, err
    words = " ".join(out.split())
    assert "(40, 40) pooled into 14x14 blocks" in words
    assert (
        "mean over its queries of the sum over its keys, so rows sum to 1; every key masked: ·"
        in words
    )
    rows = heat_rows(out)
    assert len(rows) == 14
    assert rows[0][0] == "q0-2"
    assert rows[-1][0] == "q39"
    assert all(r[-1] == "1.00" for r in rows)  # every pooled row sums to 1
    assert (
        rows[0][2:-1] == ["·"] * 13
    )  # causal: later key blocks fully masked for the first queries
    golden(out[out.index("attention weights") :], "heatmap")


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_pooled_heat_map_fits_the_terminal(columns: int) -> None:
    code, out, _ = run_cli("run", "--seq", "300", "--hidden", "8", "--heads", "2", columns=columns)
    assert code == 0
    rows = heat_rows(out)
    assert 2 <= len(rows[0]) - 2 <= 16
    block = out[out.index("attention weights") :]
    assert max(len(line) for line in block.splitlines()) <= columns


def test_pooled_view_is_the_pool_of_the_chosen_head_and_batch_item() -> None:
    trace = trace_attention(AttentionConfig(batch=2, seq=24, hidden=8, heads=2, seed=3))
    console = Console(file=io.StringIO(), width=80, no_color=True)
    console.print(attention_view(trace, 1, batch_item=1, width=80))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "head 1 of batch item 1" in out
    expected = pool(trace["weights"].value[1, 1], 16, 12)  # type: ignore[index]
    shown = np.array([[float(c) for c in r[1:-1]] for r in heat_rows(out)])
    np.testing.assert_allclose(shown, expected.values, atol=0.006)
    other = pool(trace["weights"].value[0, 1], 16, 12).values  # type: ignore[index]
    assert np.abs(shown - other).max() > 0.01  # a different item shows different numbers


def test_batch_item_picks_the_row_and_is_checked() -> None:
    code, out, _ = run_cli(
        "run", "--batch", "3", "--seq", "4", "--hidden", "8", "--heads", "2", "--batch-item", "2"
    )
    assert code == 0
    assert "head 0 of batch item 2" in out
    code, _, err = run_cli("run", "--batch", "2", "--batch-item", "2")
    assert code == 2
    assert err == "attntrace: error: --batch-item 2 does not exist; use 0 to 1\n"
    code, _, err = run_cli("run", "--batch-item", "1")
    assert code == 2
    assert "add --batch" in err


def test_values_lists_what_it_skipped_and_takes_a_limit() -> None:
    code, out, _ = run_cli("run", "--seq", "3", "--hidden", "8", "--heads", "2", "--values")
    assert code == 0
    assert "skipped (more than 256 elements)" not in out  # nothing that large here
    code, out, _ = run_cli(
        "run", "--seq", "3", "--hidden", "8", "--heads", "2", "--values", "--values-limit", "20"
    )
    assert code == 0
    words = " ".join(out.split())
    assert "values (tensors of at most 20 elements" in out
    assert "scores (2, 3, 3)" in out  # 18 elements: shown
    assert re.search(r"skipped \(more than 20 elements\): x \(3, 8\), q_proj \(3, 8\)", words)
    assert "w_q (8, 8)" in out.split("skipped")[1]
    code, _, _err = run_cli("run", "--values", "--values-limit", "0")
    assert code == 2


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_summary_of_a_long_matrix_gives_its_facts_as_float64_finds_them(dtype: str) -> None:
    """Row sums, the largest weight and the mean row entropy (0 log 0 counting 0: causal rows
    hold zeros), against the same facts taken in float64."""
    from attntrace.render.table import weights_summary

    cfg = AttentionConfig(seq=300, hidden=32, heads=2, causal=True, dtype=dtype)
    matrix = trace_attention(cfg)["weights"].value[1]  # (S, N), zeros above the diagonal
    text = weights_summary(matrix).plain
    wide = matrix.astype(np.float64)
    entropy = -(wide * np.log(np.where(wide > 0, wide, 1.0))).sum(-1).mean()
    query, key = divmod(int(np.argmax(wide)), 300)
    assert f"mean row entropy {entropy:.3f} nats (uniform attention: ln 300 = 5.704)" in text
    assert f"largest weight {wide.max():.4f} (query {query} -> key {key})" in text
    if dtype == "float64":  # the sums of narrower rows round differently in float64
        assert f"rows sum to 1 within {np.abs(wide.sum(-1) - 1).max():.1e}" in text
