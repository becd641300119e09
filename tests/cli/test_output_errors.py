"""Output is all or nothing (issue 29): stdout that refuses a write (a full disk, a closed
descriptor, a file-size limit) is one line on stderr and exit code 2, never exit 0 with half a
document; ``--output FILE`` is complete or absent; a reader that went away (``| head``) stays
quiet; an exit 2 prints exactly one stderr line even when a library warns.

These run the real entry point in a child process: the descriptors are the point."""

from __future__ import annotations

import importlib.util
import logging
import os
import resource
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from attntrace.errors import ConfigError
from hostile import invoke
from paths import SRC

pytestmark = pytest.mark.slow  # real processes or seconds per test

HAVE_TORCH = importlib.util.find_spec("torch") is not None

#: Commands printing a document, each in several formats (all of them offline and quick).
DOCUMENTS = [
    ("run", "-f", "json"),
    ("run", "-f", "csv"),
    ("run", "-f", "markdown"),
    ("run", "-f", "svg"),
    ("run",),
    ("check", "-e", "scores=h,S,S", "-f", "json"),
    ("check", "-e", "scores=1,1", "-f", "junit"),
    *([("verify", "-f", "json")] if HAVE_TORCH else []),  # verify compares against PyTorch
    ("presets", "-f", "json"),
    ("presets",),
    ("sweep", "--seq", "4,8", "--format", "csv"),
    ("sweep", "--seq", "4,8", "--format", "json"),
]
#: The exit code each document command ends with when its output is written (1: a check failed).
EXPECTED = {("check", "-e", "scores=1,1", "-f", "junit"): 1}

#: A file-size limit (bytes) below the size of every document above.
LIMIT = 200


def _env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "COLUMNS": "100",
        "MPLCONFIGDIR": str(tmp / "mpl"),  # a fresh font cache: matplotlib wants to write one
        # a process under a file-size limit must not write bytecode: a .pyc cut at the limit
        # is left in the checkout's __pycache__, and every later import of it fails
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _attntrace(
    tmp: Path, *args: str, limit: int | None = None, **popen: object
) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        if limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    options: dict[str, object] = {"capture_output": True, **popen}
    if "stdout" in popen:
        options = {"stderr": subprocess.PIPE, **popen}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "attntrace", *args],
        text=True,
        env=_env(tmp),
        cwd=tmp,
        timeout=180,
        check=False,
        preexec_fn=limited,
        **options,
    )


def _one_line(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    context = f"exit {proc.returncode}\nstderr: {proc.stderr}"
    assert proc.returncode == 2, context
    assert len(proc.stderr.splitlines()) == 1, context
    assert proc.stderr.startswith("attntrace: error: "), context
    assert "Traceback" not in proc.stderr, context
    for word in words:
        assert word in proc.stderr, context


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("args", DOCUMENTS, ids=" ".join)
def test_a_document_on_a_full_disk_is_one_line_and_exit_2(tmp_path: Path, args: tuple) -> None:
    with open("/dev/full", "w") as full:
        proc = _attntrace(tmp_path, *args, stdout=full)
    _one_line(proc, "cannot write to stdout (No space left on device)", "--output FILE")


@pytest.mark.parametrize("args", DOCUMENTS[::3], ids=" ".join)
def test_a_closed_stdout_is_one_line_and_exit_2(tmp_path: Path, args: tuple) -> None:
    # Python's `>&-`: the child starts with descriptor 1 closed
    code = (
        "import os, runpy, sys; os.close(1); sys.argv = ['attntrace', *sys.argv[1:]];"
        "runpy.run_module('attntrace', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    _one_line(proc, "cannot write to stdout (it is closed)")


def test_a_closed_stdout_through_the_shell(tmp_path: Path) -> None:
    proc = subprocess.run(
        f"'{sys.executable}' -m attntrace run -f json >&-",
        shell=True,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    _one_line(proc, "it is closed")


def test_a_closed_stdout_does_not_fail_a_command_that_prints_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        f"'{sys.executable}' -m attntrace run -f json -o g.json >&-",
        shell=True,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert (tmp_path / "g.json").read_text().startswith("{")


@pytest.mark.parametrize("args", DOCUMENTS, ids=" ".join)
def test_stdout_into_a_file_past_the_size_limit_is_one_line(tmp_path: Path, args: tuple) -> None:
    target = tmp_path / "doc.out"
    with target.open("w") as out:
        proc = _attntrace(tmp_path, *args, limit=LIMIT, stdout=out)
    _one_line(proc, "cannot write to stdout (File too large)")


@pytest.mark.parametrize("args", DOCUMENTS, ids=" ".join)
def test_output_past_the_size_limit_leaves_no_file(tmp_path: Path, args: tuple) -> None:
    proc = _attntrace(tmp_path, *args, "--output", "doc.out", limit=LIMIT)
    _one_line(proc, "doc.out: could not be written (File too large)")
    assert proc.stdout == ""
    assert not (tmp_path / "doc.out").exists()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("args", DOCUMENTS[::2], ids=" ".join)
def test_output_past_the_size_limit_keeps_the_old_file(tmp_path: Path, args: tuple) -> None:
    golden = tmp_path / "golden.json"
    golden.write_text('{"old": true}\n')
    proc = _attntrace(tmp_path, *args, "-o", "golden.json", limit=LIMIT)
    _one_line(proc, "could not be written")
    assert golden.read_text() == '{"old": true}\n'
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("args", DOCUMENTS, ids=" ".join)
def test_output_holds_exactly_what_stdout_gets(tmp_path: Path, args: tuple) -> None:
    to_stdout = _attntrace(tmp_path, *args)
    to_file = _attntrace(tmp_path, *args, "--output", "doc.out")
    assert to_stdout.returncode == to_file.returncode == EXPECTED.get(args, 0), to_file.stderr
    assert to_file.stdout == ""
    assert to_file.stderr == to_stdout.stderr
    assert (tmp_path / "doc.out").read_text() == to_stdout.stdout
    assert _leftovers(tmp_path) == []


def test_a_plot_on_a_full_disk_is_one_line_despite_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    # matplotlib also fails to save its font cache ("Could not save font_manager cache"): held
    proc = _attntrace(tmp_path, "run", "--plot", "heads.png", limit=2000)
    _one_line(proc, "heads.png: could not be written (File too large)")
    assert proc.stdout == ""
    assert not (tmp_path / "heads.png").exists()
    assert _leftovers(tmp_path) == []


def test_a_reader_that_goes_away_stays_quiet(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "attntrace", "presets", "-f", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader left before the first byte, as `| head -c0`
    err = proc.stderr.read()
    assert proc.wait(timeout=180) in (0, 141)
    assert err == b""


# ---- one stderr line for an exit 2, even when a library warns (in-process) ----


def _warn_then(outcome: str) -> None:
    warnings.warn("a library's deprecation", UserWarning, stacklevel=1)
    logging.getLogger("somelib").warning("a library's log line")
    if outcome == "fail":
        raise ConfigError("--seq must be >= 1")


@pytest.mark.parametrize("outcome", ["fail", "ok"])
def test_warnings_are_held_back_on_exit_2(
    outcome: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer

    from attntrace.cli.typer_app import cli_errors

    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # no logging config: lastResort
    monkeypatch.setattr(logging, "lastResort", logging.StreamHandler(sys.stderr))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        if outcome == "fail":
            with pytest.raises(typer.Exit) as exit_info:
                cli_errors(_warn_then)(outcome)
            assert exit_info.value.exit_code == 2
        else:
            cli_errors(_warn_then)(outcome)
    # a success shows them as before (after the command); an exit 2 only its one line
    assert [str(w.message) for w in shown] == (
        [] if outcome == "fail" else ["a library's deprecation"]
    )
    err = capsys.readouterr().err
    if outcome == "fail":
        assert err == "attntrace: error: --seq must be >= 1\n"
    else:
        assert err == "a library's log line\n"


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--seq", "0"),
        ("run", "--seq", "0", "-f", "json", "-o", "x.json"),
        ("check", "-e", "nosuchstep=1", "-f", "junit"),
        ("sweep", "--seq", "four"),
    ],
    ids=" ".join,
)
def test_exit_2_is_one_line_in_process(
    args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = invoke(*args)
    result.assert_contained()
    assert result.code == 2
    assert result.out == ""
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("args", [("--help",), ("run", "--help"), ("--version",)], ids=" ".join)
def test_help_on_a_full_disk_is_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    # argv[0] "attntrace": the top-level help is drawn by the fast path, without Typer
    code = (
        "import sys; from attntrace.cli import main;sys.argv = ['attntrace', *sys.argv[1:]]; main()"
    )
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tmp_path),
            cwd=tmp_path,
            timeout=180,
            check=False,
        )
    _one_line(proc, "No space left on device")
