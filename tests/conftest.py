"""Shared fixtures: golden files (regenerated only with --update-golden) and backends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/data/golden/* from the current output",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare text with tests/data/golden/<test name>[-<suffix>].txt; --update-golden rewrites it."""

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
