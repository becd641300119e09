"""The front door: ``attntrace --help``, the README and the site's home page open with the same
paragraph (attntrace.cli.root.ABOUT); the README stays short, links into the site and keeps the
two set-up commands that .ci/run and a newcomer run."""

from __future__ import annotations

import re
import subprocess
import sys

from attntrace.cli.root import ABOUT
from paths import REPO, SRC

README = (REPO / "README.md").read_text(encoding="utf-8")
INSTALL = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install . && "
    "attntrace run --heads 12 --hidden 768"
)


def first_paragraph(markdown: str) -> str:
    """The first paragraph after the title, its lines joined."""
    body = markdown.split("\n\n")
    assert body[0].startswith("# ")
    return " ".join(body[1].split())


def help_paragraph() -> str:
    """The first paragraph of ``python -m attntrace --help``, as a terminal shows it."""
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "--help"],
        env={"PYTHONPATH": str(SRC), "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    paragraphs = result.stdout.strip("\n").split("\n\n")
    assert paragraphs[0].strip().startswith("Usage:")
    return " ".join(paragraphs[1].split())


def test_help_readme_and_site_open_with_the_same_paragraph() -> None:
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert help_paragraph() == ABOUT
    assert first_paragraph(README) == ABOUT
    assert first_paragraph(home) == ABOUT


def test_the_readme_is_short_and_keeps_the_two_commands() -> None:
    assert len(README.splitlines()) <= 300
    lines = README.splitlines()
    assert INSTALL in lines
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    test_command = next(line for line in lines if 'pip install -q -e ".[test]"' in line)
    assert test_command.endswith('python -m pytest -n auto -m "not e2e"')
    assert not {"apt-get", "sudo"} & set(test_command.split())  # no root needed
    assert f"\n{test_command} && " in ci  # .ci/run runs exactly the README's test command


def test_the_readme_links_into_the_site_and_names_no_placeholder() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert len(links) >= 10
    pending = {"docs/guides/your-code.md", "docs/guides/learning.md"}  # other branches bring them
    for link in links:
        assert (REPO / link).is_file() or link in pending, link
    for page in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]:
        text = page.read_text(encoding="utf-8")
        assert "OWNER" not in text, page
        assert "pip install 'attntrace[" not in text, page  # not on PyPI: names no source
        assert 'pip install "attntrace[' not in text.replace('"attntrace[plot] @ git+', ""), page
