"""benchmarks/bench.py --quick runs every section end to end (a smoke test: no timing is
asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# the benchmarks end to end (fresh processes): .ci/run runs this after the README's command
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

pytest.importorskip("torch")  # the baseline of the compute and memory sections
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"


def test_bench_quick_prints_every_section_as_a_markdown_page() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--markdown"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert page.startswith("# Benchmarks")
    assert "**Machine.**" in page
    assert "load average" in page
    for section in (
        "| start-up | attntrace --help",
        "| start-up | attntrace run --heads 12 --hidden 768",
        "| command line | attntrace run --batch 1",
        "| compute | trace_attention(cfg) numpy flash",
        "| compute, same work | attntrace run, no tuning flags (in process) | torch script in "
        "process",
        "| contended | flash slowdown / eager slowdown",
        "| memory, mask causal | numpy flash",
    ):
        assert section in page, section
    assert "Load average at the end" in page
    figures = "\n".join(line for line in page.splitlines() if line.startswith("|"))  # the table
    assert "nan" not in figures.lower()
    assert "inf×" not in figures
    assert " 0.0 MiB" not in figures
    assert " 0 KiB" not in figures


@pytest.mark.slow
def test_bench_prompt_quick_times_both_sides() -> None:
    """benchmarks/bench_prompt.py --quick: a 2-layer folder, run --prompt beside the script."""
    pytest.importorskip("transformers")
    done = subprocess.run(
        [sys.executable, str(BENCH.with_name("bench_prompt.py")), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "attntrace run --prompt" in done.stdout
    assert "transformers script" in done.stdout
    ratio = float(done.stdout.split("ratio attntrace / transformers: ")[1].split()[0])
    assert 0 < ratio < 100
