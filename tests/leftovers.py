"""After a test that starts real processes, none of them is left: each test gets a marker in
its environment (``ATTNTRACE_TEST_MARKER``), which every process it starts inherits (the
attntrace under test, its sandbox child, what the user's code starts), and the fixture looks
for the marker in ``/proc/*/environ`` when the test ends, as a careful tester does."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

MARKER = "ATTNTRACE_TEST_MARKER"


def marked(marker: str) -> dict[int, str]:
    """The live processes (not this one) whose environment holds ``MARKER=marker``: their
    pids and command lines."""
    needle = f"{MARKER}={marker}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # ended meanwhile, or not ours to read
        found[int(entry.name)] = command.decode("utf-8", "replace").strip()
    return found


@pytest.fixture
def no_leftovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh marker in the environment; after the test, no process carrying it (a second
    to let the last ones be reaped)."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find the processes a test leaves")
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER, marker)
    yield marker
    deadline = time.monotonic() + 1.0
    while (left := marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:  # the test's own processes: ended, so the next tests do not inherit them
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == {}, f"processes left behind: {sorted(left.values())}"
