"""Safe readers: every user file becomes a dict of numpy arrays, and nothing in it ever runs.

``.npz`` / ``.npy`` are read with ``allow_pickle=False``, ``.safetensors`` holds no code by
design, PyTorch files are read with ``torch.load(..., weights_only=True)``, which refuses every
pickled object that is not a tensor or a plain container. Each failure is one
:class:`~attntrace.errors.InputFileError` line that names the file and the fix.
"""

from __future__ import annotations

import pickle  # only for its exception type: nothing is ever unpickled here
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import BackendUnavailableError, InputFileError, install_hint
from attntrace.files import declared as dec
from attntrace.files.guard import open_regular
from attntrace.text import plain

if TYPE_CHECKING:
    import numpy as np

#: File suffixes of weights files, and what reads them.
WEIGHT_SUFFIXES: tuple[str, ...] = (".npz", ".safetensors", ".pt", ".pth", ".bin")

_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"
_PICKLE_REFUSED = dec.PICKLE_REFUSED


class LazyArrays(Mapping[str, "np.ndarray"]):
    """Array names known up front, values read on access: a checkpoint can be far larger than
    the one layer attntrace needs.

    >>> import numpy as np
    >>> arrays = LazyArrays(["a.w", "b"], lambda name: np.zeros(1))
    >>> list(arrays), list(arrays.under("a.")), "b" in arrays
    (['a.w', 'b'], ['w'], True)
    """

    def __init__(self, names: Iterable[str], load: Callable[[str], np.ndarray]) -> None:
        self._names = list(names)
        self._known = set(self._names)
        self._load = load

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._known:
            raise KeyError(name)
        return self._load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:  # Mapping's default would read the tensor
        return name in self._known

    def __len__(self) -> int:
        return len(self._names)

    def under(self, prefix: str) -> LazyArrays:
        """The arrays whose names start with ``prefix``, named without it."""
        return LazyArrays(
            (n[len(prefix) :] for n in self._names if n.startswith(prefix)),
            lambda n: self._load(prefix + n),
        )


def read_arrays(path: Path) -> tuple[LazyArrays, dict[str, str]]:
    """The arrays in the weights file ``path`` by name (read when accessed), and its text
    metadata (a ``config`` JSON entry of an attntrace ``.npz``, a ``.safetensors`` header's).

    >>> import numpy as np, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "w.npz"
    >>> np.savez(f, w_q=np.eye(2), config=np.array('{"heads": 1}'))
    >>> arrays, meta = read_arrays(f)
    >>> sorted(arrays), meta
    (['w_q'], {'config': '{"heads": 1}'})
    """
    suffix = path.suffix.lower()
    if suffix not in WEIGHT_SUFFIXES:
        raise InputFileError(
            f"{path}: unknown weights format {suffix or '(no suffix)'!r}; use one of "
            f"{', '.join(WEIGHT_SUFFIXES)}"
        )
    head = _head(path)
    if suffix == ".npz":
        arrays, meta = _read_npz(path, head)
        return LazyArrays(arrays, arrays.__getitem__), meta
    if suffix == ".safetensors":
        return _read_safetensors(path)
    if not head.startswith(
        (_ZIP_MAGIC, b"\x80")
    ):  # torch.save writes a zip; legacy files are pickles
        raise InputFileError(
            f"{path}: not a readable PyTorch state dict (empty, truncated or another format)"
        )
    return _read_torch(path, mmap=head.startswith(_ZIP_MAGIC)), {}


def read_npy(path: Path) -> np.ndarray:
    """The one floating-point array of a ``.npy`` file (or the ``x`` entry of a ``.npz``)."""
    import numpy as np

    head = _head(path)
    if path.suffix.lower() == ".npz":
        arrays, _ = _read_npz(path, head)
        if "x" not in arrays:
            raise InputFileError(
                f"{path}: has no array named 'x'; save the input as x, or pass a .npy file"
            )
        return arrays["x"]
    if path.suffix.lower() != ".npy":
        raise InputFileError(
            f"{path}: --input takes a .npy file (numpy.save) or a .npz with an 'x' entry"
        )
    if not head.startswith(_NPY_MAGIC):
        raise _not_format(path, head, ".npy")
    dec.check_npy(path)
    try:
        value = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise _refused_or_broken(path, exc) from None
    except (OSError, EOFError) as exc:
        raise InputFileError(
            f"{path}: truncated or damaged .npy file ({exc}); write it again with numpy.save"
        ) from None
    return _float_array(path, "x", value)


def _head(path: Path) -> bytes:
    """The first bytes of ``path``; missing, unreadable and irregular files (FIFOs, devices,
    directories) fail here with one line, without blocking."""
    with open_regular(path) as f:
        try:
            return f.read(16)
        except OSError as exc:
            raise InputFileError(
                f"{plain(path)}: cannot be read ({plain(exc.strerror or exc)})"
            ) from None


def _not_format(path: Path, head: bytes, kind: str) -> InputFileError:
    if head[:1] == b"\x80":  # the first opcode of every pickle since protocol 2
        return InputFileError(f"{path}: is a raw pickle, not a {kind} file; it {_PICKLE_REFUSED}")
    return InputFileError(f"{path}: is not a {kind} file (empty, truncated or another format)")


def _refused_or_broken(path: Path, exc: Exception) -> InputFileError:
    if "pickle" in str(exc).lower():
        return InputFileError(f"{path}: {_PICKLE_REFUSED}")
    return InputFileError(f"{path}: damaged numpy data ({exc})")


def _read_npz(path: Path, head: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    import numpy as np

    if not head.startswith(_ZIP_MAGIC):
        raise _not_format(path, head, ".npz")
    dec.check_npz(path)
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, str] = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                value = npz[name]
                if value.dtype.kind == "U" and value.ndim == 0:
                    meta[name] = str(value)
                else:
                    arrays[name] = value
    except ValueError as exc:
        raise _refused_or_broken(path, exc) from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError) as exc:
        raise InputFileError(
            f"{path}: truncated or damaged .npz file ({exc}); write it again with numpy.savez"
        ) from None
    return arrays, meta


def _read_safetensors(path: Path) -> tuple[LazyArrays, dict[str, str]]:
    try:
        from safetensors import safe_open
    except ImportError:
        raise BackendUnavailableError(
            f"{path}: reading .safetensors needs the safetensors package; "
            + install_hint("safetensors")
        ) from None
    table, meta = dec.safetensors_header(path)  # validated, sizes known before any data is read
    try:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
    except Exception as exc:  # SafetensorError derives from Exception only
        raise InputFileError(
            f"{plain(path)}: not a valid .safetensors file ({plain(exc)})"
        ) from None

    def load(name: str) -> np.ndarray:
        dec.check_bytes(path, name, table[name].nbytes * (2 if table[name].dtype == "BF16" else 1))
        return _safetensor(path, name)

    return LazyArrays(names, load), meta


def _safetensor(path: Path, name: str) -> np.ndarray:
    """One tensor; bfloat16 (which numpy lacks) is widened to float32 through torch."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            value: np.ndarray = f.get_tensor(name)
    except TypeError:  # "data type 'bfloat16' not understood"
        return _torch_safetensor(path, name)
    except Exception as exc:
        raise InputFileError(
            f"{plain(path)}: not a valid .safetensors file ({plain(exc)})"
        ) from None
    return value


def _torch_safetensor(path: Path, name: str) -> np.ndarray:
    torch = _torch(path, "bfloat16 tensors in .safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        value: np.ndarray = f.get_tensor(name).to(torch.float32).numpy()
    return value


#: The most bytes of pickled structure a PyTorch file may have (the data.pkl of a zip file):
#: real state dicts need kilobytes, and the weights-only unpickler works through every byte.
PICKLE_LIMIT = 8 * 1024**2
#: How deep dicts may nest in a state dict, and how many entries it may have in all.
STATE_DEPTH = 32
STATE_ENTRIES = 1_000_000


def _read_torch(path: Path, *, mmap: bool) -> LazyArrays:
    """A state dict; zip-format files are memory-mapped, so only the tensors used are read.
    Bounded: the pickle is size-capped, the walk of the dicts is bounded in depth and entries
    (shared or cyclic dicts are refused), each tensor is checked against the budget before
    it is copied."""
    torch = _torch(path, "PyTorch files")
    _check_torch_size(path, zipped=mmap)
    try:
        # e.g. "Detected pickle protocol 4": the error line says enough
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except (
        pickle.UnpicklingError
    ) as exc:  # the weights-only unpickler met something that is not a tensor
        found = re.search(r"GLOBAL (\S+)", str(exc))
        asked = f" (it asked for {plain(found.group(1))[:80]})" if found else ""
        raise InputFileError(f"{plain(path)}: {_PICKLE_REFUSED}{asked}") from None
    except Exception:  # RuntimeError (a damaged zip), EOFError, RecursionError ...
        raise InputFileError(
            f"{plain(path)}: not a readable PyTorch state dict (empty, truncated or another format)"
        ) from None
    if not isinstance(loaded, dict):
        raise InputFileError(
            f"{plain(path)}: holds a {type(loaded).__name__}, not a state dict; "
            "save model.state_dict()"
        )
    flat = _flatten(loaded, path)
    return LazyArrays(flat, lambda name: _to_numpy(torch, flat[name], path, name))


def _check_torch_size(path: Path, *, zipped: bool) -> None:
    """The pickle of a zip-format file is capped; a legacy file is read whole, so its size
    counts against the memory budget."""
    if not zipped:
        dec.check_bytes(path, "the legacy (non-zip) PyTorch file", path.stat().st_size)
        return
    try:
        with open_regular(path) as raw, zipfile.ZipFile(raw) as z:
            pickles = [i for i in z.infolist() if i.filename.endswith(".pkl")]
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError):
        raise InputFileError(
            f"{plain(path)}: not a readable PyTorch state dict (a damaged zip)"
        ) from None
    if any(i.file_size > PICKLE_LIMIT for i in pickles):
        raise InputFileError(
            f"{plain(path)}: its pickled structure is larger than "
            f"{PICKLE_LIMIT >> 20} MiB, "
            "far more than a state dict needs; save model.state_dict() alone"
        )


def _flatten(tree: dict[Any, Any], path: Path) -> dict[str, Any]:
    """Nested dicts ({"model": {...}}) as one dict with dotted keys, in file order; non-tensors
    are dropped. Walked without recursion; each dict is entered once."""
    import torch

    flat: dict[str, Any] = {}
    seen, entries = {id(tree)}, 0
    stack: list[tuple[Iterator[tuple[Any, Any]], str]] = [(iter(tree.items()), "")]
    while stack:
        items, prefix = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        entries += 1
        key, value = item
        if isinstance(value, dict):
            if id(value) in seen or len(stack) >= STATE_DEPTH or entries > STATE_ENTRIES:
                raise InputFileError(
                    f"{plain(path)}: its dicts are shared, cyclic, "
                    f"nested deeper than {STATE_DEPTH} or hold more than "
                    f"{STATE_ENTRIES:,} entries; save model.state_dict()"
                )
            seen.add(id(value))
            stack.append((iter(value.items()), f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            flat[f"{prefix}{key}"] = value
    return flat


def _to_numpy(torch: Any, t: Any, path: Path | None = None, name: str = "") -> np.ndarray:
    where = f"{plain(path)}: {plain(name)}" if path is not None else "a tensor"
    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta" or t.is_complex():
        raise InputFileError(
            f"{where} is a {t.layout}, {t.dtype} tensor on {t.device.type}; "
            "save dense floating-point weights"
        )
    if path is not None:
        widened = 2 if t.dtype == torch.bfloat16 else 1
        dec.check_bytes(path, name, t.numel() * t.element_size() * widened)
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every value exactly
        t = t.to(torch.float32)
    try:
        value: np.ndarray = t.numpy()
    except (TypeError, RuntimeError) as exc:
        raise InputFileError(
            f"{where} cannot be read as numpy ({plain(exc)}); save float weights"
        ) from None
    return value


def _torch(path: Path, what: str) -> Any:
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError(
            f"{path}: reading {what} needs PyTorch; {install_hint('torch')}"
        ) from None
    return torch


def _float_array(path: Path, name: str, value: Any) -> np.ndarray:
    """``value`` as a native-byte-order floating-point array, or a one-line error."""
    import numpy as np

    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        kind = getattr(getattr(value, "dtype", None), "name", type(value).__name__)
        raise InputFileError(
            f"{path}: {name} is {kind}, not floating point; save it as float32 or float64"
        )
    native = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))
    return (
        native if native.flags.writeable else native.copy()
    )  # torch.from_numpy warns on read-only arrays
