"""``run --save FILE.npz``: every step and parameter of a trace in one ``.npz``, atomically."""

from __future__ import annotations

import json
from pathlib import Path

from attntrace.errors import ConfigError
from attntrace.files.output import write_output
from attntrace.trace import Trace

#: The format tag stored in the ``config`` entry.
SAVE_FORMAT = "attntrace-trace/1"


def trace_arrays(trace: Trace) -> dict[str, object]:
    """What ``--save`` writes: each step and parameter under its name, plus ``config``, a JSON
    string with the config fields, the backend and the format tag."""
    import numpy as np

    missing = [s.name for s in (*trace.steps, *trace.parameters) if s.value is None]
    if missing:
        raise ConfigError(
            f"--save needs values, but the {trace.backend} backend keeps none; use --backend numpy "
            "or torch"
        )
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
        raise ConfigError(
            "--save writes a .npz file; give a name ending in .npz, e.g. --save "
            f"{path.stem or 'trace'}.npz"
        )
    arrays = trace_arrays(trace)
    write_output(path, lambda f: np.savez(f, **arrays), what="saved")  # type: ignore[arg-type]
