"""Every size is bounded before the work starts: specs and goldens capped with the cap named,
integers of any length (past Python's 4,300-digit limit) in --expect, specs, config fields and
COLUMNS read to one line (exit 2), never an internal error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attntrace.tools.check import MAX_GOLDEN_RECORDS, MAX_SPEC_CONFIGS, SPEC_LIMIT
from hostile import invoke
from paths import SRC

pytestmark = pytest.mark.slow  # real processes or seconds per test

#: Lengths of the numbers tried: past a float, past int64, at and past Python's str limit.
DIGITS = [20, 40, 400, 4300, 4301, 5000, 100_000]


def _number(digits: int) -> str:
    return "9" * digits


def _one_line(outcome: object, *words: str) -> None:
    from hostile import Outcome

    assert isinstance(outcome, Outcome)
    outcome.assert_contained()
    assert outcome.code == 2, outcome
    assert "internal error" not in outcome.err
    for word in words:
        assert word in outcome.err, outcome.err


@pytest.mark.parametrize("digits", DIGITS)
def test_a_huge_size_in_expect_is_one_line(digits: int) -> None:
    n = _number(digits)
    for expect in (f"scores={n},S,S", f"scores=h*{n},S,S", f"scores=({n})", f"q_proj={n}x3"):
        _one_line(invoke("check", "--expect", expect), "--expect")


@pytest.mark.parametrize("digits", DIGITS)
def test_a_huge_integer_in_a_spec_is_one_line(tmp_path: Path, digits: int) -> None:
    n = _number(digits)
    specs = [
        f"[config.a]\nheads = {n}\n",
        f'[config.a]\nexpect = {{ scores = "h,S,{n}" }}\n',
        f"[config.a]\nexpect = {{ scores = [1, {n}] }}\n",
        f"[defaults]\nseq = {n}\n[config.a]\nheads = 2\n",
    ]
    for i, text in enumerate(specs):
        path = tmp_path / f"s{i}.toml"
        path.write_text(text)
        _one_line(invoke("check", "--spec", str(path)), str(path))


@pytest.mark.parametrize("digits", [400, 4300])
@pytest.mark.parametrize("field", ["num_attention_heads", "rope_theta", "sliding_window"])
def test_a_huge_integer_in_a_config_is_one_line(tmp_path: Path, digits: int, field: str) -> None:
    config = {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config)[:-1] + f', "{field}": {_number(digits)}}}')
    _one_line(invoke("run", "--backend", "shape", "--hf-config", str(path)), field)


def test_an_integer_past_the_str_limit_in_a_config_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": ' + _number(5000) + "}")
    _one_line(invoke("run", "--backend", "shape", "--hf-config", str(path)), "config.json")


@pytest.mark.parametrize("columns", [_number(d) for d in (6, 30, 4301, 5000)])
def test_any_columns_draws_the_table(columns: str) -> None:
    env = {
        "PYTHONPATH": str(SRC),
        "NO_COLOR": "1",
        "PATH": os.environ.get("PATH", ""),
        "COLUMNS": columns,
    }
    done = subprocess.run(
        [sys.executable, "-m", "attntrace", "run", "--seq", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "scores" in done.stdout


def test_a_spec_larger_than_its_cap_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    configs = (f"[config.c{i}]\nseq = {i % 7 + 1}\nheads = 2\nhidden = 8\n" for i in range(120_000))
    path.write_text("".join(configs))
    assert path.stat().st_size > 2 * SPEC_LIMIT
    _one_line(invoke("check", "--spec", str(path)), "1.00 MiB")


@pytest.mark.parametrize("count", [MAX_SPEC_CONFIGS + 1, 3 * MAX_SPEC_CONFIGS])
def test_a_spec_of_too_many_configs_is_refused_naming_the_cap(tmp_path: Path, count: int) -> None:
    path = tmp_path / "many.toml"
    path.write_text("".join(f"[config.c{i}]\n" for i in range(count)))
    assert path.stat().st_size < SPEC_LIMIT
    _one_line(invoke("check", "--spec", str(path)), str(MAX_SPEC_CONFIGS), "MAX_SPEC_CONFIGS")


@pytest.mark.parametrize("key", ["steps", "params"])
@pytest.mark.parametrize("count", [MAX_GOLDEN_RECORDS + 1, 200_000])
def test_a_golden_of_too_many_records_is_refused_naming_the_cap(
    tmp_path: Path, key: str, count: int
) -> None:
    record = {"name": "x", "shape": [3, 8], "dtype": "float32"}
    doc = {"schema": "attntrace.trace/1", "config": {}, "steps": [], "params": []}
    doc[key] = [record] * count
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(doc))
    outcome = invoke("check", "--golden", str(path))
    _one_line(outcome, str(MAX_GOLDEN_RECORDS), "MAX_GOLDEN_RECORDS")


@pytest.mark.parametrize(
    ("scaling", "named"),
    [
        ("linear:factor=-1", "factor"),
        ("linear:factor=0", "factor"),
        (f"linear:factor={_number(400)}", "factor"),
        (f"linear:factor={_number(5000)}", "factor"),
        ("linear:factor=nan", "factor"),
        ("dynamic:factor=2,max_position_embeddings=-5", "max_position_embeddings"),
        ("yarn:factor=4,original_max_position_embeddings=0", "original_max_position_embeddings"),
        ("yarn:factor=4,original_max_position_embeddings=8,beta_fast=-1", "beta_fast"),
        ("llama3:low_freq_factor=4", "high_freq_factor"),
    ],
)
def test_a_rope_scaling_value_out_of_range_is_one_line(scaling: str, named: str) -> None:
    _one_line(invoke("run", "--backend", "shape", "--rope", "--rope-scaling", scaling), named)
