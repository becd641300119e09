"""What a file says it holds, read from its headers before any data: the shape and dtype in a
``.npy`` header, the entries of a ``.npz`` zip, the tensor table of a ``.safetensors`` file.
Every declared size is checked against the memory budget here, so a sparse file, a zip bomb or
a header that lies is refused before a byte of its data is read.
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from attntrace.errors import InputFileError, MemoryBudgetError
from attntrace.files.guard import open_regular, parse_json
from attntrace.text import plain

#: Longest header a .npy file may have (numpy's own default limit).
NPY_HEADER_LIMIT = 10_000
#: Longest JSON header a .safetensors file may have (the safetensors library's own limit).
SAFETENSORS_HEADER_LIMIT = 100 * 1024**2
#: The most entries a .npz or .safetensors file may list.
MAX_ENTRIES = 100_000
#: Bytes per element of the safetensors dtypes attntrace can read.
SAFETENSORS_DTYPES: dict[str, int] = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


#: The end of the error line for a file that holds pickled objects (never loaded), with the fix.
PICKLE_REFUSED = (
    "carries pickled Python objects; attntrace never unpickles, so it was refused "
    "and nothing in it ran; save plain arrays instead (numpy.save of a float "
    "array, torch.save of a state_dict of tensors, or a .safetensors file)"
)


@dataclass(frozen=True)
class Declared:
    """One array as a header declares it."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def check_bytes(path: Path, name: str, nbytes: int) -> None:
    """Refuse an array whose declared bytes exceed the memory budget (before reading it)."""
    from attntrace.engine.memory import file_budget
    from attntrace.units import format_bytes

    budget, origin = file_budget()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{plain(path)}: {plain(name)} declares {format_bytes(nbytes)}, more than the memory "
            f"budget of {format_bytes(budget)} ({origin}); "
            "check that this is the right file, or raise --max-memory"
        )


def npy_header(f: IO[bytes], path: Path, name: str = "x") -> Declared:
    """The shape and dtype of the ``.npy`` data at the position of ``f`` (left after the header).

    >>> import io, numpy as np
    >>> buf = io.BytesIO(); np.save(buf, np.zeros((2, 3), dtype=np.float32)); _ = buf.seek(0)
    >>> npy_header(buf, Path("x.npy"))
    Declared(shape=(2, 3), dtype='float32', nbytes=24)
    """
    import numpy as np

    try:
        version = np.lib.format.read_magic(f)
        fmt = np.lib.format
        reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = reader(f, max_header_size=NPY_HEADER_LIMIT)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError):
        # numpy's message quotes the header: the file's own bytes, never shown
        raise InputFileError(
            f"{plain(path)}: damaged numpy data ({plain(name)}: a bad .npy "
            "header); write it again with numpy.save"
        ) from None
    if dtype.hasobject:
        raise InputFileError(f"{plain(path)}: {plain(name)} {PICKLE_REFUSED}")
    return Declared(tuple(int(n) for n in shape), str(dtype), math.prod(shape) * dtype.itemsize)


def check_npy(path: Path, what: str = "") -> Declared:
    """The declared array of a ``.npy`` file, refused when it exceeds the budget or the file
    is shorter than its header says; ``what`` (e.g. ``"--mask"``) names it in messages."""
    with open_regular(path, what) as f:
        declared = npy_header(f, path, "the array")
        data_bytes = os.fstat(f.fileno()).st_size - f.tell()
    if declared.nbytes > data_bytes:
        raise InputFileError(
            f"{plain(path)}: declares {declared.shape} {declared.dtype} but holds "
            f"only {data_bytes} bytes of data (truncated?); write it again with "
            "numpy.save"
        )
    check_bytes(path, "the array", declared.nbytes)
    return declared


def check_npz(path: Path) -> dict[str, Declared]:
    """The declared arrays of a ``.npz`` zip by name; the uncompressed sizes the zip states and
    the shapes the .npy headers state are checked against the budget (zip bombs included)."""
    found: dict[str, Declared] = {}
    total = 0
    with open_regular(path) as raw:
        try:
            with zipfile.ZipFile(raw) as z:
                infos = z.infolist()
                if len(infos) > MAX_ENTRIES:
                    raise InputFileError(
                        f"{plain(path)}: lists {len(infos)} entries; the most is {MAX_ENTRIES}"
                    )
                for info in infos:
                    name = info.filename.removesuffix(".npy")
                    check_bytes(path, name, info.file_size)
                    with z.open(info) as member:
                        declared = npy_header(member, path, name)
                    check_bytes(path, name, max(declared.nbytes, info.file_size))
                    total += max(declared.nbytes, info.file_size)
                    found[name] = declared
        except (
            zipfile.BadZipFile,
            zipfile.LargeZipFile,
            NotImplementedError,
            EOFError,
            OSError,
        ) as exc:
            raise InputFileError(
                f"{plain(path)}: truncated or damaged .npz file ({plain(exc)}); "
                "write it again with numpy.savez"
            ) from None
    check_bytes(path, "all its arrays together", total)
    return found


def safetensors_header(path: Path) -> tuple[dict[str, Declared], dict[str, str]]:
    """The tensor table and the ``__metadata__`` of a ``.safetensors`` file, validated: known
    dtypes, offsets inside the file that match the shapes, metadata of strings."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        length = int.from_bytes(first, "little") if len(first) == 8 else -1
        if not 2 <= length <= min(SAFETENSORS_HEADER_LIMIT, size - 8):
            raise InputFileError(  # the length is the file's own bytes: never shown
                f"{plain(path)}: not a valid .safetensors file (its first 8 bytes do not "
                "give a header length that fits the file); write it again with safetensors"
            )
        text = f.read(length).decode("utf-8", "replace")
    doc = parse_json(text, f"{plain(path)} (safetensors header)")
    if not isinstance(doc, dict) or len(doc) > MAX_ENTRIES:
        raise InputFileError(
            f"{plain(path)}: not a valid .safetensors file (its header is not a table of tensors)"
        )
    meta = doc.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise InputFileError(
            f"{plain(path)}: not a valid .safetensors file (its __metadata__ "
            "must map names to strings); write it again with safetensors"
        )
    data = size - 8 - length
    return {name: _tensor_entry(path, name, entry, data) for name, entry in doc.items()}, meta


def _tensor_entry(path: Path, name: str, entry: Any, data: int) -> Declared:
    def bad(why: str) -> InputFileError:
        return InputFileError(
            f"{plain(path)}: not a valid .safetensors file (tensor "
            f"{plain(repr(name))} {why}); write it again with safetensors"
        )

    if not isinstance(entry, dict):
        raise bad("is not described by a table")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_DTYPES:
        raise bad(f"has the unknown dtype {plain(repr(dtype))[:40]}")
    if not isinstance(shape, list) or not all(_whole(n) and n >= 0 for n in shape):
        raise bad("has no valid shape")
    ok = isinstance(offsets, list) and len(offsets) == 2 and all(map(_whole, offsets))
    nbytes = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
    start, stop = offsets if ok else (0, -1)  # type: ignore[misc]
    if not 0 <= start <= stop <= data or stop - start != nbytes:
        raise bad(f"declares {shape} {dtype} at offsets that do not fit the file")
    return Declared(tuple(shape), dtype, nbytes)


def _whole(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)
