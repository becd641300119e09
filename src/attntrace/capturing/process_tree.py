"""Every process the user's code starts, found and stopped when the run ends.

On Linux, attntrace makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``)
while the child runs: a process the code starts in a new session (``start_new_session=True``,
``setsid``), or a double fork whose middle process exits, is re-parented to attntrace rather
than to init, so it stays in attntrace's tree of processes, read from ``/proc/PID/stat``. When
the run ends, every process of that tree started during the run is killed (repeatedly, until
none is left, so a process that forks while it is killed is caught too) and reaped; the
children attntrace had before the run, and theirs, are left alone. A signal to attntrace
(SIGTERM, SIGHUP, SIGINT) is forwarded to the same tree first.

Elsewhere (macOS, Windows, a Linux without ``/proc``) only the child's own session is killed
(``os.killpg``): a process the code moved to a session of its own may outlive the run.

>>> tree = Tree()
>>> tree.members() == set()
True
>>> tree.close()
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field

#: prctl options (linux/prctl.h).
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: Rounds of killing before giving up on a tree that keeps forking (each about 10 ms).
ROUNDS = 200


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    zombie: bool


def _prctl(option: int, value: int) -> int | None:
    """``prctl(option, value)``; None where there is no prctl (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            out = ctypes.c_int(0)
            ok = libc.prctl(option, ctypes.byref(out), 0, 0, 0)
            return int(out.value) if ok == 0 else None
        return int(libc.prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def _processes() -> list[_Proc] | None:
    """Every process of the machine (its pid, parent and whether it is a zombie); None
    without ``/proc``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read(4096)
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
        if len(fields) >= 2 and fields[1].isdigit():
            out.append(_Proc(int(name), int(fields[1]), fields[0] in (b"Z", b"X")))
    return out


@dataclass
class Tree:
    """The processes started during one run: this process's descendants, less the children
    it had before (and their descendants). Made a subreaper for its life on Linux."""

    me: int = field(default_factory=os.getpid)
    before: frozenset[int] = frozenset()
    was_reaper: bool = True
    linux: bool = False

    def __post_init__(self) -> None:
        procs = _processes()
        self.before = frozenset(p.pid for p in procs or () if p.ppid == self.me)
        got = _prctl(_PR_GET_CHILD_SUBREAPER, 0)
        self.was_reaper = bool(got)
        self.linux = procs is not None and got is not None
        if self.linux and not self.was_reaper:
            self.linux = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0

    def members(self) -> set[int]:
        """The pids of the processes started during the run that still exist (zombies too)."""
        return {p.pid for p in self._members()}

    def _members(self) -> list[_Proc]:
        procs = _processes() if self.linux else None
        if procs is None:
            return []
        below: dict[int, list[_Proc]] = {}
        for p in procs:
            below.setdefault(p.ppid, []).append(p)
        out, todo = [], [p for p in below.get(self.me, []) if p.pid not in self.before]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(below.get(p.pid, []))
        return out

    def send(self, number: int, root: int) -> None:
        """Send signal ``number`` to every process of the tree (and the child's session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(root, number)
        for p in self._members():
            if not p.zombie:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, number)

    def stop(self, root: int) -> None:
        """Kill every process of the tree and reap those re-parented here; ``root`` (the
        child, whose status its ``Popen`` reads) is killed, not reaped."""
        for _ in range(ROUNDS):
            self.send(signal.SIGKILL, root)
            left = [p for p in self._members() if p.pid != root]
            for p in left:
                if p.zombie and p.ppid == self.me:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(p.pid, os.WNOHANG)
            if not left:
                return
            time.sleep(0.005)

    def close(self) -> None:
        """This process is no subreaper any more (unless it was one before)."""
        if self.linux and not self.was_reaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
