"""`check` and `sweep` take run's size, variant and preset options, and mean the same by them;
sweep, verify and presets take --format/-f as run does."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, ConfigError, trace_attention
from attntrace.cli import app
from attntrace.config.presets import PRESETS
from attntrace.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from attntrace.tools.check import (
    check_expectations,
    load_spec,
    parse_expectation,
    run_spec,
)
from attntrace.units import parse_shape

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100"})
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# Option sets that each change the trace; run and check must build the same config from them.
OPTION_SETS = {
    "preset": ("--preset", "llama-3-8b", "--seq", "5"),
    "preset-overridden": (
        "--preset",
        "llama-3-8b",
        "--seq",
        "4",
        "--kv-heads",
        "1",
        "--no-causal",
        "--no-rope",
    ),
    "decoupled-head-dim": ("--preset", "gemma-7b", "--seq", "3"),
    "cross": (
        "--batch",
        "2",
        "--seq",
        "3",
        "--kv-seq",
        "5",
        "--kv-hidden",
        "12",
        "--hidden",
        "16",
        "--heads",
        "4",
    ),
    "gqa-head-dim": (
        "--seq",
        "4",
        "--hidden",
        "16",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--head-dim",
        "6",
        "--no-bias",
    ),
    "masks-rope": (
        "--batch",
        "2",
        "--seq",
        "4",
        "--hidden",
        "16",
        "--heads",
        "2",
        "--causal",
        "--key-lengths",
        "4,2",
        "--rope",
        "--rope-base",
        "500",
    ),
    "flash": (
        "--seq",
        "10",
        "--hidden",
        "16",
        "--heads",
        "4",
        "--algorithm",
        "flash",
        "--block-size",
        "4",
        "--scale",
        "none",
    ),
}


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_check_builds_the_config_that_run_builds(tmp_path: Path, name: str) -> None:
    args = OPTION_SETS[name]
    code, out, err = cli("run", "--backend", "shape", "--format", "json", *args)
    assert code == 0, err
    golden = tmp_path / "golden.json"
    golden.write_text(out, encoding="utf-8")
    code, out, err = cli("check", "--golden", str(golden), *args)
    assert (code, err) == (EXIT_OK, ""), out
    assert "note:" not in out  # no config field differs from the golden's
    code, out, _ = cli(
        "check", "--golden", str(golden), "--seq", "7"
    )  # a plain config is not the same
    assert code == EXIT_CHECK_FAILED


def test_check_a_preset_with_the_gqa_axis_letters() -> None:
    code, out, err = cli(
        "check",
        "--preset",
        "llama-3-8b",
        "--seq",
        "16",
        "--expect",
        "k_rep=h,S,d",
        "--expect",
        "k_proj=S,g·d",
        "-e",
        "k_proj=S,g*d",
        "-e",
        "k_proj=16,1024",
        "-e",
        "k=g,S,d",
        "-e",
        "q_proj=S,H",
        "-e",
        "q_proj=S,h*d",
        "-e",
        "rope_cos=S,d",
        "-e",
        "mask=S,S",
    )
    assert (code, err) == (EXIT_OK, ""), out
    assert "ok: 9 passed, 0 failed" in out


def test_check_reports_a_product_axis_that_does_not_hold() -> None:
    code, out, _ = cli("check", "--preset", "llama-3-8b", "--seq", "16", "-e", "k_proj=S,h*d")
    assert code == EXIT_CHECK_FAILED
    assert "k_proj S,h·d = (16, 4096) (16, 1024) (S, g·d)" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--kv-seq", "5", "--kv-hidden", "12"), ("scores=h,S,N", "k_proj=N,H", "x_kv=N,M")),
        (
            ("--hidden", "12", "--heads", "4", "--head-dim", "5"),
            ("q_proj=S,h*d", "merged=S,h*d", "output=S,H"),
        ),
        (
            ("--algorithm", "flash", "--block-size", "2", "--seq", "5"),
            ("s_tile=h,Br,Bc", "q_block=h,Br,d", "context=h,S,d"),
        ),
        (("--batch", "2", "--key-lengths", "3,1"), ("mask=B,1,1,S", "masked=B,h,S,S")),
    ],
)
def test_check_takes_every_variant_option(args: tuple[str, ...], expect: tuple[str, ...]) -> None:
    code, out, err = cli("check", *args, *(a for e in expect for a in ("-e", e)))
    assert (code, err) == (EXIT_OK, ""), out
    assert f"ok: {len(expect)} passed, 0 failed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--rope-base", "500", "-e", "x=S,H"),
            "--rope-base has no effect without rotary embeddings",
        ),
        (("--preset", "nope", "-e", "x=S,H"), "unknown preset 'nope'"),
        (("--heads", "12", "--kv-heads", "5", "-e", "x=S,H"), "kv-heads"),
        (
            ("-e", "k=g,S,d"),
            (
                "unknown axis 'g' in k=g,S,d; axes of this config: S=3, H=768, h=12, d=64 (g "
                "only with --kv-heads below --heads)"
            ),
        ),
        (("-e", "s_tile=h,Br,Bc"), "unknown step 's_tile'"),
        (("--key-lengths", "3,x", "-e", "x=S,H"), "--key-lengths takes whole numbers"),
    ],
)
def test_check_option_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    code, out, err = cli("check", *args)
    assert code == EXIT_USAGE, out
    assert message in err
    assert len(err.splitlines()) == 1


def test_check_help_lists_the_variant_and_preset_options() -> None:
    code, out, _ = cli("check", "--help")
    assert code == 0
    for option in (
        "--preset",
        "--hf-config",
        "--kv-seq",
        "--kv-hidden",
        "--kv-heads",
        "--head-dim",
        "--no-bias",
        "--causal",
        "--key-lengths",
        "--rope",
        "--rope-base",
        "--scale",
        "--algorithm",
        "--block-size",
    ):
        assert option in out, option


@pytest.mark.parametrize(
    ("text", "dims"),
    [
        ("S,g*d", ("S", "g·d")),
        ("S, g · d", ("S", "g·d")),
        ("(S, h·d)", ("S", "h·d")),
        ("B,2*d", ("B", "2·d")),
    ],
)
def test_parse_shape_reads_products_of_axes(text: str, dims: tuple[str, ...]) -> None:
    assert parse_shape(text) == dims


@pytest.mark.parametrize("text", ["S,g**d", "S,*d", "S,g*", "S,g·"])
def test_parse_shape_rejects_broken_products(text: str) -> None:
    with pytest.raises(ConfigError, match="cannot read the shape"):
        parse_shape(text)


def test_expectations_resolve_every_label_the_trace_uses() -> None:
    """Every step's own axis labels, written back as an expectation, hold (h·d, g·d, N, M, Br …)."""
    configs = [
        AttentionConfig(
            batch=2,
            seq=4,
            hidden=12,
            heads=4,
            head_dim_override=5,
            kv_heads=2,
            kv_seq=3,
            kv_hidden=7,
        ),
        AttentionConfig(
            batch=1, seq=9, hidden=16, heads=4, kv_heads=1, algorithm="flash", block_size=4
        ),
        AttentionConfig(
            batch=2, seq=4, hidden=8, heads=2, key_lengths=(4, 1), causal=True, rope=True
        ),
    ]
    for config in configs:
        trace = trace_attention(config, "shape")
        expectations = [
            parse_expectation(f"{s.name}={','.join(s.axes)}") for s in trace.steps if s.axes
        ]
        assert check_expectations(trace, expectations) == ()


# --- spec files ------------------------------------------------------------------------------


def test_spec_presets_sit_between_the_defaults_and_the_table(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "shapes.toml",
        """\
        [defaults]
        hidden = 768
        heads = 12
        batch = 2

        [config.llama]
        preset = "llama-3-8b"
        seq = 16
        kv_heads = 4
        expect = { k_proj = "B,S,g*d", k_rep = "B,h,S,d", scores = [2, 32, 16, 16] }

        [config.plain]
        seq = 4
        expect = { scores = "B,h,S,S" }
        """,
    )
    llama, plain = load_spec(spec)
    p = PRESETS["llama-3-8b"]
    assert llama.config == AttentionConfig(
        batch=2,
        seq=16,
        hidden=p.hidden,
        heads=p.heads,
        kv_heads=4,
        bias=False,
        causal=True,
        rope=True,
        rope_base=500000.0,
    )
    assert plain.config == AttentionConfig(batch=2, seq=4, hidden=768, heads=12)
    assert [r.ok for r in run_spec([llama, plain])] == [True, True]


def test_spec_takes_the_variant_keys_and_run_spellings(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
            }
        )
    )
    spec = write(
        tmp_path / "shapes.toml",
        """\
        [config.variants]
        seq = 4
        hidden = 12
        heads = 4
        head_dim = 6
        kv_seq = 5
        kv_hidden = 7
        kv_heads = 2
        bias = false
        scale = "none"
        expect = { q_proj = "S,h*d", k_proj = "N,g*d", scores = "h,S,N" }

        [config.flash]
        seq = 10
        algorithm = "flash"
        block_size = 4
        scale = 1
        rope_base = 500000
        expect = { s_tile = "h,Br,Bc" }

        [config.masked]
        batch = 2
        key_lengths = [3, 1]
        causal = true
        expect = { mask = "B,1,S,S" }

        [config.from-file]
        hf_config = "models/config.json"
        expect = { k_proj = "S,g*d" }
        """,
    )
    cases = load_spec(spec)
    variants, flash, masked, from_file = (c.config for c in cases)
    assert (variants.head_dim, variants.scale, variants.bias) == (6, 1.0, False)
    assert (flash.scale, flash.rope_base) == (1.0, 500000)
    assert masked.key_lengths == (3, 1)
    assert (from_file.hidden, from_file.heads, from_file.kv_heads, from_file.rope) == (
        64,
        4,
        2,
        True,
    )
    code, out, err = cli("check", "--spec", str(spec))
    assert (code, err) == (EXIT_OK, ""), out
    assert "ok: 4 passed, 0 failed" in out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('preset = "nope"', "[config.a]: unknown preset 'nope'"),
        (
            'preset = "gpt2"\nhf_config = "config.json"',
            "[config.a]: use either preset or hf_config, not both",
        ),
        ("preset = 3", '[config.a]: "preset" and "hf_config" must be strings'),
        (
            "head_dim = 8\nhead_dim_override = 8",
            "[config.a]: use either head_dim or head_dim_override",
        ),
        ('scale = "big"', "[config.a]: --scale must be sqrt, none or a positive number"),
        ('hf_config = "missing.json"', "missing.json"),
    ],
)
def test_bad_spec_presets_and_variants_exit_2(tmp_path: Path, body: str, message: str) -> None:
    spec = write(tmp_path / "bad.toml", f'[config.a]\n{body}\nexpect = {{ x = "S,H" }}\n')
    code, out, err = cli("check", "--spec", str(spec))
    assert code == EXIT_USAGE, out
    assert message in err
    assert len(err.splitlines()) == 1


# --- sweep -----------------------------------------------------------------------------------


def _sweep_csv(*args: str) -> tuple[list[dict[str, str]], str]:
    code, out, err = cli("sweep", "--format", "csv", *args)
    assert code == 0, err
    return list(csv.DictReader(io.StringIO(out))), err


def test_sweep_takes_a_preset_causal_mask_included() -> None:
    rows, _ = _sweep_csv("--preset", "llama-3-8b", "--seq", "128,256", "--algorithms", "eager")
    p = PRESETS["llama-3-8b"]
    assert {(r["heads"], r["hidden"], r["algorithm"]) for r in rows} == {
        (str(p.heads), str(p.hidden), "eager")
    }
    assert [int(r["kv_cache_bytes_per_token"]) for r in rows] == [
        2 * p.kv_heads * p.head_dim * 4
    ] * 2
    scores = trace_attention(
        AttentionConfig(
            seq=256,
            hidden=p.hidden,
            heads=p.heads,
            kv_heads=p.kv_heads,
            causal=True,
            rope=True,
            bias=False,
        ),
        "shape",
    ).score_bytes
    assert int(rows[1]["score_bytes"]) == scores
    both, _ = _sweep_csv("--preset", "llama-3-8b", "--seq", "128")  # causal flash runs too
    assert [r["algorithm"] for r in both] == ["eager", "flash"]


def test_sweep_takes_the_variant_options_and_algorithms() -> None:
    rows, _ = _sweep_csv(
        "--preset",
        "llama-3-8b",
        "--no-causal",
        "--seq",
        "128",
        "--algorithms",
        "flash",
        "--kv-heads",
        "1",
        "--block-size",
        "64",
    )
    assert [r["algorithm"] for r in rows] == ["flash"]
    assert int(rows[0]["kv_cache_bytes_per_token"]) == 2 * 1 * 128 * 4
    assert int(rows[0]["score_bytes"]) == 32 * 64 * 64 * 4  # one tile
    rows, _ = _sweep_csv("--seq", "64", "--heads", "4,8")  # lists still override
    assert {r["heads"] for r in rows} == {"4", "8"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--algorithms", "eager,fast"), "--algorithms takes eager and/or flash"),
        (("--preset", "gpt2", "--heads", "5"), "not divisible by --heads 5"),
        (("--rope-base", "5"), "--rope-base has no effect"),
    ],
)
def test_sweep_option_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    code, _, err = cli("sweep", "--seq", "64", *args)
    assert code == EXIT_USAGE
    assert message in err


@pytest.mark.parametrize("command", ["sweep", "verify", "presets"])
def test_format_has_the_short_flag(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert any("--format" in x and " -f " in x for x in result.output.splitlines())
