"""`run --format json|csv|markdown|table`: documents for scripts, validated and parsed back."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attntrace import AttentionConfig, Trace, __version__, trace_attention
from attntrace.cli import app
from attntrace.render.csv_out import CSV_COLUMNS
from attntrace.render.markdown import render_markdown
from attntrace.schemas import TRACE_SCHEMA_FILE, trace_schema
from paths import SRC

ANSI = re.compile(r"\x1b\[")
runner = CliRunner()

CONFIGS = [
    AttentionConfig(seq=3, hidden=768, heads=12),
    AttentionConfig(batch=2, seq=5, hidden=16, heads=4),
    AttentionConfig(batch=1, seq=1, hidden=1, heads=1),
    AttentionConfig(seq=7, hidden=12, heads=3, dtype="float64", seed=4),
    AttentionConfig(seq=4, hidden=8, heads=2, dtype="float16"),
]
#: Variants and flash: every optional key and axis letter the schema knows.
VARIANT_CONFIGS = [
    AttentionConfig(
        batch=2, seq=5, hidden=32, heads=8, kv_heads=2, rope=True, causal=True, bias=False
    ),
    AttentionConfig(batch=2, seq=4, hidden=16, heads=4, kv_seq=6, kv_hidden=12, key_lengths=(6, 3)),
    AttentionConfig(seq=4, hidden=12, heads=4, head_dim_override=6, kv_heads=1),
    AttentionConfig(seq=10, hidden=16, heads=4, algorithm="flash", block_size=4),
    AttentionConfig(
        batch=2, seq=9, hidden=16, heads=4, kv_heads=2, kv_seq=7, algorithm="flash", block_size=3
    ),
]


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


def validate(doc: Any) -> None:
    jsonschema.Draft202012Validator(
        trace_schema(), format_checker=jsonschema.FormatChecker()
    ).validate(doc)


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_in_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(trace_schema())
    assert (SRC / "attntrace" / "schemas" / TRACE_SCHEMA_FILE).is_file()
    assert trace_schema()["properties"]["schema"]["const"] == "attntrace.trace/1"


@pytest.mark.parametrize(
    "config",
    CONFIGS + VARIANT_CONFIGS,
    ids=lambda c: f"B{c.batch}-S{c.seq}-H{c.hidden}-h{c.heads}-{c.dtype}-{c.algorithm}",
)
@pytest.mark.parametrize("backend", ["numpy", "shape"])
def test_to_dict_of_many_configs_validates_against_the_schema(
    config: AttentionConfig, backend: str
) -> None:
    doc = trace_attention(config, backend).to_dict()
    validate(doc)
    assert json.loads(json.dumps(doc)) == doc  # plain JSON types only
    assert doc["config"]["backend"] == backend
    assert doc["config"]["axis_sizes"] == {**config.axis_sizes(), **config.tile_sizes()}
    for step in doc["steps"]:  # axes spell the shape, for every label (h·d, g·d, Br, 1 …)
        assert [
            config.size(a) if a not in config.tile_sizes() else config.tile_sizes()[a]
            for a in step["axes"]
        ] == step["shape"]


def test_documents_without_the_cost_keys_still_validate() -> None:
    """The cost keys are optional: traces saved before they existed stay valid (same schema id)."""
    doc = trace_attention(AttentionConfig(), "shape").to_dict()
    cost_keys = ("flops", "macs", "formula", "repeat")
    old = {
        **doc,
        "steps": [{k: v for k, v in s.items() if k not in cost_keys} for s in doc["steps"]],
        "totals": {
            k: doc["totals"][k] for k in ("steps", "step_bytes", "param_count", "param_bytes")
        },
    }
    validate(old)
    assert old["schema"] == doc["schema"] == "attntrace.trace/1"


def test_json_steps_and_params_mirror_the_trace() -> None:
    trace = trace_attention(AttentionConfig(batch=2, seq=3, hidden=8, heads=2), "numpy")
    doc = trace.to_dict()
    assert [s["name"] for s in doc["steps"]] == list(trace.names)
    assert [s["index"] for s in doc["steps"]] == list(range(len(trace)))
    scores = doc["steps"][trace.names.index("scores")]
    assert scores == {
        "index": 11,
        "name": "scores",
        "op": "q @ k_t",
        "shape": [2, 2, 3, 3],
        "axes": ["B", "h", "S", "S"],
        "dtype": "float32",
        "bytes": 2 * 2 * 3 * 3 * 4,
        "view": False,
        "flops": 2 * 2 * 2 * 3 * 3 * 4,
        "macs": 2 * 2 * 3 * 3 * 4,
        "formula": "2·B·h·S·S·d",
        "repeat": 1,
        "nonfinite": 0,
    }
    assert doc["params"][0] == {
        "name": "w_q",
        "shape": [8, 8],
        "axes": ["H", "H"],
        "dtype": "float32",
        "count": 64,
        "bytes": 256,
    }
    for step in doc["steps"]:  # axes spell the shape
        assert [doc["config"]["axis_sizes"][a] for a in step["axes"]] == step["shape"]


def test_json_totals_equal_the_sums_of_the_rows() -> None:
    doc = trace_attention(AttentionConfig(batch=3, seq=4, hidden=16, heads=4), "shape").to_dict()
    totals = doc["totals"]
    assert totals["steps"] == len(doc["steps"]) == 18
    assert totals["step_bytes"] == sum(s["bytes"] for s in doc["steps"] if not s["view"])
    assert totals["param_count"] == sum(p["count"] for p in doc["params"]) == 4 * 16 * 16 + 4 * 16
    assert totals["param_bytes"] == sum(p["bytes"] for p in doc["params"])
    assert totals["flops"] == sum(s["flops"] for s in doc["steps"])
    assert totals["macs"] == sum(s["macs"] for s in doc["steps"]) == totals["flops"] / 2


def _evaluate(formula: str, sizes: dict[str, int]) -> float:
    """A formula such as ``2·S·H·H + S·H`` (or ``0.5·h·S·S`` in MACs) with the axis sizes put in."""
    total = 0.0
    for term in formula.split(" + "):
        value = 1.0
        for factor in term.split("·"):
            value *= sizes[factor] if factor in sizes else float(factor)
        total += value
    return total


def _closed_forms(c: AttentionConfig) -> dict[str, int]:
    """FLOPs of the steps of eager attention written out by hand (1 multiply-add = 2 FLOPs)."""
    B, S, N, H, M = c.batch or 1, c.seq, c.keys, c.hidden, c.kv_width
    h, g, d, bias = c.heads, c.groups, c.head_dim, int(c.bias)
    return {
        "q_proj": B * S * h * d * (2 * H + bias),
        "k_proj": B * N * g * d * (2 * M + bias),
        "v_proj": B * N * g * d * (2 * M + bias),
        "scores": 2 * B * h * S * N * d,
        "weights": 5 * B * h * S * N,
        "context": 2 * B * h * S * N * d,
        "output": B * S * H * (2 * h * d + bias),
    }


@pytest.mark.slow
@given(
    batch=st.none() | st.integers(1, 3),
    seq=st.integers(1, 9),
    kv_seq=st.none() | st.integers(1, 9),
    kv_hidden=st.none() | st.integers(1, 12),
    heads=st.sampled_from([1, 2, 4, 6]),
    d=st.integers(1, 6),
    groups=st.sampled_from([1, 2, None]),
    bias=st.booleans(),
    causal=st.booleans(),
    rope=st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_json_costs_equal_closed_forms_and_their_formulas(
    batch: int | None,
    seq: int,
    kv_seq: int | None,
    kv_hidden: int | None,
    heads: int,
    d: int,
    groups: int | None,
    bias: bool,
    causal: bool,
    rope: bool,
) -> None:
    kv_heads = heads // groups if groups and heads % groups == 0 else None
    config = AttentionConfig(
        batch=batch,
        seq=seq,
        hidden=heads * d,
        heads=heads,
        head_dim_override=None,
        kv_seq=kv_seq,
        kv_hidden=kv_hidden,
        kv_heads=kv_heads,
        bias=bias,
        causal=causal,
        rope=rope and d % 2 == 0 and kv_seq is None and kv_hidden is None,
    )
    doc = trace_attention(config, "shape").to_dict()
    validate(doc)
    steps = {s["name"]: s for s in doc["steps"]}
    for name, flops in _closed_forms(config).items():
        assert steps[name]["flops"] == flops, name
    for step in doc["steps"]:  # the formula in letters is the number, and macs is half of it
        assert (
            _evaluate(step["formula"], doc["config"]["axis_sizes"]) * step["repeat"]
            == step["flops"]
        ), step["name"]
        assert step["macs"] * 2 == step["flops"]
    totals = doc["totals"]
    assert totals["flops"] == sum(s["flops"] for s in doc["steps"])
    assert totals["score_bytes"] == steps["scores"]["bytes"]
    assert totals["kv_cache_bytes_per_token"] == config.kv_cache_bytes_per_token
    assert max(s["bytes"] for s in doc["steps"]) <= totals["peak_bytes"] <= totals["step_bytes"]


@pytest.mark.parametrize("seq", [8, 12])
def test_json_flash_steps_give_tiles_and_the_whole_cost(seq: int) -> None:
    config = AttentionConfig(batch=2, seq=seq, hidden=16, heads=4, algorithm="flash", block_size=4)
    trace = trace_attention(config, "shape")
    doc = trace.to_dict()
    validate(doc)
    steps = {s["name"]: s for s in doc["steps"]}
    tiles = (seq // 4) ** 2
    assert steps["s_tile"]["repeat"] == tiles
    assert steps["s_tile"]["formula"] == "2·B·h·Br·Bc·d"  # one tile's
    assert (
        steps["s_tile"]["flops"] == 2 * 2 * 4 * seq * seq * 4
    )  # every tile's: the eager scores' FLOPs
    assert (
        _evaluate(steps["s_tile"]["formula"], doc["config"]["axis_sizes"]) * tiles
        == steps["s_tile"]["flops"]
    )
    assert doc["totals"]["score_bytes"] == steps["s_tile"]["bytes"] == 2 * 4 * 4 * 4 * 4
    assert doc["totals"] == {
        **doc["totals"],
        "flops": trace.total_flops,
        "peak_bytes": trace.peak_bytes,
    }


@pytest.mark.slow
def test_run_format_json_prints_only_the_document() -> None:
    code, out, err = run_cli("run", "--format", "json", "--heads", "12", "--hidden", "768")
    assert code == 0, err
    assert err == ""
    doc = json.loads(out)  # fails on any banner or colour
    validate(doc)
    assert doc.pop("attntrace_version") == __version__
    assert doc == trace_attention(AttentionConfig(seq=3, hidden=768, heads=12)).to_dict()
    # the README's: jq '.steps[] | select(.name=="scores") | .shape'
    assert [s["shape"] for s in doc["steps"] if s["name"] == "scores"] == [[12, 3, 3]]


def test_json_is_the_same_on_every_backend_but_the_backend_name(compute_backend: str) -> None:
    config = AttentionConfig(batch=2, seq=3, hidden=8, heads=2)
    doc = trace_attention(config, compute_backend).to_dict()
    shapes_only = trace_attention(config, "shape").to_dict()
    validate(doc)
    assert doc["config"].pop("backend") == compute_backend
    shapes_only["config"].pop("backend")
    assert doc == shapes_only


@pytest.mark.slow
def test_csv_parses_with_the_csv_module() -> None:
    code, out, err = run_cli(
        "run", "--format", "csv", "--batch", "2", "--seq", "3", "--hidden", "768", "--heads", "12"
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 18
    by_name = {r["name"]: r for r in rows}
    assert by_name["scores"]["shape"] == "2x12x3x3"
    assert by_name["scores"]["axes"] == "B h S S"
    assert by_name["q_proj"]["op"] == "x @ w_q.T + b_q"
    assert by_name["k_t"]["view"] == "true"
    assert int(by_name["scores"]["bytes"]) == 2 * 12 * 3 * 3 * 4
    assert [int(r["index"]) for r in rows] == list(range(18))
    assert int(by_name["scores"]["flops"]) == 2 * 2 * 12 * 3 * 3 * 64
    assert by_name["scores"]["formula"] == "2·B·h·S·S·d"
    assert by_name["q_proj"]["formula"] == "2·B·S·H·H + B·S·H"
    assert by_name["k_t"]["flops"] == "0"
    doc = json.loads(
        run_cli(
            "run",
            "--format",
            "json",
            "--batch",
            "2",
            "--seq",
            "3",
            "--hidden",
            "768",
            "--heads",
            "12",
        )[1]
    )
    assert sum(int(r["flops"]) for r in rows) == doc["totals"]["flops"]


def test_csv_keeps_the_old_column_positions_and_counts_macs_on_request() -> None:
    assert CSV_COLUMNS[:8] == ("index", "name", "op", "shape", "axes", "dtype", "bytes", "view")
    code, out, err = run_cli(
        "run", "--format", "csv", "--count", "macs", "--seq", "3", "--hidden", "8", "--heads", "2"
    )
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert tuple(rows[0]) == (*CSV_COLUMNS[:8], "macs", "formula", "nonfinite")
    by_name = {r["name"]: r for r in rows}
    assert int(by_name["scores"]["macs"]) == 2 * 3 * 3 * 4
    assert by_name["scores"]["formula"] == "h·S·S·d"
    assert by_name["q_proj"]["macs"] == str(3 * 8 * 8 + 3 * 8 / 2).removesuffix(
        ".0"
    )  # a bias add is half a MAC
    assert by_name["q_proj"]["formula"] == "S·H·H + 0.5·S·H"


def _cells(line: str) -> list[str]:
    assert re.fullmatch(r"\| .* \|", line), line
    return re.split(r"(?<!\\)\|", line[1:-1])


def test_markdown_is_well_formed_pipe_tables() -> None:
    code, out, err = run_cli(
        "run", "--format", "markdown", "--batch", "2", "--seq", "3", "--hidden", "8", "--heads", "2"
    )
    assert code == 0, err
    blocks = [b.splitlines() for b in out.strip().split("\n\n")]
    assert blocks[0][0].startswith("**attntrace**")
    tables = blocks[1:]
    assert len(tables) == 2
    for table in tables:
        width = len(_cells(table[0]))
        assert all(re.fullmatch(r"\s*-{3,}:?\s*", c) for c in _cells(table[1])), table[1]
        assert all(len(_cells(line)) == width for line in table), (
            "rows with a different number of cells"
        )
    steps, params = tables
    assert (
        "| 11 | scores | `q @ k_t` | (2, 2, 3, 3) | (B, h, S, S) | float32 | 144 B | 288 "
        "| `2·B·h·S·S·d` |" in steps
    )
    assert len(steps) == 2 + 18 + 1  # header, rule, one row per step and a total row
    trace = trace_attention(AttentionConfig(batch=2, seq=3, hidden=8, heads=2), "shape")
    total = f"**{trace.total_flops / 1000:.2f} k**"
    assert steps[-1] == f"|  | **total** |  |  |  |  | peak {trace.peak_bytes} B | {total} |  |"
    assert params[-1].startswith("| **total** |")


def test_markdown_counts_macs_on_request_and_shows_tiles() -> None:
    code, out, err = run_cli(
        "run",
        "--format",
        "markdown",
        "--count",
        "macs",
        "--seq",
        "8",
        "--hidden",
        "8",
        "--heads",
        "2",
        "--algorithm",
        "flash",
        "--block-size",
        "4",
    )
    assert code == 0, err
    assert "| # | step | op | shape | axes | dtype | bytes | MACs | formula |" in out
    assert "| 512 | `h·Br·Bc·d` per tile, 4 tiles |" in out  # s_tile: 2·4·4·4 MACs a tile, 4 tiles


def test_markdown_matches_golden(golden: Callable[[str], None]) -> None:
    golden(render_markdown(trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape")))


def test_markdown_escapes_pipes_in_cells() -> None:
    trace = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2), "shape")
    step = trace.steps[0]
    piped = Trace(
        trace.config,
        trace.backend,
        (type(step)(step.name, step.shape, step.dtype, op="a | b"),),
        (),
    )
    assert "`a \\| b`" in render_markdown(piped)


def test_values_only_with_the_table() -> None:
    code, out, err = run_cli("run", "--format", "json", "--values")
    assert code == 2
    assert out == ""
    assert "--values only works with --format table" in err


def _run_process(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    }
    return subprocess.run(
        [sys.executable, "-m", "attntrace", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**clean, "PYTHONPATH": str(SRC), **env},
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_piped_output_has_no_escape_codes(fmt: str) -> None:
    done = _run_process("run", "--format", fmt, "--seq", "4", "--hidden", "8", "--heads", "2")
    assert done.returncode == 0, done.stderr
    assert "scores" in done.stdout
    assert not ANSI.search(done.stdout)


COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-7]|38;|4[0-7]|48;)[0-9;]*m")


@pytest.mark.slow
@pytest.mark.parametrize("how", [("--no-color",), ()], ids=["--no-color", "NO_COLOR"])
def test_no_color_and_NO_COLOR_turn_colours_off_on_a_terminal(how: tuple[str, ...]) -> None:
    env = {"FORCE_COLOR": "1", **({} if how else {"NO_COLOR": "1"})}
    forced = _run_process("run", "--seq", "4", "--hidden", "8", "--heads", "2", FORCE_COLOR="1")
    assert COLOUR.search(forced.stdout), (
        "FORCE_COLOR should give colours (the test would prove nothing)"
    )
    plain = _run_process("run", "--seq", "4", "--hidden", "8", "--heads", "2", *how, **env)
    assert plain.returncode == 0, plain.stderr
    assert not COLOUR.search(plain.stdout)


def test_the_documented_example_document_validates_and_matches_a_real_trace() -> None:
    text = (SRC.parent / "docs" / "scripting.md").read_text(encoding="utf-8")
    example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    validate(example)
    real = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "numpy").to_dict()
    assert example["config"] == real["config"]
    assert example["totals"] == real["totals"]
    assert example["steps"][0] == real["steps"][11]
    assert example["params"][0] == real["params"][0]
    assert set(example["steps"][0]) == set(real["steps"][11])  # every key is shown
    assert set(example["totals"]) == set(real["totals"])
