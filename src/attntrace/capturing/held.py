"""Library attention held inside the user's own module: the packages whose ops trace and diff
follow when the user's class keeps a transformers (or x-transformers, or torch's
``nn.MultiheadAttention``) module under any attribute, in an ``nn.Sequential`` or an
``nn.ModuleList``, so that its steps are seen, as when the class is named directly.

A plain function of x alone (``def run(x): return attn(x, ...)[0]``) that reaches a module
through its globals or closure is held the same way, by :func:`function_module`."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

#: Packages whose modules are never followed: their own internals, not attention code.
_NEVER = ("torch", "numpy", "attntrace", "builtins", "__main__", "typing")


def held_into(module: Any) -> tuple[str, ...]:
    """The ``--into`` packages of the library modules inside ``module`` (itself excluded):
    ``transformers`` for a held LlamaAttention, :data:`~attntrace.capturing.torch_inside.MHA`
    for a held ``nn.MultiheadAttention``; () for a module made of the user's and torch's
    layers only.

    >>> import torch
    >>> held_into(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    ()
    >>> held_into(torch.nn.TransformerEncoderLayer(8, 2))
    ('torch.nn.MultiheadAttention',)
    """
    from attntrace.capturing.torch_inside import MHA, follows

    found: dict[str, None] = {}
    for _, sub in list(module.named_modules())[1:]:
        if follows(sub):
            found[MHA] = None
        elif (package := _package_of(type(sub))) is not None:
            found[package] = None
    return tuple(found)


def _package_of(cls: type) -> str | None:
    """The installed package that defines ``cls`` (not torch, not the user's file), or None."""
    from attntrace.capturing.source import _NEVER_INTO, PASS_THROUGH, is_user_file

    top = cls.__module__.split(".")[0]
    if top in (*_NEVER, *_NEVER_INTO, *PASS_THROUGH) or top.startswith("_"):
        return None  # einops' layers: their ops are already the user's line's
    try:
        where = inspect.getfile(cls)
    except (TypeError, OSError):
        return None
    return None if is_user_file(where) else top


def function_module(fn: Callable[..., Any]) -> Any | None:
    """An ``nn.Module`` whose forward is ``fn(x)`` and which holds the modules ``fn`` reaches
    through its closure and the globals its code names (so their weights and packages are
    found), or None when ``fn`` reaches none.

    >>> import torch
    >>> proj = torch.nn.Linear(2, 2)
    >>> def run(x):
    ...     return proj(x)
    >>> wrapped = function_module(run)
    >>> type(wrapped).__name__, [n for n, _ in wrapped.named_children()]
    ('run', ['proj'])
    """
    torch: Any = sys.modules.get("torch")
    if torch is None or not callable(fn):
        return None
    reached = _reached(fn, torch.nn.Module)
    if not reached:
        return None

    class Function(torch.nn.Module):  # type: ignore[misc]
        attntrace_transparent = True  # its forward is attntrace's: fn's own ops are recorded

        def __init__(self) -> None:
            super().__init__()
            for name, module in reached.items():
                self.add_module(name, module)

        def forward(self, x: Any) -> Any:
            return fn(x)

    name = getattr(fn, "__name__", "function")
    Function.__name__ = Function.__qualname__ = name
    return Function()


def _reached(fn: Callable[..., Any], kind: type) -> dict[str, Any]:
    """The instances of ``kind`` in ``fn``'s closure, its default arguments
    (``def run(x, attn=attn)``) and the globals its code names."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    cells = zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False)
    found = {name: cell.cell_contents for name, cell in cells if _full(cell)}
    defaults = getattr(fn, "__defaults__", None) or ()
    named = code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount]
    found.update(zip(named, defaults, strict=True))
    found.update(getattr(fn, "__kwdefaults__", None) or {})
    scope = getattr(fn, "__globals__", {})
    found.update({name: scope[name] for name in code.co_names if name in scope})
    return {name: value for name, value in found.items() if isinstance(value, kind)}


def _full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True
