"""The suite's own checks in conftest.py. Every file in tests/data/golden/ is read by a test: the
golden fixture names a file ``<test name>[-<parameter id>][-<suffix>].txt``, so a file named
after no test that takes the fixture is left over from a renamed or deleted test, and fails the
run. A doctest skips where torch is missing only when its failure comes from ``import torch``."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path

import pytest
from _pytest.doctest import MultipleDoctestFailures

from conftest import (
    GOLDEN_DIR,
    TESTS_DIR,
    orphaned_golden_files,
    says_torch_is_missing,
    torch_is_missing,
)


@pytest.mark.slow
def test_every_golden_file_is_named_after_a_test_that_reads_it() -> None:
    assert sorted(GOLDEN_DIR.iterdir()), "no golden files found: is GOLDEN_DIR right?"
    orphans = orphaned_golden_files(GOLDEN_DIR, TESTS_DIR)
    assert orphans == [], f"golden files no test reads (delete or rename them): {orphans}"


def test_the_check_finds_files_of_missing_tests_and_tests_without_the_fixture(
    tmp_path: Path,
) -> None:
    tests, golden = tmp_path / "tests", tmp_path / "golden"
    (tests / "area").mkdir(parents=True)
    golden.mkdir()
    (tests / "area" / "test_thing.py").write_text(
        "import pytest\n\n"
        "def test_a(golden): ...\n\n"
        "@pytest.mark.parametrize('n', [1])\n"
        "def test_b(n, golden): ...\n\n"
        "def test_c(): ...\n\n"
        "class TestD:\n"
        "    def test_d(self, *, golden): ...\n",
        encoding="utf-8",
    )
    (tests / "helpers.py").write_text("def test_e(golden): ...\n", encoding="utf-8")
    read = ["test_a.txt", "test_a-svg.txt", "test_b-1.txt", "test_b-1-html.txt", "test_d.txt"]
    orphans = ["notes.md", "test_a.md", "test_ab.txt", "test_c.txt", "test_e.txt", "test_f.txt"]
    for name in read + orphans:
        (golden / name).write_text("x", encoding="utf-8")
    assert orphaned_golden_files(golden, tests) == orphans


def failure_of(code: str) -> doctest.UnexpectedException:
    """The failure a doctest runner reports for an example that runs ``code`` and raises."""
    test = doctest.DocTest([], {}, "t", None, 0, None)
    try:
        exec(code, {})
    except Exception:
        return doctest.UnexpectedException(test, doctest.Example(code, ""), sys.exc_info())
    raise AssertionError(f"{code!r} did not raise")


def test_only_a_failure_from_importing_the_missing_torch_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not installed
    needs = failure_of("import torch")
    chained = failure_of(
        "try:\n    import torch.nn\nexcept ImportError as e:\n    raise ValueError('no') from e"
    )
    other = failure_of("import attntrace_no_such_module")
    wrong = doctest.DocTestFailure(needs.test, needs.example, "got this")
    assert says_torch_is_missing(needs)
    assert says_torch_is_missing(chained)
    assert says_torch_is_missing(MultipleDoctestFailures([needs, chained]))
    assert not says_torch_is_missing(other)
    assert not says_torch_is_missing(failure_of("1 / 0"))
    assert not says_torch_is_missing(wrong)  # wrong output fails, torch or not
    assert not says_torch_is_missing(MultipleDoctestFailures([needs, other]))
    monkeypatch.undo()
    if not torch_is_missing():  # installed: the same failure is a real one
        assert not says_torch_is_missing(needs)
