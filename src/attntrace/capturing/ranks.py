"""``trace --nproc N``: N sandbox children, one per rank, joined by torch.distributed (gloo).

Each rank is the child of :mod:`attntrace.capturing.sandbox` (``python -m`` it, or the
``module`` given: diff's own child), run with ``rank``, ``world`` and ``store`` (the file of the
rendezvous, in a folder removed at the end: no port to race for) in its request: it joins the
process group before the user's code is imported
(:mod:`attntrace.capturing.rank_setup`), then runs under the same time limit, memory limit
(per rank), channel and relayed prints (``[rank R] `` before each line) as one child does.

The parent waits for all of them. When one fails (raises, is killed, runs past the time limit,
ends the process), the others get :data:`SETTLE` seconds to end by themselves (a peer waiting in
a collective on it gets gloo's error at once), then each is stopped with SIGABRT (faulthandler
names the line it was waiting at) and then SIGKILL, with every process any rank started; one
line says which rank failed first and where. A signal to attntrace (Ctrl-C) stops them all.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from attntrace.capturing.process_tree import Tree
from attntrace.capturing.runner import Outcome
from attntrace.capturing.sandbox import (
    DEFAULT_TIMEOUT,
    GRACE,
    MAX_DUMP,
    SIGNAL_GRACE,
    STARTUP,
    ChildError,
    Ended,
    _Collected,
    _dump_frames,
    _forwarding,
    _readers,
    _result,
    _Signalled,
    _start,
    _stopped,
    check_timeout,
)
from attntrace.errors import ConfigError

#: The most ranks ``--nproc`` starts (each a Python with torch: about 300 MB).
MAX_NPROC = 16
#: Seconds the other ranks get to end by themselves after one failed.
SETTLE = 1.0
#: Seconds a rank stopped with SIGABRT gets to write where it was.
DUMP_WAIT = 1.0

Result = Outcome | dict[str, Any] | None


@dataclass
class RankRuns:
    """Every rank's run: its result (an :class:`Outcome`, the dict of a ``module`` whose
    runner returns one, or None for a rank that was stopped before it ended), the
    :class:`Ended` of each rank that did not end normally, and the one line of the first
    failure (None when every rank ran through)."""

    results: list[Result]
    ended: list[Ended | None]
    line: str | None = None
    rank: int | None = None  # the rank that failed first

    @property
    def world(self) -> int:
        """N, the ranks."""
        return len(self.results)

    def outcomes(self) -> list[Outcome]:
        """Each rank's :class:`Outcome` (an ended rank's: the steps it ran; a rank that sent
        nothing: no steps)."""
        from attntrace.capturing.record import Recorder
        from attntrace.capturing.session import Session

        out = []
        for r, result in enumerate(self.results):
            ended = self.ended[r]
            if ended is not None:
                out.append(ended.outcome)
            elif isinstance(result, Outcome):
                out.append(result)
            else:
                out.append(Outcome(Session(Recorder(keep_values=False))))
        return out

    def collectives(self) -> list[list[dict[str, Any] | None]]:
        """Each rank's steps' collective records (kind, ranks, peer, bytes, placements), None
        for a step that is no collective."""
        return [
            [e.params.get("collective") for e in o.capture._recorder.events]
            for o in self.outcomes()
        ]

    def failure_dict(self, rank: int) -> dict[str, Any] | None:
        """Rank ``rank``'s ``failure`` of its document (as ``trace --format json``'s)."""
        outcome = self.outcomes()[rank]
        if outcome.error is None:
            return None
        document = outcome.capture.document(outcome.error, outcome.frames)
        return document["failure"]  # type: ignore[no-any-return]


@dataclass
class _Child:
    rank: int
    proc: subprocess.Popen[bytes]
    got: _Collected
    dump: IO[bytes]
    readers: list[threading.Thread] = field(default_factory=list)
    killed: bool = False  # past the time limit
    stopped: bool = False  # stopped by attntrace after another rank failed
    ended_at: float = 0.0


def check_nproc(nproc: int) -> int:
    """``--nproc``'s value, checked: 2 to :data:`MAX_NPROC` ranks.

    >>> check_nproc(4)
    4
    """
    if not 2 <= nproc <= MAX_NPROC:
        raise ConfigError(
            f"--nproc {nproc} is not a number of ranks; give 2 to {MAX_NPROC} (one process each)"
        )
    return nproc


def run_ranks(
    request: Mapping[str, Any],
    nproc: int,
    *,
    axes: Mapping[str, int] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    budget: int | None = None,
    prints: Any = None,
    module: str = "attntrace.capturing.sandbox",
) -> RankRuns:
    """Run ``request`` (as :func:`~attntrace.capturing.sandbox.run_in_child` takes it, plus
    ``shard``) on ``nproc`` ranks, each in a sandbox child of its own; ``budget``: the memory
    of EACH rank. A rank's own error (bad target, failed import) is raised here, as one."""
    if budget is None:
        from attntrace.engine.memory import default_budget

        budget = default_budget()
    check_timeout(timeout)
    check_nproc(nproc)
    out = prints or sys.stderr
    folder = tempfile.mkdtemp(prefix="attntrace-ranks-")
    base = {**request, "world": nproc, "store": os.path.join(folder, "store"), "timeout": timeout}
    base |= {"axes": dict(axes or {}), "budget": budget}
    base["path"] = [p for p in sys.path if isinstance(p, str)]
    tree = Tree()
    children: list[_Child] = []
    try:
        for r in range(nproc):
            children.append(_launch(module, {**base, "rank": r}, out))
        received = _supervised(children, timeout, tree)
        for c in children:
            for reader in c.readers:
                reader.join(timeout=5)
    finally:
        tree.close()
        shutil.rmtree(folder, ignore_errors=True)
    if received:
        _stopped(received)
    return _collect(children, timeout, axes)


def _launch(module: str, payload: dict[str, Any], prints: Any) -> _Child:
    read_fd, write_fd = os.pipe()
    dump = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _collect)
    payload = {**payload, "fd": write_fd, "dump": dump.fileno()}
    proc = _start(module, payload, write_fd, dump.fileno(), merged=prints is sys.stderr)
    got = _Collected()
    child = _Child(int(payload["rank"]), proc, got, dump)
    child.readers = _readers(proc, read_fd, got, prints, f"[rank {child.rank}] ")
    return child


def _supervised(children: Sequence[_Child], timeout: float, tree: Tree) -> int:
    """Wait for the ranks (:func:`_waited`), then stop every process they started; the
    number of a signal attntrace received meanwhile, else 0."""
    with _forwarding(children[0].proc, tree) as signals:
        try:
            _waited(children, timeout)
        except _Signalled:
            end = time.monotonic() + SIGNAL_GRACE
            for c in children:
                with contextlib.suppress(subprocess.TimeoutExpired, _Signalled):
                    c.proc.wait(timeout=max(end - time.monotonic(), 0.01))
        finally:
            signals.stopping = True  # a signal now is forwarded, and the stop goes on
            for c in children:
                tree.stop(c.proc.pid)
            for c in children:
                c.proc.wait()
                tree.stop(c.proc.pid)
    return signals.received


def _running(c: _Child) -> bool:
    return c.proc.poll() is None and not c.got.stop.is_set()


def _waited(children: Sequence[_Child], timeout: float) -> None:
    """Until every rank ended, or :data:`SETTLE` seconds after the first failed (the others
    are stopped with SIGABRT), or the time limit passed (all still running aborted)."""
    start = time.monotonic()
    while not all(c.got.started.is_set() for c in children):
        if any(not _running(c) for c in children):
            break
        if time.monotonic() - start > STARTUP:
            _abort([c for c in children if _running(c)], killed=True)
            return
        time.sleep(0.05)
    deadline = time.monotonic() + timeout + GRACE
    failed_at = 0.0
    while True:
        now = time.monotonic()
        for c in children:
            if not c.ended_at and not _running(c):
                c.ended_at = now
                if not failed_at and _failed(c):
                    failed_at = now
        live = [c for c in children if _running(c)]
        if not live:
            return
        if failed_at and now - failed_at > SETTLE:
            _abort(live, killed=False)
            return
        if now > deadline:  # their watchdogs did not fire: SIGABRT names the line
            _abort(live, killed=True)
            return
        time.sleep(0.05)


def _abort(children: Sequence[_Child], *, killed: bool) -> None:
    """SIGABRT to each (faulthandler writes where it was), then a moment for the dumps."""
    for c in children:
        c.killed, c.stopped = killed, not killed
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(c.proc.pid, signal.SIGABRT)
    end = time.monotonic() + DUMP_WAIT
    for c in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.proc.wait(timeout=max(end - time.monotonic(), 0.01))


def _failed(c: _Child) -> bool:
    """Whether the rank ended other than by running through."""
    end = c.got.end
    if c.proc.returncode not in (0, None) or c.got.refused or c.got.thread is not None:
        return True
    if end is None or end.get("end") not in ("done", "result"):
        return True
    return bool(end.get("error")) or bool(end.get("exit_code"))


# --- what came back --------------------------------------------------------------------------


def _collect(
    children: Sequence[_Child], timeout: float, axes: Mapping[str, int] | None
) -> RankRuns:
    results: list[Result] = []
    ended: list[Ended | None] = []
    dumps: list[str] = []
    own: list[tuple[bool, float, ChildError]] = []
    for c in children:
        c.dump.seek(0)
        dumps.append(c.dump.read(MAX_DUMP).decode("utf-8", "replace"))
        c.dump.close()
        try:
            got = _result(c.got, c.proc.returncode or 0, dumps[-1], c.killed, timeout, axes)
        except ChildError as exc:  # the rank's own one line, with its number
            peer = "by peer" in str(exc) or "gloo" in str(exc)  # closed, reset: a consequence
            said = f"rank {c.rank}: {exc}{_twice(str(exc))}"
            own.append((peer, c.ended_at, ChildError(said, exc.code)))
            got = None
        results.append(got.outcome if isinstance(got, Ended) else got)
        ended.append(got if isinstance(got, Ended) else None)
    if own and not any(isinstance(r, Outcome) and r.error for r in results):
        raise min(own, key=lambda o: o[:2])[2]  # the code could not be imported or built
    for outcome in (r for r in (*results, *(e.outcome for e in ended if e)) if r):
        if isinstance(outcome, Outcome):
            outcome.capture.parts = len(children)  # h/N heads on each rank
            outcome.capture._seen = -1
    runs = RankRuns(results, ended)
    runs.rank, runs.line = blame(children, runs, dumps)
    return runs


def _twice(message: str) -> str:
    """The fix when the code joins a process group itself: attntrace has joined one.

    >>> _twice("ValueError: trying to initialize the default process group twice!")[:30]
    '; attntrace --nproc has joined'
    """
    if "default process group twice" not in message:
        return ""
    return (
        "; attntrace --nproc has joined the process group (gloo) before your code runs: "
        "call dist.init_process_group only when not dist.is_initialized()"
    )


def blame(
    children: Sequence[_Child], runs: RankRuns, dumps: Sequence[str]
) -> tuple[int | None, str | None]:
    """The rank that failed first, and the one line: what it did and where, where the others
    were waiting, and, when the first failed in a collective while another rank had returned,
    how many collectives each called."""
    failed = [c for c in children if c.stopped or _failed(c)]
    if not failed:
        return None, None
    first = min(failed, key=lambda c: (c.stopped, _waiting(c, runs, dumps[c.rank]), c.ended_at))
    line = _rank_line(first, runs, dumps[first.rank])
    if _waiting(first, runs, dumps[first.rank]):
        line += _returned(first, [c for c in children if not _failed(c) and not c.stopped], runs)
    for c in children:
        if c is not first and c in failed and (where := _where(dumps[c.rank])):
            line += f"; rank {c.rank} was waiting at {where}"
    return first.rank, f"{line}; all {len(children)} ranks were stopped"


def _returned(first: _Child, done: Sequence[_Child], runs: RankRuns) -> str:
    """`` (rank 1 had returned after 0 collectives, rank 0 called 1)``: the ranks called
    different collectives."""
    if not done:
        return ""
    counts = [
        f"rank {c.rank} had returned after {_collectives(runs, c.rank)} collectives" for c in done
    ]
    return f" ({', '.join(counts)}; rank {first.rank} called {_collectives(runs, first.rank)})"


def _collectives(runs: RankRuns, rank: int) -> int:
    """The collectives rank ``rank`` called: those recorded, and the one that raised."""
    outcome = runs.outcomes()[rank]
    recorder = outcome.capture._recorder
    called = sum(e.kind == "collective" for e in recorder.events)
    return called + (recorder.failure is not None and recorder.failure.kind == "collective")


def _waiting(c: _Child, runs: RankRuns, dumped: str) -> bool:
    """Whether the rank failed inside a collective (gloo: a peer closed, a timeout), so most
    likely because of another rank."""
    if "distributed_c10d.py" in dumped or "_functional_collectives" in dumped:
        return True
    outcome = runs.results[c.rank]
    fail = outcome.capture._recorder.failure if isinstance(outcome, Outcome) else None
    return fail is not None and fail.kind == "collective"


def _rank_line(c: _Child, runs: RankRuns, dumped: str) -> str:
    ended = runs.ended[c.rank]
    if ended is not None:
        return ended.line.replace("the code under test", f"rank {c.rank}", 1)
    outcome = runs.results[c.rank]
    if c.stopped or not isinstance(outcome, Outcome):
        where = _where(dumped)
        return f"rank {c.rank} was stopped" + (f" at {where}" if where else "")
    error = outcome.error
    if error is None:
        return f"rank {c.rank} called sys.exit({outcome.exit_code})"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)  # gloo's [.../pair.cc:553] before its words
    said = f"{type(error).__name__}: {_cut(text)}" if text else type(error).__name__
    fail = outcome.capture._recorder.failure
    inside = f" in {fail.func}" if fail is not None and fail.kind == "collective" else ""
    at = ""
    if outcome.frames:
        file, number = outcome.frames[-1][:2]
        at = f" at {os.path.basename(file)}:{number}"
    return f"rank {c.rank} raised {said}{inside}{at}"


def _cut(text: str, width: int = 100) -> str:
    """``text``, at most ``width`` characters (``…`` where it was cut).

    >>> _cut("abcdef", 4)
    'abc…'
    """
    return text if len(text) <= width else text[: width - 1] + "…"


def _where(dumped: str) -> str:
    """``attn.py:30`` of the innermost frame of the user's code in a faulthandler dump."""
    frames = _dump_frames(dumped)
    return f"{os.path.basename(frames[0][0])}:{frames[0][1]}" if frames else ""
