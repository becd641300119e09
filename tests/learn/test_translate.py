"""translate(): a printed English sentence found in the catalogue by its template, its
figures carried into the Chinese; what fits no template stays English."""

from __future__ import annotations

import pytest

from attntrace.learn.lang import clauses, requested_lang, translate


def test_a_template_carries_its_figures() -> None:
    said = translate(
        "--hidden 768 is not divisible by --heads 5; valid head counts for hidden "
        "768: 1, 2, 3, 4, 6, 8, 12, 16 (or set --head-dim)",
        "zh",
    )
    assert said.startswith("--hidden 768 不是 --heads 5 的整数倍")
    assert "1, 2, 3, 4, 6, 8, 12, 16" in said


def test_a_figure_that_is_a_sentence_is_translated_too() -> None:
    said = translate("fix: apply the mask to the scaled scores before the softmax", "zh")
    assert said == "改法：在 softmax 之前把掩码加到缩放后的分数上"


def test_clauses_are_translated_one_by_one_and_unknown_ones_stay() -> None:
    said = translate("--heads must be at least 1, got 0; something new", "zh")
    assert said == "--heads 至少为 1，而不是 0；something new"


def test_a_clause_is_cut_outside_brackets_only() -> None:
    assert clauses("a (b; c); d [e; f]") == ["a (b; c)", "d [e; f]"]


def test_a_phrase_that_only_happens_to_fit_stays_english() -> None:
    """ "{kind} at {where}" must not eat a sentence that merely holds " at "."""
    assert translate("score bytes held at once", "zh") == "同时保存的分数字节数"
    assert translate("a quick brown fox at the door", "zh") == "a quick brown fox at the door"


def test_a_figure_keeps_its_brackets_paired() -> None:
    said = translate(
        "bug: softmax over the wrong axis (dim=1, S) (applied to the reference it reproduces "
        "the code to 4.3e-08)",
        "zh",
    )
    assert said.startswith("bug：softmax 归一化的维度不对（dim=1，S）（施加到参考实现上")
    assert said.endswith("它重现了你的代码，误差 4.3e-08）")


def test_english_is_left_alone() -> None:
    text = "--heads must be at least 1, got 0"
    assert translate(text, "en") is text


def test_only_the_cell_words_translate_a_cell() -> None:
    assert translate("scores", "zh", "cell.") == "scores"  # a step name
    assert translate("(missing)", "zh", "cell.") == "（缺失）"


@pytest.mark.parametrize(
    ("args", "env", "lang"),
    [
        (["run", "--lang", "zh"], {}, "zh"),
        (["run", "--lang=zh", "--help"], {"LANG": "C"}, "zh"),
        (["run", "--lang", "en"], {"LANG": "zh_CN.UTF-8"}, "en"),
        (["run", "--lang", "fr"], {"LANG": "zh_CN.UTF-8"}, "zh"),  # refused later, by click
        (["run"], {"LC_ALL": "zh_TW.UTF-8", "LANG": "C"}, "zh"),
        (["run", "--lang"], {}, "en"),
    ],
)
def test_the_command_line_asks_for_a_language_before_it_is_parsed(
    args: list[str], env: dict[str, str], lang: str
) -> None:
    assert requested_lang(args, env) == lang
