"""`check` for CI: --format json|junit (validated against the JUnit schema), GitHub annotations,
a bad config reported as an error while the others are still checked, -v listing passes."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from attntrace.render.check_report import render_junit
from attntrace.tools.check import CaseResult, Mismatch, spec_lines
from paths import DATA

runner = CliRunner()
JUNIT_XSD = DATA / "schemas" / "junit.xsd"

MIXED = """\
    [defaults]
    hidden = 768
    heads = 12

    [config.bert-base]
    batch = 2
    seq = 128
    expect = { scores = "B,h,S,S", output = [2, 128, 768] }

    [config.broken]
    hidden = 10
    heads = 4

    [config.gpt2]
    seq = 1024

    [config.gpt2.expect]
    scores = "h,S,512"
    context = "h,S,d"
    """


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def check_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(
        app, ["check", *args], env={"COLUMNS": "100", "GITHUB_ACTIONS": "", **(env or {})}
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return write(tmp_path / "shapes.toml", MIXED)


def test_a_bad_config_is_an_error_and_the_others_are_still_checked(mixed: Path) -> None:
    code, out, err = check_cli("--spec", str(mixed))
    assert code == EXIT_USAGE  # an error outranks a failure
    assert "PASS  bert-base  (2 checks)" in out
    assert "ERROR  broken:" in out
    assert "FAIL  gpt2  (2 checks)" in out
    assert "FAILED: 1 passed, 1 failed, 1 error" in out
    assert err.count("\n") == 1
    assert "[config.broken]: --hidden 10 is not divisible by --heads 4" in err


def test_failures_without_errors_exit_1_and_verbose_lists_passes(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "s.toml",
        MIXED.replace("    [config.broken]\n    hidden = 10\n    heads = 4\n", ""),
    )
    code, out, err = check_cli("--spec", str(spec), "-v")
    assert (code, err) == (EXIT_CHECK_FAILED, "")
    assert "  passed  expect scores=B,h,S,S" in out
    assert "  passed  expect context=h,S,d" in out
    assert "  passed  expect scores=h,S,512" not in out
    code, out, _ = check_cli("--spec", str(spec))
    assert "passed  expect" not in out


def test_verbose_without_a_spec(tmp_path: Path) -> None:
    code, out, _ = check_cli("-e", "scores=h,S,S", "-e", "output=3,768", "-v")
    assert code == EXIT_OK
    assert "passed  expect scores=h,S,S" in out
    assert "passed  expect output=3,768" in out


def test_spec_lines_find_tables_and_keys() -> None:
    lines = spec_lines(textwrap.dedent(MIXED))
    assert lines["config.bert-base"] == 5
    assert lines["config.bert-base.expect.scores"] == 8
    assert lines["config.bert-base.expect.output"] == 8
    assert lines["config.broken"] == 10
    assert lines["config.gpt2.expect.context"] == 19


def test_json_report(mixed: Path) -> None:
    code, out, _ = check_cli("--spec", str(mixed), "--format", "json")
    assert code == EXIT_USAGE
    doc = json.loads(out)
    assert doc["schema"] == "attntrace.check/1"
    assert doc["summary"] == {"configs": 3, "passed": 1, "failed": 1, "errors": 1, "checks": 5}
    assert [c["status"] for c in doc["configs"]] == ["passed", "error", "failed"]
    failed = [c for c in doc["checks"] if c["status"] == "failed"]
    assert failed == [
        {
            "config": "gpt2",
            "check": "expect scores=h,S,512",
            "status": "failed",
            "line": 18,
            "message": "scores: expected h,S,512 = (12, 1024, 512), got (12, 1024, 1024) (h, S, S)",
            "step": None,
            "location": None,
        }
    ]  # step, location: only for check --trace


@pytest.mark.slow
def test_junit_validates_against_the_schema_one_testcase_per_check(mixed: Path) -> None:
    code, out, _ = check_cli("--spec", str(mixed), "--format", "junit")
    assert code == EXIT_USAGE
    xmlschema.XMLSchema(JUNIT_XSD).validate(out)
    root = ET.fromstring(out)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "1", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["bert-base", "broken", "gpt2"]
    assert [c.get("name") for c in suites[2].findall("testcase")] == [
        "expect scores=h,S,512",
        "expect context=h,S,d",
    ]
    failure = suites[2].find("testcase/failure")
    assert failure is not None
    assert failure.text is not None
    assert failure.text.startswith(f"{mixed}:18: scores: expected")
    error = suites[1].find("testcase/error")
    assert error is not None
    assert "not divisible" in (error.get("message") or "")


def test_the_schema_rejects_what_ci_readers_reject() -> None:
    """The schema is not a rubber stamp: a testcase without a name, or a count that is no number."""
    schema = xmlschema.XMLSchema(JUNIT_XSD)
    good = render_junit(
        [CaseResult("a", 1, (Mismatch("x", "(1,)", "(2,)", "expect x=1"),), checks=("expect x=1",))]
    )
    schema.validate(good)
    assert not schema.is_valid(good.replace('name="expect x=1" ', ""))
    assert not schema.is_valid(good.replace('tests="1"', 'tests="one"', 1))
    assert not schema.is_valid(good.replace("<testcase ", '<testcase line="3" '))


def test_junit_of_a_passing_check_without_spec() -> None:
    code, out, _ = check_cli("-e", "scores=h,S,S", "--format", "junit")
    assert code == EXIT_OK
    xmlschema.XMLSchema(JUNIT_XSD).validate(out)
    assert ET.fromstring(out).find("testsuite/testcase/failure") is None


def test_github_annotations_point_at_spec_lines(mixed: Path) -> None:
    code, out, _ = check_cli("--spec", str(mixed), env={"GITHUB_ACTIONS": "true"})
    assert code == EXIT_USAGE
    annotations = [line for line in out.splitlines() if line.startswith("::error")]
    assert annotations == [
        f"::error file={mixed},line=10,title=attntrace check broken::config: {mixed}: "
        "[config.broken]: --hidden 10 is not divisible by --heads 4; valid head counts for "
        "hidden 10: 1, 2, 5, 10 (or set --head-dim)",
        f"::error file={mixed},line=18,title=attntrace check gpt2::expect scores=h,S,512: "
        "scores: expected h,S,512 = (12, 1024, 512), got (12, 1024, 1024) (h, S, S)",
    ]


def test_annotations_go_to_stderr_beside_a_document(mixed: Path) -> None:
    code, out, err = check_cli("--spec", str(mixed), "-f", "json", env={"GITHUB_ACTIONS": "true"})
    assert code == EXIT_USAGE
    json.loads(out)  # stdout stays one document
    assert err.count("::error file=") == 2


def test_no_annotations_outside_github(mixed: Path) -> None:
    _, out, err = check_cli("--spec", str(mixed))
    assert "::error" not in out + err
