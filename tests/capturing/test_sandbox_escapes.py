"""Nothing the user's code does escapes the sandbox (issue 45): a process it starts in a new
session, by a double fork and ``setsid`` or inside ``backward`` is stopped when the run ends;
a signal to attntrace (from outside, or sent by the code to its parent) is forwarded to the
whole tree, with one line and exit 128 + N; the memory limit cannot be raised; what the child
sends is bounded and a malformed message is one line; the code's prints come through, in
order, without ``PYTHONUNBUFFERED``. Every test checks that none of its processes is left
(:mod:`leftovers`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leftovers import no_leftovers  # noqa: F401 (a fixture)
from paths import REPO

# the sandbox as a process: kills, signals, limits, leftovers: the e2e tier (.ci/run), -m e2e
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.usefixtures("no_leftovers")]

#: Every program first makes one numpy step (x, line 2), then misbehaves from line 3 on.
HEAD = "import numpy as np\nx = np.ones((3, 8))\n"

#: The code starts a process that would outlive the run: name -> its body after HEAD.
SPAWNS = {
    "new_session": (
        "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    ),
    "double_fork_setsid": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '300'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
    ),
    "new_session_holding_stdout": (
        "import subprocess, sys\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=sys.stdout,"
        " stderr=sys.stderr)\n"
    ),
    "new_process_group": (
        "import subprocess\nsubprocess.Popen(['sleep', '300'], process_group=0)\n"
    ),
}

#: The line attntrace prints when a signal stops it.
STOPPED = (
    "attntrace: stopped by {name}; the code under test and every process it started were ended"
)


def _env() -> dict[str, str]:
    """This environment (the test's marker included) without PYTHONUNBUFFERED, as on a
    machine that does not set it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "COLUMNS": "160"}


def _attntrace(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "attntrace", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=REPO,
        env=_env(),
    )


def _script(tmp_path: Path, name: str, body: str) -> Path:
    script = tmp_path / f"{name}.py"
    script.write_text(HEAD + body)
    return script


@pytest.mark.parametrize("name", sorted(SPAWNS))
def test_a_process_the_code_starts_is_stopped_with_the_run(tmp_path: Path, name: str) -> None:
    script = _script(tmp_path, name, SPAWNS[name])
    start = time.monotonic()
    result = _attntrace("trace", str(script), "--timeout", "5")
    assert time.monotonic() - start < 20
    assert result.returncode == 0, result.stderr
    assert "np.ones((3, 8))" in result.stdout
    assert result.stderr == ""


def test_a_process_started_inside_backward_is_stopped(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "spawn_backward.py"
    script.write_text(
        "import subprocess\nimport torch\n\n"
        "class Twice(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n"
        "        subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "        return g * 2\n\n"
        "x = torch.ones(3, 8, requires_grad=True)\n"
        "Twice.apply(x).sum().backward()\n"
    )
    result = _attntrace("trace", str(script), "--timeout", "20")
    assert result.returncode == 0, result.stderr
    assert "torch.ones(3, 8, requires_grad=True)" in result.stdout


def test_the_code_signalling_its_parent_stops_the_whole_tree(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "kill_parent",
        "import os, signal, subprocess, time\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "os.kill(os.getppid(), signal.SIGTERM)\n"
        "time.sleep(30)\n",
    )
    start = time.monotonic()
    result = _attntrace("trace", str(script), "--timeout", "20")
    assert time.monotonic() - start < 15
    assert result.returncode == 128 + signal.SIGTERM
    assert result.stderr.splitlines() == [STOPPED.format(name="SIGTERM")]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_to_attntrace_is_forwarded_to_the_whole_tree(tmp_path: Path, name: str) -> None:
    ready = tmp_path / "ready"
    script = _script(
        tmp_path,
        f"waits_{name}",
        "import os, pathlib, subprocess, time\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"pathlib.Path({str(ready)!r}).write_text('started')\n"
        "time.sleep(30)\n",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "attntrace", "trace", str(script), "--timeout", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        number = getattr(signal, name)
        os.kill(proc.pid, number)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.wait()
    assert ready.exists(), err
    assert proc.returncode == 128 + number, err
    assert err.splitlines() == [STOPPED.format(name=name)]
    assert "Traceback" not in out + err


def test_the_memory_limit_cannot_be_raised_by_the_code(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "raise_limit",
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "assert soft == hard, (soft, hard)\n"
        "try:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n"
        "except ValueError:\n    pass\n"
        "a = bytearray(4 * 2**30)\n",
    )
    result = _attntrace("trace", str(script), "--max-memory", "300MiB", "--timeout", "10")
    assert result.returncode == 1, result.stderr
    assert "MemoryError" in result.stdout
    assert "AssertionError" not in result.stdout


#: Writes ``data`` to the channel (the one pipe the child holds besides stdout and stderr).
TO_CHANNEL = (
    "import os, stat\n"
    "for fd in range(3, 64):\n"
    "    try:\n"
    "        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
    "            {write}\n"
    "    except OSError:\n"
    "        pass\n"
)

#: name: (what the code writes to the channel, the one line attntrace prints)
CHANNEL = {
    "flood_without_newline": (
        "for _ in range(200): os.write(fd, b'x' * 2**20)",
        "the code under test sent more than 16 MiB to attntrace; it was stopped at {f}:2",
    ),
    "deeply_nested": (
        "os.write(fd, b'[' * 1000000 + b'\\n')",
        "the code under test sent attntrace a message that is not one of its own; it was "
        "stopped at {f}:2",
    ),
    "forged_end": (
        'os.write(fd, b\'{"end": "done", "error": 5, "frames": 7}\\n\')',
        "the code under test sent attntrace a message it cannot read; it was stopped at {f}:2",
    ),
    "forged_event": (
        'os.write(fd, b\'{"event": {"name": [[[[[]]]]]}}\\n\')',
        "the code under test sent attntrace a message it cannot read (KeyError); it was "
        "stopped at {f}:2",
    ),
}

#: Runs attntrace and reports its own peak RSS (VmHWM, KiB: ru_maxrss would count the
#: forked test process before the exec) as the last line of stderr.
WITH_RSS = (
    "import atexit, sys\n"
    "def peak():\n"
    "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
    "    sys.stderr.write(f'RSS {hwm[0].split()[1]}\\n')\n"
    "atexit.register(peak)\n"
    "from attntrace.cli import main\n"
    "sys.argv = ['attntrace', *sys.argv[1:]]\n"
    "main()\n"
)


@pytest.mark.parametrize("name", sorted(CHANNEL))
def test_what_the_child_sends_is_bounded_and_read_safely(tmp_path: Path, name: str) -> None:
    write, expected = CHANNEL[name]
    script = _script(tmp_path, name, TO_CHANNEL.format(write=write) + "import time\n")
    result = subprocess.run(
        [sys.executable, "-c", WITH_RSS, "trace", str(script), "--timeout", "10"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
        env=_env(),
    )
    *lines, rss = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr
    assert lines == [f"attntrace: {expected.format(f=script.name)}"]
    assert "np.ones((3, 8))" in result.stdout
    assert int(rss.split()[1]) < 150 * 1024  # KiB: attntrace itself, not the flood


def _printing(tmp_path: Path, end: str = "") -> Path:
    """A script that prints 40 lines, odd ones to stderr."""
    return _script(
        tmp_path,
        "prints",
        "import sys\nfor i in range(40):\n"
        "    print(f'line {i}', file=sys.stderr if i % 2 else sys.stdout)\n" + end,
    )


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("line ")]


@pytest.mark.parametrize(
    "args",
    [["--format", "json"], ["--format", "csv"]],
    ids=["json", "csv"],
)
def test_prints_beside_a_document_come_in_order_unbuffered_or_not(
    tmp_path: Path, args: list[str]
) -> None:
    script = _printing(tmp_path)
    result = _attntrace("trace", str(script), *args)
    assert result.returncode == 0, result.stderr
    assert _lines(result.stderr) == [f"line {i}" for i in range(40)]
    assert _lines(result.stdout) == []


def test_prints_beside_a_table_come_in_order(tmp_path: Path) -> None:
    result = _attntrace("trace", str(_printing(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout) == [f"line {i}" for i in range(0, 40, 2)]
    assert _lines(result.stderr) == [f"line {i}" for i in range(1, 40, 2)]


def test_prints_before_os_exit_are_not_lost(tmp_path: Path) -> None:
    script = _printing(tmp_path, "import os\nos._exit(0)\n")
    result = _attntrace("trace", str(script), "--format", "json")
    assert result.returncode == 1
    assert _lines(result.stderr) == [f"line {i}" for i in range(40)]


def test_prints_of_check_trace_come_through(tmp_path: Path) -> None:
    script = _printing(tmp_path)
    result = _attntrace("check", "--trace", str(script), "--expect", "x=3,8")
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout + result.stderr) != []
    assert sorted(_lines(result.stdout + result.stderr)) == sorted(f"line {i}" for i in range(40))


def test_prints_of_diff_come_through(tmp_path: Path) -> None:
    user = tmp_path / "noisy_attn.py"
    user.write_text(
        "import sys\nimport numpy as np\n\n"
        "def attend(x, p):\n"
        "    for i in range(40):\n"
        "        print(f'line {i}', file=sys.stderr if i % 2 else sys.stdout)\n"
        "    return x\n"
    )
    result = _attntrace("diff", f"{user}:attend", "--timeout", "20")
    assert result.returncode in (0, 1, 4), result.stderr  # 4: no step to compare, cannot tell
    printed = _lines(result.stderr)  # diff calls the function more than once
    assert printed != []
    assert printed == [f"line {i}" for i in range(40)] * (len(printed) // 40)


@pytest.mark.parametrize("limit", [25, 40])
def test_code_that_lowers_the_recursion_limit_gets_its_own_outcome(
    tmp_path: Path, limit: int
) -> None:
    script = _script(
        tmp_path,
        f"low_limit_{limit}",
        f"import sys\nsys.setrecursionlimit({limit})\ny = x.reshape(3, 2, 4)\n"
        "raise ValueError('mine')\n",
    )
    result = _attntrace("trace", str(script), "--format", "json")
    assert result.returncode == 1, result.stderr
    assert "failed in the child" not in result.stderr
    assert "internal error" not in result.stderr
    assert '"message": "mine"' in result.stdout


@pytest.mark.parametrize("cache", ["k.numpy(), k.numpy()", "k.to('meta'), k", "k[0], k[0]", "3, 4"])
def test_a_past_cache_that_is_no_cache_is_one_line_exit_2(tmp_path: Path, cache: str) -> None:
    pytest.importorskip("torch")
    user = tmp_path / "bad_cache.py"
    user.write_text(
        "import torch\n\nclass Attn(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.proj = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x, kv_cache=None):\n"
        "        k = self.proj(x)\n"
        f"        return k, ({cache})\n"
    )
    result = _attntrace("trace", f"{user}:Attn", "--past", "3", "--batch", "1")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "attntrace: error: --past 3: Attn returned no (k, v) cache after a prefill of 3 tokens; "
        "return it with the output, as GPT-2 returns present = (k, v)"
    ]
