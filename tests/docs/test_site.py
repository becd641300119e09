"""The documentation site: built with ``mkdocs build --strict`` (no broken link, anchor or nav
entry), and its home and tutorial pages rendered in headless Chromium, served over HTTP as a
reader gets them: not blank, nothing logged to the console."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser import render_in_browser
from paths import REPO, SRC

pytestmark = pytest.mark.slow  # real processes or seconds per test

pytest.importorskip("mkdocs", reason="the site needs mkdocs (the test extra)")
pytest.importorskip("material", reason="the site needs mkdocs-material (the test extra)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_site_has_every_page(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started/index.html",
        "tutorial/english/index.html",
        "tutorial/chinese/index.html",
        "guides/index.html",
        "reference/commands/index.html",
        "architecture/index.html",
        "benchmarks/index.html",
    ):
        assert (site / page).is_file(), page
    tutorial = (site / "tutorial/chinese/index.html").read_text(encoding="utf-8")
    assert "多头注意力机制" in tutorial
    assert "fonts.googleapis" not in (site / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", ["", "tutorial/english/", "tutorial/chinese/"])
def test_the_page_renders_in_headless_chromium(served: str, page: str, tmp_path: Path) -> None:
    image, console = render_in_browser(served + page, tmp_path, size="1280,1600")
    assert console == []  # no console errors (nor any other message)
    ink = (image < 0.9).any(axis=2)
    assert ink.mean() > 0.01  # not blank: text, the header bar, code blocks
    assert ink[:64].mean() > 0.5  # Material's coloured header bar is drawn: the CSS loaded
    assert image.std() > 0.05
