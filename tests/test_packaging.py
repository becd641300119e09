"""Install as people really install it: `python -m build` makes an sdist and a wheel that
`twine check` accepts, and the wheel installs into a fresh venv and runs there."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

# sdist, wheel and a fresh venv: .ci/run runs these after the README's command
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]


def sh(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=cwd,
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and wheel, built from this checkout without network (--no-isolation)."""
    out = tmp_path_factory.mktemp("dist")
    sh(sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", out, ROOT)
    return out


def test_build_makes_an_sdist_and_a_wheel_that_twine_accepts(dist: Path) -> None:
    wheels, sdists = list(dist.glob("attntrace-*.whl")), list(dist.glob("attntrace-*.tar.gz"))
    assert len(wheels) == len(sdists) == 1
    result = sh(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists)
    assert result.stdout.count("PASSED") == 2
    names = zipfile.ZipFile(wheels[0]).namelist()
    for inside in (
        "attntrace/py.typed",
        "attntrace/schemas/trace-1.schema.json",
        "attntrace/cli/commands/cmd_report.py",
    ):
        assert inside in names
    assert not any(".venv" in n or "__pycache__" in n for n in names)
    with tarfile.open(sdists[0]) as tar:
        members = tar.getnames()
    assert any(m.endswith("src/attntrace/schemas/trace-1.schema.json") for m in members)
    assert not any("/.venv/" in m for m in members)


def test_the_wheel_installs_and_runs_in_a_fresh_venv(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    wheel = next(dist.glob("attntrace-*.whl"))
    sh(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        wheel,
    )
    # the dependencies (numpy, typer, rich, psutil) from this environment, attntrace from the wheel
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages()), "COLUMNS": "80"}
    where = sh(
        python,
        "-c",
        "import attntrace; print(attntrace.__file__, attntrace.__version__)",
        env=env,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(venv))
    out = sh(
        venv / "bin" / "attntrace", "run", "--heads", "12", "--hidden", "768", env=env, cwd=tmp_path
    ).stdout
    assert "(3, 768) → (3, 12, 64) → (12, 3, 64) → (12, 3, 3)" in out
    check = sh(
        venv / "bin" / "attntrace", "check", "-e", "scores=h,S,S", env=env, cwd=tmp_path
    ).stdout
    assert "ok: 1 passed, 0 failed" in check
