"""The corpus of broken attention code (tests/data/broken/): every shape error is explained at the
line that broke, with the rule of the failing op and, for the known mistakes, the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from attntrace.capturing.explain import explain, is_shape_error
from attntrace.capturing.runner import run_script
from paths import DATA

BROKEN = sorted((DATA / "broken").glob("*.py"))


def _expected(path: Path) -> tuple[int, list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    words = [w.strip() for w in lines[0].removeprefix("# expect:").split("|")]
    line = next(n for n, text in enumerate(lines, 1) if text.endswith("# breaks"))
    return line, words


def test_the_corpus_has_at_least_twelve_programs_in_both_flavours() -> None:
    assert len(BROKEN) >= 12
    assert {p.name[0] for p in BROKEN} == {"t", "n"}  # torch and numpy


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_shape_error_is_explained_at_the_right_line(path: Path) -> None:
    if path.name.startswith("t"):
        pytest.importorskip("torch")
    line, words = _expected(path)
    outcome = run_script(path, [])
    failure = outcome.capture.failure
    assert outcome.exit_code == 1
    assert failure is not None
    assert failure.error is outcome.error
    assert failure.site.location == f"{path.name}:{line}"
    assert is_shape_error(failure)
    text = explain(failure)
    said = f"{text.rule} | {text.fix}"
    for word in words:
        assert word in said, said


def test_matmul_rule_names_the_axes() -> None:
    path = next(p for p in BROKEN if p.stem == "n01_k_not_transposed")
    failure = run_script(path, []).capture.failure
    assert failure is not None
    assert [o.axes for o in failure.operands] == [("h", "S", "d"), ("h", "S", "d")]
    assert explain(failure).rule == (
        "matmul contracts the last axis of q (d=96) with the second-to-last of k (S=3); 96 ≠ 3"
    )
