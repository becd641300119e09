"""The variant options of `attntrace run`: output, and one line + exit 2 for every impossible
combination."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", *args], env={"COLUMNS": "100"})
    return result.exit_code, result.stdout, result.stderr


def test_causal_gqa_rope_run_shows_the_variant_steps() -> None:
    code, out, err = invoke(
        "--batch",
        "2",
        "--seq",
        "4",
        "--hidden",
        "16",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--causal",
        "--key-lengths",
        "4,2",
        "--rope",
        "--no-bias",
    )
    assert code == 0, err
    assert "grouped-query causal self-attention with RoPE, key padding, no bias" in out
    for name in ("rope_cos", "q_rot", "k_rep", "v_rep", "mask", "masked"):
        assert f" {name} " in out
    assert "KV cache: 2 (k, v) x g=2 x d=4 x 4 B (float32) = 64 B per token and layer" in out
    assert "b_q" not in out
    assert "q0 1.000     ·     ·     ·" in out  # masked cells are dots


def test_cross_attention_heat_map_is_s_by_n() -> None:
    code, out, err = invoke(
        "--seq", "2", "--kv-seq", "5", "--kv-hidden", "6", "--hidden", "8", "--heads", "2"
    )
    assert code == 0, err
    assert "cross-attention" in out
    assert "(2, 2, 5)" in out
    assert "k4" in out
    assert "q1" in out
    assert "q2" not in out


def test_fully_masked_row_is_a_note_not_nan(tmp_path: Path) -> None:
    keep = np.ones((3, 3), dtype=bool)
    keep[1] = False
    np.save(tmp_path / "m.npy", keep)
    code, out, err = invoke("--hidden", "8", "--heads", "2", "--mask", str(tmp_path / "m.npy"))
    assert code == 0, err
    assert "warning: 2 query row(s) attend to no key" in " ".join(out.split())
    assert "nan" not in out
    assert err == ""


def test_preset_runs_and_flags_override_it() -> None:
    code, out, err = invoke("--preset", "llama-3-8b", "--backend", "shape", "--kv-heads", "1")
    assert code == 0, err
    assert "multi-query causal self-attention with RoPE, no bias" in out
    assert "H=4096  h=32  g=1  d=128" in out


def test_hf_config_run(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "hidden_size": 3584,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "rope_theta": 1000000.0,
            }
        )
    )
    code, out, err = invoke("--hf-config", str(path), "--backend", "shape", "--seq", "2")
    assert code == 0, err
    assert "H=3584  h=28  g=4  d=128" in out


def _save(tmp_path: Path, name: str, array: object) -> str:
    path = tmp_path / name
    if name.endswith(".pkl.npy"):
        path.write_bytes(b"\x93NUMPY" + pickle.dumps(array))
    else:
        np.save(path, array)
    return str(path)


ERRORS = [
    (
        ["--heads", "12", "--kv-heads", "5"],
        "--heads 12 is not divisible by --kv-heads 5; use one of 1, 2, 3, 4, 6, 12",
    ),
    (["--heads", "4", "--hidden", "8", "--kv-heads", "8"], "not divisible by --kv-heads 8"),
    (["--key-lengths", "3"], "--key-lengths needs --batch (one length per batch item)"),
    (["--batch", "2", "--key-lengths", "3"], "--key-lengths has 1 length(s) but --batch is 2"),
    (
        ["--batch", "1", "--key-lengths", "4"],
        "--key-lengths 4 does not fit the 3 keys; use lengths from 1 to 3 (or raise --seq)",
    ),
    (["--batch", "1", "--key-lengths", "0"], "use lengths from 1 to 3"),
    (
        ["--batch", "1", "--key-lengths", "x"],
        "--key-lengths takes whole numbers separated by commas",
    ),
    (["--rope", "--hidden", "10", "--heads", "2"], "--rope needs an even head_dim, got d = 5"),
    (["--rope", "--kv-seq", "4"], "drop --rope or --kv-seq"),
    (["--rope-base", "500"], "--rope-base has no effect without rotary embeddings; add --rope"),
    (["--rope", "--rope-base", "0"], "--rope-base must be a number > 0"),
    (["--head-dim", "0"], "--head-dim must be at least 1, got 0"),
    (["--kv-seq", "0"], "--kv-seq must be at least 1"),
    (["--kv-hidden", "-2"], "--kv-hidden must be at least 1"),
    (["--kv-heads", "0"], "--kv-heads must be at least 1"),
    (["--hidden", "10", "--heads", "4"], "(or set --head-dim)"),
    (["--heads", "4", "--hidden", "8", "--head", "4"], "--head 4 does not exist; use 0 to 3"),
    (["--preset", "nine"], "unknown preset 'nine'; use one of bert-base"),
    (["--preset", "llama3-8b"], "unknown preset 'llama3-8b' (did you mean llama-3-8b?); use one"),
    (
        ["--heads", "4", "--hidden", "8", "--head", "12"],
        "use 0 to 3 (--head picks the head shown; the count is --heads 12)",
    ),
    (
        ["--preset", "gpt2", "--hf-config", "config.json"],
        "use either --preset or --hf-config, not both",
    ),
    (["--preset", "llama-3-8b", "--kv-heads", "5"], "--heads 32 is not divisible by --kv-heads 5"),
    (["--preset", "llama-3-8b", "--heads", "12"], "--hidden 4096 is not divisible by --heads 12"),
]


@pytest.mark.parametrize(("args", "message"), ERRORS)
def test_impossible_combinations_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    code, _out, err = invoke(*args)
    assert code == 2
    assert err.startswith("attntrace: error: "), err
    assert err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize(
    ("name", "array", "message"),
    [
        (
            "shape.npy",
            np.ones((2, 3), dtype=bool),
            "--mask of shape (2, 3) does not broadcast to the scores (h, S, S) = (12, 3, 3)",
        ),
        ("big.npy", np.ones((2, 1, 3, 3), dtype=bool), "does not broadcast"),
        ("scalar.npy", np.array(True), "does not broadcast"),
        (
            "int.npy",
            np.ones((3, 3), dtype=np.int64),
            "holds int64; save booleans (True = attend) or floats",
        ),
        ("nan.npy", np.full((3, 3), np.nan), "holds NaN or +inf"),
        ("obj.pkl.npy", np.array([1, None], dtype=object), "cannot read --mask"),
    ],
)
def test_bad_mask_files(tmp_path: Path, name: str, array: object, message: str) -> None:
    code, _, err = invoke("--mask", _save(tmp_path, name, array))
    assert code == 2
    assert err.count("\n") == 1
    assert message in err


def test_pickled_mask_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pickled.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, _, err = invoke("--mask", str(path))
    assert code == 2
    assert "cannot read --mask" in err
    assert "pickle" in err.lower()


def test_missing_mask_file(tmp_path: Path) -> None:
    code, _, err = invoke("--mask", str(tmp_path / "nope.npy"))
    assert code == 2
    assert "cannot read --mask" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"hidden_size": 768}', "has none of the fields num_attention_heads, n_head, num_heads"),
        ('{"num_attention_heads": 12}', "has none of the fields hidden_size, n_embd, d_model"),
        (
            '{"num_attention_heads": "12", "hidden_size": 768}',
            'num_attention_heads must be a whole number from 1 to 2147483647, got "12"',
        ),
        (
            (
                '{"num_attention_heads": 32, "hidden_size": 4096, "rope_scaling": '
                '{"rope_type": "longrope"}}'
            ),
            "rope scaling 'longrope' is not modelled",
        ),
        (
            '{"model_type": "mpt", "num_attention_heads": 32, "hidden_size": 4096, '
            '"attn_config": {"alibi_bias_max": 16}}',
            "alibi_bias_max 16 is not modelled",
        ),
        ('{"text_config": {}}', "multimodal config"),
        (
            '{"num_attention_heads": 12, "hidden_size": 768, "num_key_value_heads": 5}',
            "not divisible by --kv-heads 5",
        ),
    ],
)
def test_bad_hf_config(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    code, _, err = invoke("--hf-config", str(path))
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize("name", ["Llama-3-8B", "meta-llama/Meta-Llama-3-8B", "llama-3-8b"])
def test_a_preset_is_found_in_any_case_and_by_its_repository(name: str) -> None:
    from typer.testing import CliRunner

    from attntrace.cli import app

    result = CliRunner().invoke(
        app, ["run", "--preset", name, "--seq", "4", "--backend", "shape"], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    assert "from --preset llama-3-8b" in result.stdout
    assert "h=32  g=8  d=128" in result.stdout
