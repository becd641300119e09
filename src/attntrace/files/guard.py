"""Guarded reading of user files: only regular files, never a blocking open, sizes capped
before and while reading, JSON strict and depth-bounded, JSON fields type- and range-checked.

Every refusal is one :class:`~attntrace.errors.InputFileError` line that names the file (made
inert with :func:`attntrace.text.plain`) and the fix. ``what`` names the option or the role of
the file in the message (``"--hf-config"``, ``"golden file"``).
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from attntrace.errors import InputFileError
from attntrace.text import plain

#: Text inputs (config.json, golden traces, spec files) larger than this are refused unread.
TEXT_LIMIT = 16 * 1024**2
#: Deepest nesting of lists and objects a JSON or TOML input may have.
MAX_DEPTH = 64


def _name(path: str | os.PathLike[str], what: str) -> str:
    shown = plain(os.fspath(path))
    return f"{what} {shown}" if what else shown


def regular_file(path: str | os.PathLike[str], what: str = "") -> Path:
    """``path`` when it names a regular file (symlinks followed); a one-line InputFileError
    for anything else -- without opening it, so a FIFO or a device never blocks.

    >>> regular_file("/dev/null")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: /dev/null: is a device, not a regular file; write the data ...
    """
    name = _name(path, what)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise InputFileError(f"{name}: no such file; check the path") from None
    except PermissionError:
        raise _denied(name) from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, an embedded NUL byte ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputFileError(f"{name}: cannot be read ({plain(reason)}); check the path") from None
    _refuse_kind(name, mode)
    return Path(path)


def _denied(name: str) -> InputFileError:
    return InputFileError(f"{name}: permission denied; make the file readable (chmod u+r)")


def _refuse_kind(name: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        kind = "a directory"
    elif stat.S_ISFIFO(mode):
        kind = "a named pipe (FIFO)"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device"
    else:
        kind = "not a plain file"
    fix = "write the data to a file first" if kind != "a directory" else "pass a file"
    raise InputFileError(f"{name}: is {kind}, not a regular file; {fix}")


def open_regular(path: str | os.PathLike[str], what: str = "") -> IO[bytes]:
    """``path`` opened for binary reading after :func:`regular_file`; opened non-blocking and
    checked again on the open descriptor, so a file swapped for a FIFO cannot block either."""
    regular_file(path, what)
    name = _name(path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise _denied(name) from None
    except OSError as exc:
        raise InputFileError(f"{name}: cannot be read ({plain(exc.strerror or exc)})") from None
    try:
        _refuse_kind(name, os.fstat(fd).st_mode)
    except InputFileError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike[str], limit: int = TEXT_LIMIT, what: str = "") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: the size is checked before
    reading (``st_size``) and while reading (a file that grows, or lies about its size).

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "big.txt"
    >>> _ = f.write_bytes(b"x" * 100)
    >>> read_bytes(f, limit=10)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: .../big.txt: is larger than 10 B, the most attntrace reads ...
    """
    from attntrace.units import format_bytes

    name = _name(path, what)
    too_big = InputFileError(
        f"{name}: is larger than {format_bytes(limit)}, the most attntrace reads from such a file; "
        "check that this is the right file"
    )
    with open_regular(path, what) as f:
        if (size := os.fstat(f.fileno()).st_size) > limit:
            raise too_big
        try:  # read(limit + 1) would allocate the whole limit for a small file
            data = f.read(size + 1)
            if len(data) > size:  # it grew (or lied about its size): read on up to the limit
                data += f.read(limit + 1 - len(data))
        except OSError as exc:
            raise InputFileError(f"{name}: cannot be read ({plain(exc.strerror or exc)})") from None
    if len(data) > limit:
        raise too_big
    return data


def read_text(path: str | os.PathLike[str], limit: int = TEXT_LIMIT, what: str = "") -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (a leading BOM is dropped).

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "latin1.txt"
    >>> _ = f.write_bytes("caf\\xe9".encode("latin-1"))
    >>> read_text(f)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: .../latin1.txt: is not UTF-8 text (byte 0xe9 at offset 3); ...
    """
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise InputFileError(
            f"{_name(path, what)}: is not UTF-8 text (byte 0x{bad:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None


def load_json(
    path: str | os.PathLike[str],
    limit: int = TEXT_LIMIT,
    what: str = "",
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The JSON document in ``path``, read with :func:`read_text` and parsed by
    :func:`parse_json`.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = f.write_text('{"heads": NaN}')
    >>> load_json(f, what="--hf-config")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: --hf-config .../config.json: is not strict JSON: NaN ...
    """
    return parse_json(read_text(path, limit, what), _name(path, what), max_depth)


def parse_json(text: str, source: str, max_depth: int = MAX_DEPTH) -> Any:
    """Strict JSON: NaN, Infinity, numbers too large for a float, integers of more than 4300
    digits, duplicate keys and nesting deeper than ``max_depth`` are refused with one line
    naming ``source``.

    >>> parse_json('{"a": [1, 2.5, "x", null]}', "example")
    {'a': [1, 2.5, 'x', None]}
    >>> parse_json('{"a": 1, "a": 2}', "example")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: example: is not strict JSON: the key 'a' appears twice; ...
    """
    try:
        doc = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{source}: is not valid JSON ({plain(exc.msg)} at line {exc.lineno} column "
            f"{exc.colno}); fix the file"
        ) from None
    except _StrictError as exc:
        raise InputFileError(f"{source}: is not strict JSON: {exc}; fix the file") from None
    except RecursionError:
        raise InputFileError(
            f"{source}: nests lists or objects deeper than {max_depth} levels; fix the file"
        ) from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise InputFileError(f"{source}: is not valid JSON ({plain(exc)}); fix the file") from None
    if nesting_depth(doc) > max_depth:
        raise InputFileError(
            f"{source}: nests lists or objects deeper than {max_depth} levels; fix the file"
        )
    return doc


class _StrictError(ValueError):
    """A value the JSON grammar of Python accepts and strict JSON does not."""


def _refuse_constant(name: str) -> Any:
    raise _StrictError(f"{name} is not a JSON number (write a finite number or null)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _StrictError(f"the number {text[:40]} is too large for a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        keys = [k for k, _ in pairs]
        twice = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise _StrictError(f"the key {plain(repr(twice))} appears twice")
    return doc


def nesting_depth(doc: Any) -> int:
    """The nesting depth of a parsed JSON document, walked without recursion."""
    deepest, stack = 0, [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in node)
    return deepest


# --- typed fields of JSON documents ---------------------------------------------------------


def json_int(
    doc: Mapping[str, Any],
    key: str,
    source: str,
    *,
    lo: int = 0,
    hi: int = 2**31 - 1,
    default: int | None = None,
) -> int | None:
    """``doc[key]`` as a whole number in ``[lo, hi]`` (``true`` and ``2.0`` are refused);
    ``default`` when the key is absent or null.

    >>> json_int({"heads": 12}, "heads", "config.json", lo=1)
    12
    >>> json_int({"heads": True}, "heads", "config.json", lo=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: config.json: field 'heads' must be a whole number ..., got true
    """
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _field_error(source, key, f"a whole number from {lo} to {hi}", value)
    return value


def json_float(
    doc: Mapping[str, Any],
    key: str,
    source: str,
    *,
    lo: float = -math.inf,
    hi: float = math.inf,
    default: float | None = None,
) -> float | None:
    """``doc[key]`` as a finite number in ``[lo, hi]`` (integers accepted, ``true`` refused).

    >>> json_float({"rope_theta": 10000}, "rope_theta", "config.json", lo=1.0)
    10000.0
    >>> json_float({"rope_theta": "1e4"}, "rope_theta", "config.json", lo=1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: config.json: field 'rope_theta' must be a number ..., got "1e4"
    """
    value = doc.get(key)
    if value is None:
        return default
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    number = float(value) if ok and abs(value) < 2.0**1023 else math.nan
    if not (math.isfinite(number) and lo <= number <= hi):
        raise _field_error(source, key, f"a number from {lo:g} to {hi:g}", value)
    return number


def json_bool(
    doc: Mapping[str, Any], key: str, source: str, default: bool | None = None
) -> bool | None:
    """``doc[key]`` when it is ``true`` or ``false`` (the string ``"false"`` and 0 are refused).

    >>> json_bool({"bias": "false"}, "bias", "config.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: config.json: field 'bias' must be ..., got "false"
    """
    value = doc.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _field_error(source, key, "true or false", value)
    return value


def json_str(
    doc: Mapping[str, Any],
    key: str,
    source: str,
    *,
    max_len: int = 1000,
    default: str | None = None,
) -> str | None:
    """``doc[key]`` when it is a string of at most ``max_len`` characters.

    >>> json_str({"model_type": 7}, "model_type", "config.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: config.json: field 'model_type' must be a string ..., got 7
    """
    value = doc.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > max_len:
        raise _field_error(source, key, f"a string of at most {max_len} characters", value)
    return value


def _field_error(source: str, key: str, wanted: str, value: Any) -> InputFileError:
    shown = _shown(value)
    return InputFileError(f"{source}: field {plain(repr(key))} must be {wanted}, got {shown}")


def _shown(value: Any) -> str:
    """A JSON value as it is written in the file, cut short and made inert."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return plain(text if len(text) <= 60 else text[:57] + "...")
