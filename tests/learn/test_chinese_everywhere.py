"""Under LANG=zh_CN.UTF-8 (or --lang zh) every word a learner meets is Chinese: every command's
--help, the verdicts of check, verify, compare, sweep, presets, trace and diff, and one error of
every class; step names, JSON keys, shapes and code stay as they are. The catalogues of the
interface hold both languages for every key."""

from __future__ import annotations

import contextlib
import io
import string
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.cli.root import COMMANDS
from attntrace.learn.catalogue_cli import MESSAGES as CLI
from attntrace.learn.catalogue_help import MESSAGES as HELP
from attntrace.learn.lang import translate
from chinese import english_runs

runner = CliRunner()
ZH = {"LANG": "zh_CN.UTF-8", "LC_ALL": "", "LC_MESSAGES": "", "COLUMNS": "200", "NO_COLOR": "1"}


def zh(*args: str) -> tuple[int, str]:
    """A command run under a Chinese locale: its exit code and everything it printed."""
    result = runner.invoke(app, list(args), env=ZH)
    return result.exit_code, result.stdout + result.stderr


#: Chinese characters and the full-width punctuation of Chinese text.
CJK = frozenset(map(chr, [*range(0x3000, 0x3040), *range(0x4E00, 0xA000), *range(0xFF00, 0xFFF0)]))


def fields(text: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}


@pytest.mark.parametrize("key", sorted({**CLI, **HELP}))
def test_every_message_has_both_languages_with_the_same_placeholders(key: str) -> None:
    en, cn = {**CLI, **HELP}[key]
    assert en.strip(), key
    assert cn.strip(), key
    assert fields(en) == fields(cn), key
    assert cn == en or any(c in CJK for c in cn), key  # the Chinese is Chinese


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_is_chinese(command: str | None) -> None:
    code, out = zh(*([command] if command else []), "--help")
    assert code == 0, out
    assert "显示本帮助并退出" in out
    assert english_runs(out) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_help_has_its_chinese(command: str) -> None:
    """Names the option whose English help changed without its Chinese (the help test above
    would only say that English is left)."""
    import typer.main

    click_command = typer.main.get_command(app).get_command(None, command)  # type: ignore[attr-defined]
    untranslated = [
        param.name
        for param in click_command.params
        if getattr(param, "help", None)
        and translate(" ".join(param.help.split()), "zh") == " ".join(param.help.split())
    ]
    assert untranslated == []


def test_lang_zh_gives_chinese_help_under_an_english_locale() -> None:
    result = runner.invoke(app, ["check", "--lang", "zh", "--help"], env={"LANG": "C.UTF-8"})
    assert "检查一次追踪的形状" in result.stdout
    result = runner.invoke(app, ["check", "--help"], env={"LANG": "C.UTF-8"})
    assert "Check the shapes of a trace" in result.stdout
    assert "检查" not in result.stdout


VERDICTS = {
    "check passes": ["check", "--expect", "scores=h,S,S", "-v"],
    "check fails": ["check", "--expect", "scores=h,S,S", "--expect", "k=S,h"],
    "compare": ["compare", "--seq", "8", "--vs", "--causal --kv-heads 4"],
    "sweep": ["sweep", "--seq", "128,512"],
    "presets": ["presets"],
    "run": ["run", "--kv-heads", "4", "--causal", "--rope", "--explain"],
    "run --past": ["run", "--past", "8", "--seq", "1", "--causal", "--backend", "shape"],
    "run --backward": ["run", "--backward", "--hidden", "16", "--heads", "2", "--backend", "shape"],
}


@pytest.mark.parametrize("name", list(VERDICTS))
def test_every_verdict_is_chinese(name: str) -> None:
    code, out = zh(*VERDICTS[name])
    assert code in (0, 1), out
    assert english_runs(out) == []


def test_check_says_pass_and_fail_in_chinese() -> None:
    assert "通过：1 项通过，0 项失败" in zh(*VERDICTS["check passes"])[1]
    code, out = zh(*VERDICTS["check fails"])
    assert code == 1
    assert "失败：1 项通过，1 项失败" in out
    assert "未通过的检查" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--batch", "2", "--seq", "5", "--hidden", "64", "--heads", "8", "--kv-heads", "2"],
        ["--seq", "1", "--past", "8", "--causal", "--rope", "--layers", "4"],
        ["--hidden", "16", "--heads", "2", "--backward", "--layers", "2"],
        ["--seq", "6", "--algorithm", "flash", "--block-size", "2", "--causal"],
    ],
)
def test_the_report_is_chinese(args: list[str], tmp_path: Path) -> None:
    import html
    import re

    page = tmp_path / "report.html"
    code, out = zh("report", "--out", str(page), "--explain", *args)
    assert code == 0, out
    text = page.read_text(encoding="utf-8")
    assert '<html lang="zh">' in text
    assert "<th>步骤</th><th>运算</th><th>形状</th><th>维度</th><th>类型</th>" in text
    assert " object at 0x" not in text  # every cell written as its words
    words = html.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", "\n", text, flags=re.S))
    assert english_runs(words) == []


@pytest.mark.slow
def test_verify_says_pass_in_chinese() -> None:
    pytest.importorskip("torch")
    code, out = zh("verify", "--hidden", "16", "--heads", "2", "--seq", "3")
    assert code == 0, out
    assert "通过：全部 26 项比较都在 float32 的容差内" in out
    assert english_runs(out) == []


BAD_SHAPES = """
import numpy as np
x = np.random.rand(3, 768)
w_q = np.random.rand(768, 768)
q = (x @ w_q).reshape(3, 12, 64).transpose(1, 0, 2)
k = (x @ w_q).reshape(3, 12, 64).transpose(1, 0, 2)
scores = q @ k
"""


@pytest.mark.slow
def test_trace_says_the_rule_and_the_fix_in_chinese(tmp_path: Path) -> None:
    script = tmp_path / "attn.py"
    script.write_text(BAD_SHAPES)
    code, out = zh("trace", str(script))
    assert code == 1
    assert "形状错误，位于 attn.py:7" in out
    assert "规则：matmul 把 q 的最后一个维度（d=64）与 k 的倒数第二个维度（S=3）相乘求和" in out
    assert "改法：K 没有转置：应乘以 k.transpose(-2, -1)" in out
    assert english_runs(out) == []


@pytest.mark.slow
@pytest.mark.parametrize("lang", [["--lang", "zh"], []])
def test_diff_names_the_bug_in_chinese(lang: list[str]) -> None:
    pytest.importorskip("torch")
    example = Path(__file__).parents[2] / "examples" / "diff" / "softmax_axis.py"
    args = ["diff", f"{example}:attention", "--hidden", "16", "--heads", "4", "--seq", "4"]
    code, out = zh(*args, *lang)
    assert code == 1
    assert "不一致（DIFFERS）：从第 weights 步开始" in out
    # the example is numpy code: its axis words and its fix in numpy (h41b's wording)
    assert "bug：softmax 归一化的维度不对（axis=1，S）" in out
    assert "改法：应沿键所在的维度（axis=-1）归一化：e / e.sum(axis=-1, keepdims=True)" in out
    assert english_runs(out) == []


@pytest.mark.slow
def test_diff_names_a_kv_cache_bug_in_chinese() -> None:
    pytest.importorskip("torch")
    example = Path(__file__).parents[2] / "examples" / "diff" / "kv_cache_stale.py"
    target = f"{example}:CausalSelfAttention"
    code, out = zh("diff", target, "--batch", "1", "--seq", "1", "--past", "3", "--causal")
    assert code == 1
    assert "bug：缓存没有更新：这一步返回的是传进来的缓存，没有新词" in out
    assert "形状不同，(1, 4, 3, 8) 对 (1, 4, 4, 8)" in out
    assert english_runs(out) == []


@pytest.mark.slow
def test_diff_names_a_backward_bug_in_chinese() -> None:
    pytest.importorskip("torch")
    example = Path(__file__).parents[2] / "examples" / "diff" / "hand_backward.py"
    args = ["--batch", "2", "--seq", "4", "--backward"]
    code, out = zh("diff", f"{example}:HandAttention", *args)
    assert code == 1
    assert "不一致（DIFFERS）：从梯度 d_w_q 开始" in out
    assert "bug：softmax 的反向传播少了按行求和的那一项" in out
    assert english_runs(out) == []


@pytest.mark.slow
def test_a_timeout_is_said_in_chinese(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    code, out = zh("trace", str(script), "--timeout", "1")
    assert code == 1
    assert "attntrace：被测代码运行超过了 1 秒，停在 slow.py:" in out
    assert english_runs(out) == []


#: One error of every class the CLI turns into its one line, and how to cause it.
ERRORS = {
    "ConfigError": (["run", "--heads", "5"], "不是 --heads 5 的整数倍"),
    "ConfigError (lang)": (["run", "--heads", "0"], "--heads 至少为 1，而不是 0"),
    "InputFileError": (["run", "--weights", "no-such-file.npz"], "没有这个文件；请检查路径"),
    "MemoryBudgetError": (["run", "--seq", "1000", "--max-memory", "1KiB"], "但内存预算只有"),
    "TargetError": (["trace", "no-such-script.py"], "没有这个文件：no-such-script.py"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_every_error_class_is_chinese(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args, words = ERRORS[name]
    code, out = zh(*args)
    assert code == 2
    assert out.startswith("attntrace：错误："), out
    assert words in out
    assert english_runs(out) == []


def test_a_missing_library_is_chinese(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """BackendUnavailableError: --plot without matplotlib."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out = zh("run", "--hidden", "8", "--heads", "2", "--plot", str(tmp_path / "w.png"))
    assert code == 2
    assert "--plot 需要 matplotlib，但它没有安装；安装方法：pip install" in out
    assert english_runs(out) == []


def test_an_internal_error_is_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    import attntrace.engine.attention as engine

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "trace_attention", broken)
    code, out = zh("run")
    assert code == 3
    assert "内部错误（RuntimeError: boom）；这是 attntrace" in out
    assert english_runs(out) == []


USAGE = {
    "no such option": ["run", "--hed", "3"],
    "not an integer": ["run", "--heads", "x"],
    "not a choice": ["run", "--format", "xml"],
    "missing argument": ["diff"],
    "missing option": ["report"],
    "no such command": ["nosuch"],
    "extra argument": ["run", "extra"],
    "option needs a value": ["run", "--heads"],
}


@pytest.mark.parametrize("name", list(USAGE))
def test_every_usage_error_is_chinese(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """click's usage errors, as the console script prints them (attntrace.cli.typer_app.main)."""
    from attntrace.cli.typer_app import main

    for key, value in ZH.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["attntrace", *USAGE[name]])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 2
    line = err.getvalue()
    assert line.startswith("attntrace：错误："), line
    assert line.count("\n") == 1, line
    assert english_runs(line) == []


def test_english_stays_english() -> None:
    result = runner.invoke(app, ["run", "--heads", "5"], env={"LANG": "C.UTF-8"})
    assert result.stderr.startswith("attntrace: error: --hidden 768 is not divisible")


def test_a_cannot_tell_of_a_choice_nobody_stated_is_chinese() -> None:
    """The CANNOT TELL of an unstated causal mask or RoPE pairing: every clause in Chinese."""
    from attntrace.diffing.verdict import Read, _unstated

    read = (Read("causal", True, "GPT2Attention.is_causal"),)
    for args in [
        ("causal", "--no-causal", "applies no causal mask", read),
        ("causal", "--causal", "applies a causal mask", ()),
        ("rope_style", "--rope-style interleaved", "pairs RoPE's dims as interleaved", ()),
    ]:
        why = _unstated(*args)
        for english in (why.missing, why.remedy):
            chinese = translate(english, "zh")
            assert english_runs(chinese) == [], chinese
