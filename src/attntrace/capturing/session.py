"""Capture the shapes of the user's own attention code, torch or numpy.

>>> import numpy as np
>>> import attntrace
>>> ones = np.ones((3, 8))
>>> with attntrace.capture() as t:
...     x = t.track(ones)
...     q = x.reshape(3, 2, 4).transpose(1, 0, 2)
>>> [(s.name, s.shape, s.axes) for s in t.steps][1:]
[('reshape_1', (3, 2, 4), ('S', 'h', 'd')), ('q', (2, 3, 4), ('h', 'S', 'd'))]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from attntrace.capturing.events import Event, Failure, Operand
from attntrace.capturing.record import CAPTURE_SCHEMA_ID, Capture, CapturedStep, Recorder


class Session(Capture):
    """The object ``attntrace.capture()`` yields: a :class:`Capture` that can also mark a
    numpy array as the input (``x = t.track(x)``)."""

    def __init__(self, recorder: Recorder, axes: Mapping[str, int] | None = None) -> None:
        super().__init__(recorder, axes)
        self._numpy: Any = None
        self._torch: Any = None

    def track(self, array: Any, axes: tuple[str, ...] | None = None) -> Any:
        """``array`` as the traced input: numpy ops on it are recorded from here on (a torch
        tensor needs no tracking and is returned as it is)."""
        if self._numpy is None or not _is_numpy(array):
            return array
        return self._numpy.track(array, axes)


def _is_numpy(value: object) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray | list | tuple)


@contextmanager
def capture(
    *,
    keep_values: bool = True,
    axes: Mapping[str, int] | None = None,
    numpy: bool = True,
    torch: bool | None = None,
    into: Sequence[str] = (),
    stream: Callable[[Event], None] | None = None,
    opaque: bool | None = None,
) -> Iterator[Session]:
    """Record every tensor operation the user's code runs inside the block.

    torch is captured when it is imported (``torch=None``) or asked for; numpy arrays are
    captured from their creation in the user's code inside the block, or from ``t.track(x)``.
    ``keep_values=False`` records shapes only. ``axes`` gives sizes of axis letters
    (``{"h": 12, "d": 64}``) to name the axes that sizes alone cannot. ``into`` names
    installed packages whose code counts as the user's (``["transformers"]``: the ops inside
    its attention modules, not one row per module call). ``stream`` is called with each
    raw event as it is recorded. Each ``scaled_dot_product_attention`` call is opened: its
    steps replayed (:mod:`attntrace.capturing.kernel`); ``opaque=True`` keeps it one row per
    call (``None``: as ``trace --opaque`` set it, else opened).

    The block runs in this process: the user's code is not time- or memory-limited here (the
    CLI's ``trace`` runs it in a child process, :mod:`attntrace.capturing.sandbox`).
    """
    from attntrace.capturing.kernel import opaque_default
    from attntrace.capturing.kernel import remarks as kernel_remarks
    from attntrace.capturing.source import forget, package_folders, trace_into
    from attntrace.capturing.torch_inside import following, remarks, split

    into, follow = split(into)
    opaque = opaque_default() if opaque is None else opaque
    places = package_folders(into)
    forget()
    recorder = Recorder(keep_values)
    recorder.stream = stream
    session = Session(recorder, axes)
    hooks: list[Any] = []
    try:
        if numpy:
            from attntrace.capturing.numpy_hooks import NumpyHooks

            session._numpy = NumpyHooks(recorder)
            hooks.append(session._numpy)
        if torch or (torch is None and "torch" in sys.modules):
            from attntrace.capturing.torch_hooks import TorchHooks

            session._torch = TorchHooks(recorder, opaque=opaque)
            hooks.append(session._torch)
        for h in hooks:
            h.install()
            session._adapters[_adapter_key(h)] = h.adapter
        trace_into(places)
        with following(follow):
            yield session
    finally:
        opened = kernel_remarks(recorder.events)
        session.remarks = (*(remarks(recorder.events) if follow else ()), *opened)
        trace_into(())
        for h in reversed(hooks):
            h.uninstall()
        session.finish()


def _adapter_key(hooks: Any) -> int:
    if type(hooks).__name__ == "TorchHooks":
        import torch

        return id(torch.Tensor)
    from attntrace.capturing.numpy_hooks import TracedArray

    return id(TracedArray)


__all__ = [
    "CAPTURE_SCHEMA_ID",
    "Capture",
    "CapturedStep",
    "Failure",
    "Operand",
    "Session",
    "capture",
]
