"""The user's code run in a child process, for the CLI's ``trace`` and ``check --trace``.

The child (``python -m attntrace.capturing.sandbox``: :func:`child_main`) runs the target
under :func:`capture` with a time limit (faulthandler's watchdog in the child, a hard kill
by the parent after it) and an address-space limit (``RLIMIT_AS``: what it had mapped
before the user's code, plus the budget). It streams every recorded event to the parent as
a JSON line on a pipe of its own, as it is recorded, so a child that is killed, aborts,
calls ``os._exit`` or hangs still leaves the steps it ran. Its stdout and stderr are read by
the parent and written out with every escape made inert. Nothing the child sends is
unpickled: JSON only.

The parent builds the :class:`~attntrace.capturing.session.Session` from the events and
works out axes and roles itself, so a well-behaved target gives what the in-process capture
gives.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from attntrace.capturing.events import Event, Failure, Operand
from attntrace.capturing.process_tree import Tree
from attntrace.capturing.runner import Outcome
from attntrace.capturing.session import Session
from attntrace.capturing.source import Site
from attntrace.errors import AttntraceError

#: ``--timeout``'s default, in seconds.
DEFAULT_TIMEOUT = 60.0
#: Bytes of address space the child may map beyond the budget: attntrace's own work, thread
#: stacks and the allocator's arenas.
SLACK = 2 * 2**30
#: Seconds the parent allows past the time limit (faulthandler's dump) before it kills the
#: child itself; the time limit starts when the child says the user's code starts.
GRACE = 3.0
#: Seconds the child may take to start (Python, numpy, torch) before the user's code runs.
STARTUP = 120.0
#: The longest ``--timeout`` (a year): the child's watchdog takes no more.
MAX_TIMEOUT = 365 * 24 * 3600.0
#: The longest message read from the child's channel (a step, diff's rendered report), and
#: the most read in all: the child cannot make attntrace itself hold more.
MAX_MESSAGE = 16 * 2**20
MAX_CHANNEL = 256 * 2**20
#: The most of a line of the child's stdout or stderr held at once (longer lines are relayed
#: in pieces of this size), and the most of faulthandler's dump read.
MAX_PRINTED = 64 * 2**10
MAX_DUMP = 2**20
#: Seconds a forwarded signal leaves the processes to end before they are killed.
SIGNAL_GRACE = 0.5
#: Signals to attntrace forwarded to the code's whole tree of processes.
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP")

Frame = tuple[str, int, str, str]

#: Packages whose targets need torch: the child loads it before the time limit starts.
TORCH_PACKAGES = frozenset({"torch", "transformers", "timm", "x_transformers", "vit_pytorch"})


class ChildFailedError(Exception):
    """attntrace's own code failed in the child (not the user's): a bug, exit 3."""


class SandboxStop(Exception):  # noqa: N818 (the type name of the document)
    """What ended a child that did not finish (stands in for the error of the document)."""


@dataclass
class Ended:
    """A run in the child that did not end normally: the steps it recorded and one line."""

    outcome: Outcome
    line: str  # "the code under test ran past 60 s at attn.py:12"


@dataclass
class _Collected:
    events: list[Event] = field(default_factory=list)
    end: dict[str, Any] | None = None
    started: threading.Event = field(default_factory=threading.Event)
    thread: dict[str, Any] | None = None
    #: why the channel was closed before the child ended (a flood, a malformed message)
    refused: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    read: int = 0


def run_in_child(
    request: Mapping[str, Any],
    *,
    axes: Mapping[str, int] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    budget: int | None = None,
    prints: Any = None,
    module: str = "attntrace.capturing.sandbox",
) -> Outcome | Ended | dict[str, Any]:
    """Run ``request`` (``{"kind": "script", "path", "argv"}`` or ``{"kind": "target",
    "target", "init", "inputs"}``, plus ``into``) in a child; the :class:`Outcome` of a run
    that ended normally (the user's exception included), an :class:`Ended` for one that did
    not, or the child's :class:`AttntraceError` (bad target, failed import or build) raised
    here (a :class:`ChildError`); a dict for a ``module`` (the child's ``python -m``) whose
    runner returns one (diff's report, rendered in the child). The child's stdout goes to
    ``prints`` (default: attntrace's stderr), its stderr to attntrace's stderr."""
    if budget is None:
        from attntrace.engine.memory import default_budget

        budget = default_budget()
    check_timeout(timeout)
    read_fd, write_fd = os.pipe()
    dump = tempfile.TemporaryFile()  # noqa: SIM115 (the child writes to it; closed below)
    payload = {
        **request,
        "axes": dict(axes or {}),
        "fd": write_fd,
        "dump": dump.fileno(),
        "timeout": timeout,
        "budget": budget,
        "path": [p for p in sys.path if isinstance(p, str)],
    }
    tree = Tree()
    try:
        out = prints or sys.stderr
        proc = _start(module, payload, write_fd, dump.fileno(), merged=out is sys.stderr)
        got = _Collected()
        readers = _readers(proc, read_fd, got, out)
        killed, stopped_by = _supervised(proc, got, timeout, tree)
        for r in readers:
            r.join(timeout=5)
    finally:
        tree.close()
    dump.seek(0)
    dumped = dump.read(MAX_DUMP).decode("utf-8", "replace")
    dump.close()
    if stopped_by:
        _stopped(stopped_by)
    return _result(got, proc.returncode, dumped, killed, timeout, axes)


def check_timeout(timeout: float) -> None:
    """Refuse a time limit that is not a number of seconds from 0.1 to a year (``inf``,
    ``nan``, a 100-digit value) with one line, before anything runs.

    >>> check_timeout(float("inf"))
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: --timeout inf is not a time limit; give seconds from 0.1 to ...
    """
    from attntrace.errors import ConfigError

    if not 0.1 <= timeout <= MAX_TIMEOUT:  # nan too
        raise ConfigError(
            f"--timeout {timeout:g} is not a time limit; give seconds from 0.1 to {MAX_TIMEOUT:.0f}"
        )


def _start(
    module: str, payload: Mapping[str, Any], write_fd: int, dump: int, *, merged: bool
) -> Any:
    """The child, in a session of its own, its stdout and stderr unbuffered (``-u``: the
    code's prints come through, in order, even when the child is killed or calls
    ``os._exit``); ``merged``: both on one pipe, so that their lines keep their order."""
    try:
        return subprocess.Popen(
            [sys.executable, "-u", "-m", module, json.dumps(payload)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
            pass_fds=(write_fd, dump),
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(payload["path"])},
        )
    finally:
        os.close(write_fd)


def _readers(
    proc: Any, read_fd: int, got: _Collected, prints: Any, prefix: str = ""
) -> list[threading.Thread]:
    """Threads reading the child's channel, and relaying its stdout (to ``prints``) and stderr,
    each line after ``prefix`` (``[rank 1] ``)."""
    readers = [
        threading.Thread(target=_read_channel, args=(read_fd, got), daemon=True),
        threading.Thread(target=_relay, args=(proc.stdout, prints, prefix), daemon=True),
    ]
    if proc.stderr is not None:
        relay = (proc.stderr, sys.stderr, prefix)
        readers.append(threading.Thread(target=_relay, args=relay, daemon=True))
    for r in readers:
        r.start()
    return readers


def _supervised(
    proc: subprocess.Popen[bytes], got: _Collected, timeout: float, tree: Tree
) -> tuple[bool, int]:
    """Wait for the child, then stop every process it started; (killed at the time limit,
    the number of a signal attntrace received meanwhile, else 0). A signal (SIGTERM, SIGHUP,
    SIGINT) is forwarded to the whole tree, which gets :data:`SIGNAL_GRACE` to end."""
    killed = False
    with _forwarding(proc, tree) as signals:
        try:
            killed = not _waited(proc, got, timeout)
            if killed:  # its watchdog did not fire: SIGABRT makes faulthandler name the line
                _abort(proc)
        except _Signalled:
            with contextlib.suppress(subprocess.TimeoutExpired, _Signalled):
                proc.wait(timeout=SIGNAL_GRACE)
        finally:
            signals.stopping = True  # a signal now is forwarded, and the stop goes on
            tree.stop(proc.pid)
            proc.wait()
            tree.stop(proc.pid)
    return killed, signals.received


class _Signalled(BaseException):
    """Raised in the main thread by a forwarded signal (not an Exception: nothing between
    the wait and :func:`_supervised` catches it)."""


@dataclass
class _Signals:
    received: int = 0  # the first signal's number
    stopping: bool = False


@contextlib.contextmanager
def _forwarding(proc: subprocess.Popen[bytes], tree: Tree) -> Iterator[_Signals]:
    """While the child runs, SIGTERM, SIGHUP and SIGINT to attntrace are sent on to the
    whole tree, and end the wait (the main thread only: elsewhere Python takes no handler)."""
    import signal

    signals = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return

    def forward(number: int, _frame: object) -> None:
        tree.send(number, proc.pid)
        if not signals.received:
            signals.received = number
            if not signals.stopping:
                raise _Signalled

    numbers = [getattr(signal, n) for n in FORWARDED if hasattr(signal, n)]
    previous = {n: signal.signal(n, forward) for n in numbers}
    try:
        yield signals
    finally:
        for n, handler in previous.items():
            signal.signal(n, handler)


def _stopped(number: int) -> None:
    """One line, and the exit code a shell gives a process ended by the signal (128 + N)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(
            f"attntrace: stopped by {_signal_name(number)}; the code under test and every "
            "process it started were ended\n"
        )
        sys.stderr.flush()
    raise SystemExit(128 + number)


def _waited(proc: subprocess.Popen[bytes], got: _Collected, timeout: float) -> bool:
    """Wait for the child to end, or for its channel to be refused: :data:`STARTUP` seconds
    for it to start the user's code, then ``timeout`` and :data:`GRACE`; False when it is
    still running."""
    import time

    start = time.monotonic()
    while not got.started.wait(0.05):
        if proc.poll() is not None or got.stop.is_set():
            return True
        if time.monotonic() - start > STARTUP:
            return False
    deadline = time.monotonic() + timeout + GRACE
    while not got.stop.is_set():
        try:
            proc.wait(timeout=0.05)
            return True
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                return False
    return True


def _abort(proc: subprocess.Popen[bytes]) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, signal.SIGABRT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1)


def _read_channel(fd: int, got: _Collected) -> None:
    """The child's messages, one JSON line each, each at most :data:`MAX_MESSAGE` bytes and
    :data:`MAX_CHANNEL` in all; a longer one, or one that is not the child's (malformed,
    nested too deep), closes the channel with the reason in ``got.refused`` (never a
    traceback), and the child is stopped."""
    with os.fdopen(fd, "rb") as f:
        try:
            while not got.stop.is_set():
                raw = f.readline(MAX_MESSAGE + 1)
                if not raw:
                    return
                got.read += len(raw)
                if len(raw) > MAX_MESSAGE or got.read > MAX_CHANNEL:
                    limit = MAX_MESSAGE if len(raw) > MAX_MESSAGE else MAX_CHANNEL
                    _refuse(got, f"sent more than {limit // 2**20} MiB to attntrace")
                elif raw.strip():
                    _take(raw, got)
        except Exception as exc:  # whatever the child wrote: a line, never a traceback
            _refuse(got, f"sent attntrace a message it cannot read ({type(exc).__name__})")


def _take(raw: bytes, got: _Collected) -> None:
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        _refuse(got, "sent attntrace a message that is not one of its own")
        return
    if not isinstance(message, dict):
        _refuse(got, "sent attntrace a message that is not one of its own")
    elif "event" in message:
        got.events.append(_event(message["event"], len(got.events)))
    elif "started" in message:
        got.started.set()
    elif "thread" in message and got.thread is None:
        got.thread = message["thread"] if isinstance(message["thread"], dict) else {}
    elif "end" in message and got.end is None:
        got.end = message


def _refuse(got: _Collected, why: str) -> None:
    if not got.refused:
        got.refused = f"the code under test {why}"
    got.stop.set()


def _relay(stream: IO[bytes] | None, err: Any, prefix: str = "") -> None:
    """The child's output onto ``err`` line by line (a line longer than :data:`MAX_PRINTED`
    in pieces), every escape made inert."""
    import codecs

    from attntrace.text import plain

    if stream is None:
        return
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    ended = True  # the last piece ended its line
    while raw := stream.readline(MAX_PRINTED):
        text = decode(raw)
        head = prefix if ended else ""
        ended = text.endswith("\n")
        _write(err, head + plain(text.removesuffix("\n")) + ("\n" if ended else ""))
    if not ended:
        _write(err, "\n")


def _write(err: Any, text: str) -> None:
    try:
        err.write(text)
        err.flush()
    except (OSError, ValueError):
        pass


# --- the parent reads what came back ---------------------------------------------------


def _result(
    got: _Collected,
    status: int,
    dumped: str,
    killed: bool,
    timeout: float,
    axes: Mapping[str, int] | None,
) -> Outcome | Ended | dict[str, Any]:
    try:
        return _read_result(got, status, dumped, killed, timeout, axes)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError):
        got.refused = "the code under test sent attntrace a message it cannot read"
        got.end = None
        return _read_result(got, status, dumped, killed, timeout, axes)


def _read_result(
    got: _Collected,
    status: int,
    dumped: str,
    killed: bool,
    timeout: float,
    axes: Mapping[str, int] | None,
) -> Outcome | Ended | dict[str, Any]:
    from attntrace.capturing.record import Recorder

    end = None if got.refused else got.end
    if end is not None and end["end"] == "bad":
        code = end.get("code", 2)
        raise ChildError(str(end.get("message", "")), code if code in (1, 2) else 2)
    data = end.get("data") if end is not None and end["end"] == "result" else None
    if isinstance(data, dict):
        return {str(k): v for k, v in data.items()}
    recorder = Recorder(keep_values=False)
    recorder.events = got.events
    stated = dict(end.get("axes") or {}) if end is not None else {}  # the class's h and d
    session = Session(recorder, {**stated, **(axes or {})} or None)
    outcome = Outcome(session)
    if end is not None and end["end"] == "done":
        error = _error(end["error"]) if end.get("error") else None
        outcome.error = error
        outcome.exit_code = int(end.get("exit_code", 0))
        session.remarks = tuple(str(r) for r in end.get("remarks", ()))
        outcome.frames = [_frame(f) for f in end.get("frames", [])]
        fail = end.get("failure")
        if fail:
            recorder.failure = Failure(
                func=str(fail["func"]),
                kind=str(fail["kind"]),
                site=_site(fail["site"]),
                operands=tuple(Operand(str(n), _shape(s), ()) for n, s in fail["operands"]),
                error=error if fail.get("same") and error is not None else _error(fail["error"]),
                params=_decode(fail["params"]),
            )
        if got.thread is None:
            return outcome
        frame = got.thread.get("where") or _last_step(got.events)
        what = got.thread.get("type", "an exception")
        return Ended(outcome, f"the code under test raised {what} in a thread{_at(frame)}")
    frames = _dump_frames(dumped)
    where = frames[0] if frames else None
    if end is not None and end["end"] == "base":  # KeyboardInterrupt, a BaseException
        user = [_frame(f) for f in end.get("frames", [])]
        where = user[-1] if user else where
        what = str(end["error"].get("type", "BaseException"))
        line = f"the code under test raised {what}"
    elif got.refused:
        line = f"{got.refused}; it was stopped"
    elif end is not None and end["end"] == "internal":
        raise ChildFailedError(str(end.get("message", "")))
    elif killed or "Timeout (" in dumped:
        line = f"the code under test ran past {timeout:g} s"
    elif status < 0:
        line = f"the code under test was killed by {_signal_name(-status)}"
    else:
        line = f"the code under test ended the process with exit status {status}"
    if where is None:
        where = _last_step(got.events)
    line += _at(where)
    outcome.error = SandboxStop(line)
    outcome.exit_code = 1
    outcome.frames = [where] if where is not None else []
    return Ended(outcome, line)


def _at(frame: Frame | None) -> str:
    if frame is None or not frame[0]:
        return ""
    return f" at {os.path.basename(frame[0])}:{frame[1]}"


def _last_step(events: Sequence[Event]) -> Frame | None:
    """Where the last recorded step ran, as a frame (its file and line)."""
    for e in reversed(events):
        file, _, line = e.site.location.rpartition(":")
        if file and line.isdigit():
            return (file, int(line), "", e.site.source)
    return None


_DUMPED = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


def _dump_frames(text: str) -> list[Frame]:
    """The user's frames of a faulthandler dump, innermost first."""
    import linecache

    from attntrace.capturing.source import is_user_file

    out: list[Frame] = []
    for line in text.splitlines():
        m = _DUMPED.match(line)
        if m and is_user_file(m.group(1)):
            file, number = m.group(1), int(m.group(2))
            out.append((file, number, m.group(3), linecache.getline(file, number).strip()))
    return out


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _error(data: Mapping[str, Any]) -> BaseException:
    """An exception of the child's type name and message, of the nearest builtin base (the
    explanations read ValueError, RuntimeError, IndexError, MemoryError)."""
    name, message = str(data.get("type", "Exception")), str(data.get("message", ""))
    base: type[BaseException] = Exception
    for b in data.get("bases", []):
        found = getattr(builtins, str(b), None)
        if isinstance(found, type) and issubclass(found, Exception):
            base = found
            break
    try:
        cls = type(name if name.isidentifier() else "Exception", (base,), {"__str__": _text})
        made: BaseException = cls(message)
    except TypeError:
        made = type(name, (Exception,), {"__str__": _text})(message)
    return made


def _text(self: BaseException) -> str:
    return str(self.args[0]) if self.args else ""


def _frame(data: Sequence[Any]) -> Frame:
    return (str(data[0]), int(data[1]), str(data[2]), str(data[3]))


def _site(data: Sequence[Any]) -> Site:
    return Site(str(data[0]), str(data[1]), str(data[2]), tuple(str(t) for t in data[3]))


def _shape(data: Sequence[Any]) -> tuple[int, ...]:
    return tuple(int(n) for n in data)


def _event(data: Mapping[str, Any], index: int) -> Event:
    return Event(
        index=index,
        name=str(data["name"]),
        kind=str(data["kind"]),
        func=str(data["func"]),
        shape=_shape(data["shape"]),
        dtype=str(data["dtype"]),
        inputs=tuple(None if i is None or int(i) >= index else int(i) for i in data["inputs"]),
        input_shapes=tuple(_shape(s) for s in data["input_shapes"]),
        site=_site(data["site"]),
        params=_decode(data["params"]),
        version=int(data.get("version", -1)),
    )


def _encode(value: Any) -> Any:
    """Plain data as JSON with its tuples kept (``{"t": [...]}``), dicts as ``{"d": ...}``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {"t": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"d": [[str(k), _encode(v)] for k, v in value.items()]}
    if hasattr(value, "__index__"):
        return int(value)
    return str(value)


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "t" in value:
            return tuple(_decode(v) for v in value["t"])
        return {str(k): _decode(v) for k, v in value.get("d", [])}
    return value


# --- the child -----------------------------------------------------------------------------


Runner = Callable[[Callable[[Event], None]], "Outcome | dict[str, Any]"]


class ChildError(AttntraceError):
    """The child's own one-line error (bad target, failed import or build), with its exit
    code (2, or 1 for a diff whose code raised)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def child_main(prepare: Callable[[Mapping[str, Any]], Runner] | None = None) -> None:
    """The child's whole life: read the request, limit itself, run, report, exit. ``prepare``
    makes what runs (default: a trace's capture); a runner that returns a dict reports it as
    the result."""
    request = json.loads(sys.argv[1])
    sys.path[:] = request["path"]
    fd = int(request["fd"])
    write, dumps, exit_now = os.write, json.dumps, os._exit
    getlimit, setlimit = sys.getrecursionlimit, sys.setrecursionlimit
    floor = getlimit()

    def send(message: Mapping[str, Any]) -> None:
        if getlimit() < floor:  # the code lowered it: attntrace's own work needs it back
            setlimit(floor)
        data = (dumps(message) + "\n").encode()
        while data:
            try:
                data = data[write(fd, data) :]
            except OSError:
                return

    import faulthandler
    import signal

    # SIGINT forwarded by the parent (Ctrl-C, `kill -INT`) ends the child as SIGTERM does: no
    # KeyboardInterrupt traceback on the stderr the parent relays while it stops the tree.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    faulthandler.enable(file=int(request["dump"]), all_threads=True)
    _thread_hook(send)
    _limit_core()
    try:
        run = (prepare or _prepare)(request)
        timeout = float(request["timeout"])
        timeout = timeout if 0.1 <= timeout <= MAX_TIMEOUT else MAX_TIMEOUT
        faulthandler.dump_traceback_later(  # its thread started before the memory limit
            timeout, exit=True, file=int(request["dump"])
        )
        _limit_memory(int(request["budget"]))
        send({"started": True})
        outcome = run(lambda e: send({"event": _event_dict(e)}))
        setlimit(max(floor, getlimit()))
    except BaseException as exc:  # each kind is one message
        send(_stopped_message(exc))
        _flush()
        exit_now(0)
    faulthandler.cancel_dump_traceback_later()
    if isinstance(outcome, dict):
        send({"end": "result", "data": outcome})
    else:
        send(_done(outcome))
    _flush()
    exit_now(0)


def _stopped_message(exc: BaseException) -> dict[str, Any]:
    """The child's last message when the run did not return: its own error (bad target,
    import, build), out of memory, attntrace's own failure, or a BaseException of the code's
    (KeyboardInterrupt, its own subclass)."""
    if isinstance(exc, AttntraceError):
        return {"end": "bad", "message": str(exc), "code": int(getattr(exc, "exit_code", 2))}
    if isinstance(exc, MemoryError):
        return {"end": "bad", "message": "out of memory; lower the sizes or the budget"}
    if isinstance(exc, Exception):
        return {"end": "internal", "message": f"{type(exc).__name__}: {exc}"}
    return {"end": "base", "error": _error_dict(exc), "frames": _user_frames(exc)}


def _flush() -> None:
    """What the code printed, written before the child ends (``os._exit`` flushes nothing)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]


def _prepare(request: Mapping[str, Any]) -> Runner:
    """What the child runs, with torch loaded first when the target will need it."""
    from attntrace.capturing.kernel import keep_opaque
    from attntrace.capturing.runner import (
        Inputs,
        imports_torch,
        parse_target,
        run_script,
        run_target,
    )

    axes = request.get("axes") or None
    into = tuple(request.get("into", ()))
    keep_opaque(bool(request.get("opaque", False)))  # trace --opaque: one row per kernel call
    if request["kind"] == "script":
        path = Path(request["script"])
        argv = tuple(request.get("argv", ()))
        if imports_torch(path):
            from attntrace.capturing.runner import _import_torch

            _import_torch(path)
        return lambda stream: run_script(
            path, argv, axes=axes, keep_values=False, into=into, stream=stream
        )
    spec = parse_target(request["target"])
    given = dict(request["inputs"])
    if given.get("input_file") is not None:
        given["input_file"] = Path(given["input_file"])
    inputs = Inputs(**given)
    init = _decode(request["init"])
    top = (spec.module or "").split(".")[0]
    if (spec.path is not None and imports_torch(spec.path)) or top in TORCH_PACKAGES:
        with contextlib.suppress(ImportError):  # loaded before the clock starts
            import torch  # noqa: F401
    rank = None
    if "rank" in request:  # trace --nproc N: the process group joined before the clock starts
        from attntrace.capturing.rank_setup import join

        rank = join(request)
    return lambda stream: run_target(
        spec, init, inputs, axes=axes, keep_values=False, into=into, stream=stream, rank=rank
    )


def _limit_core() -> None:
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _limit_memory(budget: int) -> None:
    """The address space the child has mapped now, plus the budget (and :data:`SLACK`), as
    its ceiling: the soft and the hard limit both, so the code cannot raise it again."""
    import resource

    mapped = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    mapped = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = mapped + budget + SLACK
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY:
        want = min(want, soft)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (want, want))


def _thread_hook(send: Callable[[Mapping[str, Any]], None]) -> None:
    """A thread's exception: reported once to the parent (its traceback stays quiet)."""

    def hook(args: threading.ExceptHookArgs) -> None:
        exc = args.exc_value
        frames = _user_frames(exc) if exc is not None else []
        name = args.exc_type.__name__ if args.exc_type is not None else "an exception"
        send({"thread": {"type": name, "where": frames[-1] if frames else None}})

    threading.excepthook = hook


def _event_dict(e: Event) -> dict[str, Any]:
    return {
        "name": e.name,
        "kind": e.kind,
        "func": e.func,
        "shape": list(e.shape),
        "dtype": e.dtype,
        "inputs": list(e.inputs),
        "input_shapes": [list(s) for s in e.input_shapes],
        "site": [e.site.location, e.site.source, e.site.target, list(e.site.targets)],
        "params": _encode(e.params),
        "version": e.version,
    }


def _error_dict(exc: BaseException) -> dict[str, Any]:
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    try:
        message = str(exc)
    except Exception:
        message = ""
    return {"type": type(exc).__name__, "bases": bases, "message": message}


def _user_frames(exc: BaseException) -> list[list[Any]]:
    import traceback

    from attntrace.capturing.runner import tb_frames
    from attntrace.capturing.source import is_user_file

    return [
        [f.filename, f.lineno or 0, f.name, f.line or ""]
        for f in traceback.StackSummary.extract(tb_frames(exc.__traceback__))
        if is_user_file(f.filename)
    ]


def _done(outcome: Outcome) -> dict[str, Any]:
    error = outcome.error
    fail = outcome.capture._recorder.failure
    failure = None
    if fail is not None:
        failure = {
            "func": fail.func,
            "kind": fail.kind,
            "site": [fail.site.location, fail.site.source, fail.site.target, fail.site.targets],
            "operands": [[o.name, list(o.shape)] for o in fail.operands],
            "error": _error_dict(fail.error),
            "same": fail.error is error,
            "params": _encode(fail.params),
        }
    return {
        "end": "done",
        "exit_code": outcome.exit_code,
        "error": None if error is None else _error_dict(error),
        "frames": [list(f) for f in outcome.frames],
        "failure": failure,
        "remarks": list(outcome.capture.remarks),
        "axes": dict(outcome.capture._given),  # the sizes the run was told (a class's h, d)
    }


if __name__ == "__main__":
    child_main()
