"""Shared fixtures: golden files (regenerated only with --update-golden) and backends; the check
that every golden file belongs to a test; doctests that need torch skip where torch is missing."""

from __future__ import annotations

import ast
import doctest
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem, MultipleDoctestFailures

TESTS_DIR = Path(__file__).parent
GOLDEN_DIR = TESTS_DIR / "data" / "golden"

# The processes the tests start (the sandbox child, `python -m attntrace`, the docs' examples)
# reuse bytecode as an installed package does: with PYTHONDONTWRITEBYTECODE set (as on some
# machines) every one of them compiled attntrace's sources again. Set before xdist's workers start.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/data/golden/* from the current output",
    )


@pytest.fixture(autouse=True)
def english_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs in English whatever the machine's locale: a zh_* LANG would make --lang default
    to Chinese (issue 31) and every expected output differ. Tests of the locale pass their own."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if os.environ.get(name, "").lower().startswith("zh"):
            monkeypatch.setenv(name, "C.UTF-8")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare text with tests/data/golden/<test name>[-<suffix>].txt; --update-golden rewrites
    it."""

    def check(text: str, suffix: str = "") -> None:
        name = request.node.name.replace("[", "-").replace("]", "").replace("/", "_")
        path = GOLDEN_DIR / f"{name}{'-' + suffix if suffix else ''}.txt"
        if request.config.getoption("--update-golden"):
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"{path.name} is missing; create it with: pytest --update-golden"
        assert text == path.read_text(encoding="utf-8"), (
            f"output differs from {path.name}; if intended: pytest --update-golden"
        )

    return check


@pytest.fixture(params=["numpy", "torch"])
def compute_backend(request: pytest.FixtureRequest) -> str:
    """Both compute backends; CI installs torch, so nothing is skipped there."""
    if request.param == "torch":
        pytest.importorskip("torch")
    return str(request.param)


# --- golden files that no test reads ---------------------------------------------------------


def golden_tests(test_files: Iterable[Path]) -> set[str]:
    """The names of the test functions in ``test_files`` that take the ``golden`` fixture."""
    names = set()
    for path in test_files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if node.name.startswith("test") and any(a.arg == "golden" for a in params):
                    names.add(node.name)
    return names


def orphaned_golden_files(golden_dir: Path, tests_dir: Path) -> list[str]:
    """The files of ``golden_dir`` named after no test of ``tests_dir`` that takes ``golden``.

    The fixture names a file ``<test name>[-<parameter id>][-<suffix>].txt``, so a file belongs
    to test ``t`` when its stem is ``t`` or starts with ``t-``.
    """
    tests = golden_tests(tests_dir.rglob("test_*.py"))
    return sorted(
        path.name
        for path in golden_dir.iterdir()
        if not any(path.stem == t or path.stem.startswith(f"{t}-") for t in tests)
        or path.suffix != ".txt"
    )


# --- doctests that need torch ------------------------------------------------------------------


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or while handling."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def torch_is_missing() -> bool:
    try:
        return importlib.util.find_spec("torch") is None
    except ValueError:  # sys.modules["torch"] is None: imports of torch are blocked
        return True


def says_torch_is_missing(exc: BaseException) -> bool:
    """Whether a doctest's failure ``exc`` comes from ``import torch`` finding no torch."""
    if isinstance(exc, MultipleDoctestFailures):
        return all(says_torch_is_missing(f) for f in exc.failures)
    if not isinstance(exc, doctest.UnexpectedException):
        return False  # wrong output: a real failure, whatever is installed
    return torch_is_missing() and any(
        isinstance(e, ModuleNotFoundError) and (e.name or "").partition(".")[0] == "torch"
        for e in _chain(exc.exc_info[1])
    )


def skip_if_torch_is_missing(item: DoctestItem) -> None:
    """Make ``item`` skip, not fail, when what fails it is the missing torch."""
    run = item.runtest

    def runtest() -> None:
        try:
            run()
        except (doctest.UnexpectedException, MultipleDoctestFailures) as exc:
            if says_torch_is_missing(exc):
                pytest.skip("this doctest needs torch, which is not installed")
            raise

    item.runtest = runtest  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    if torch_is_missing():  # examples that import torch at the top are skipped, not errors
        config.option.doctest_ignore_import_errors = True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, DoctestItem):
            skip_if_torch_is_missing(item)
