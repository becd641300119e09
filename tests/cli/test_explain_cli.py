"""``attntrace run --explain --lang``: the words in the table view, the JSON (valid against the
schema), the markdown; the language from the locale; csv refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.schemas import trace_schema
from paths import REPO

EXAMPLES = REPO / "examples"

runner = CliRunner()
SMALL = ("--seq", "3", "--hidden", "8", "--heads", "2")


def run_cli(*args: str, lang: str = "C.UTF-8") -> tuple[int, str, str]:
    env = {"COLUMNS": "100", "NO_COLOR": "1", "LANG": lang, "LC_ALL": "", "LC_MESSAGES": ""}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def flat(text: str) -> str:
    """The text with every run of whitespace one space (the table wraps long sentences)."""
    return " ".join(text.split())


def test_explain_adds_the_words_of_every_step_to_the_table() -> None:
    code, out, err = run_cli("run", *SMALL, "--explain")
    assert code == 0, err
    assert "what each step does" in out
    assert "Divides every score by √4 = 2" in flat(out)
    assert "every row sums to 1" in flat(out)
    code, plain, _ = run_cli("run", *SMALL)
    assert "what each step does" not in plain
    assert plain.splitlines()[3] == out.splitlines()[3]  # the steps table itself unchanged


def test_lang_zh_writes_the_headers_and_words_in_chinese_and_keeps_the_contract() -> None:
    code, out, err = run_cli("run", *SMALL, "--explain", "--lang", "zh")
    assert code == 0, err
    assert "步骤（所有张量均为 float32）" in out
    assert "每一步做什么" in out
    assert "相似度分数" in out
    assert "q_heads" in out  # step names and shapes as they are
    assert "(3, 2, 4)" in out


def test_the_default_language_comes_from_the_locale() -> None:
    _, out, _ = run_cli("run", *SMALL, "--explain", lang="zh_CN.UTF-8")
    assert "每一步做什么" in out
    _, out, _ = run_cli("run", *SMALL, "--explain", "--lang", "en", lang="zh_CN.UTF-8")
    assert "what each step does" in out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_json_has_an_explanation_per_step_and_stays_valid(lang: str) -> None:
    code, out, err = run_cli("run", *SMALL, "--explain", "--lang", lang, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    assert all(step["explanation"] for step in doc["steps"])
    assert [s["name"] for s in doc["steps"]][:2] == ["x", "q_proj"]
    _, plain, _ = run_cli("run", *SMALL, "--format", "json")
    assert "explanation" not in plain


def test_markdown_lists_what_each_step_does() -> None:
    code, out, err = run_cli("run", *SMALL, "--explain", "--format", "markdown")
    assert code == 0, err
    assert "**what each step does**" in out
    assert "- **merged**: Concatenates the 2 heads of 4 numbers" in out


def test_explain_with_csv_is_refused_in_one_line() -> None:
    code, out, err = run_cli("run", *SMALL, "--explain", "--format", "csv")
    assert code == 2
    assert out == ""
    assert err.strip().count("\n") == 0
    assert "--explain works with --format table, json, markdown" in err


def test_an_unknown_language_is_refused() -> None:
    code, _, err = run_cli("run", *SMALL, "--lang", "fr")
    assert code == 2
    assert "fr" in err


def test_report_explain_adds_a_column_of_words(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    code, _, err = run_cli("report", "--out", str(page), *SMALL, "--explain", "--lang", "zh")
    assert code == 0, err
    text = page.read_text(encoding="utf-8")
    assert "<th>解释</th>" in text
    assert "拼接多头" in text
    code, _, _ = run_cli("report", "--out", str(page), *SMALL)
    assert "<th>explanation</th>" not in page.read_text(encoding="utf-8")


@pytest.mark.slow
def test_trace_explain_says_what_the_users_lines_do_with_their_sizes() -> None:
    notes = str(EXAMPLES / "seed_001_numpy.py")
    code, out, err = run_cli("trace", notes, "--explain", "--lang", "zh")
    assert code == 0, err
    text = flat(out)
    assert "每一步做什么" in text
    assert "seed_001_numpy.py:29" in text  # scores = Query @ Key.T, on the user's line
    assert "相似度分数" in text
    code, out, err = run_cli("trace", notes, "--explain", "--format", "json")
    assert code == 2
    assert "trace --explain works with --format table" in err


@pytest.mark.slow
def test_lang_zh_writes_the_heat_maps_title_and_the_reports_headings(tmp_path: Path) -> None:
    code, out, _ = run_cli("run", *SMALL, "--batch", "2", "--lang", "zh")
    assert code == 0
    assert "注意力权重，第 0 个样本的第 0 个头（行：查询，列：键；每行之和为 1）" in out
    page = tmp_path / "r.html"
    code, _, _ = run_cli("report", *SMALL, "--out", str(page), "--lang", "zh")
    assert code == 0
    html = page.read_text(encoding="utf-8")
    assert '<html lang="zh">' in html
    for heading in ("数据流", "步骤", "注意力权重", "计算量与内存", "配置"):
        assert f"<h2>{heading}</h2>" in html
    code, english, _ = run_cli("run", *SMALL, "--batch", "2")
    assert "attention weights, head 0 of batch item 0 (rows: queries, columns: keys;" in english
