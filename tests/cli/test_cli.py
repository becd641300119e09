"""The `attntrace run` command through Typer's CliRunner and as a real process: its tables, its
JSON (version and preset), the dtype of its KV-cache figures, its one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import jsonschema
import pytest
from typer.testing import CliRunner

import attntrace
from attntrace.cli import app
from attntrace.errors import install_hint
from attntrace.schemas import trace_schema
from paths import SRC

runner = CliRunner()


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def test_main_job_prints_the_chain_of_the_card() -> None:
    code, out, err = run_cli("run", "--heads", "12", "--hidden", "768")
    assert code == 0, err
    for row in ("(3, 768)", "(3, 12, 64)", "(12, 3, 64)", "(12, 64, 3)", "(12, 3, 3)"):
        assert row in out
    assert "q_heads.transpose(0, 1)" in out
    assert "w_q" in out
    assert "589,824" in out
    assert "2,362,368" in out
    assert "attention weights, head 0" in out
    assert err == ""


def test_rendered_table_matches_golden(golden: Callable[[str], None]) -> None:
    code, out, _ = run_cli("run", "--seq", "4", "--hidden", "8", "--heads", "2")
    assert code == 0
    golden(out)


def test_batched_long_sequence_matches_golden(golden: Callable[[str], None]) -> None:
    code, out, _ = run_cli(
        "run", "--batch", "2", "--seq", "20", "--hidden", "8", "--heads", "2", "--head", "1"
    )
    assert code == 0
    assert "(2, 2, 20, 20)" in out
    assert "(20, 20) pooled into 10x10 blocks" in out
    golden(out)


def test_values_prints_the_numbers_of_small_tensors(golden: Callable[[str], None]) -> None:
    code, out, _ = run_cli("run", "--seq", "3", "--hidden", "4", "--heads", "2", "--values")
    assert code == 0
    assert "w_q (4, 4)" in out
    assert "scores (2, 3, 3)" in out
    golden(out)


@pytest.mark.slow
def test_every_line_fits_80_columns() -> None:
    for args in (
        ["--heads", "12", "--hidden", "768"],
        ["--batch", "16", "--seq", "16", "--hidden", "64", "--heads", "4"],
    ):
        code, out, _ = run_cli("run", *args)
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= 80


def test_torch_backend_and_dtypes() -> None:
    pytest.importorskip("torch")
    code, out, _ = run_cli(
        "run", "--backend", "torch", "--dtype", "bfloat16", "--hidden", "16", "--heads", "4"
    )
    assert code == 0
    assert "torch bfloat16" in out
    assert "every tensor bfloat16" in out


def test_head_selects_the_heat_map() -> None:
    _, head0, _ = run_cli("run", "--hidden", "16", "--heads", "4", "--head", "0")
    _, head3, _ = run_cli("run", "--hidden", "16", "--heads", "4", "--head", "3")
    assert "head 3" in head3
    assert head0.split("attention weights")[1] != head3.split("attention weights")[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--hidden", "768", "--heads", "7"],
            "valid head counts for hidden 768: 1, 2, 3, 4, 6, 8, 12, 16",
        ),
        (["--seq", "0"], "--seq must be at least 1"),
        (["--batch", "0"], "omit --batch"),
        (["--hidden", "-4"], "--hidden must be at least 1"),
        (["--heads", "0"], "--heads must be at least 1"),
        (
            ["--dtype", "bfloat16"],
            (
                "the numpy backend has no dtype bfloat16; use one of float16, float32, float64 "
                "or --backend torch"
            ),
        ),
        (["--head", "12"], "--head 12 does not exist; use 0 to 11"),
        (["--max-memory", "lots"], "cannot read the size 'lots'"),
        (["--seq", "2000000", "--hidden", "8192", "--heads", "64"], "--backend shape"),
        (["--seq", "4096", "--max-memory", "1MiB"], "budget is 1.00 MiB (--max-memory)"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    code, out, err = run_cli("run", *args)
    assert code == 2
    assert out == ""
    assert err.startswith("attntrace: error: "), err
    assert err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--backend", "jax"], "'jax' is not one of"),
        (["--dtype", "int8"], "'int8' is not one of"),
        (["--hedas", "12"], "No such option"),
    ],
)
def test_unknown_choices_and_typos_are_usage_errors(args: list[str], fragment: str) -> None:
    code, _, err = run_cli("run", *args)
    assert code == 2
    assert fragment in err


def test_torch_missing_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    code, _, err = run_cli("run", "--backend", "torch")
    assert code == 2
    assert install_hint("torch") in err


def _python(*code_or_args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, *code_or_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_module_entry_point_runs_and_pipes_without_colour() -> None:
    proc = _python("-m", "attntrace", "run", "--heads", "12", "--hidden", "768")
    assert proc.returncode == 0, proc.stderr
    assert "(12, 3, 3)" in proc.stdout
    assert "\x1b[" not in proc.stdout  # stdout is a pipe: no escape codes


@pytest.mark.slow
def test_import_and_numpy_run_never_import_torch() -> None:
    code = (
        "import sys, attntrace; assert 'torch' not in sys.modules;"
        "attntrace.trace_attention(attntrace.AttentionConfig());"
        "from attntrace.cli import app; from typer.testing import CliRunner;"
        "r = CliRunner().invoke(app, ['run']); assert r.exit_code == 0, r.output;"
        "assert 'torch' not in sys.modules, 'torch was imported'; print('ok')"
    )
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
def test_huge_sizes_are_refused_at_once_without_allocating() -> None:
    code = (
        "import tracemalloc; tracemalloc.start();"
        "from typer.testing import CliRunner; from attntrace.cli import app;"
        "r = CliRunner().invoke(app, ['run', '--seq', '2000000', '--hidden', '8192', "
        "'--heads', '64']);"
        "peak = tracemalloc.get_traced_memory()[1]; print(r.exit_code, peak < 50_000_000)"
    )
    proc = _python("-c", code)
    assert proc.stdout.split() == ["2", "True"], proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--hedas", "12"], "No such option: --hedas (Possible options: --head, --heads"),
        (
            ["run", "--seq", "abc"],
            "Invalid value for '--seq': 'abc' is not a valid int; see 'attntrace run --help'",
        ),
        (["runn"], "No such command 'runn'"),
    ],
)
def test_usage_errors_of_the_real_process_are_one_line(args: list[str], message: str) -> None:
    proc = _python(
        "-c", "import sys; sys.argv[0] = 'attntrace'; from attntrace.cli import main; main()", *args
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("attntrace: error: "), proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1


def stdout_of(*args: str) -> str:
    """What a successful command prints at 100 columns."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_json_carries_the_version_and_the_preset() -> None:
    doc = json.loads(stdout_of("run", "--preset", "gpt2", "--backend", "shape", "-f", "json"))
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    assert doc["attntrace_version"] == attntrace.__version__
    assert doc["preset"] == "gpt2"
    plain = json.loads(stdout_of("run", "--backend", "shape", "-f", "json"))
    assert "preset" not in plain
    assert plain["attntrace_version"] == attntrace.__version__


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_kv_cache_figure_states_its_dtype(dtype: str) -> None:
    out = " ".join(
        stdout_of("run", "--kv-heads", "4", "--backend", "shape", "--dtype", dtype).split()
    )
    itemsize = {"float32": 4, "float16": 2}[dtype]
    assert f"x {itemsize} B ({dtype}) =" in out  # the KV-cache line under the parameters
    assert f"per token ({dtype})" in out  # the caption of the costs table
