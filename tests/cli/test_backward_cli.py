"""`run --backward` / `check --backward` from the command line: the table, the version-2 JSON
(valid against its schema), --grad-output, --recompute, goldens of versions 1 and 2, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.schemas import trace_schema, trace_schema_2

runner = CliRunner()
SIZES = ("--seq", "4", "--hidden", "8", "--heads", "2")


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def test_run_backward_prints_the_gradient_steps_and_the_training_table() -> None:
    code, out, err = run_cli("run", *SIZES, "--backward")
    assert code == 0, err
    for text in ("d_scaled", "4·h·S·S", "d_w_q", "d_x", "flash keeps", "Megatron (16-bit)"):
        assert text in out


@pytest.mark.slow
def test_json_of_version_2_is_valid_and_version_1_stays_without_backward() -> None:
    code, out, _ = run_cli("run", *SIZES, "--backward", "--layers", "2", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, trace_schema_2())
    assert doc["schema"] == "attntrace.trace/2"
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["d_scores"]["pass"] == "backward"
    assert steps["weights"]["saved"] is True
    assert steps["scores"]["saved"] is False
    assert doc["backward"]["saved_bytes"] == sum(s["bytes"] for s in doc["steps"] if s["saved"])
    assert doc["whole_model"]["saved_bytes"] == 2 * doc["backward"]["saved_bytes"]
    code, out, _ = run_cli("run", *SIZES, "--format", "json")
    plain = json.loads(out)
    jsonschema.validate(plain, trace_schema())
    assert plain["schema"] == "attntrace.trace/1"
    assert "pass" not in plain["steps"][0]


def test_grad_output_file_is_the_start_of_the_backward(tmp_path: Path) -> None:
    grad = tmp_path / "grad.npy"
    np.save(grad, np.ones((4, 8), dtype=np.float32))
    code, out, err = run_cli(
        "run", *SIZES, "--backward", "--grad-output", str(grad), "--format", "json"
    )
    assert code == 0, err
    assert json.loads(out)["backward"]["d_output"] == "given"
    np.save(grad, np.ones((3, 8), dtype=np.float32))
    code, _, err = run_cli("run", *SIZES, "--backward", "--grad-output", str(grad))
    assert code == 2
    assert "--grad-output has shape (3, 8)" in err


def test_recompute_and_grad_output_need_backward() -> None:
    code, _, err = run_cli("run", *SIZES, "--recompute")
    assert code == 2
    assert "needs --backward" in err
    code, _, err = run_cli("run", *SIZES, "--backward", "--algorithm", "flash", "--window", "2")
    assert code == 2
    assert err.count("\n") == 1
    assert "flash with --window" in err


def test_backward_of_a_decode_step_is_one_line() -> None:
    code, out, err = run_cli("run", *SIZES, "--backward", "--past", "4")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert "--past N" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_check_reads_goldens_of_both_versions(tmp_path: Path) -> None:
    for extra, name in (((), "one.json"), (("--backward",), "two.json")):
        code, out, _ = run_cli("run", *SIZES, *extra, "--format", "json")
        assert code == 0
        (tmp_path / name).write_text(out)
    code, out, err = run_cli("check", *SIZES, "--golden", str(tmp_path / "one.json"))
    assert code == 0, out + err
    code, out, err = run_cli("check", *SIZES, "--golden", str(tmp_path / "two.json"))
    assert code == 0, out + err  # a version-2 golden traces the backward too
    code, out, _ = run_cli("check", *SIZES, "--backward", "--expect", "d_scores=h,S,S")
    assert code == 0, out
    code, out, _ = run_cli("check", *SIZES, "--backward", "--expect", "d_scores=h,S,1")
    assert code == 1


def test_report_backward_has_the_training_section(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, _, err = run_cli("report", "--out", str(out), *SIZES, "--backward")
    assert code == 0, err
    page = out.read_text()
    assert "Training: the backward" in page
    assert "d_scores" in page


def test_csv_and_markdown_carry_the_backward_steps() -> None:
    code, out, _ = run_cli("run", *SIZES, "--backward", "--format", "csv")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith(",nonfinite,pass,saved")
    rows = {line.split(",")[1]: line for line in lines[1:]}
    assert rows["weights"].endswith(",forward,true")
    assert rows["d_scores"].endswith(",backward,false")
    code, out, _ = run_cli("run", *SIZES, "--format", "csv")
    assert out.splitlines()[0].endswith(",nonfinite")  # unchanged without --backward
    code, out, _ = run_cli("run", *SIZES, "--backward", "--format", "markdown")
    assert code == 0
    assert "| d_scores |" in out


def test_sweep_backward_adds_saved_bytes_eager_beside_flash() -> None:
    code, out, err = run_cli(
        "sweep",
        "--backward",
        "--seq",
        "64,256",
        "--heads",
        "4",
        "--hidden",
        "32",
        "--format",
        "json",
    )
    assert code == 0, err
    points = {(p["seq"], p["algorithm"]): p for p in json.loads(out)}
    eager, flash = points[(256, "eager")], points[(256, "flash")]
    weights = 4 * 4 * 256 * 256  # float32 (h, S, S)
    assert eager["saved_bytes"] == 4 * 256 * 32 * 5 + weights
    assert flash["saved_bytes"] == 4 * 256 * 32 * 6 + 4 * 4 * 256  # + output, + log-sum-exp
    assert flash["backward_flops"] > eager["backward_flops"]  # the tiles made again
    code, out, _ = run_cli(
        "sweep", "--seq", "64", "--heads", "4", "--hidden", "32", "--format", "csv"
    )
    assert "saved_bytes" not in out.splitlines()[0]  # unchanged without --backward


@pytest.mark.slow
def test_presets_backward_gives_training_figures_of_whole_models() -> None:
    code, out, err = run_cli("presets", "--backward", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    llama = next(p for p in doc["presets"] if p["name"] == "llama-3.1-8b")["whole_model"]
    assert llama["saved_bytes"] > 0
    assert llama["backward_flops"] > llama["flops"]
    per_token = (llama["flops"] + llama["backward_flops"]) / llama["keys"]
    assert abs(llama["train_flops_per_token"] - per_token) <= 1e-6 * per_token
    code, out, _ = run_cli("presets", "--format", "json")
    plain = next(p for p in json.loads(out)["presets"] if p["name"] == "llama-3.1-8b")
    assert "saved_bytes" not in plain["whole_model"]


@pytest.mark.slow
def test_the_version_2_schema_is_valid_and_shipped_and_documents_validate() -> None:
    from attntrace import AttentionConfig, trace_attention
    from attntrace.schemas import TRACE_SCHEMA_2_FILE
    from paths import SRC

    jsonschema.Draft202012Validator.check_schema(trace_schema_2())
    assert (SRC / "attntrace" / "schemas" / TRACE_SCHEMA_2_FILE).is_file()
    variants: list[dict[str, object]] = [
        {"batch": 2, "causal": True, "kv_heads": 2, "rope": True},
        {"kv_seq": 5, "kv_hidden": 12, "softcap": 5.0},
        {"relative_bias": "8,16", "qk_norm": "full"},
    ]
    for fields in variants:
        config = AttentionConfig(seq=4, hidden=16, heads=4, **fields)  # type: ignore[arg-type]
        doc = trace_attention(config, "shape", backward=True).to_dict()
        jsonschema.Draft202012Validator(trace_schema_2()).validate(doc)
        for step in doc["steps"]:  # the axes spell the shape, gradient steps too
            assert [config.size(a) for a in step["axes"]] == step["shape"], step["name"]
        assert sum(doc["backward"]["megatron_terms"].values()) == (
            doc["backward"]["megatron_bytes"] - doc["backward"]["ours_16bit_bytes"]
        )


def test_save_writes_every_gradient_beside_the_forward(tmp_path: Path) -> None:
    out = tmp_path / "trace.npz"
    code, _, err = run_cli("run", *SIZES, "--backward", "--save", str(out))
    assert code == 0, err
    with np.load(out) as saved:
        assert saved["d_x"].shape == (4, 8)
        assert saved["d_w_q"].shape == (8, 8)
        assert saved["weights"].shape == (2, 4, 4)


@pytest.mark.slow
def test_run_backward_table_matches_golden(golden: Callable[[str], None]) -> None:
    code, out, _ = run_cli(
        "run", "--backward", "--batch", "2", "--seq", "3", "--hidden", "4", "--heads", "2"
    )
    assert code == 0
    assert any(line.startswith("backward: (2, 3, 4) →") for line in out.splitlines()[:5])
    golden(out)
