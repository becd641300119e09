"""The recorder the hooks write to, and :class:`Capture`, what ``attntrace.capture()`` gives:
the user's steps as :class:`CapturedStep` records (a :class:`attntrace.Step` plus where it
happened), readable by the renderers and by ``check``."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attntrace.capturing.events import Event, Failure, Operand, Shape
from attntrace.capturing.source import Site
from attntrace.trace import Param, Step, UnknownStepError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.capturing.explain import Explanation
    from attntrace.capturing.kernel import KernelCall

#: The ``schema`` value of :meth:`Capture.to_dict`.
CAPTURE_SCHEMA_ID = "attntrace.capture/2"


@dataclass(frozen=True)
class CapturedStep(Step):
    """One operation of the user's code: a :class:`Step` (name, shape, dtype, value, index, op,
    axes, inputs) plus ``location`` (``file:line``), ``source`` (the expression) and ``role``
    (the reference step it plays, e.g. ``scores``, or "").

    >>> s = CapturedStep("scores", (8, 3, 3), "float64", location="a.py:7", role="scores")
    >>> s.nbytes, s.role
    (576, 'scores')
    """

    location: str = ""
    source: str = ""
    role: str = ""
    input_shapes: tuple[Shape, ...] = ()  # the shape of each tensor operand, in call order
    called: str = ""  # made in a helper: "in apply_rope, called at ring.py:81"

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes (0 for a dtype attntrace does not size, e.g. object)."""
        return self.numel * _ITEMSIZE.get(self.dtype, 0)


_ITEMSIZE = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
}


@dataclass(frozen=True, kw_only=True)
class Adapter:
    """How one array library's values are read: shape, dtype, numpy copy, shared memory."""

    shape: Callable[[Any], Shape]
    dtype: Callable[[Any], str]
    to_numpy: Callable[[Any, dict[int, Any]], np.ndarray]  # memo: one copy per buffer
    shares: Callable[[Any, Any], bool]
    copy: Callable[[Any], Any]
    version: Callable[[Any], int]


class Recorder:
    """Collects :class:`Event` records from the hooks (one Recorder per capture)."""

    def __init__(self, keep_values: bool = True) -> None:
        self.keep_values = keep_values
        self.events: list[Event] = []
        self.failure: Failure | None = None
        self.busy = False  # set while attntrace itself runs library ops (no recording then)
        self._ids: dict[int, tuple[weakref.ref[Any] | None, int]] = {}
        self._names: set[str] = set()
        self._counts: dict[str, int] = {}
        self._repeats: dict[str, int] = {}  # the last suffix given to each name
        #: called with each event as it is recorded (the sandboxed child streams them out)
        self.stream: Callable[[Event], None] | None = None

    def lookup(self, obj: object) -> int | None:
        """The event that produced ``obj`` (None for tensors from outside the capture)."""
        entry = self._ids.get(id(obj))
        if entry is None:
            return None
        ref, index = entry
        return index if ref is None or ref() is obj else None

    def record(
        self,
        out: object,
        k: int,
        func: str,
        kind: str,
        site: Site,
        operands: Sequence[object],
        adapter: Adapter,
        params: Mapping[str, Any] | None = None,
        key: object = None,
    ) -> Event:
        """Add the event for output ``out`` (the ``k``-th tensor the op returned); later ops
        find it by ``key`` (the user's tensor, when ``out`` is a detached alias of it)."""
        index = len(self.events)
        event = Event(
            index=index,
            name=self._name(site, func, k),
            kind=kind,
            func=func,
            shape=adapter.shape(out),
            dtype=adapter.dtype(out),
            inputs=tuple(self.lookup(o) for o in operands),
            input_shapes=tuple(adapter.shape(o) for o in operands),
            site=site,
            params=dict(params or {}),
            value=out if self.keep_values else None,
            version=adapter.version(out),
        )
        self.events.append(event)
        if self.stream is not None:
            self.busy, was = True, self.busy
            try:
                self.stream(event)
            finally:
                self.busy = was
        key = out if key is None else key
        try:
            self._ids[id(key)] = (weakref.ref(key), index)
        except TypeError:
            self._ids[id(key)] = (None, index)
        return event

    def alias(self, obj: object, index: int) -> None:
        """Later ops reading ``obj`` read event ``index`` (one of the tensors of a list a
        collective filled, all recorded as one step)."""
        try:
            self._ids[id(obj)] = (weakref.ref(obj), index)
        except TypeError:
            self._ids[id(obj)] = (None, index)

    def _name(self, site: Site, func: str, k: int) -> str:
        name = site.targets[k] if k < len(site.targets) else site.target if k == 0 else ""
        if not name or name == "_":
            self._counts[func] = self._counts.get(func, 0) + 1
            name = f"{func}_{self._counts[func]}"
        unique, n = name, self._repeats.get(name, 1)
        while unique in self._names:  # q, q_2, q_3 … (a name from the code, or op_N)
            n += 1
            unique = f"{name}_{n}"
        self._repeats[name] = n
        self._names.add(unique)
        return unique

    def snapshot(self, target: object, adapter: Adapter) -> None:
        """Copy the kept values that share memory with ``target`` before it is changed in place."""
        for event in self.events:
            if event.value is not None and adapter.shares(event.value, target):
                event.value = adapter.copy(event.value)
                event.version = adapter.version(event.value)

    def fail(
        self,
        func: str,
        kind: str,
        site: Site,
        operands: Sequence[tuple[str, Shape]],
        error: BaseException,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Remember the first operation that raised (axes are named when the trace is read)."""
        if self.failure is None:
            ops = tuple(Operand(n, s, ()) for n, s in operands)
            self.failure = Failure(
                func=func,
                kind=kind,
                site=site,
                operands=ops,
                error=error,
                params=dict(params or {}),
            )

    def operand_name(self, obj: object) -> str:
        index = self.lookup(obj)
        return self.events[index].name if index is not None else ""


class Capture:
    """The user's steps recorded by :func:`attntrace.capture` (readable during and after).

    Steps are looked up by name or by role: ``t["weights"]`` is the step playing the reference's
    ``weights`` whatever the user called it. Renderers (json, csv, the trace table) and the
    checks of ``attntrace check`` read it as they read a :class:`attntrace.Trace`.
    """

    parameters: tuple[Param, ...] = ()
    notes: tuple[str, ...] = ()
    #: what attntrace did to see the steps (torch's fast path off …): told as ``note:`` lines
    remarks: tuple[str, ...] = ()
    #: the ranks of ``trace --nproc N`` this capture is one of (1: a single process)
    parts: int = 1

    def __init__(
        self,
        recorder: Recorder,
        axes: Mapping[str, int] | None = None,
        adapters: Mapping[int, Adapter] | None = None,
    ) -> None:
        self._recorder = recorder
        from attntrace.capturing.axes import check_letters

        self._given = check_letters(axes or {})
        self._adapters: dict[int, Adapter] = dict(adapters or {})
        self._steps: list[CapturedStep] = []
        self._sizes: dict[str, int] = {}
        self._seen = -1
        self._values: list[np.ndarray | None] = []  # the copies, made once per event

    @property
    def steps(self) -> list[CapturedStep]:
        """The recorded steps, in order."""
        self._refresh()
        return self._steps

    @property
    def failure(self) -> Failure | None:
        """The operation that raised, with its operands' named axes (None when none did)."""
        fail = self._recorder.failure
        if fail is None:
            return None
        self._refresh()
        named = [(o.name, o.shape, self._axes_by_name(o.name, o.shape)) for o in fail.operands]
        operands = tuple(Operand(n, s, a) for n, s, a in named)
        return Failure(
            func=fail.func,
            kind=fail.kind,
            site=fail.site,
            operands=operands,
            error=fail.error,
            params=fail.params,
        )

    def _axes_by_name(self, name: str, shape: Shape) -> tuple[str, ...]:
        from attntrace.capturing.axes import Sizes

        for s in self._steps:
            if s.name == name and s.shape == shape:
                return s.axes
        return tuple(Sizes(dict(self._sizes)).letter(n) for n in shape)

    def _refresh(self) -> None:
        events = self._recorder.events
        if self._seen == len(events):
            return
        from attntrace.capturing.analyse import mixed_reshapes, propagate
        from attntrace.capturing.explain import contradicted_notes, mixing_note
        from attntrace.capturing.roles import roles

        found, sizes = propagate(events, self._given, self.parts)
        named = roles(events, found)
        self.notes = (
            *(
                mixing_note(m.event.site.location, m.event.site.source, m.mixing)
                for m in mixed_reshapes(events, found, sizes)
            ),
            *contradicted_notes(self._given, events, found),
        )
        self._sizes = {k: v for k, v in sizes.known.items() if "·" not in k}
        memo: dict[int, Any] = {}
        for e in events[len(self._values) :]:
            self._values.append(self._value(e, memo))
        self._steps = [self._step(e, a, r) for e, a, r in zip(events, found, named, strict=True)]
        self._seen = len(events)

    def _step(self, e: Event, axes: tuple[str, ...], role: str) -> CapturedStep:
        inputs = tuple(self._recorder.events[i].name for i in e.inputs if i is not None)
        return CapturedStep(
            e.name,
            e.shape,
            e.dtype,
            self._values[e.index],
            index=e.index,
            op=e.func,
            axes=axes,
            inputs=inputs,
            location=e.site.location,
            source=e.site.source,
            role=role,
            input_shapes=e.input_shapes,
            called=e.site.called,
        )

    def _value(self, e: Event, memo: dict[int, Any]) -> np.ndarray | None:
        """A numpy copy of the kept value; views of one buffer share one copy of it."""
        if e.value is None:
            return None
        value = e.value
        if hasattr(value, "to_local") and id(type(value)) not in self._adapters:
            value = value.to_local()  # a DTensor: the rank's own shard (diff --nproc)
        adapter = self._adapters.get(id(type(value)))
        if adapter is None and hasattr(value, "detach"):  # a torch.Tensor subclass
            if callable(getattr(value, "wait", None)):  # AsyncCollectiveTensor: its result
                value = value.wait()
            adapter = next(
                (self._adapters[id(k)] for k in type(value).__mro__ if id(k) in self._adapters),
                None,
            )
        if adapter is None:  # a plain ndarray: no hooks made it
            from attntrace.capturing.copies import copy_shared

            return copy_shared(value, memo)
        now = adapter.version(value)  # -1: the library keeps no version counter (numpy)
        if now >= 0 and e.version >= 0 and now != e.version:
            return None  # changed in place where attntrace could not see it
        return adapter.to_numpy(value, memo)

    def finish(self) -> None:
        """Copy every kept value now, so later changes to the user's tensors do not reach them."""
        self._refresh()

    # --- the Trace-like reading interface -------------------------------------------------

    def __getitem__(self, name: str) -> CapturedStep:
        """The step ``name`` names, by the rule of ``attntrace check --trace``: a reference
        step name (``q``, ``scores``, ``k_rep`` …) is the step playing that role, ``var:NAME``
        or any other name the variable ``NAME`` of your code. Else UnknownStepError (a
        KeyError) that says what there is."""
        from attntrace.errors import ConfigError
        from attntrace.tools.check import find_step, unplayed

        try:
            step = find_step(self, name)
        except ConfigError as exc:
            raise UnknownStepError(name, self.names, str(exc)) from None
        if step is None:
            raise UnknownStepError(name, self.names, unplayed(self, name))
        assert isinstance(step, CapturedStep)
        return step

    def __iter__(self) -> Iterator[CapturedStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        roles = sum(bool(s.role) for s in self.steps)
        return f"<attntrace capture: {len(self.steps)} steps, {roles} with a role>"

    def _repr_html_(self) -> str:
        """Jupyter's view: the steps table (:mod:`attntrace.display`)."""
        from attntrace.display import html

        return html(self)

    def __contains__(self, name: object) -> bool:
        try:
            return isinstance(name, str) and self[name] is not None
        except UnknownStepError:
            return False

    @property
    def names(self) -> tuple[str, ...]:
        """Step names in order."""
        return tuple(s.name for s in self.steps)

    def shape(self, name: str) -> Shape:
        """The shape of the step ``name`` names (see :meth:`__getitem__`)."""
        return self[name].shape

    def kernels(self) -> tuple[KernelCall, ...]:
        """Every fused kernel call the code made that was opened (replayed step by step:
        :mod:`attntrace.capturing.kernel`), in call order."""
        from attntrace.capturing.kernel import kernel_calls

        return kernel_calls(self._recorder.events)

    def axis_sizes(self) -> dict[str, int]:
        """The size of every axis letter the propagation found, e.g. ``{"S": 3, "H": 768, …}``."""
        self._refresh()
        return dict(self._sizes)

    def to_dict(self) -> dict[str, Any]:
        """The capture as plain JSON-ready data (schema ``attntrace.capture/2``); no values.
        ``failure`` is the first op that raised while capturing, else None."""
        fail = self._recorder.failure
        return self.document(None if fail is None else fail.error)

    def document(self, error: BaseException | None, frames: Sequence[Frame] = ()) -> dict[str, Any]:
        """The document of a run that ended with ``error`` (None: it ran through), as
        ``attntrace trace --format json`` prints it: ``failure`` is the op that raised it (its
        operands' shapes and axes, the rule and the fix of a shape error), or the last of the
        user's ``frames`` when no recorded op raised it, or None.

        >>> import attntrace, numpy as np
        >>> with attntrace.capture() as t:
        ...     q = t.track(np.ones((3, 8)))
        >>> doc = t.document(ValueError("bad"), [("/tmp/a.py", 4, "f", "q @ q")])
        >>> doc["failure"]["location"], doc["failure"]["error"]
        ('a.py:4', {'type': 'ValueError', 'message': 'bad'})
        """
        steps = self.steps
        return {
            "schema": CAPTURE_SCHEMA_ID,
            "config": {"axis_sizes": self.axis_sizes()},
            "steps": [_step_dict(s) for s in steps],
            "params": [],
            "notes": [*self.notes, *self.remarks],
            "failure": None if error is None else self._failure_dict(error, frames),
            "kernels": [k.document() for k in self.kernels()],
        }

    def _failure_dict(self, error: BaseException, frames: Sequence[Frame]) -> dict[str, Any]:
        from attntrace.capturing.explain import told, with_first_wrong

        fail = self.failure
        if fail is None or fail.error is not error:  # raised by the user's code, not by an op
            file, line, _, text = frames[-1] if frames else ("", 0, "", "")
            where = f"{os.path.basename(file)}:{line}" if file else ""
            return _failure(where, text, None, None, [], None, error)
        operands = [
            {"name": o.name, "shape": list(o.shape), "axes": list(o.axes)} for o in fail.operands
        ]
        return _failure(
            fail.site.location,
            fail.site.source,
            fail.func,
            fail.kind,
            operands,
            with_first_wrong(told(fail), self.steps),  # the first step whose axes went wrong
            error,
        )


Frame = tuple[str, int, str, str]  # file, line, function, source text (a traceback's frame)


def _failure(
    location: str,
    source: str,
    op: str | None,
    kind: str | None,
    operands: list[dict[str, Any]],
    told: Explanation | None,
    error: BaseException,
) -> dict[str, Any]:
    text = str(error).strip()
    return {
        "location": location,
        "source": source,
        "op": op,
        "kind": kind,
        "shape_error": told is not None and told.kind == "shape error",
        "operands": operands,
        "rule": told.rule if told is not None else None,
        "fix": (told.first or told.fix or None) if told is not None else None,
        "error": {"type": type(error).__name__, "message": text.splitlines()[0] if text else ""},
    }


def _step_dict(s: CapturedStep) -> dict[str, Any]:
    return {
        "index": s.index,
        "name": s.name,
        "op": s.op,
        "shape": list(s.shape),
        "axes": list(s.axes),
        "dtype": s.dtype,
        "bytes": s.nbytes,
        "role": s.role,
        "location": s.location,
        "source": s.source,
        "inputs": list(s.inputs),
        "input_shapes": [list(x) for x in s.input_shapes],
    }
