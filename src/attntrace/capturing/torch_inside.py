"""Following the ops inside torch's own attention: ``nn.MultiheadAttention.forward`` and
``F.multi_head_attention_forward`` (the in-projection from the packed ``in_proj_weight``, the
split into heads, scores, weights, context and out-projection), which are torch's files, not
the user's, and so were one row.

Following is asked for with the name :data:`MHA` among the packages of ``--into`` (the
default for a target that is an ``nn.MultiheadAttention``, as ``transformers`` is for its
classes). While it is followed, torch's fast path (``torch._native_multi_head_attention``, one
C++ op in eval mode without grad) is off, so the Python ops run and are seen.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import CodeType
from typing import Any

#: The ``--into`` name that follows torch's ``nn.MultiheadAttention``.
MHA = "torch.nn.MultiheadAttention"

#: What trace and diff say when they followed torch's attention.
FASTPATH_NOTE = (
    "torch's MultiheadAttention fast path (torch._native_multi_head_attention, one C++ op) "
    "is off while traced: the same math runs as Python ops, which are shown"
)

#: The code objects whose ops are recorded as the user's while :func:`following`.
_CODES: set[CodeType] = set()
#: The module classes whose forward is followed (not one row per call) while :func:`following`.
_CLASSES: list[type] = []


#: What trace says when torch's attention ran its fused kernel (``need_weights=False``) and it
#: was kept one row (``--opaque``); without it the call is opened (capturing/kernel.py).
SDPA_NOTE = (
    "nn.MultiheadAttention called with need_weights=False runs F.scaled_dot_product_attention, "
    "one fused op: with --opaque its scores and weights are not visible (drop --opaque to see "
    "them replayed, or call it with need_weights=True)"
)


def remarks(events: Sequence[Any]) -> tuple[str, ...]:
    """The notes of a capture that followed torch's attention: the fast path turned off, and
    the steps a fused op hides, when it ran one."""
    fused = any(e.kind == "sdpa" and e.site.location.startswith("functional.py") for e in events)
    return (FASTPATH_NOTE, *((SDPA_NOTE,) if fused else ()))


def split(into: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """``into`` without :data:`MHA`, and whether it was there.

    >>> split(["transformers", MHA])
    (('transformers',), True)
    """
    return tuple(p for p in into if p != MHA), MHA in into


def follows(obj: Any) -> bool:
    """Whether ``obj`` (a class or a module) is torch's ``nn.MultiheadAttention``, whose
    inside trace and diff follow by default.

    >>> follows(dict)
    False
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    cls = obj if isinstance(obj, type) else type(obj)
    return issubclass(cls, torch.nn.MultiheadAttention)


def is_followed_code(code: CodeType) -> bool:
    """Whether a frame running ``code`` is one whose ops are recorded (see :func:`following`)."""
    return code in _CODES


def is_followed_module(module: object) -> bool:
    """Whether ``module``'s forward is followed op by op rather than recorded as one row."""
    return bool(_CLASSES) and isinstance(module, tuple(_CLASSES))


@contextmanager
def following(on: bool) -> Iterator[None]:
    """Inside the block (when ``on``), the ops of ``nn.MultiheadAttention.forward`` and
    ``F.multi_head_attention_forward`` are the user's, and the fast path is off."""
    if not on:
        yield
        return
    import torch
    import torch.nn.functional as F  # noqa: N812

    mha = torch.nn.MultiheadAttention
    original = F.multi_head_attention_forward
    helpers = (getattr(F, name, None) for name in ("_in_projection_packed", "_in_projection"))
    codes = {
        mha.forward.__code__,
        original.__code__,
        *(f.__code__ for f in helpers if f is not None),  # private: gone in another torch
    }
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    F.multi_head_attention_forward = _undispatched(original, F)
    _CODES.update(codes)
    _CLASSES.append(mha)
    try:
        yield
    finally:
        _CODES.difference_update(codes)
        _CLASSES.remove(mha)
        F.multi_head_attention_forward = original
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _undispatched(function: Any, module: Any) -> Any:
    """``function`` (the same code, so the same lines) without its ``has_torch_function``
    check, which would hand the whole call to attntrace's mode as one op: its body runs under
    the mode, each op seen."""
    import types

    scope = {**vars(module), "has_torch_function": lambda *args: False}
    copy = types.FunctionType(
        function.__code__,
        scope,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy
