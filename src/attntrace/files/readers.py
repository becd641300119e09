"""Safe readers: every user file becomes a dict of numpy arrays, and nothing in it ever runs.

``.npz`` / ``.npy`` are read with ``allow_pickle=False``, ``.safetensors`` holds no code by
design, PyTorch files are read with ``torch.load(..., weights_only=True)``, which refuses every
pickled object that is not a tensor or a plain container. Each failure is one
:class:`~attntrace.errors.InputFileError` line that names the file and the fix.
"""

from __future__ import annotations

import pickle  # only for its exception type: nothing is ever unpickled here
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import BackendUnavailableError, InputFileError

if TYPE_CHECKING:
    import numpy as np

#: File suffixes of weights files, and what reads them.
WEIGHT_SUFFIXES: tuple[str, ...] = (".npz", ".safetensors", ".pt", ".pth", ".bin")
SAFETENSORS_HINT = "install it with: pip install 'attntrace[safetensors]'"

_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"
_PICKLE_REFUSED = "carries pickled Python objects; attntrace never unpickles, so it was refused and nothing in it ran"


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
        return LazyArrays((n[len(prefix):] for n in self._names if n.startswith(prefix)), lambda n: self._load(prefix + n))


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
        raise InputFileError(f"{path}: unknown weights format {suffix or '(no suffix)'!r}; use one of {', '.join(WEIGHT_SUFFIXES)}")
    head = _head(path)
    if suffix == ".npz":
        arrays, meta = _read_npz(path, head)
        return LazyArrays(arrays, arrays.__getitem__), meta
    if suffix == ".safetensors":
        return _read_safetensors(path)
    if not head.startswith((_ZIP_MAGIC, b"\x80")):  # torch.save writes a zip; legacy files are pickles
        raise InputFileError(f"{path}: not a readable PyTorch state dict (empty, truncated or another format)")
    return _read_torch(path, mmap=head.startswith(_ZIP_MAGIC)), {}


def read_npy(path: Path) -> np.ndarray:
    """The one floating-point array of a ``.npy`` file (or the ``x`` entry of a ``.npz``)."""
    import numpy as np

    head = _head(path)
    if path.suffix.lower() == ".npz":
        arrays, _ = _read_npz(path, head)
        if "x" not in arrays:
            raise InputFileError(f"{path}: has no array named 'x'; save the input as x, or pass a .npy file")
        return arrays["x"]
    if path.suffix.lower() != ".npy":
        raise InputFileError(f"{path}: --input takes a .npy file (numpy.save) or a .npz with an 'x' entry")
    if not head.startswith(_NPY_MAGIC):
        raise _not_format(path, head, ".npy")
    try:
        value = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise _refused_or_broken(path, exc) from None
    except (OSError, EOFError) as exc:
        raise InputFileError(f"{path}: truncated or damaged .npy file ({exc}); write it again with numpy.save") from None
    return _float_array(path, "x", value)


def _head(path: Path) -> bytes:
    """The first bytes of ``path``; missing and unreadable files fail here with one line."""
    try:
        with path.open("rb") as f:
            return f.read(16)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise InputFileError(f"{path}: is a directory; pass a file") from None
    except PermissionError:
        raise InputFileError(f"{path}: permission denied; make the file readable (chmod u+r)") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None


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
        raise InputFileError(f"{path}: truncated or damaged .npz file ({exc}); write it again with numpy.savez") from None
    return arrays, meta


def _read_safetensors(path: Path) -> tuple[LazyArrays, dict[str, str]]:
    try:
        from safetensors import safe_open
    except ImportError:
        raise BackendUnavailableError(f"{path}: reading .safetensors needs the safetensors package; {SAFETENSORS_HINT}") from None
    try:
        with safe_open(str(path), framework="np") as f:
            meta = dict(f.metadata() or {})
            names = list(f.keys())
    except Exception as exc:  # SafetensorError derives from Exception only
        raise InputFileError(f"{path}: not a valid .safetensors file ({exc})") from None
    return LazyArrays(names, lambda name: _safetensor(path, name)), meta


def _safetensor(path: Path, name: str) -> np.ndarray:
    """One tensor; bfloat16 (which numpy lacks) is widened to float32 through torch."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            value: np.ndarray = f.get_tensor(name)
    except TypeError:  # "data type 'bfloat16' not understood"
        return _torch_safetensor(path, name)
    except Exception as exc:
        raise InputFileError(f"{path}: not a valid .safetensors file ({exc})") from None
    return value


def _torch_safetensor(path: Path, name: str) -> np.ndarray:
    torch = _torch(path, "bfloat16 tensors in .safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        value: np.ndarray = f.get_tensor(name).to(torch.float32).numpy()
    return value


def _read_torch(path: Path, *, mmap: bool) -> LazyArrays:
    """A state dict; zip-format files are memory-mapped, so only the tensors used are read."""
    torch = _torch(path, "PyTorch files")
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:  # the weights-only unpickler met something that is not a tensor
        found = re.search(r"GLOBAL (\S+)", str(exc))
        asked = f" (it asked for {found.group(1)})" if found else ""
        raise InputFileError(f"{path}: {_PICKLE_REFUSED}{asked}") from None
    except Exception:  # RuntimeError (a damaged zip), EOFError, ...
        raise InputFileError(f"{path}: not a readable PyTorch state dict (empty, truncated or another format)") from None
    if not isinstance(loaded, dict):
        raise InputFileError(f"{path}: holds a {type(loaded).__name__}, not a state dict; save model.state_dict()")
    flat = _flatten(loaded)
    return LazyArrays(flat, lambda name: _to_numpy(torch, flat[name]))


def _flatten(tree: dict[Any, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts ({"model": {...}}) as one dict with dotted keys; non-tensors are dropped."""
    import torch

    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif isinstance(value, torch.Tensor):
            flat[f"{prefix}{key}"] = value
    return flat


def _to_numpy(torch: Any, t: Any) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every value exactly
        t = t.to(torch.float32)
    value: np.ndarray = t.numpy()
    return value


def _torch(path: Path, what: str) -> Any:
    try:
        import torch
    except ImportError:
        from attntrace.backends.torch_backend import INSTALL_HINT

        raise BackendUnavailableError(f"{path}: reading {what} needs PyTorch; {INSTALL_HINT}") from None
    return torch


def _float_array(path: Path, name: str, value: Any) -> np.ndarray:
    """``value`` as a native-byte-order floating-point array, or a one-line error."""
    import numpy as np

    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        kind = getattr(getattr(value, "dtype", None), "name", type(value).__name__)
        raise InputFileError(f"{path}: {name} is {kind}, not floating point; save it as float32 or float64")
    native = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))
    return native if native.flags.writeable else native.copy()  # torch.from_numpy warns on read-only arrays
