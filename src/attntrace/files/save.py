"""``run --save FILE.npz``: every step and parameter of a trace in one ``.npz``, atomically."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from attntrace.errors import ConfigError, InputFileError
from attntrace.trace import Trace

#: The format tag stored in the ``config`` entry.
SAVE_FORMAT = "attntrace-trace/1"


def trace_arrays(trace: Trace) -> dict[str, object]:
    """What ``--save`` writes: each step and parameter under its name, plus ``config``, a JSON
    string with the config fields, the backend and the format tag."""
    import numpy as np

    missing = [s.name for s in (*trace.steps, *trace.parameters) if s.value is None]
    if missing:
        raise ConfigError(f"--save needs values, but the {trace.backend} backend keeps none; use --backend numpy or torch")
    arrays: dict[str, object] = {r.name: r.value for r in (*trace.steps, *trace.parameters)}
    meta = {**trace.config.to_dict(), "backend": trace.backend, "format": SAVE_FORMAT}
    arrays["config"] = np.array(json.dumps(meta))
    return arrays


def save_trace(trace: Trace, path: Path) -> None:
    """Write ``trace`` to ``path`` (a ``.npz``) through a temporary file in the same folder and
    a rename, so the file is either complete or absent; loadable with ``allow_pickle=False``.

    >>> import numpy as np, tempfile, pathlib
    >>> from attntrace import AttentionConfig, trace_attention
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "t.npz"
    >>> save_trace(trace_attention(AttentionConfig(seq=2, hidden=4, heads=2)), f)
    >>> with np.load(f, allow_pickle=False) as npz:
    ...     npz["output"].shape, npz["w_q"].shape, "config" in npz
    ((2, 4), (4, 4), True)
    """
    import numpy as np

    if path.suffix.lower() != ".npz":
        raise ConfigError(f"--save writes a .npz file; give a name ending in .npz, e.g. --save {path.stem or 'trace'}.npz")
    if not path.parent.is_dir():
        raise InputFileError(f"{path}: the folder {path.parent} does not exist; create it or save elsewhere")
    arrays = trace_arrays(trace)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputFileError(f"{path}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    try:
        with _signals_raise(), os.fdopen(fd, "wb") as f:
            # as open() would create it, not mkstemp's 0600
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            np.savez(f, **arrays)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputFileError(f"{path}: could not be written ({exc.strerror or exc}); nothing was saved") from None
        raise


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While the file is written, SIGTERM (and SIGHUP) raise SystemExit like Ctrl-C raises
    KeyboardInterrupt, so the temporary file is removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous = {n: signal.signal(getattr(signal, n), stop) for n in names}
    try:
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(getattr(signal, n), handler)
