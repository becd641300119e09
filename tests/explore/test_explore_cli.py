"""attntrace explore as a user starts it: --no-browser prints the URL with its token, the page
answers there, and Ctrl-C stops it cleanly (exit 0, one line); bad options are one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from paths import SRC


@pytest.mark.slow
def test_no_browser_prints_the_url_and_ctrl_c_stops_it() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "attntrace", "explore", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        url = r"http://127\.0\.0\.1:\d+/\?token=\w{32,}"
        found = re.fullmatch(rf"attntrace explore: ({url})\n", line)
        assert found, line
        with urllib.request.urlopen(found.group(1), timeout=30) as response:
            assert response.status == 200
            assert b"attntrace explore" in response.read()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert out.strip().splitlines()[-1] == "attntrace explore: stopped"
    assert "Traceback" not in err


def test_model_without_a_prompt_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["explore", "--no-browser", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "explore reads --model DIR with --prompt TEXT; add --prompt" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_empty_prompt_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["explore", "--no-browser", "--prompt", " "])
    assert result.exit_code == 2
    assert "--prompt is empty" in result.output
    assert len(result.output.strip().splitlines()) == 1
