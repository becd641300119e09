"""Capturing numpy: arrays the user's code creates (``np.array``, ``np.random.rand`` …) come
back as :class:`TracedArray`, an ndarray subclass whose ufuncs, array functions and shape
methods are recorded; results stay traced, and behave as ndarrays once the capture ends."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from attntrace.capturing import copies, ops
from attntrace.capturing.record import Adapter, Recorder
from attntrace.capturing.source import pass_through_folders, site_of, user_frame

#: attntrace's own frames are walked past; a call numpy makes internally is not the user's.
_CAPTURE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _through() -> tuple[str, ...]:
    """The folders whose frames are walked past to the user's: capture's own, einops'."""
    return (_CAPTURE_DIR, *pass_through_folders())


_array, _asarray, _shares = np.array, np.asarray, np.may_share_memory  # before any wrapping

#: Creation functions wrapped while a capture runs: what they return to the user is traced.
CREATORS = (
    "array",
    "asarray",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "eye",
    "linspace",
    "tri",
    "load",
    "frombuffer",
    "fromfile",
    "loadtxt",
    "genfromtxt",
    "copy",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "ascontiguousarray",
)
RANDOM = (
    "rand",
    "randn",
    "random",
    "normal",
    "uniform",
    "standard_normal",
    "randint",
    "random_sample",
)

_active: NumpyHooks | None = None


def _plain(value: Any) -> Any:
    if isinstance(value, TracedArray):
        return value.view(np.ndarray)
    if isinstance(value, list | tuple) and value:
        return type(value)(_plain(v) for v in value)
    return value


def _wrap(value: Any) -> Any:
    if type(value) is np.ndarray:
        return value.view(TracedArray)
    if isinstance(value, tuple | list) and any(type(v) is np.ndarray for v in value):
        return type(value)(_wrap(v) for v in value)  # np.split's list of parts too
    return value


def copy_shared(value: Any, memo: dict[int, Any]) -> np.ndarray:
    """A copy of ``value`` (a traced array is copied as the ndarray it is), views of one buffer
    sharing one copy of it: :func:`attntrace.capturing.copies.copy_shared`.

    >>> a = np.arange(6.0).reshape(2, 3).view(TracedArray)
    >>> type(copy_shared(a, {})).__name__
    'ndarray'
    """
    return copies.copy_shared(_plain(value), memo)


def numpy_adapter() -> Adapter:
    """Reading numpy arrays: shape, dtype name, a copy, shared memory (no version counter)."""

    def copy(a: Any) -> np.ndarray:
        return _array(_plain(a), copy=True)

    return Adapter(
        shape=lambda a: tuple(a.shape),
        dtype=lambda a: str(a.dtype),
        to_numpy=copy_shared,
        shares=lambda a, b: bool(_shares(_plain(a), _plain(b))),
        copy=copy,
        version=lambda a: -1,
    )


class TracedGenerator(np.random.Generator):
    """``np.random.default_rng()`` while a capture runs: the generator numpy recommends (an
    ``np.random.Generator`` still, on the same bit generator), its arrays
    (``rng.standard_normal((S, H))``) recorded as created where the user's line makes them.

    >>> gen = TracedGenerator(np.random.default_rng(0).bit_generator, None)
    >>> gen.standard_normal(2).shape, isinstance(gen, np.random.Generator)
    ((2,), True)
    """

    def __init__(self, bit_generator: Any, hooks: NumpyHooks | None) -> None:
        super().__init__(bit_generator)
        self._hooks = hooks

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name.startswith("_") or not callable(value):
            return value
        hooks = super().__getattribute__("_hooks")
        if hooks is None:
            return value

        def method(*args: Any, **kwargs: Any) -> Any:
            return hooks.created(value(*_plain(args), **kwargs), name)

        return method


class NumpyHooks:
    """Installs and removes the numpy side of a capture."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.adapter = numpy_adapter()
        self._saved: list[tuple[Any, str, Any]] = []
        self.depth = 0  # > 0 while numpy runs an op for the user: calls it makes are internal

    def install(self) -> None:
        global _active  # noqa: PLW0603  (the capture the array methods report to)
        _active = self
        for owner, names in ((np, CREATORS), (np.random, RANDOM)):
            for name in names:
                original = getattr(owner, name)
                self._saved.append((owner, name, original))
                setattr(owner, name, self._creator(original, name))
        rng = np.random.default_rng
        self._saved.append((np.random, "default_rng", rng))
        np.random.default_rng = lambda *a, **k: TracedGenerator(rng(*a, **k).bit_generator, self)

    def uninstall(self) -> None:
        global _active  # noqa: PLW0603
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved = []
        _active = None

    def _creator(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        hooks = self

        def create(*args: Any, **kwargs: Any) -> Any:
            if hooks.depth:  # called by numpy's compiled code (no frame of its own): not the user
                return original(*args, **kwargs)
            hooks.depth += 1
            try:
                result = original(*_plain(args), **kwargs)
            finally:
                hooks.depth -= 1
            frame = user_frame(through=_through())
            if frame is None or _active is not hooks or not isinstance(result, np.ndarray):
                return result
            site = site_of(frame)
            if name not in site.source:  # numpy's compiled code (default_rng …), not the line
                return result
            traced = result.view(TracedArray)
            hooks.recorder.record(traced, 0, name, "create", site, [], hooks.adapter)
            return traced

        create.__wrapped__ = original  # type: ignore[attr-defined]
        return create

    def created(self, result: Any, name: str) -> Any:
        """``result`` of the creator ``name`` traced and recorded where the user's line calls
        it (a generator's method: :class:`TracedGenerator`)."""
        frame = user_frame(through=_through())
        if frame is None or _active is not self or not isinstance(result, np.ndarray):
            return result
        site = site_of(frame)
        if name not in site.source:  # numpy's own code, not the user's line
            return result
        traced = result.view(TracedArray)
        self.recorder.record(traced, 0, name, "create", site, [], self.adapter)
        return traced

    def track(self, array: Any, axes: tuple[str, ...] | None = None, skip: int = 0) -> Any:
        """The array as a traced input (recorded as a created tensor with the given axes)."""
        traced = _asarray(_plain(array)).view(TracedArray)
        frame = user_frame(through=_through())
        if frame is not None:
            site = site_of(frame)
            self.recorder.record(
                traced,
                0,
                "input",
                "create",
                site,
                [],
                self.adapter,
                {"axes": axes} if axes else None,
            )
        return traced

    def run(
        self,
        func: Any,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        params: Callable[[int], tuple[str, dict[str, Any]]],
    ) -> Any:
        """Call ``func`` on plain arrays, record the call if the user made it, trace the result."""
        operands = ops.tensors(args, kwargs, lambda v: isinstance(v, np.ndarray))
        out = kwargs.get("out")
        targets = [
            t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, np.ndarray)
        ]
        for target in targets:
            self.recorder.snapshot(target, self.adapter)
        frame = None if self.depth else user_frame(through=_through())
        self.depth += 1
        try:
            result = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        except Exception as exc:
            if frame is not None:
                kind, p = params(len(operands))
                named = [(self.recorder.operand_name(o), tuple(o.shape)) for o in operands]
                self.recorder.fail(name, kind, site_of(frame), named, exc, p)
            raise
        finally:
            self.depth -= 1
        if targets and out is not None:
            result = out if isinstance(out, tuple) and len(out) > 1 else targets[0]
        result = _wrap(result)
        if frame is not None:
            kind, p = params(len(operands))
            outputs = [
                r
                for r in (result if isinstance(result, tuple | list) else (result,))
                if isinstance(r, np.ndarray)
            ]
            site = site_of(frame)
            for k, r in enumerate(outputs):
                self.recorder.record(
                    r,
                    k,
                    name,
                    kind,
                    site,
                    operands,
                    self.adapter,
                    ops.part_params(p, k, len(outputs)),
                )
        return result


def _function_params(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[int], tuple[str, dict[str, Any]]]:
    def params(operands: int) -> tuple[str, dict[str, Any]]:
        kind = ops.kind_of(name, operands)
        rank = len(getattr(args[0], "shape", ())) if args else 0
        if kind == "permute":
            return kind, {"order": ops.numpy_order(name, args[1:], kwargs, rank)}
        if kind == "reduce":
            return kind, {"dims": ops.reduce_dims(args, kwargs)}
        if kind == "einsum" and args and isinstance(args[0], str):
            return kind, {"equation": args[0]}
        return kind, {}

    return params


def _ufunc_name(ufunc: Any, method: str) -> str:
    name = str(ufunc.__name__)
    if method == "reduce":
        return {"add": "sum", "maximum": "max", "minimum": "min", "multiply": "prod"}.get(
            name, name
        )
    return {"true_divide": "divide"}.get(name, name)


class TracedArray(np.ndarray):
    """An ndarray whose operations are recorded while a capture is active."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        hooks = _active
        if hooks is None:
            plain = [_plain(i) for i in inputs]
            return getattr(ufunc, method)(*plain, **{k: _plain(v) for k, v in kwargs.items()})
        name = _ufunc_name(ufunc, method)
        call = getattr(ufunc, method)
        if method == "reduce":
            dims = kwargs.get("axis")
            dims = (dims,) if isinstance(dims, int) else dims
            return hooks.run(call, name, inputs, kwargs, lambda n: ("reduce", {"dims": dims}))
        return hooks.run(call, name, inputs, kwargs, lambda n: (ops.kind_of(name, n), {}))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        hooks = _active
        if hooks is None:
            return func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        name = str(func.__name__)
        call = getattr(func, "_implementation", func)  # numpy's own code, without dispatch
        return hooks.run(call, name, args, dict(kwargs), _function_params(name, args, kwargs))

    def _method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        plain = self.view(np.ndarray)
        hooks = _active
        bound = getattr(np.ndarray, name)
        if hooks is None:
            return bound(plain, *args, **kwargs)
        if name == "transpose" and len(args) > 1:
            args = (args,)
        return hooks.run(
            bound, name, (self, *args), kwargs, _function_params(name, (self, *args), kwargs)
        )

    def reshape(self, *shape: Any, **kwargs: Any) -> Any:
        return self._method("reshape", *shape, **kwargs)

    def transpose(self, *axes: Any) -> Any:
        return self._method("transpose", *axes)

    def swapaxes(self, axis1: Any, axis2: Any) -> Any:
        return self._method("swapaxes", axis1, axis2)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("sum", *args, **kwargs)

    def max(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("max", *args, **kwargs)

    def mean(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("mean", *args, **kwargs)

    def min(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("min", *args, **kwargs)

    def astype(self, *args: Any, **kwargs: Any) -> Any:
        return self._method("astype", *args, **kwargs)

    @property
    def T(self) -> Any:  # noqa: N802  (ndarray's name)
        plain = self.view(np.ndarray)
        hooks = _active
        if hooks is None:
            return plain.T
        return hooks.run(lambda a: a.T, "T", (self,), {}, _function_params("T", (self,), {}))

    def __getitem__(self, key: Any) -> Any:
        hooks = _active
        if hooks is None:
            return np.ndarray.__getitem__(self.view(np.ndarray), _plain(key))
        return hooks.run(
            lambda a, k: a[k],
            "getitem",
            (self, key),
            {},
            lambda n: ("elementwise", ops.index_params(key, self.shape)),
        )

    def __setitem__(self, key: Any, value: Any) -> None:
        if _active is not None:
            _active.recorder.snapshot(self, _active.adapter)
        np.ndarray.__setitem__(self.view(np.ndarray), _plain(key), _plain(value))

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))
