"""Opening ``torch.nn.attention.flex_attention.flex_attention``: each call the user's code makes
is replayed as torch's eager implementation computes it (``math_attention`` in
``torch/_higher_order_ops/flex_attention.py``; with torch 2.13 flex_attention runs eagerly on
the CPU, unfused, and warns that it does), each step recorded as
:mod:`attntrace.capturing.kernel` records SDPA's:

``k_rep``/``v_rep`` (``enable_gqa``) → ``k_t`` → ``scores`` → ``scaled`` → ``score_mod`` (the
user's function applied to every score, its source line shown) → ``mask`` (the block mask's
``mask_mod`` evaluated on every (b, h, q, kv): the (B, h, S, N) keep mask it stands for) →
``masked`` → ``weights`` → ``context``.

flex_attention is a Python function that torch's function mode never sees as one call, so
while a capture runs the function's code is swapped for a shim that calls :func:`_called`
(every name bound to it, ``from … import flex_attention`` included, goes through it); the
original code comes back when the capture ends. ``create_block_mask`` is swapped the same way
so that it runs outside the recording (it vmaps the ``mask_mod``: called inside the user's
forward, its batched tensors would reach the recorder).
"""

from __future__ import annotations

import linecache
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attntrace.capturing.kernel import FLEX, KernelCall, Replay, finish, mask_record
from attntrace.capturing.ops import swap
from attntrace.capturing.source import Site, site_of, user_frame

#: The module that holds flex_attention.
MODULE = "torch.nn.attention.flex_attention"
#: The global of that module the shim calls while a capture runs.
_HOOK = "_attntrace_flex_attention"
_ARGS = ("query", "key", "value", "score_mod", "block_mask", "scale", "enable_gqa")


def _shim(*args: Any, **kwargs: Any) -> Any:
    """The code flex_attention runs while captured: it looks :data:`_HOOK` up in torch's module."""
    return _attntrace_flex_attention(*args, **kwargs)  # type: ignore[name-defined]  # noqa: F821


def _block_shim(*args: Any, **kwargs: Any) -> Any:
    """The code create_block_mask runs while captured: it looks :data:`_BLOCK_HOOK` up."""
    return _attntrace_create_block_mask(*args, **kwargs)  # type: ignore[name-defined]  # noqa: F821


#: The global the block mask's shim calls.
_BLOCK_HOOK = "_attntrace_create_block_mask"


def install(hooks: Any) -> Callable[[], None]:
    """Route every flex_attention call through :func:`_called`, and every create_block_mask
    call outside the recording (:func:`_unrecorded`), until the returned undo runs."""
    import importlib

    try:
        module = importlib.import_module(MODULE)
    except ImportError:  # a torch without flex_attention
        return lambda: None
    undo_flex = _swap(module, "flex_attention", _HOOK, _shim, lambda f: _calling(hooks, f))
    undo_block = _swap(module, "create_block_mask", _BLOCK_HOOK, _block_shim, _unrecorded)

    def undo() -> None:
        undo_block()
        undo_flex()

    return undo


def _calling(hooks: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    def called(*args: Any, **kwargs: Any) -> Any:
        return _called(hooks, original, args, kwargs)

    return called


def _unrecorded(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (create_block_mask) run with torch functions disabled: it vmaps the
    mask_mod, whose batched tensors the recorder cannot read; the block mask it makes is
    expanded to its keep mask when flex_attention is called with it."""

    def called(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch._C.DisableTorchFunction():
            return original(*args, **kwargs)

    return called


def _swap(
    module: Any,
    name: str,
    hook: str,
    shim: Callable[..., Any],
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
) -> Callable[[], None]:
    """Swap the code of ``module.name`` for ``shim``'s, which calls ``wrap(original)`` (kept as
    ``module.hook``), until the returned undo runs (every name bound to the function, ``from …
    import`` included, goes through it)."""
    import types

    fn = getattr(module, name, None)
    if not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        return lambda: None
    outer = module.__dict__.get(hook)  # a capture inside a capture: the outer one's shim
    if outer is None:
        original = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        original.__kwdefaults__ = fn.__kwdefaults__
    else:
        original = outer.original
    saved = (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
    called = wrap(original)
    called.original = original  # type: ignore[attr-defined]
    module.__dict__[hook] = called
    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = shim.__code__, None, None

    def undo() -> None:
        fn.__code__, fn.__defaults__, fn.__kwdefaults__ = saved
        if outer is None:
            module.__dict__.pop(hook, None)
        else:
            module.__dict__[hook] = outer

    return undo


def _called(
    hooks: Any, original: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """One flex_attention call: run as it is; when the user's code made it, opened (or one row
    with ``--opaque``)."""
    import torch

    frame = None if hooks.recorder.busy or hooks.stack else user_frame(through=hooks.through)
    if frame is not None:
        site = site_of(frame)
        bound = {**dict(zip(_ARGS, args, strict=False)), **kwargs}
        qkv = [bound["query"], bound["key"], bound["value"]]
        hooks._adopt(qkv, site)
    with torch._C.DisableTorchFunction():  # its eager path runs dynamo, which a mode derails
        detached = _needs_detaching(args, kwargs)
        if detached:
            args, kwargs = _detached(args, kwargs)
        result = original(*args, **kwargs)
    if frame is None:
        return result
    out = result[0] if isinstance(result, tuple) else result
    if not hooks.opaque:
        try:
            replay_flex(hooks, {**bound, "detached": detached}, out, site)
        except Exception:  # an argument the replay does not read: one row, as --opaque
            hooks._record(out, FLEX, "sdpa", site, qkv, {})
        return result
    hooks._record(out, FLEX, "sdpa", site, qkv, {})
    return result


def _needs_detaching(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether q, k and v must go to flex_attention detached: on the CPU, with one requiring
    grad (a module's weights make them), its eager path raises "FlexAttention does not support
    backward on CPU"; trace asks for no gradient."""
    import torch

    tensors = [t for t in _qkv(args, kwargs) if isinstance(t, torch.Tensor)]
    cpu = all(t.device.type == "cpu" for t in tensors)
    return cpu and any(t.requires_grad for t in tensors)


def _qkv(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    bound = {**dict(zip(_ARGS, args, strict=False)), **kwargs}
    return [bound.get(name) for name in _ARGS[:3]]


def _detached(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with q, k and v detached from autograd, wherever they are."""
    positional = tuple(a.detach() if i < 3 else a for i, a in enumerate(args))
    named = {k: v.detach() if k in _ARGS[:3] else v for k, v in kwargs.items()}
    return positional, named


def replay_flex(hooks: Any, bound: Mapping[str, Any], result: Any, site: Site) -> KernelCall:
    """Replay one flex_attention call whose output was ``result``, recording its steps."""
    import torch

    from attntrace.backends.torch_backend import TorchBackend
    from attntrace.engine.costs import CostMeter

    q, k, v = bound["query"], bound["key"], bound["value"]
    with torch._C.DisableTorchFunction(), torch.no_grad():
        replay = Replay(hooks, site, hooks.kernels, CostMeter(TorchBackend()))
        hooks.kernels += 1
        fields = _fields(bound, q, k, v)
        weights, v_used = _weights(replay, bound, fields, q, k, v)
        v_name = "v_rep" if v_used is not v else "v"
        return finish(replay, {"op": FLEX, **fields}, result, weights.to(q.dtype), v_used, v_name)


def _fields(bound: Mapping[str, Any], q: Any, k: Any, v: Any) -> dict[str, Any]:
    """The call's arguments as a :class:`KernelCall` holds them."""
    scale = bound.get("scale")
    block = bound.get("block_mask")
    sparsity = None if block is None else float(block.sparsity()) / 100
    return {
        "q": tuple(q.shape),
        "k": tuple(k.shape),
        "v": tuple(v.shape),
        "scale": None if scale is None else float(scale),
        "scale_used": 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
        "enable_gqa": bool(bound.get("enable_gqa", False)),
        "score_mod": "" if bound.get("score_mod") is None else source_line(bound["score_mod"]),
        "sparsity": sparsity,
        "mask": None,
        "detached": bool(bound.get("detached", False)),
    }


def _weights(
    replay: Replay, bound: Mapping[str, Any], fields: dict[str, Any], q: Any, k: Any, v: Any
) -> tuple[Any, Any]:
    """k_rep, v_rep, k_t, scores, scaled, score_mod, mask, masked and weights recorded, in
    flex's working precision (float64 for float64, else float32); the weights and values."""
    import torch

    be, step, key = replay.meter, replay.step, k
    if q.shape[-3] != k.shape[-3] and k.shape[-3]:  # flex repeats along dim 1 (enable_gqa)
        r = q.shape[-3] // k.shape[-3]
        k = step("k_rep", be.repeat_interleave(k, r, 1), "repeat", "repeat_interleave", [k], "")
        v = step("v_rep", be.repeat_interleave(v, r, 1), "repeat", "repeat_interleave", [v], "")
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    order = {"order": swap(k.dim(), -2, -1)}
    text = f"{'k_rep' if k is not key else 'k'}.transpose(-2, -1)"
    k_t = step("k_t", be.transpose(k, -2, -1), "permute", "transpose", [k], text, order)
    scores = be.matmul(q.to(work), k_t.to(work))  # (B, h, S, N), in the working precision
    scores = step("scores", scores, "matmul", "matmul", [q, k_t], "q @ k_t")
    s = fields["scale_used"]
    last = step("scaled", be.scale(scores, s), "elementwise", "mul", [scores], f"scores * {s:.6g}")
    grid, shown = _grid(q, k), "scaled"
    if bound.get("score_mod") is not None:
        modded = _vmapped(bound["score_mod"], (0,))(last, *grid)  # (B, h, S, N)
        replay.meter.charge("score_mod", last, out=modded)
        text = f"score_mod(scaled): {fields['score_mod']}"
        last, shown = (
            step("score_mod", modded, "elementwise", "score_mod", [last], text),
            "score_mod",
        )
    block = bound.get("block_mask")
    if block is not None:
        keep = _vmapped(block.mask_mod, ())(*grid).expand(last.shape)  # (B, h, S, N)
        fields["mask"] = mask_record("block", tuple(keep.shape), tuple(last.shape), "", 0)
        sparsity = fields["sparsity"] or 0.0
        text = f"mask_mod(b, h, q, kv): {source_line(block.mask_mod)} ({sparsity:.0%} skipped)"
        keep = step("mask", keep, "create", "mask_mod", [], text, {"mask": fields["mask"]})
        masked = be.where(keep, last, -math.inf)  # (B, h, S, N)
        text, shown = f"where(mask, {shown}, -inf)", "masked"
        last = step("masked", masked, "elementwise", "where", [last, keep], text)
    weights = be.softmax(last)  # (B, h, S, N); a row with every key hidden: zeros, as flex
    text = f"softmax({shown}, dim=-1)"
    weights = step("weights", weights, "elementwise", "softmax", [last], text)
    return weights, v


def _grid(q: Any, k: Any) -> tuple[Any, Any, Any, Any]:
    """The indices flex hands a score_mod or mask_mod: b, h, q_idx, kv_idx."""
    import torch

    sizes = (q.shape[0], q.shape[-3], q.shape[-2], k.shape[-2])
    return tuple(torch.arange(n) for n in sizes)  # type: ignore[return-value]


def _vmapped(fn: Callable[..., Any], prefix: tuple[int, ...]) -> Callable[..., Any]:
    """``fn`` mapped over (b, h, q_idx, kv_idx) as flex's eager implementation maps it."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.nn.attention.flex_attention import _vmap_for_bhqkv

    mapped = _vmap_for_bhqkv(fn, prefix=prefix)

    def run(*args: Any) -> Any:
        with TransformGetItemToIndex():
            return mapped(*args)

    return run


def source_line(fn: Any) -> str:
    """``file:line`` and the line that says what a score_mod / mask_mod does: its first
    ``return`` line (its own line for a lambda); its name when it has no source.

    >>> source_line(len)
    'len'
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return str(getattr(fn, "__name__", type(fn).__name__))
    first, file = code.co_firstlineno, code.co_filename
    lines = [linecache.getline(file, n).strip() for n in range(first, first + 20)]
    at = 0
    if code.co_name != "<lambda>":
        at = next((n for n, line in enumerate(lines) if line.startswith("return ")), 0)
    return f"{os.path.basename(file)}:{first + at} {lines[at]}".rstrip()
