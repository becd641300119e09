"""``trace``, ``diff`` and ``check --trace`` run the user's code in a child process: whatever
a generated misbehaving program does, attntrace shows the steps it ran, one line saying what
happened, and exits 1 within its time limit, leaving no process behind; the user's own error
while importing or building the target is one line with its message and ``file:line``
(exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leftovers import no_leftovers  # noqa: F401 (a fixture)
from paths import REPO

# the sandbox as a process: kills, signals, limits, leftovers: the e2e tier (.ci/run), -m e2e
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.usefixtures("no_leftovers")]

#: Every program first makes two numpy steps (x and q), then misbehaves at line 4 on.
HEAD = "import numpy as np\nx = np.ones((3, 8))\nq = x.reshape(3, 2, 4)\n"

#: name: (the misbehaviour, the outcome line on stderr it must give)
PROGRAMS: dict[str, tuple[str, str]] = {
    "loop": ("while True: pass\n", "the code under test ran past 2 s at {f}:4"),
    "watchdog_cancelled": (
        "import faulthandler\nfaulthandler.cancel_dump_traceback_later()\nwhile True: pass\n",
        "the code under test ran past 2 s at {f}:6",
    ),
    "sleep": ("import time\ntime.sleep(100)\n", "the code under test ran past 2 s at {f}:5"),
    "os_exit": (
        "import os\nos._exit(7)\n",
        "the code under test ended the process with exit status 7 at {f}:3",
    ),
    "abort": ("import os\nos.abort()\n", "the code under test was killed by SIGABRT at {f}:5"),
    "sigterm": (
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
        "the code under test was killed by SIGTERM at {f}:3",
    ),
    "sigkill": (
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        "the code under test was killed by SIGKILL at {f}:3",
    ),
    "sys_exit_3": ("import sys\nsys.exit(3)\n", "the traced code called sys.exit(3)"),
    "sys_exit_escape": (
        'import sys\nsys.exit("\\x1b[31mred\\x1b]8;;x\\x07")\n',
        "the traced code called sys.exit(1)",
    ),
    "base_exception": (
        "class Boom(BaseException):\n    pass\nraise Boom('no')\n",
        "the code under test raised Boom at {f}:6",
    ),
    "keyboard_interrupt": (
        "raise KeyboardInterrupt\n",
        "the code under test raised KeyboardInterrupt at {f}:4",
    ),
    "thread": (
        "import threading\ndef f():\n    raise ValueError('in a thread')\n"
        "t = threading.Thread(target=f)\nt.start()\nt.join()\n",
        "the code under test raised ValueError in a thread at {f}:6",
    ),
    "patched_stdout_loop": (
        "import sys, io\nsys.stdout = io.StringIO()\nsys.stderr = None\nwhile True: pass\n",
        "the code under test ran past 2 s at {f}:7",
    ),
    "patched_modules_exit": (
        "import sys\nsys.modules['json'] = None\nsys.modules['os'] = None\n"
        "import posix\nposix._exit(5)\n",
        "the code under test ended the process with exit status 5 at {f}:3",
    ),
}


def _trace(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "trace", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "160"},
    )
    return result, time.monotonic() - start


def _children_of(marker: str) -> list[str]:
    """The processes still running whose command line names ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline and "attntrace" in cmdline and str(os.getpid()) != entry.name:
            found.append(cmdline)
    return found


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_misbehaving_program_gives_its_steps_and_one_line(tmp_path: Path, name: str) -> None:
    body, expected = PROGRAMS[name]
    script = tmp_path / f"mis_{name}.py"
    script.write_text(HEAD + body)
    result, took = _trace(str(script), "--timeout", "2")
    assert result.returncode == 1, result.stderr
    assert took < 15, took
    lines = result.stderr.splitlines()
    assert lines == [f"attntrace: {expected.format(f=script.name)}"], result.stderr
    assert "\x1b" not in result.stderr
    assert "np.ones((3, 8))" in result.stdout  # the steps it ran before
    assert "x.reshape(3, 2, 4)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert _children_of(script.name) == []


def test_the_document_of_a_killed_child_holds_its_steps_and_the_failure(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(HEAD + PROGRAMS["loop"][0])
    result, took = _trace(str(script), "--timeout", "2", "--format", "json")
    assert result.returncode == 1
    assert took < 15
    doc = json.loads(result.stdout)
    assert [s["name"] for s in doc["steps"]] == ["x", "q"]
    assert doc["failure"]["location"] == "killed.py:4"
    assert doc["failure"]["error"] == {
        "type": "SandboxStop",
        "message": "the code under test ran past 2 s at killed.py:4",
    }
    assert result.stderr.splitlines() == [
        "attntrace: the code under test ran past 2 s at killed.py:4"
    ]


def test_a_memory_hog_stops_at_the_budget(tmp_path: Path) -> None:
    script = tmp_path / "hog.py"
    script.write_text(HEAD + "a = []\nwhile True:\n    a.append(bytearray(10**8))\n")
    result, took = _trace(str(script), "--max-memory", "300MiB", "--timeout", "20")
    assert result.returncode == 1
    assert took < 30
    assert "MemoryError" in result.stdout
    assert "x.reshape(3, 2, 4)" in result.stdout
    assert _children_of(script.name) == []


def test_deep_recursion_is_bounded_in_time(tmp_path: Path) -> None:
    script = tmp_path / "deep.py"
    script.write_text(
        HEAD + "import sys\nsys.setrecursionlimit(10**7)\n"
        "def f(n):\n    return f(n + 1) + 1\nf(0)\n"
    )
    result, took = _trace(str(script), "--max-memory", "200MiB", "--timeout", "2")
    assert result.returncode == 1
    assert took < 30
    assert "x.reshape(3, 2, 4)" in result.stdout
    assert _children_of(script.name) == []


def test_the_codes_prints_come_through_inert(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        HEAD + "print('\\x1b[2Jcleared')\nimport sys\nprint('\\x1b[31m', file=sys.stderr)\n"
    )
    result, _ = _trace(str(script), "--format", "json")
    assert result.returncode == 0
    assert "\x1b" not in result.stdout + result.stderr
    assert "\\x1b[2Jcleared" in result.stderr
    assert json.loads(result.stdout)["failure"] is None


USER_ERRORS = {
    "init": (
        "import torch.nn as nn\nclass Attention(nn.Module):\n    def __init__(self, embed_dim=8):\n"
        "        super().__init__()\n        if embed_dim < 0:\n"
        "            raise ValueError('embed_dim must be positive')\n"
        "    def forward(self, x):\n        return x\n",
        ["--init", "embed_dim=-1"],
        "cannot build Attention(embed_dim=-1): ValueError: embed_dim must be positive at {f}:6",
    ),
    "assert_init": (
        "import torch.nn as nn\nclass Attention(nn.Module):\n"
        "    def __init__(self, qk_norm=False):\n"
        "        super().__init__()\n        assert not qk_norm, 'qk_norm needs a norm layer'\n"
        "    def forward(self, x):\n        return x\n",
        ["--init", "qk_norm=True"],
        "cannot build Attention(qk_norm=True): AssertionError: qk_norm needs a norm layer at {f}:5",
    ),
    "property": (
        "import torch.nn as nn\nclass Attention(nn.Module):\n"
        "    @property\n    def embed_dim(self):\n"
        "        raise RuntimeError('no width yet')\n    def forward(self, x):\n        return x\n",
        [],
        "building Attention failed: RuntimeError: no width yet at {f}:5",
    ),
    "import": (
        "import torch\nraise ImportError('needs flash_attn')\nclass Attention:\n    pass\n",
        [],
        "importing {p} failed: ImportError: needs flash_attn at {f}:2",
    ),
    "wrong_init_args": (
        "import torch.nn as nn\nclass Attention(nn.Module):\n    def __init__(self, dim):\n"
        "        super().__init__()\n    def forward(self, x):\n        return x\n",
        ["--init", "width=3"],
        "cannot build Attention(width=3): Attention.__init__() got an unexpected keyword "
        "argument 'width'; pass its arguments with --init KEY=VALUE",
    ),
}


@pytest.mark.parametrize("name", sorted(USER_ERRORS))
def test_the_users_error_while_building_is_one_line_exit_2(tmp_path: Path, name: str) -> None:
    pytest.importorskip("torch")
    text, args, expected = USER_ERRORS[name]
    user = tmp_path / f"built_{name}.py"
    user.write_text(text)
    result, _ = _trace(f"{user}:Attention", *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    message = expected.format(f=user.name, p=user)
    assert result.stderr.splitlines() == [f"attntrace: error: {message}"]


def test_diff_of_a_looping_function_stops_at_the_time_limit(tmp_path: Path) -> None:
    user = tmp_path / "spin.py"
    user.write_text("import numpy as np\ndef attend(x, p):\n    while True: pass\n")
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "diff", f"{user}:attend", "--timeout", "2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert time.monotonic() - start < 15
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "attntrace: the code under test ran past 2 s at spin.py:3"
    ]
    assert _children_of(user.name) == []


def test_diff_of_a_module_whose_init_raises_is_one_line_exit_2(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    text, args, expected = USER_ERRORS["init"]
    user = tmp_path / "bad_init.py"
    user.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "diff", f"{user}:Attention", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"attntrace: error: {expected.format(f=user.name)}"]


def test_check_trace_of_an_aborting_script_is_one_line_exit_1(tmp_path: Path) -> None:
    script = tmp_path / "gone.py"
    script.write_text(HEAD + PROGRAMS["os_exit"][0])
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "check", "--trace", str(script), "--expect", "q=3,2,4"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "attntrace: the code under test ended the process with exit status 7 at gone.py:3"
    ]


@pytest.mark.parametrize("command", ["trace", "diff", "check"])
def test_the_time_limit_and_its_default_are_in_the_help(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", command, "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert result.returncode == 0
    line = next(ln for ln in result.stdout.splitlines() if "--timeout" in ln)
    assert "Stop the code under test after this many seconds" in line
    assert "[default: 60]" in " ".join(result.stdout.split())
