"""`--alibi` from the command line: run's steps, costs and words (English and Chinese), the JSON
document, verify against SDPA with the bias as a float mask, a decode step with a paged cache,
sweep and compare, and one line + exit 2 for every combination no model has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app

runner = CliRunner()
SIZES = ["--heads", "12", "--hidden", "96", "--seq", "5"]


def invoke(*args: str, lang: str = "en") -> tuple[int, str, str]:
    env = {"COLUMNS": "120", "NO_COLOR": "1", "LANG": "zh_CN.UTF-8" if lang == "zh" else "C"}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_run_shows_the_bias_steps_their_costs_and_the_kind() -> None:
    code, out, err = invoke("run", "--alibi", "--causal", *SIZES)
    assert code == 0, err
    assert "multi-head causal self-attention with ALiBi" in out
    assert "position_bias  alibi_slopes * (j - i)" in out
    assert "biased         scaled + position_bias" in out
    assert "where(mask, biased, -inf)" in out
    assert "position_bias       300  h·S·S" in out  # one multiply per (head, query, key)


def test_explain_says_what_alibi_is_in_both_languages() -> None:
    code, out, err = invoke("run", "--alibi", *SIZES, "--explain")
    said = " ".join(out.split())
    assert code == 0, err
    assert "ALiBi's position bias: head h adds slope_h · (j - i)" in said
    assert "(slopes 0.5 for the first head down to 0.08839 for the last" in said
    code, out, err = invoke("run", "--alibi", *SIZES, "--explain", lang="zh")
    assert code == 0, err
    assert "ALiBi的位置偏置：第h个头加上slope_h·(j-i)" in "".join(out.split())


def test_the_json_document_holds_the_flag_and_the_steps() -> None:
    code, out, err = invoke("run", "--alibi", *SIZES, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["config"]["alibi"] is True
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["position_bias"]["shape"] == [12, 5, 5]
    assert steps["biased"]["op"] == "scaled + position_bias"
    code, out, _ = invoke("run", *SIZES, "--format", "json")
    assert "alibi" not in json.loads(out)["config"]  # off: absent, as the other variants


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["--causal", "--kv-heads", "4"],
        ["--causal", "--algorithm", "flash", "--block-size", "2"],
        ["--causal", "--seq", "1", "--past", "6", "--page-size", "4"],
        ["--causal", "--batch", "2", "--seq", "2", "--past", "6", "--window", "4"],
    ],
    ids=" ".join,
)
def test_verify_passes_against_sdpa_with_the_bias_as_a_float_mask(extra: list[str]) -> None:
    code, out, err = invoke("verify", "--alibi", *SIZES, *extra)
    assert code == 0, out + err
    assert "PASS" in out
    assert "n/a: SDPA" not in " ".join(out.split())  # the bias is in every SDPA reference


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rope"], "--alibi and --rope both encode positions (no model uses both); drop one"),
        (["--relative-bias", "32,128"], "--alibi and --relative-bias both encode positions"),
        (["--kv-seq", "7"], "drop --alibi or --kv-seq (cross-attention has no ALiBi)"),
        (["--backward"], "--backward does not cover --alibi yet"),
        (["--tp", "2"], "--alibi is not traced across devices yet; drop it or drop --tp/--cp"),
    ],
)
def test_combinations_no_model_has_are_one_line_and_exit_2(args: list[str], words: str) -> None:
    code, out, err = invoke("run", "--alibi", *SIZES, *args)
    assert code == 2, out
    assert words in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_typo_names_the_option() -> None:
    code, _, err = invoke("run", "--alibli", *SIZES)
    assert code == 2
    assert "--alibi" in err


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"model_type": "bloom", "n_head": 4, "hidden_size": 32}, "with ALiBi"),
        ({"model_type": "mpt", "num_attention_heads": 4, "hidden_size": 32}, "with ALiBi"),
        (
            {"model_type": "falcon", "num_attention_heads": 4, "hidden_size": 32, "alibi": True},
            "alibi_slopes * scale * (j - i)",  # Falcon: the bias before the scale
        ),
        ({"model_type": "falcon", "num_attention_heads": 4, "hidden_size": 32}, "with RoPE"),
    ],
)
def test_a_config_json_says_alibi_itself(
    fields: dict[str, object], words: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    code, out, err = invoke("run", "--hf-config", str(path), "--backend", "shape")
    assert code == 0, err
    assert words in out
