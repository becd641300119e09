"""Startup stays light: --help and shape-only runs import neither numpy nor torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import sys, runpy
sys.argv = ["attntrace", *{args!r}]
try:
    runpy.run_module("attntrace", run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
heavy = sorted(m for m in ("numpy", "torch") if m in sys.modules)
print("HEAVY:", heavy, file=sys.stderr)
"""


def imported_heavy(*args: str) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "100"}
    result = subprocess.run([sys.executable, "-c", PROBE.format(args=list(args))], capture_output=True, text=True,
                            env=env, check=True, timeout=120)
    return result.stderr.strip().splitlines()[-1], result.stdout


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["sweep", "--help"]])
def test_help_imports_neither_numpy_nor_torch(args: list[str]) -> None:
    heavy, _ = imported_heavy(*args)
    assert heavy == "HEAVY: []"


def test_shape_backend_prints_a_4_tib_trace_without_numpy() -> None:
    heavy, out = imported_heavy("run", "--heads", "64", "--hidden", "8192", "--seq", "131072", "--backend", "shape")
    assert heavy == "HEAVY: []"
    assert "(64, 131072, 131072)" in out
    assert "4.00 TiB" in out
    assert "no values" in out


def test_shape_sweep_imports_neither_numpy_nor_torch() -> None:
    heavy, _ = imported_heavy("sweep", "--seq", "128,131072", "--format", "csv")
    assert heavy == "HEAVY: []"
