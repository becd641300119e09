"""`attntrace check` in every mode and every exit code, and the check logic behind it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, ConfigError, InputFileError, trace_attention
from attntrace.cli import app
from attntrace.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from attntrace.schemas import trace_schema
from attntrace.tools.check import (
    CaseResult,
    Mismatch,
    check_expectations,
    compare_golden,
    load_golden,
    load_spec,
    parse_expectation,
    run_spec,
    summary,
)
from attntrace.units import parse_shape
from paths import REPO

runner = CliRunner()


def check_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["check", *args], env={"COLUMNS": "100"})
    return result.exit_code, result.stdout, result.stderr


def save_golden(path: Path, *args: str) -> Path:
    result = runner.invoke(app, ["run", "--format", "json", *args])
    assert result.exit_code == 0, result.stderr
    jsonschema.validate(json.loads(result.stdout), trace_schema())
    path.write_text(result.stdout, encoding="utf-8")
    return path


def flat(text: str) -> str:
    """Table output with every run of whitespace as one space (column widths vary)."""
    return " ".join(text.split())


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dims"),
    [
        ("12,3,3", (12, 3, 3)),
        ("(12, 3, 3)", (12, 3, 3)),
        ("[12, 3, 3]", (12, 3, 3)),
        ("12x3x3", (12, 3, 3)),
        ("h,S,S", ("h", "S", "S")),
        ("B, h, S, 64", ("B", "h", "S", 64)),
        ("(768,)", (768,)),
        ("768", (768,)),
        ("()", ()),
    ],
)
def test_parse_shape_reads_every_documented_spelling(
    text: str, dims: tuple[int | str, ...]
) -> None:
    assert parse_shape(text) == dims


@pytest.mark.parametrize("text", ["12;3", "1.5,2", "h S S", "12,,3", "-1,2"])
def test_parse_shape_rejects_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ConfigError, match="cannot read the shape"):
        parse_shape(text)


@pytest.mark.parametrize("text", ["scores", "=12,3,3", ""])
def test_parse_expectation_needs_step_equals_shape(text: str) -> None:
    with pytest.raises(ConfigError, match="STEP=SHAPE"):
        parse_expectation(text)


def test_expectations_resolve_axis_letters_from_the_config() -> None:
    trace = trace_attention(AttentionConfig(batch=2, seq=5, hidden=16, heads=4), "shape")
    ok = [
        parse_expectation(e)
        for e in ("scores=B,h,S,S", "q_heads=B,S,h,d", "k_t=2,4,4,5", "output=2x5x16")
    ]
    assert check_expectations(trace, ok) == ()
    (bad,) = check_expectations(trace, [parse_expectation("scores=h,S,S")])
    assert bad == Mismatch(
        "scores", "h,S,S = (4, 5, 5)", "(2, 4, 5, 5) (B, h, S, S)", "expect scores=h,S,S"
    )


def test_batch_axis_of_an_unbatched_config_is_an_input_error() -> None:
    trace = trace_attention(AttentionConfig(), "shape")
    with pytest.raises(ConfigError, match=r"unknown axis 'B'.*S=3, H=768, h=12, d=64"):
        check_expectations(trace, [parse_expectation("scores=B,h,S,S")])


# --- --expect --------------------------------------------------------------------------------


def test_expect_all_hold_exits_0() -> None:
    code, out, err = check_cli(
        "--heads",
        "12",
        "--hidden",
        "768",
        "--expect",
        "scores=h,S,S",
        "-e",
        "output=3,768",
        "-e",
        "q=(12, 3, 64)",
    )
    assert (code, err) == (EXIT_OK, "")
    assert "ok: 3 passed, 0 failed" in out


def test_expect_failure_exits_1_with_step_expected_actual() -> None:
    code, out, err = check_cli(
        "--batch", "2", "-e", "scores=12,3,4", "-e", "output=B,S,H", "-e", "k_t=h,S,d"
    )
    assert code == EXIT_CHECK_FAILED
    assert err == ""
    assert "step" in out
    assert "expected" in out
    assert "actual" in out
    assert "scores (12, 3, 4) (2, 12, 3, 3) (B, h, S, S)" in flat(out)
    assert "k_t h,S,d = (12, 3, 64) (2, 12, 64, 3) (B, h, d, S)" in flat(out)
    assert "output" not in out.split("actual")[1]  # only the failures are listed
    assert "FAILED: 1 passed, 2 failed" in out


def test_unknown_step_exits_2_listing_the_valid_names() -> None:
    code, out, err = check_cli("-e", "score=12,3,3")
    assert code == EXIT_USAGE
    assert out == ""
    assert err.startswith(
        "attntrace: error: unknown step 'score' (did you mean scores?); valid steps: x, q_proj,"
    )
    assert "scores" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-e", "scores"), "write STEP=SHAPE"),
        (("-e", "scores=h;S"), "cannot read the shape"),
        (("-e", "scores=g,S,S"), "unknown axis 'g'"),
        ((), "nothing to check"),
        (("--heads", "5", "-e", "x=3,768"), "not divisible by --heads 5"),
    ],
)
def test_bad_expect_input_exits_2(args: tuple[str, ...], message: str) -> None:
    code, out, err = check_cli(*args)
    assert code == EXIT_USAGE
    assert message in err
    assert out == ""


def test_check_help_states_the_exit_codes() -> None:
    result = runner.invoke(app, ["check", "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "3 an internal error" in " ".join(result.stdout.split())
    assert "--expect" in result.stdout
    assert "--golden" in result.stdout
    assert "[config.NAME]" in result.stdout


# --- --golden --------------------------------------------------------------------------------


def test_golden_of_the_same_config_exits_0(tmp_path: Path) -> None:
    golden = save_golden(tmp_path / "trace.json", "--batch", "2", "--hidden", "16", "--heads", "4")
    code, out, err = check_cli(
        "--golden", str(golden), "--batch", "2", "--hidden", "16", "--heads", "4"
    )
    assert (code, err) == (EXIT_OK, "")
    assert "ok: 26 passed, 0 failed" in out  # 18 steps + 8 parameters


def test_golden_passes_on_every_backend_because_values_are_not_compared(
    tmp_path: Path, compute_backend: str
) -> None:
    golden = save_golden(
        tmp_path / "trace.json",
        "--hidden",
        "8",
        "--heads",
        "2",
        "--backend",
        compute_backend,
        "--seed",
        "1",
    )
    assert (
        check_cli("--golden", str(golden), "--hidden", "8", "--heads", "2", "--seed", "7")[0]
        == EXIT_OK
    )


@pytest.mark.slow
def test_golden_made_by_one_config_fails_against_another(tmp_path: Path) -> None:
    golden = save_golden(tmp_path / "trace.json", "--heads", "12", "--hidden", "768")
    code, out, err = check_cli("--golden", str(golden), "--heads", "8", "--hidden", "768")
    assert code == EXIT_CHECK_FAILED
    assert err == ""
    assert "note: the golden was made with heads=12 (now 8)" in out
    assert "step scores shape (12, 3, 3) (8, 3, 3)" in flat(out)
    assert "step x" not in out  # unchanged steps are not listed
    assert "FAILED: 14 passed, 12 failed" in out


@pytest.mark.slow
def test_golden_reports_dtype_and_batch_differences(tmp_path: Path) -> None:
    golden = save_golden(tmp_path / "trace.json", "--hidden", "8", "--heads", "2")
    code, out, _ = check_cli(
        "--golden",
        str(golden),
        "--hidden",
        "8",
        "--heads",
        "2",
        "--dtype",
        "float64",
        "--batch",
        "1",
    )
    assert code == EXIT_CHECK_FAILED
    assert "param w_q dtype" in out
    assert "float32" in out
    assert "float64" in out
    assert "step x shape" in out
    assert "(1, 3, 8)" in out
    assert "FAILED: 0 passed, 26 failed" in out


def test_compare_golden_lists_missing_and_extra_steps() -> None:
    trace = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2), "shape")
    doc = trace.to_dict()
    doc["steps"] = [s for s in doc["steps"] if s["name"] != "k_t"] + [
        {**doc["steps"][0], "name": "extra"}
    ]
    assert compare_golden(trace, doc) == (
        Mismatch("step extra", "present", "missing", "step extra"),
        Mismatch("step k_t", "absent", "present", "step k_t"),
    )


BAD_GOLDENS = {
    "invalid-json": ('{"schema": "attntrace.trace/1",', "not valid JSON"),
    "not-an-object": ("[1, 2]", "must be a JSON object"),
    "wrong-schema": (
        '{"schema": "other/2", "config": {}, "steps": [], "params": []}',
        '"schema" must be',
    ),
    "missing-steps": (
        '{"schema": "attntrace.trace/1", "config": {}, "params": []}',
        '"steps" must be a list',
    ),
    "shape-as-string": (
        (
            '{"schema": "attntrace.trace/1", "config": {}, "params": [], "steps": [{"name": '
            '"x", "shape": "3x4", "dtype": "float32"}]}'
        ),
        "steps[0].shape must be a list of whole numbers",
    ),
    "dtype-missing": (
        (
            '{"schema": "attntrace.trace/1", "config": {}, "steps": [], "params": [{"name": '
            '"w_q", "shape": [4, 4]}]}'
        ),
        "params[0].dtype must be a string",
    ),
    "not-utf8": (b"\xff\xfe{", "is not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(BAD_GOLDENS))
def test_malformed_golden_exits_2_naming_the_file(tmp_path: Path, case: str) -> None:
    content, message = BAD_GOLDENS[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = check_cli("--golden", str(path))
    assert code == EXIT_USAGE
    assert out == ""
    assert str(path) in err
    assert message in err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [(lambda p: p / "missing.json", "no such file"), (lambda p: p, "is a directory")],
)
def test_unreadable_golden_exits_2(tmp_path: Path, make: object, message: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    code, _, err = check_cli("--golden", str(path))
    assert code == EXIT_USAGE
    assert str(path) in err
    assert message in err


# --- --spec ----------------------------------------------------------------------------------

SPEC = """\
    # every config is checked on the shape backend unless it says otherwise
    [defaults]
    hidden = 768
    heads = 12

    [config.bert-base]
    batch = 2
    seq = 128
    expect = { scores = "B,h,S,S", output = [2, 128, 768] }

    [config.small-numpy]
    backend = "numpy"
    seq = 4
    hidden = 8
    heads = 2
    dtype = "float64"

    [config.small-numpy.expect]
    q_heads = "S,h,d"
    weights = "2x4x4"
    """


def test_spec_where_all_hold_exits_0(tmp_path: Path) -> None:
    spec = write(tmp_path / "shapes.toml", SPEC)
    code, out, err = check_cli("--spec", str(spec))
    assert (code, err) == (EXIT_OK, "")
    assert "PASS  bert-base  (2 checks)" in out
    assert "PASS  small-numpy  (2 checks)" in out
    assert "ok: 2 passed, 0 failed" in out


def test_spec_with_a_failing_config_exits_1_with_the_summary(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "shapes.toml",
        SPEC
        + """
    [config.gpt2]
    seq = 1024
    expect = { scores = "h,S,512", context = "h,S,d" }
    """,
    )
    code, out, err = check_cli("--spec", str(spec))
    assert code == EXIT_CHECK_FAILED
    assert err == ""
    assert "FAIL  gpt2  (2 checks)" in out
    assert "gpt2 scores h,S,512 = (12, 1024, 512) (12, 1024, 1024) (h, S, S)" in flat(out)
    assert "FAILED: 2 passed, 1 failed" in out


@pytest.mark.slow
def test_spec_golden_paths_are_relative_to_the_spec(tmp_path: Path) -> None:
    save_golden(tmp_path / "small.json", "--hidden", "8", "--heads", "2")
    spec = write(
        tmp_path / "shapes.toml",
        """\
        [config.same]
        hidden = 8
        heads = 2
        golden = "small.json"

        [config.wider]
        hidden = 16
        heads = 2
        golden = "small.json"
        """,
    )
    code, out, _ = check_cli("--spec", str(spec))
    assert code == EXIT_CHECK_FAILED
    assert "PASS  same  (26 checks)" in out
    assert "FAIL  wider" in out
    assert "FAILED: 1 passed, 1 failed" in out


BAD_SPECS = {
    "invalid-toml": ("[config.a\nseq = 3\n", "not valid TOML"),
    "no-configs": ("[defaults]\nseq = 3\n", "[config.NAME] tables"),
    "unknown-top-level": ("seq = 3\n[config.a]\n", "unknown top-level keys: seq"),
    "config-not-a-table": ("config = 3\n", "[config.NAME] tables"),
    "wrong-type": (
        '[config.a]\nseq = "three"\n',
        "[config.a]: seq must be a whole number, got 'three'",
    ),
    "bool-size": ("[config.a]\nheads = true\n", "[config.a]: heads must be a whole number"),
    "unknown-key": (
        "[config.a]\nsequence = 3\n",
        "[config.a]: unknown key 'sequence'; valid keys: batch, seq",
    ),
    "bad-config": (
        "[config.a]\nhidden = 10\nheads = 4\n",
        "[config.a]: --hidden 10 is not divisible by --heads 4",
    ),
    "expect-not-a-table": ('[config.a]\nexpect = "scores=1"\n', '"expect" must be a table'),
    "expect-bad-shape": (
        "[config.a]\nexpect = { scores = 3.5 }\n",
        "expect.scores must be a shape",
    ),
    "unknown-step": (
        '[config.a]\nexpect = { score = "h,S,S" }\n',
        "[config.a]: unknown step 'score' (did you mean scores?); valid steps: x,",
    ),
    "unknown-axis": (
        '[config.a]\nexpect = { scores = "B,h,S,S" }\n',
        "[config.a]: unknown axis 'B'",
    ),
    "unknown-backend": ('[config.a]\nbackend = "jax"\n', "[config.a]: unknown backend 'jax'"),
    "missing-golden": ('[config.a]\ngolden = "nope.json"\n', "nope.json: no such file"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_malformed_spec_exits_2_naming_the_file(tmp_path: Path, case: str) -> None:
    content, message = BAD_SPECS[case]
    spec = write(tmp_path / f"{case}.toml", content)
    code, out, err = check_cli("--spec", str(spec))
    assert code == EXIT_USAGE, out
    assert "Traceback" not in err
    assert message in err
    assert ("nope.json" if case == "missing-golden" else str(spec)) in err
    assert len(err.splitlines()) == 1


def test_missing_spec_exits_2(tmp_path: Path) -> None:
    code, _, err = check_cli("--spec", str(tmp_path / "none.toml"))
    assert code == EXIT_USAGE
    assert "spec file" in err
    assert "none.toml: no such file" in err


def test_spec_cannot_be_mixed_with_expect(tmp_path: Path) -> None:
    spec = write(tmp_path / "shapes.toml", SPEC)
    code, _, err = check_cli("--spec", str(spec), "-e", "x=3,768")
    assert code == EXIT_USAGE
    assert "--spec cannot be combined with --expect" in err


def test_spec_api_defaults_and_summary(tmp_path: Path) -> None:
    cases = load_spec(write(tmp_path / "shapes.toml", SPEC), backend="shape")
    assert [(c.name, c.backend, c.config) for c in cases] == [
        ("bert-base", "shape", AttentionConfig(batch=2, seq=128, hidden=768, heads=12)),
        ("small-numpy", "numpy", AttentionConfig(seq=4, hidden=8, heads=2, dtype="float64")),
    ]
    results = run_spec(cases)
    assert [r.ok for r in results] == [True, True]
    assert (
        summary([*results, CaseResult("x", 1, (Mismatch("a", "b", "c"),))]) == "2 passed, 1 failed"
    )


def test_load_golden_is_the_python_api_for_saved_traces(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace_attention(AttentionConfig(), "shape").to_dict()))
    assert load_golden(path)["steps"][11]["shape"] == [12, 3, 3]
    path.write_text("{}")
    with pytest.raises(InputFileError, match=r"t\.json: not an attntrace trace"):
        load_golden(path)


def test_the_example_spec_passes() -> None:
    spec = REPO / "examples" / "shapes.toml"
    code, out, err = check_cli("--spec", str(spec))
    assert (code, err) == (EXIT_OK, "")
    assert "ok: 3 passed, 0 failed" in out
    assert "PASS  llama-3-8b  (7 checks)" in out
