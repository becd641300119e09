"""Startup stays light: --help and shape-only runs import neither numpy nor torch, and a small
run starts no thread pool and leaves threadpoolctl alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paths import REPO

PROBE = """
import sys, runpy
sys.argv = ["attntrace", *{args!r}]
try:
    runpy.run_module("attntrace", run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
heavy = sorted(m for m in {watch!r} if m in sys.modules)
print("HEAVY:", heavy, file=sys.stderr)
"""


def imported_heavy(*args: str, watch: tuple[str, ...] = ("numpy", "torch")) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "100"}
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)  # as a user's shell has them
    code = PROBE.format(args=list(args), watch=watch)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return result.stderr.strip().splitlines()[-1], result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["sweep", "--help"]])
def test_help_imports_neither_numpy_nor_torch(args: list[str]) -> None:
    heavy, _ = imported_heavy(*args)
    assert heavy == "HEAVY: []"


def test_shape_backend_prints_a_4_tib_trace_without_numpy() -> None:
    heavy, out = imported_heavy(
        "run", "--heads", "64", "--hidden", "8192", "--seq", "131072", "--backend", "shape"
    )
    assert heavy == "HEAVY: []"
    assert "(64, 131072, 131072)" in out
    assert "4.00 TiB" in out
    assert "no values" in out


def test_shape_sweep_imports_neither_numpy_nor_torch() -> None:
    heavy, _ = imported_heavy("sweep", "--seq", "128,131072", "--format", "csv")
    assert heavy == "HEAVY: []"


@pytest.mark.slow
def test_a_small_run_starts_no_pool_and_skips_threadpoolctl() -> None:
    # BLAS was loaded with one thread (small work): limiting it again is nothing to do, and
    # drawing 2.4M weights on a pool cost more in a fresh process than it saved
    heavy, out = imported_heavy(
        "run",
        "--heads",
        "12",
        "--hidden",
        "768",
        watch=("numpy", "threadpoolctl", "concurrent.futures"),
    )
    assert heavy == "HEAVY: ['numpy']"
    assert "(3, 12, 64)" in out


@pytest.mark.slow
def test_blas_pinned_only_when_every_thread_variable_says_one() -> None:
    code = (
        "import attntrace.backends as b; b.single_threaded_blas(); import numpy;"
        "from threadpoolctl import threadpool_info;"
        "print(b.blas_pinned(), sorted({i['num_threads'] for i in threadpool_info()"
        " if i['user_api'] == 'blas'}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["PYTHONPATH"] = str(REPO / "src")

    def probe(**extra: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**env, **extra},
            check=True,
            timeout=120,
        ).stdout.strip()

    assert probe() == "True [1]"
    # the user's own choice of 2 threads: BLAS has 2, and one_thread_each must limit them
    assert probe(OPENBLAS_NUM_THREADS="2").startswith("False")
