"""The sandbox's pieces: what crosses the pipe keeps its types (tuples stay tuples), an
exception comes back with its name, message and builtin base (the explanations read them),
a faulthandler dump gives the user's innermost frame, and a child's events rebuild the same
capture as the in-process run."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from attntrace.capturing.runner import run_script
from attntrace.capturing.sandbox import (
    MAX_MESSAGE,
    Ended,
    _Collected,
    _decode,
    _dump_frames,
    _encode,
    _error,
    _error_dict,
    _read_channel,
    run_in_child,
)
from leftovers import no_leftovers  # noqa: F401 (a fixture)


def test_params_keep_their_tuples_and_dicts() -> None:
    params = {"along": (1, 4, 12), "picks": (None, 0, 1), "dims": [0], "equation": "ij", "x": 1}
    assert _decode(_encode(params)) == params
    assert isinstance(_decode(_encode(params))["along"], tuple)


def test_an_error_comes_back_with_its_name_message_and_base() -> None:
    class ShapeMismatchError(RuntimeError):
        pass

    back = _error(_error_dict(ShapeMismatchError("mat1 and mat2 shapes cannot be multiplied")))
    assert type(back).__name__ == "ShapeMismatchError"
    assert isinstance(back, RuntimeError)
    assert str(back) == "mat1 and mat2 shapes cannot be multiplied"
    key = _error(_error_dict(KeyError("w_q")))
    assert isinstance(key, KeyError)
    assert str(key) == "'w_q'"


def test_a_dump_gives_the_users_innermost_frame(tmp_path: Path) -> None:
    user = tmp_path / "attn.py"
    user.write_text("def f():\n    while True: pass\nf()\n")
    dump = (
        "Timeout (0:00:02)!\nThread 0x00007f (most recent call first):\n"
        f'  File "{user}", line 2 in f\n  File "{user}", line 3 in <module>\n'
        f'  File "{sys.modules["runpy"].__file__}", line 88 in _run_code\n'
    )
    frames = _dump_frames(dump)
    assert frames[0] == (str(user), 2, "f", "while True: pass")
    assert [f[1] for f in frames] == [2, 3]


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftovers")
def test_the_child_rebuilds_the_capture_of_the_process(tmp_path: Path) -> None:
    script = tmp_path / "attn.py"
    script.write_text(
        "import numpy as np\nx = np.ones((3, 8))\nq = x.reshape(3, 2, 4).transpose(1, 0, 2)\n"
        "s = q @ q.transpose(0, 2, 1)\n"
    )
    here = run_script(script, (), keep_values=False)
    there = run_in_child({"kind": "script", "script": str(script), "argv": [], "into": []})
    assert not isinstance(there, Ended | dict)
    assert there.capture.document(None) == here.capture.document(None)


def _channel(data: bytes) -> _Collected:
    """What the parent's reader makes of ``data`` written on the channel (in a thread: the
    pipe holds less than the data)."""
    import os
    import threading

    read_fd, write_fd = os.pipe()
    got = _Collected()
    reader = threading.Thread(target=_read_channel, args=(read_fd, got))
    reader.start()
    with os.fdopen(write_fd, "wb") as f, contextlib.suppress(BrokenPipeError):
        f.write(data)
    reader.join(timeout=30)
    assert not reader.is_alive()
    return got


def test_a_message_longer_than_the_bound_closes_the_channel() -> None:
    got = _channel(b'{"started": true}\n' + b"x" * (MAX_MESSAGE + 10))
    assert got.started.is_set()
    assert (
        got.refused == f"the code under test sent more than {MAX_MESSAGE // 2**20} MiB to attntrace"
    )
    assert got.stop.is_set()


def test_a_message_nested_a_million_deep_is_refused_in_a_line() -> None:
    got = _channel(b"[" * 10**6 + b"\n")
    assert got.refused == "the code under test sent attntrace a message that is not one of its own"
    assert got.events == []
