"""--past on the command line: run's decode steps and serving figures (table, JSON valid against
the schema, CSV), check's expectations in N+1, and one line + exit 2 for every bad option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
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
        (("--past", "-1"), "--past must be a whole number from 0, got -1"),
        (("--past", "4,8"), "--past takes one number here (sweep takes a list"),
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


CACHED = ("run", *SMALL, "--seq", "1")


def test_cache_file_is_read_and_past_is_its_length(tmp_path: Path) -> None:
    k = np.random.default_rng(0).standard_normal((2, 5, 4))  # (g, N, d)
    v = np.random.default_rng(1).standard_normal((2, 5, 4))
    np.savez(tmp_path / "c.npz", **{"key_cache.0": k, "value_cache.0": v})
    out = tmp_path / "t.npz"
    code, _, err = invoke(*CACHED, "--cache", str(tmp_path / "c.npz"), "--save", str(out))
    assert (code, err) == (0, "")
    with np.load(out, allow_pickle=False) as saved:
        assert json.loads(str(saved["config"]))["past"] == 5
        np.testing.assert_allclose(saved["k_cache"], k, rtol=1e-6)
        np.testing.assert_allclose(saved["v_all"][:, :5], v, rtol=1e-6)


@pytest.mark.slow
def test_a_saved_step_is_the_next_steps_cache(tmp_path: Path) -> None:
    first, second = tmp_path / "1.npz", tmp_path / "2.npz"
    assert invoke(*CACHED, "--past", "4", "--save", str(first))[0] == 0
    assert invoke(*CACHED, "--cache", str(first), "--save", str(second))[0] == 0
    with np.load(first, allow_pickle=False) as a, np.load(second, allow_pickle=False) as b:
        assert b["k_cache"].shape == (2, 5, 4)
        np.testing.assert_array_equal(b["k_cache"], a["k_all"])
        np.testing.assert_array_equal(b["v_cache"], a["v_all"])
        assert b["k_all"].shape == (2, 6, 4)


def test_a_safetensors_cache_is_read(tmp_path: Path) -> None:
    numpy_io = pytest.importorskip("safetensors.numpy")
    k = np.ones((1, 2, 3, 4), dtype=np.float32)  # (B, g, N, d)
    numpy_io.save_file({"k_cache": k, "v_cache": 2 * k}, str(tmp_path / "c.safetensors"))
    out = tmp_path / "t.npz"
    args = (*CACHED, "--batch", "1", "--cache", str(tmp_path / "c.safetensors"))
    assert invoke(*args, "--save", str(out))[0] == 0
    with np.load(out, allow_pickle=False) as saved:
        assert float(saved["v_cache"].sum()) == 2 * 24


@pytest.mark.parametrize(
    ("name", "arrays", "message"),
    [
        ("c.txt", None, "give a .npz or .safetensors file with k_cache and v_cache"),
        (
            "c.npz",
            {"k": np.ones((2, 3, 4))},
            "no keys and values of layer 0; name them k_all/v_all",
        ),
        (
            "c.npz",
            {"k_cache": np.ones((3, 3, 4)), "v_cache": np.ones((3, 3, 4))},
            "k_cache has shape",
        ),
    ],
)
def test_a_bad_cache_file_is_one_line(
    tmp_path: Path, name: str, arrays: dict[str, Any] | None, message: str
) -> None:
    path = tmp_path / name
    if arrays is None:
        path.write_text("no")
    else:
        np.savez(path, **arrays)
    code, _, err = invoke(*CACHED, "--cache", str(path))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_sweep_past_runs_decode_steps_over_context_lengths() -> None:
    args = ("sweep", "--preset", "llama-3-8b", "--seq", "1", "--past", "1024,8192")
    code, out, _ = invoke(*args, "--algorithms", "eager", "-f", "json")
    assert code == 0
    points = json.loads(out)
    assert [p["past"] for p in points] == [1024, 8192]
    # the scores (h, 1, N+1) grow with N: 32 heads x (N + 1) keys x 4 bytes
    assert [p["score_bytes"] for p in points] == [32 * 1025 * 4, 32 * 8193 * 4]
    code, out, _ = invoke(*args, "--algorithms", "eager")
    assert code == 0
    assert "N=8192 eager" in out
    code, out, _ = invoke("sweep", "--seq", "8", "-f", "csv")
    assert "past" not in out.splitlines()[0]  # a plain sweep's columns are unchanged
