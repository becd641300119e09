"""Where the tests find the repository and their data (tests/data/), from any test folder."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
DATA = REPO / "tests" / "data"
