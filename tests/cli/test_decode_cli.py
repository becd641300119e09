"""--past on the command line: run's decode steps and serving figures (table, JSON valid against
the schema, CSV), check's expectations in N+1, and one line + exit 2 for every bad option."""

from __future__ import annotations

import json

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.schemas import trace_schema

runner = CliRunner()
SMALL = ("--hidden", "16", "--heads", "4", "--kv-heads", "2", "--causal", "--rope", "--no-bias")


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100"})
    return result.exit_code, result.stdout, result.stderr


def test_run_past_shows_the_cache_steps_and_the_roofline() -> None:
    code, out, err = invoke("run", *SMALL, "--seq", "1", "--past", "6", "--backend", "shape")
    assert (code, err) == (0, "")
    assert "k_cache" in out
    assert "(g, N, d)" in out
    assert "k_all" in out
    assert "cat(k_cache, k_rot, dim=1)" in out
    assert "(h, S, N+S)" in out
    assert "causal(bottom-right)" in out
    assert "2·h·S·(N+S)·d" in out
    assert "roofline of one layer (fused kernels)" in out
    assert "decode   layer" in out
    assert "prefill  layer" in out
    assert "KV cache of 1 layer" in out


def test_run_past_json_carries_the_steps_and_figures_and_is_valid() -> None:
    args = ("run", *SMALL, "--batch", "2", "--seq", "1", "--past", "6", "-f", "json")
    code, out, err = invoke(*args, "--memory", "1MiB", "--cache-dtype", "float8")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    assert doc["config"]["past"] == 6
    assert doc["config"]["axis_sizes"]["N"] == 6
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["k_cache"]["shape"] == [2, 2, 6, 4]
    assert steps["scores"]["shape"] == [2, 4, 1, 7]
    assert steps["scores"]["axes"] == ["B", "h", "S", "N+S"]
    serving = doc["serving"]
    assert serving["machine"]["name"] == "H100 SXM"
    assert [p["name"] for p in serving["step"]] == ["layer", "linear", "attention"]
    assert serving["step"][2]["bound"] == "memory-bound"
    (row,) = serving["cache"]["dtypes"]
    assert row == {"dtype": "float8", "per_token": 16, "per_request": 112, "fits": 9362}


def test_a_plain_run_has_no_serving_figures_unless_asked() -> None:
    code, out, _ = invoke("run", *SMALL, "-f", "json", "--backend", "shape")
    assert code == 0
    assert "serving" not in json.loads(out)
    code, out, _ = invoke("run", *SMALL, "-f", "json", "--backend", "shape", "--peak-flops", "1T")
    serving = json.loads(out)["serving"]
    assert serving["machine"]["peak_flops"] == 1e12
    assert serving["prefill"] == []


def test_csv_carries_the_decode_steps() -> None:
    code, out, _ = invoke("run", *SMALL, "--seq", "1", "--past", "6", "-f", "csv")
    assert code == 0
    assert any(line.startswith("k_cache,") or ",k_cache," in line for line in out.splitlines())


def test_check_expects_n_plus_1_keys() -> None:
    args = ("check", "--preset", "llama-3-8b", "--seq", "1", "--past", "4096", "--batch", "2")
    code, out, _ = invoke(*args, "--expect", "scores=B,h,1,N+1", "--expect", "k_all=B,g,N+S,d")
    assert code == 0, out
    code, out, _ = invoke(*args, "--expect", "scores=B,h,1,N")
    assert code == 1
    assert "(2, 32, 1, 4097)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--past", "-1"), "-1 is not in the range x>=0"),
        (("--past", "3", "--kv-seq", "5"), "--past caches the keys of self-attention"),
        (("--peak-flops", "fast"), "cannot read --peak-flops 'fast'; write a rate like 989T"),
        (("--bandwidth", "-3"), "cannot read --bandwidth '-3'; write a rate like 3.35TB/s"),
        (("--memory", "lots"), "cannot read the size 'lots'"),
        (("--cache-dtype", "int4"), "--cache-dtype 'int4' is not a cache dtype"),
    ],
)
def test_bad_serving_options_are_one_line(args: tuple[str, ...], message: str) -> None:
    code, _out, err = invoke("run", *SMALL, "--backend", "shape", *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_run_page_size_shows_the_paged_cache() -> None:
    args = ("run", *SMALL, "--batch", "3", "--seq", "1", "--past", "40", "--backend", "shape")
    code, out, err = invoke(*args, "--key-lengths", "41,20,3", "--page-size", "16")
    assert (code, err) == (0, "")
    assert "paged KV cache of one layer, blocks of P=16 tokens" in out
    assert "(3, 3)" in out  # the block table
    assert "(6, 16, 2, 4)" in out  # the pool: 3 + 2 + 1 blocks of 41, 20, 3 tokens
    assert "gather: k[b] = k_pool[block_table[b]]" in out
    code, out, _ = invoke(*args, "--key-lengths", "41,20,3", "--page-size", "16", "-f", "json")
    paged = json.loads(out)["serving"]["paged"]
    assert paged["blocks"] == [3, 2, 1]
    assert paged["waste_tokens"] == 48 - 41 + 32 - 20 + 16 - 3
