"""Every "install X" message names a command that works from where attntrace was installed: a
checkout, a git URL, a wheel, an index; the requirement alone always comes too."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace import errors
from attntrace.cli import app
from attntrace.errors import EXTRAS, TORCH_CPU_INDEX, TORCH_DOCS, install_hint
from paths import REPO


def test_the_extras_are_the_ones_pyproject_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extras = declared["project"]["optional-dependencies"]
    for extra, requirement in EXTRAS.items():
        assert extras[extra] == [requirement], extra


def test_from_this_checkout_the_hint_names_its_folder() -> None:
    hint = install_hint("plot")
    assert f"'{REPO}[plot]'" in hint
    assert hint.endswith("(or just the library: pip install 'matplotlib>=3.8')")
    assert "OWNER" not in hint


Install = Callable[[dict[str, object] | None], None]


class _Dist:
    def __init__(self, direct: dict[str, object] | None) -> None:
        self.direct = direct

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct is None else json.dumps(self.direct)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Install:
    """Pretend attntrace is installed in site-packages with pip's record ``direct``."""
    site = tmp_path / "site-packages" / "attntrace"
    site.mkdir(parents=True)
    monkeypatch.setattr(errors, "__file__", str(site / "errors.py"))

    def install(direct: dict[str, object] | None) -> None:
        monkeypatch.setattr(metadata, "distribution", lambda name: _Dist(direct))

    return install


def test_from_a_git_url_the_hint_reinstalls_that_url(installed: Install) -> None:
    url = "https://git.example.org/team/attntrace.git"
    installed({"url": url, "vcs_info": {"vcs": "git", "commit_id": "a" * 40}})
    assert install_hint("torch") == (
        f"install it with: pip install 'attntrace[torch] @ git+{url}@{'a' * 40}' "
        "(or just the library: pip install 'torch>=2.1'); on Linux, for the CPU wheel add "
        "--extra-index-url https://download.pytorch.org/whl/cpu (docs/getting-started.md#pytorch)"
    )


def test_the_torch_hint_links_the_one_page_on_pytorchs_wheels() -> None:
    """Every hint naming the torch extra points at getting-started's PyTorch section, which
    exists and gives the index of CPU wheels (Linux) and what macOS and Windows get."""
    page, anchor = TORCH_DOCS.split("#")
    text = (REPO / page).read_text(encoding="utf-8")
    assert anchor == "pytorch"  # mkdocs' anchor of the title below
    assert "\n### PyTorch\n" in text
    assert all(word in text for word in (TORCH_CPU_INDEX, "macOS", "Windows"))
    assert all(part in install_hint("torch") for part in (TORCH_CPU_INDEX, TORCH_DOCS))
    assert TORCH_DOCS not in install_hint("plot")
    for command in ("run", "verify"):  # --backend's help, verify's own
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
        assert TORCH_DOCS in result.output, result.output


def test_from_a_wheel_the_hint_names_the_wheel(installed: Install, tmp_path: Path) -> None:
    wheel = tmp_path / "attntrace-0.1.0-py3-none-any.whl"
    wheel.touch()
    installed({"url": wheel.as_uri(), "archive_info": {}})
    assert f"'attntrace[safetensors] @ {wheel.as_uri()}'" in install_hint("safetensors")
    wheel.unlink()  # gone since: only the requirement is a command that works
    assert install_hint("safetensors") == "install it with: pip install 'safetensors>=0.4'"


def test_from_a_folder_or_an_index(installed: Install, tmp_path: Path) -> None:
    installed({"url": tmp_path.as_uri(), "dir_info": {}})
    assert f"pip install '{tmp_path}[plot]'" in install_hint("plot")
    installed(None)  # from a package index
    assert "pip install 'attntrace[plot]' (or just" in install_hint("plot")
