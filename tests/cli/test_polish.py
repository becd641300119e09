"""Small things a new user meets: version and preset in the JSON, the dtype of every KV-cache
figure, shell completion of preset and step names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest
from typer.testing import CliRunner

import attntrace
from attntrace.cli import app
from attntrace.schemas import trace_schema
from paths import SRC

runner = CliRunner()


def run_cli(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_json_carries_the_version_and_the_preset() -> None:
    doc = json.loads(run_cli("run", "--preset", "gpt2", "--backend", "shape", "-f", "json"))
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    assert doc["attntrace_version"] == attntrace.__version__
    assert doc["preset"] == "gpt2"
    plain = json.loads(run_cli("run", "--backend", "shape", "-f", "json"))
    assert "preset" not in plain
    assert plain["attntrace_version"] == attntrace.__version__


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_kv_cache_figure_states_its_dtype(dtype: str) -> None:
    out = " ".join(
        run_cli("run", "--kv-heads", "4", "--backend", "shape", "--dtype", dtype).split()
    )
    itemsize = {"float32": 4, "float16": 2}[dtype]
    assert f"x {itemsize} B ({dtype}) =" in out  # the KV-cache line under the parameters
    assert f"per token ({dtype})" in out  # the caption of the costs table


def complete(words: str) -> list[str]:
    """What bash completion offers for the last of ``words`` (Typer's completion protocol)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "_ATTNTRACE_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    code = "import sys; sys.argv[0] = 'attntrace'; from attntrace.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_completion_offers_preset_names() -> None:
    from attntrace.config.presets import PRESETS

    assert complete("attntrace run --preset llama-3") == [
        n for n in PRESETS if n.startswith("llama-3")
    ]
    assert "mistral-7b" in complete("attntrace check --preset ")


def test_completion_offers_step_names_for_expect() -> None:
    assert complete("attntrace check --expect sc") == ["scores=", "scaled="]
    offered = complete("attntrace check -e ")
    for name in ("x=", "q_rot=", "k_rep=", "masked=", "s_tile=", "o_block="):
        assert name in offered


def test_the_sweep_table_states_the_dtype_of_its_bytes() -> None:
    out = run_cli("sweep", "--seq", "128", "--dtype", "float16", "--backend", "shape")
    assert out.startswith("sweep (bytes of float16)")
