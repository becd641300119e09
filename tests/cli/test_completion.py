"""Shell completion (Typer's bash protocol, in a real process): preset names for --preset, step
names for --expect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paths import SRC


def complete(words: str) -> list[str]:
    """What bash completion offers for the last of ``words`` (Typer's completion protocol)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "_ATTNTRACE_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    code = "import sys; sys.argv[0] = 'attntrace'; from attntrace.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.slow
def test_completion_offers_preset_names() -> None:
    from attntrace.config.presets import PRESETS

    assert complete("attntrace run --preset llama-3") == [
        n for n in PRESETS if n.startswith("llama-3")
    ]
    assert "mistral-7b" in complete("attntrace check --preset ")


@pytest.mark.slow
def test_completion_offers_step_names_for_expect() -> None:
    assert complete("attntrace check --expect sc") == ["scores=", "scaled="]
    offered = complete("attntrace check -e ")
    for name in ("x=", "q_rot=", "k_rep=", "masked=", "s_tile=", "o_block="):
        assert name in offered
