"""attntrace.files.guard: only regular files, capped sizes, strict bounded JSON, typed fields."""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path

import pytest

from attntrace.errors import InputFileError
from attntrace.files.guard import (
    json_bool,
    json_float,
    json_int,
    json_str,
    load_json,
    open_regular,
    parse_json,
    read_bytes,
    read_text,
    regular_file,
)


def test_regular_file_accepts_a_file_and_a_symlink_to_it(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_text("{}")
    (tmp_path / "link").symlink_to(f)
    assert regular_file(f) == f
    assert regular_file(tmp_path / "link") == tmp_path / "link"


def _refusal(path: object, what: str = "") -> str:
    with pytest.raises(InputFileError) as info:
        regular_file(path, what)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_directory_and_bad_names_are_refused(tmp_path: Path) -> None:
    assert "no such file" in _refusal(tmp_path / "nope")
    assert "no such file" in _refusal(tmp_path / "nope" / "deeper")
    assert "is a directory" in _refusal(tmp_path)
    assert "cannot be read" in _refusal("a\x00b")
    assert "cannot be read" in _refusal("x" * 5000)
    assert _refusal(tmp_path / "nope", "--hf-config").startswith("--hf-config ")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(_refusal(fifo)), daemon=True)
    worker.start()
    worker.join(5)
    assert done
    assert "named pipe (FIFO)" in done[0]
    with pytest.raises(InputFileError, match="FIFO"):
        read_text(fifo)


def test_devices_and_sockets_are_refused(tmp_path: Path) -> None:
    assert "is a device" in _refusal("/dev/zero")
    assert "is a device" in _refusal("/dev/null")
    with pytest.raises(InputFileError, match="is a device"):
        load_json("/dev/zero")
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        assert "is a socket" in _refusal(sock_path)


def test_escape_codes_in_the_path_are_shown_inert(tmp_path: Path) -> None:
    message = _refusal(tmp_path / "\x1b[2Jevil[bold]")
    assert "\x1b" not in message
    assert "\\x1b[2Jevil[bold]" in message


def test_size_cap_before_reading_and_for_sparse_files(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.json"
    with sparse.open("wb") as f:
        f.truncate(2**40)  # declares a TiB, holds nothing
    with pytest.raises(InputFileError, match=r"larger than 16.00 MiB"):
        read_text(sparse)
    small = tmp_path / "s.txt"
    small.write_bytes(b"12345")
    assert read_bytes(small, limit=5) == b"12345"
    with pytest.raises(InputFileError, match="larger than 4 B"):
        read_bytes(small, limit=4)


def test_text_must_be_utf8_and_a_bom_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert load_json(f) == {"a": 1}
    f.write_bytes(b"\xff\xfe{")
    with pytest.raises(InputFileError, match=r"not UTF-8 text \(byte 0xff at offset 0\)"):
        read_text(f)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "secret"
    f.write_text("x")
    f.chmod(0)
    if os.geteuid() == 0:  # root reads everything: let the open fail as it does for a user

        def denied(*args: object, **kwargs: object) -> int:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "open", denied)
    with pytest.raises(InputFileError, match="permission denied"):
        open_regular(f)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ("[Infinity]", "Infinity is not a JSON number"),
        ("[-Infinity]", "-Infinity is not a JSON number"),
        ("[1e999]", "too large for a float"),
        ('{"a": 1, "a": 1}', "the key 'a' appears twice"),
        ("[" * 100 + "]" * 100, "deeper than 64 levels"),
        ("[" * 100_000, "deeper than 64 levels"),
        ('{"a":' * 50_000, "deeper than 64 levels"),
        ("[" + "9" * 5000 + "]", "not valid JSON"),
        ('{"a": }', "not valid JSON (Expecting value at line 1 column 7)"),
        ("", "not valid JSON"),
    ],
)
def test_strict_json_refusals(text: str, reason: str) -> None:
    with pytest.raises(InputFileError) as info:
        parse_json(text, "f.json")
    assert reason in str(info.value)
    assert str(info.value).startswith("f.json: ")


def test_depth_bound_is_exact() -> None:
    assert parse_json("[" * 64 + "]" * 64, "f") is not None
    with pytest.raises(InputFileError, match="deeper than 64"):
        parse_json("[" * 65 + "]" * 65, "f")
    assert parse_json('{"a": {"b": []}}', "f", max_depth=3) == {"a": {"b": []}}


def test_typed_fields() -> None:
    doc = {
        "i": 3,
        "f": 2.5,
        "b": False,
        "s": "llama",
        "t": True,
        "big": 10**30,
        "neg": -1,
        "nul": None,
        "str": "12",
        "huge": 10**400,
    }
    assert json_int(doc, "i", "c") == 3
    assert json_int(doc, "missing", "c", default=7) == 7
    assert json_int(doc, "nul", "c", default=7) == 7
    assert json_float(doc, "f", "c") == 2.5
    assert json_float(doc, "i", "c") == 3.0
    assert json_bool(doc, "b", "c") is False
    assert json_str(doc, "s", "c") == "llama"
    for key, fn in [
        ("t", json_int),
        ("big", json_int),
        ("neg", json_int),
        ("str", json_int),
        ("f", json_int),
        ("t", json_float),
        ("str", json_float),
        ("huge", json_float),
        ("i", json_bool),
        ("str", json_bool),
        ("i", json_str),
    ]:
        with pytest.raises(InputFileError, match=f"c: field '{key}' must be"):
            fn(doc, key, "c")  # type: ignore[operator]
    with pytest.raises(InputFileError, match="from 1 to 4, got 0"):
        json_int({"x": 0}, "x", "c", lo=1, hi=4)
    with pytest.raises(InputFileError, match=re.escape('got "\\u001b[2J"')):
        json_int({"x": "\x1b[2J"}, "x", "c")
