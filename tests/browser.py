"""Headless Chromium for the tests that look at a page (the report, the documentation site): find
it, take a screenshot, collect what the page logged to its console."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

#: Headless Chromium as CI runs it: no sandbox (root), no GPU, nothing fetched in the background.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # the site test serves locally
    "--enable-logging=stderr",
    "--v=0",
)


#: Headless Chromium's names on PATH (Debian, Ubuntu's deb, Google's build) and Chrome's place
#: on macOS.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MACOS_CHROME = "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"


def chromium() -> str:
    """The headless browser; without one the test skips in one line (no root needed to run the
    suite), except under CI=1, where .ci/run has installed Debian's chromium and a missing one
    is a failure."""
    found = [path for name in BROWSERS if (path := shutil.which(name))]
    if not found and os.path.exists(MACOS_CHROME):
        found = [MACOS_CHROME]
    if found:
        return found[0]
    if os.environ.get("CI"):
        pytest.fail("chromium is missing; .ci/run installs it with apt-get install -y chromium")
    pytest.skip(f"no headless browser found ({', '.join(BROWSERS)} on PATH): page not rendered")


def render_in_browser(
    page: Path | str, tmp_path: Path, size: str = "1200,1600"
) -> tuple[np.ndarray, list[str]]:
    """A screenshot of ``page`` (a file, or a URL) as RGB floats, and the console messages it
    logged."""
    url = page.as_uri() if isinstance(page, Path) else page
    name = page.stem if isinstance(page, Path) else "page"
    shot = tmp_path / f"{name}.png"
    result = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            f"--window-size={size}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shot.exists(), result.stderr[-2000:]
    image = pytest.importorskip("matplotlib.image").imread(shot)[:, :, :3]
    shot.unlink()  # the next page of the same name gets a fresh file
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return image, console


def dom_after(page: Path, tmp_path: Path, script: str, size: str = "1280,1600") -> str:
    """The DOM of ``page`` (a file) after ``script`` ran on it once laid out, as headless
    Chromium dumps it: a copy of the page with the script at the end of its body."""
    probe = tmp_path / f"{page.stem}-probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", f"<script>{script}</script></body>"),
        encoding="utf-8",
    )
    result = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={size}",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=3000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout
