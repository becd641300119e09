"""A corpus of hostile files, generated here (nothing hostile is stored in the repository), each
given to the real command in a subprocess under an address-space limit (``ulimit -v``): every
one ends in exit 0, 1 or 2 with one line on stderr, quickly, with its peak memory measured."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from hostile import TORCH_FILES, hostile_files
from paths import SRC

# hostile files against real processes, time and memory measured: the e2e tier (.ci/run)
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

#: Address space each run may map (numpy, torch and Python itself fit easily).
ADDRESS_LIMIT = 3 * 1024**3
#: Generous bounds on one run: seconds of wall time and MiB of peak resident memory.
MAX_SECONDS = 30.0
MAX_RSS_MIB = 1500


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return hostile_files(tmp_path_factory.mktemp("hostile"))


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))


def run_limited(*args: str) -> tuple[int, str, str, float, float]:
    """exit code, stdout, stderr, seconds and peak RSS in MiB of ``attntrace ARGS``."""
    code = "import sys; sys.argv[0] = 'attntrace'; from attntrace.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": str(SRC), "NO_COLOR": "1", "COLUMNS": "100"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        # preexec_fn is safe here: the test starts no thread before it
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=out,
            stderr=err,
            env=env,
            preexec_fn=_limit,  # noqa: PLW1509
        )
        timer = threading.Timer(
            MAX_SECONDS * 2, proc.kill
        )  # a hang fails below, it never blocks the suite
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak RSS
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        texts = [f.read().decode("utf-8", "replace") for f in (out, err)]
    return proc.returncode, texts[0], texts[1], seconds, usage.ru_maxrss / 1024


#: (option, file, the command) -> a fragment of the one stderr line.
CASES: list[tuple[list[str], str, str]] = [
    (["run", "--input"], "fifo.npy", "named pipe (FIFO)"),
    (["run", "--weights"], "fifo.npy", "unknown weights format"),
    (["run", "--mask"], "fifo.npy", "named pipe (FIFO)"),
    (["run", "--hf-config"], "fifo.json", "named pipe (FIFO)"),
    (["check", "--golden"], "fifo.json", "named pipe (FIFO)"),
    (["check", "--spec"], "fifo.json", "named pipe (FIFO)"),
    (["run", "--hf-config"], "dev-zero", "is a device"),
    (["check", "--golden"], "dev-zero", "is a device"),
    (["check", "--spec"], "dev-null", "is a device"),
    (["run", "--input"], "dev-zero", "is a device"),
    (["run", "--input"], "directory", "is a directory"),
    (["run", "--input"], "bomb.npz", "it must be (S, H) or (B, S, H)"),
    (["run", "--input"], "declares-huge.npz", "more than the memory budget"),
    (["run", "--weights"], "declares-huge.npz", "more than the memory budget"),
    (["run", "--input"], "sparse.npy", "more than the memory budget"),
    (["run", "--input"], "declares-tib.npy", "holds only"),
    (["run", "--mask"], "declares-huge.npy", "holds only"),
    (["run", "--hf-config"], "sparse.json", "is larger than 16.00 MiB"),
    (["run", "--weights"], "sparse.safetensors", "not a valid .safetensors file"),
    (["run", "--weights"], "declares-tib.safetensors", "not a valid .safetensors file"),
    (["run", "--weights"], "bad-meta.safetensors", "not a valid .safetensors file"),
    (["run", "--weights"], "bad-config.npz", "field 'heads' must be a whole number"),
    (["run", "--weights"], "nan-config.npz", "is not strict JSON: NaN"),
    (["run", "--input"], "zero-size.npy", "--seq must be at least 1"),
    (
        ["run", "--input"],
        "objects.npy",
        "carries pickled Python objects; attntrace never unpickles",
    ),
    (["run", "--mask"], "payload.npy", "save plain arrays instead (numpy.save of a float array"),
    (["run", "--weights"], "payload.pt", "save plain arrays instead"),
    (["run", "--heads", "2", "--weights"], "dict-bomb.pt", "shared, cyclic"),
    (["run", "--heads", "2", "--weights"], "deep.pt", "nested deeper than 32"),
    (["run", "--hf-config"], "deep.json", "deeper than 64 levels"),
    (["check", "--golden"], "deep.json", "deeper than 64 levels"),
    (["check", "--spec"], "deep.toml", "deeper than 64 levels"),
    (["run", "--hf-config"], "nan.json", "is not strict JSON: NaN"),
    (["run", "--hf-config"], "wrong-types.json", "must be a whole number"),
    (["run", "--hf-config"], "huge-numbers.json", "not valid JSON"),
    (["run", "--hf-config"], "big-ints.json", "must be a whole number from 1 to 2147483647"),
    (["run", "--hf-config"], "latin1.json", "is not UTF-8 text"),
    (["check", "--golden"], "esc.json", "not an attntrace trace"),
    (["run", "--heads", "2", "--weights"], "esc-keys.safetensors", "no attention weights"),
    (["run", "--heads", "2", "--weights"], "esc-keys.npz", "no attention weights"),
    (["run", "--weights"], "empty.npz", "is not a .npz file"),
    (["run", "--weights"], "truncated.npz", "truncated or damaged .npz file"),
]


@pytest.mark.parametrize(
    ("args", "name", "message"), CASES, ids=[f"{a[-1]}-{n}" for a, n, _ in CASES]
)
def test_hostile_file_is_one_line_bounded_in_time_and_memory(
    corpus: dict[str, Path], args: list[str], name: str, message: str
) -> None:
    if name in TORCH_FILES and name not in corpus:
        pytest.skip(f"{name} is written by torch.save, and torch is not installed")
    code, out, err, seconds, rss = run_limited(*args, str(corpus[name]))
    assert code == 2, (code, out[-500:], err)
    assert len(err.splitlines()) == 1, err
    assert message in err, err
    assert "\x1b" not in err + out
    assert "Traceback" not in err
    assert seconds < MAX_SECONDS, seconds
    assert rss < MAX_RSS_MIB, rss
    assert not Path("/tmp/attntrace-pwned").exists()


def test_escape_codes_in_a_spec_are_shown_inert(corpus: dict[str, Path]) -> None:
    code, out, err, _, _ = run_limited("check", "--spec", str(corpus["esc.toml"]))
    assert code in (1, 2), err
    assert "\x1b" not in out + err
    assert "\\x1b" in out + err or "\\u001b" in out + err


def test_nan_input_is_a_result_not_a_crash(corpus: dict[str, Path]) -> None:
    for fmt in ("table", "json", "csv", "markdown"):
        code, out, err, _, _ = run_limited(
            "run", "--heads", "2", "--input", str(corpus["nan-input.npy"]), "-f", fmt
        )
        assert code == 0, err
        assert err.startswith(
            "attntrace: warning: non-finite values (NaN or inf) first appear at step 'x'"
        )
        assert len(err.splitlines()) == 1
        if fmt == "json":
            doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in strict JSON"))
            assert doc["steps"][0]["nonfinite"] == 9
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(out)))
            assert (rows[0]["name"], rows[0]["nonfinite"]) == ("x", "9")
        if fmt == "markdown":
            assert "> **warning:** non-finite values (NaN or inf) first appear at step 'x'" in out
