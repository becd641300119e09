"""attntrace sweep: every point measured, output that parses."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from attntrace import ConfigError
from attntrace.cli import app
from attntrace.tools.sweep import parse_list

runner = CliRunner()


def test_json_has_eager_and_flash_per_point() -> None:
    result = runner.invoke(app, ["sweep", "--seq", "128,512,2048", "--format", "json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)
    assert [(p["seq"], p["algorithm"]) for p in points] == [
        (128, "eager"),
        (128, "flash"),
        (512, "eager"),
        (512, "flash"),
        (2048, "eager"),
        (2048, "flash"),
    ]
    eager = {p["seq"]: p for p in points if p["algorithm"] == "eager"}
    flash = {p["seq"]: p for p in points if p["algorithm"] == "flash"}
    assert eager[2048]["score_bytes"] == 16 * eager[512]["score_bytes"]  # quadratic
    assert flash[2048]["score_bytes"] == flash[512]["score_bytes"]  # one tile
    assert eager[2048]["score_bytes"] == 12 * 2048 * 2048 * 4


def test_csv_parses_and_lists_heads_and_hidden() -> None:
    result = runner.invoke(
        app, ["sweep", "--seq", "64", "--heads", "4,8", "--hidden", "256,512", "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 2 * 2 * 2
    assert {(r["heads"], r["hidden"]) for r in rows} == {
        ("4", "256"),
        ("8", "256"),
        ("4", "512"),
        ("8", "512"),
    }
    assert all(int(r["flops"]) > 0 for r in rows)


def test_table_and_bar_charts() -> None:
    result = runner.invoke(
        app, ["sweep", "--seq", "128,1024", "--count", "macs"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    assert "MACs" in result.stdout
    assert "score bytes held at once" in result.stdout
    assert "█" in result.stdout


def test_numpy_backend_sweep_computes() -> None:
    result = runner.invoke(
        app,
        [
            "sweep",
            "--seq",
            "8,16",
            "--hidden",
            "16",
            "--heads",
            "2",
            "--backend",
            "numpy",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 4


def test_bad_lists_are_usage_errors() -> None:
    with pytest.raises(ConfigError, match="comma"):
        parse_list("128,abc", "--seq")
    result = runner.invoke(app, ["sweep", "--seq", "12x"])
    assert result.exit_code == 2


def test_stderr_holds_nothing_but_the_one_error_line() -> None:
    result = runner.invoke(app, ["sweep", "--seq", "128", "-f", "json"])  # -f as --format
    assert result.exit_code == 0
    assert json.loads(result.stdout)
    assert result.stderr == ""  # no progress bar's blank line when stderr is not a terminal
    result = runner.invoke(app, ["sweep", "--seq", "10000000", "--backend", "numpy"])
    assert result.exit_code == 2
    assert result.stderr.startswith("attntrace: error: this sweep computes")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [("--seq", "128,,512"), ("--seq", "128,"), ("--heads", ",4"), ("--algorithms", "eager,,flash")],
)
def test_an_empty_list_entry_is_refused(option: str, value: str) -> None:
    result = runner.invoke(app, ["sweep", option, value])
    assert result.exit_code == 2
    assert result.stderr == (
        f"attntrace: error: {option} has an empty entry in {value!r}; "
        "separate the values by single commas, e.g. "
        f"{'eager,flash' if option == '--algorithms' else '128,512,2048'}\n"
    )


def test_the_sweep_table_states_the_dtype_of_its_bytes() -> None:
    result = runner.invoke(
        app,
        ["sweep", "--seq", "128", "--dtype", "float16", "--backend", "shape"],
        env={"COLUMNS": "100", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("sweep (bytes of float16)")
