"""Capturing torch: a ``TorchFunctionMode`` sees every torch function, method and operator;
global module hooks make a library module (``nn.Linear``) one row at the user's call."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any

from attntrace.capturing import kernel, ops
from attntrace.capturing.collectives import caller_site, collective_name, placements_seen
from attntrace.capturing.record import Adapter, Recorder
from attntrace.capturing.source import (
    Site,
    is_user_file,
    pass_through_folders,
    site_of,
    user_frame,
)
from attntrace.capturing.torch_inside import is_followed_module

#: Reading a tensor's metadata, printing it: never a step.
_QUIET = frozenset(
    {
        "size",
        "dim",
        "numel",
        "stride",
        "is_contiguous",
        "item",
        "tolist",
        "__format__",
        "__repr__",
        "__len__",
        "__bool__",
        "__index__",
        "__int__",
        "__float__",
        "storage_offset",
        "data_ptr",
        "element_size",
        "__hash__",
        "__iter__",
        "is_floating_point",
        "is_complex",
        "get_device",
        "shape",
        "dtype",
        "device",
        "requires_grad",
        "grad_fn",
        "is_leaf",
        "ndim",
        "layout",
        "names",
        "grad",
        "is_cuda",
        "__dlpack__",
        "__array__",
        "numpy",
        "_version",
    }
)


@dataclass
class _Call:
    """A library module being called: where the user called it, and with what."""

    site: Site | None
    module: Any
    inputs: tuple[Any, ...]
    #: the rank's tensors DTensor's input hooks made of them (``ColwiseParallel(input_layouts=
    #: Shard(1))`` gathers x first): what the module computes with
    redistributed: list[Any] = field(default_factory=list)


@dataclass
class TorchHooks:
    """Installs and removes the torch side of a capture."""

    recorder: Recorder
    opaque: bool = False  # True: a fused kernel (SDPA, flex_attention) stays one row per call
    kernels: int = 0  # the kernel calls opened so far
    adapter: Adapter = field(init=False)
    stack: list[_Call] = field(default_factory=list)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.adapter = torch_adapter()

    def install(self) -> None:
        import torch
        from torch.nn.modules import module as nn_module

        root = os.path.dirname(torch.__file__)
        dispatch = (os.path.join(root, *f.split("/")) for f in _DISPATCH)
        through = (_CAPTURE_DIR, *dispatch, *pass_through_folders())
        mode = _mode_class()(self, through)
        mode.__enter__()
        pre = nn_module.register_module_forward_pre_hook(self._pre)
        post = nn_module.register_module_forward_hook(self._post, always_call=True)
        placed = contextlib.ExitStack()  # DTensor's redistributions name their placements
        placed.enter_context(placements_seen(self._redistributed))
        self._undo = [
            post.remove,
            pre.remove,
            lambda: mode.__exit__(None, None, None),
            placed.close,
        ]
        self.through = through
        from attntrace.capturing import flex

        self._undo.insert(0, flex.install(self))  # flex_attention: a Python function, shimmed

    def uninstall(self) -> None:
        for undo in self._undo:
            undo()
        self._undo = []

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one torch function for the user's code, recording it when the user called it."""
        rec = self.recorder
        name = ops.torch_name(func)
        if rec.busy or name in _QUIET:
            return func(*args, **kwargs)
        if collective_name(func, name) is not None:  # torch.distributed: a step of its own
            return self._collective(func, name, args, kwargs)
        operands = ops.tensors(args, kwargs, self._is_tensor)
        if ops.in_place(name, kwargs) and operands:
            rec.snapshot(kwargs.get("out", operands[0]), self.adapter)
        frame = None if self.stack else user_frame(through=self.through)
        site = None if frame is None else site_of(frame)
        if site is not None:
            self._adopt(operands, site, _local_names(frame, operands))
        opens = site is not None and not self.opaque and name in kernel.OPENED
        rng = kernel.rng_before(name, args, kwargs) if opens else None
        try:
            result = func(*args, **kwargs)
        except Exception as exc:
            self._failed(frame, name, args, kwargs, operands, exc)
            raise
        if opens and site is not None and self._opened(name, args, kwargs, result, site, rng):
            return result
        if site is not None:
            kind, params = ops.torch_kind(name, args, kwargs, len(operands))
            self._record(result, ops.display(name), kind, site, operands, params)
        return result

    def _opened(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
        site: Site,
        rng: Any,
    ) -> bool:
        """Replay a fused kernel's call step by step (:mod:`attntrace.capturing.kernel`);
        False when the replay cannot follow it (it is then one row, as with ``--opaque``)."""
        try:
            kernel.OPENED[name](self, args, kwargs, result, site, rng)
        except Exception:  # an argument the replay does not read (a nested tensor …)
            return False
        return True

    def _record(
        self,
        result: Any,
        func: str,
        kind: str,
        site: Site,
        operands: list[Any],
        params: dict[str, Any],
    ) -> None:
        import torch

        outputs = ops.tensors((result,), {}, self._is_tensor)
        with torch._C.DisableTorchFunction():  # attntrace's own reads are not the user's ops
            for k, out in enumerate(outputs):
                kept = out.detach() if self.recorder.keep_values else out
                rec = self.recorder
                rec.record(
                    kept,
                    k,
                    func,
                    kind,
                    site,
                    operands,
                    self.adapter,
                    ops.part_params(params, k, len(outputs)),
                    key=out,
                )
                local = getattr(out, "_local_tensor", None)  # a DTensor: its rank's part too
                if local is not None:
                    rec.alias(local, len(rec.events) - 1)

    def _collective(
        self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run a collective and record it at the user's line (:mod:`.collectives`)."""
        from attntrace.capturing import collectives as co

        if (running := co.redistributing()) is not None:  # a part of DTensor's step
            result = func(*args, **kwargs)
            m = co.moved(func, name, args, kwargs, result)
            read = [tuple(t.shape) for t in m.read if self._is_tensor(t)]
            running.moved.append(co.params(m, read, self.adapter.dtype(result)))
            return result
        site = co.caller_site()
        if site is None:
            return func(*args, **kwargs)
        rec = self.recorder
        if rec.keep_values:  # what it writes in place: the values kept so far copied first
            for t in co.moved(func, name, args, kwargs, None).written:
                if self._is_tensor(t):
                    rec.snapshot(t, self.adapter)
        try:
            result = func(*args, **kwargs)
        except Exception as exc:
            m = co.moved(func, name, args, kwargs, None)
            shown = [t for t in (*m.read, *m.written) if self._is_tensor(t)]
            named = [(rec.operand_name(t), tuple(t.shape)) for t in shown]
            rec.fail(name, "collective", site, named, exc)
            raise
        self._record_collective(co.moved(func, name, args, kwargs, result), site)
        return result

    def _redistributed(self, local: Any, out: Any, it: Any) -> None:
        """A DTensor redistribution: one step at the user's line (from the rank's tensor
        before to its tensor after), or, when it moved nothing, the same step as before."""
        rec = self.recorder
        if self.stack:  # inside a module's own hooks: its input as it computes with it
            self.stack[-1].redistributed.append(out)
        source = rec.lookup(local)
        params = it.record()
        site = None if rec.busy else caller_site()
        if params is None or site is None:
            if source is not None:
                rec.alias(out, source)
            return
        import torch

        base = rec.operand_name(local) or site.target
        at = Site(site.location, site.source, f"{base}_redistribute" if base else "redistribute")
        with torch._C.DisableTorchFunction():
            kept = out.detach() if rec.keep_values else out
            rec.record(kept, 0, "redistribute", "collective", at, [local], self.adapter, params)

    def _record_collective(self, m: Any, site: Site) -> None:
        import torch

        from attntrace.capturing import collectives as co

        rec, read = self.recorder, [t for t in m.read if self._is_tensor(t)]
        written = [t for t in m.written if self._is_tensor(t)]
        shown = written or read  # a send: the tensor it sent
        if not shown:
            return
        names = [n for t in (*read, *written) if (n := rec.operand_name(t))]
        base = names[0] if names else site.target
        with torch._C.DisableTorchFunction():
            out = shown[0] if len(shown) == 1 else torch.stack(shown)  # a list: (n, ...)
            p = co.params(
                m, [tuple(t.shape) for t in read or written], self.adapter.dtype(shown[0])
            )
            kept = out.detach() if rec.keep_values else out
            mark = co.Mark()  # a send changes nothing: later uses keep their source
            key = out if written and len(written) == 1 else mark
            at = co.step_site(site, base, m.name)
            ins = read or written  # a receive: the buffer it fills (its axes come from there)
            event = rec.record(kept, 0, m.name, "collective", at, ins, self.adapter, p, key=key)
        if len(written) > 1:
            for t in written:
                rec.alias(t, event.index)

    def _failed(
        self,
        frame: Any,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        operands: list[Any],
        exc: BaseException,
    ) -> None:
        rec = self.recorder
        if self.stack:
            call = self.stack[0]
            if call.site is None:
                return
            weight = getattr(call.module, "weight", None)
            shown = [*call.inputs, *([weight] if self._is_tensor(weight) else [])]
            kind = "linear" if type(call.module).__name__ == "Linear" else "module"
            named = [
                (rec.operand_name(o) or ("weight" if o is weight else ""), self.adapter.shape(o))
                for o in shown
            ]
            rec.fail(type(call.module).__name__.lower(), kind, call.site, named, exc)
            return
        if frame is not None:
            kind, params = ops.torch_kind(name, args, kwargs, len(operands))
            named = [(rec.operand_name(o), self.adapter.shape(o)) for o in operands]
            rec.fail(ops.display(name), kind, site_of(frame), named, exc, params)

    @staticmethod
    def _is_tensor(obj: object) -> bool:
        import torch

        return isinstance(obj, torch.Tensor)

    def _adopt(self, operands: list[Any], site: Site, names: tuple[str, ...] = ()) -> None:
        """Tensors from before the capture (the ``x`` given to the model) become its inputs."""
        import torch

        for k, t in enumerate(operands):
            if self.recorder.lookup(t) is not None or isinstance(t, torch.nn.Parameter):
                continue
            with torch._C.DisableTorchFunction():
                adopt = (t.dim() in (2, 3) and t.is_floating_point()) or _is_mask(t)
            if adopt:
                name = names[k] if k < len(names) else ""
                where = Site(site.location, name or "input", name)
                self._record(t, "input", "create", where, [], {})

    def _pre(self, module: Any, inputs: tuple[Any, ...]) -> None:
        if self.stack:
            self.stack.append(_Call(None, module, ()))
            return
        frame = user_frame(through=self.through)
        tensors = tuple(ops.tensors(inputs, {}, self._is_tensor))
        if frame is not None:
            self._adopt(list(tensors), site_of(frame), _arg_names(module))
        if _user_forward(module):
            return
        self.stack.append(_Call(None if frame is None else site_of(frame), module, tensors))
        if frame is not None and getattr(module, "_forward_hooks", None):
            self._after_hooks(module)  # DTensor's parallel styles change the output after us

    def _after_hooks(self, module: Any) -> None:
        """Once the module's own forward hooks ran (a ``RowwiseParallel``'s all-reduce, a
        ``ColwiseParallel``'s ``to_local``), the tensor the user gets is the last step's."""
        rec = self.recorder

        def final(_module: Any, _inputs: Any, output: Any) -> None:
            handle.remove()
            outputs = ops.tensors((output,), {}, self._is_tensor)
            if rec.events and len(outputs) == 1 and rec.lookup(outputs[0]) is None:
                rec.alias(outputs[0], len(rec.events) - 1)

        handle = module.register_forward_hook(final, always_call=True)

    def _post(self, module: Any, inputs: tuple[Any, ...], output: Any) -> None:
        if not self.stack or self.stack[-1].module is not module:
            return
        call = self.stack.pop()
        if self.stack or call.site is None or output is None:
            return
        kind = "linear" if type(module).__name__ == "Linear" else "module"
        moved = call.redistributed  # one per input: DTensor's input hooks ran before forward
        operands = moved if len(moved) == len(call.inputs) else list(call.inputs)
        self._record(output, type(module).__name__.lower(), kind, call.site, operands, {})


def _is_mask(t: Any) -> bool:
    """A 4-D tensor with one head (B or 1, 1, S or 1, N), additive (float) or boolean: a mask
    handed to the code (HF's ``attention_mask``, a padding mask) that it adds to the scores."""
    import torch

    shape = tuple(t.shape)
    return len(shape) == 4 and shape[1] == 1 and (t.is_floating_point() or t.dtype == torch.bool)


def _local_names(frame: Any, operands: list[Any]) -> tuple[str, ...]:
    """The name each 4-D operand has among the caller's locals (``attention_mask``), else "";
    the other operands keep the default name of an input."""
    import torch

    with torch._C.DisableTorchFunction():
        four = [o.dim() == 4 for o in operands]
    if frame is None or not any(four):
        return ()
    found = {id(v): k for k, v in frame.f_locals.items() if not k.startswith("_")}
    return tuple(found.get(id(o), "") if is4 else "" for o, is4 in zip(operands, four, strict=True))


def _forward_code(module: object) -> CodeType | None:
    code = getattr(getattr(type(module), "forward", None), "__code__", None)
    return code if isinstance(code, CodeType) else None


def _arg_names(module: object) -> tuple[str, ...]:
    code = _forward_code(module)
    return () if code is None else code.co_varnames[1 : code.co_argcount]


def _user_forward(module: object) -> bool:
    """Whether the module's forward is the user's (its ops recorded one by one), attntrace's
    own caller of a library class (:mod:`attntrace.capturing.library`), or a torch module that
    only passes x on to the user's layers (``nn.Sequential``) or to torch's attention while it
    is followed (``nn.TransformerEncoderLayer``): those are seen through."""
    if getattr(type(module), "attntrace_transparent", False) or is_followed_module(module):
        return True
    if _passes_on(module):
        return True
    code = _forward_code(module)
    return code is not None and is_user_file(code.co_filename)  # cached per file


def _passes_on(module: object) -> bool:
    """``nn.Sequential``, or a torch module holding torch's attention while it is followed."""
    import torch

    if isinstance(module, torch.nn.Sequential):
        return True
    if not type(module).__module__.startswith("torch.") or not isinstance(module, torch.nn.Module):
        return False
    return any(is_followed_module(m) for m in module.children())


#: torch's files that only pass a call on (dispatch, operator wrappers): walked past to the
#: caller. Any other torch file calling an op (nn.init inside nn.Linear()) is not the user.
_DISPATCH = (
    "overrides.py",
    "_tensor.py",
    "functional.py",
    "nn/functional.py",
    "_jit_internal.py",
    "utils/_device.py",
    "nn/modules/module.py",
    "nn/modules/container.py",
)

_CAPTURE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@lru_cache(maxsize=1)
def _mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class CaptureMode(TorchFunctionMode):
        def __init__(self, hooks: TorchHooks, through: tuple[str, ...]) -> None:
            super().__init__()
            self.hooks = hooks

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            return self.hooks.call(func, args, kwargs or {})

    return CaptureMode


def torch_adapter() -> Adapter:
    """Reading torch tensors: shape, dtype name, a numpy copy, shared storage, version."""
    import numpy as np
    import torch

    def to_numpy(t: Any, memo: dict[int, Any]) -> np.ndarray:
        """A copy; tensors viewing one storage (view, transpose) share one copy of it."""
        with torch._C.DisableTorchFunction():
            t = t.detach()
            if t.dtype == torch.bfloat16 or t.device.type != "cpu" or t.is_conj() or t.is_neg():
                return np.array(
                    t.cpu().float().numpy() if t.dtype == torch.bfloat16 else t.cpu().numpy()
                )
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in memo:
                flat = torch.empty(0, dtype=t.dtype).set_(storage)  # every element of the storage
                memo[key] = (storage, flat.clone().numpy())  # torch copies on every core
                memo[key][1].flags.writeable = False  # shared by every view of the storage
            copied = memo[key][1]
            size = t.element_size()
            strides = tuple(s * size for s in t.stride())
            offset = t.storage_offset() * size
            view = np.ndarray(tuple(t.shape), copied.dtype, copied.data, offset, strides)
            view.flags.writeable = False
            return view

    def shares(a: Any, b: Any) -> bool:
        with torch._C.DisableTorchFunction():
            return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())

    def copy(t: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return t.clone()

    def version(t: Any) -> int:
        return int(t._version)

    return Adapter(
        shape=lambda t: tuple(getattr(t, "_local_tensor", t).shape),  # DTensor: the rank's
        dtype=lambda t: str(t.dtype).removeprefix("torch."),
        to_numpy=to_numpy,
        shares=shares,
        copy=copy,
        version=version,
    )
