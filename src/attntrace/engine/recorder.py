"""What records the steps: each backend result becomes a :class:`~attntrace.trace.Step` with its
cost, its inputs and its count of non-finite values, and the tensor goes on unchanged.

The algorithms (:mod:`attntrace.engine.attention`, :mod:`attntrace.engine.eager`,
:mod:`attntrace.engine.flash`) call the backend through the recorder's ``meter``, which
charges every operation; a step's FLOPs are the charges since the previous step.

>>> from attntrace import AttentionConfig
>>> from attntrace.backends import get_backend
>>> config = AttentionConfig(seq=3, hidden=8, heads=2)
>>> rec = Recorder(get_backend("shape"), config, keep_values=False)
>>> x = rec.meter.full((3, 8), 0.0, "float32")
>>> s = rec.step("x", x, "x", ("S", "H"))
>>> [(step.name, step.shape, step.flops) for step in rec.finish()]
[('x', (3, 8), 0)]
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from attntrace.backends.base import fast_path
from attntrace.engine.costs import CostMeter, Registry, resolve
from attntrace.engine.parallel import extremes, map_parts
from attntrace.trace import Lazy, Step

if TYPE_CHECKING:
    import numpy as np

    from attntrace.backends.base import Backend, FastPath
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.trace import Trace

T = TypeVar("T")
#: ``fn(values of the steps so far, the step's value) -> the value to go on with``.
StepReplacement = Callable[[Mapping[str, "np.ndarray"], Any], Any]

#: Steps that hold the -inf of masking by design: only NaN and +inf count as non-finite there.
MASKING_STEPS = frozenset({"mask", "masked", "mask_tile", "s_masked"})


class Recorder(Generic[T]):
    """Turns each backend result into a :class:`Step` with its cost and passes the tensor on.

    Steps recorded again under the same name (the tiles of flash) add their FLOPs and count as
    repeats of the first record. ``keep_values``: True, False or the names of the steps whose
    values are kept; ``replace`` maps step names to replacements (attntrace diff); ``threads``
    run independent blocks of work; ``shapes`` is the shape trace of the same config (flash's
    tile totals); ``remake`` names kept steps held as recipes made on first read; ``hold`` is
    the lead index whose part of the remade weights is held."""

    def __init__(
        self,
        be: Backend[T],
        config: AttentionConfig,
        keep_values: bool | Collection[str],
        *,
        replace: Mapping[str, StepReplacement] | None = None,
        threads: int = 1,
        shapes: Trace | None = None,
        remake: Collection[str] = (),
        hold: tuple[int, ...] | None = None,
    ) -> None:
        self.be, self.keep_values, self.replace = be, keep_values, replace or {}
        self.fast: FastPath[T] = fast_path(be)  # its speed variants, or the core made into them
        self.remake = frozenset(remake)  # kept as recipes made on first read, not held
        self.hold = hold  # the lead index whose part of the remade weights is held
        self.shapes = shapes  # the shape trace of the same config (flash's tile totals)
        self.threads = threads  # for independent blocks of work (flash's query blocks)
        self._lock = threading.Lock()
        self.meter: CostMeter[T] = CostMeter(be)
        self.registry = Registry()
        # the batch axis, for flash's tile axes
        self.lead: tuple[str, ...] = ("B",) if config.batched else ()
        self.steps: list[Step] = []
        self.notes: list[str] = []  # warnings about the values, e.g. fully masked query rows
        self._repeats: dict[str, list[int]] = {}  # name -> [extra flops, extra repeats]
        self._late: dict[str, T] = {}  # steps whose buffer is filled after they are recorded
        self.proven_finite: set[str] = set()  # steps whose values bounds prove finite

    def keeps(self, name: str) -> bool:
        """Whether the values of step ``name`` are kept."""
        keep = self.keep_values
        return keep if isinstance(keep, bool) else name in keep

    def step(
        self,
        name: str,
        value: T,
        op: str,
        axes: tuple[str, ...],
        *,
        view: bool = False,
        contract: str | None = None,
        times: int = 1,
        again: Callable[[], T] | None = None,
        nonfinite: int | None = None,
        part: Callable[[tuple[int, ...]], T] | None = None,
    ) -> T:
        """Record ``value`` as step ``name``; ``contract`` names a contracted axis the recorder
        cannot see (an input that is no step); ``times`` counts identical repeats; ``again``
        makes the same values anew (on the plain backend), kept instead of ``value`` when the
        algorithm goes on to overwrite ``value`` in place (or never made it whole), and
        ``part(index)`` makes those of one leading index alone;
        ``nonfinite`` is the count of NaN and ±inf when the caller made it (else counted)."""
        if name in self._repeats:
            return self._repeat(name, value, axes, times)
        if name in self.replace:  # a suspected mistake, tested by attntrace diff
            done = {s.name: s.value for s in self.steps if s.value is not None}
            value = self.replace[name](done, value)
            again, nonfinite = None, None  # the replacement is what is kept, and counted
        shape = self.be.shape(value)
        assert len(shape) == len(axes), f"{name}: {shape} vs {axes}"  # a bug, not user input
        charges, inputs = self.meter.take()
        flops, terms = resolve(charges, shape, axes, self.registry, contract)
        names = tuple(
            dict.fromkeys(found[0] for found in map(self.registry.lookup, inputs) if found)
        )
        be = self.be  # the recipe must not hold the recorder: a cycle would keep every step alive
        stored = (
            None
            if not self.keeps(name)
            else be.to_numpy(value)
            if again is None
            else cast("np.ndarray", _recipe(be, again, part))
        )  # made on first read
        bad = (self._nonfinite(name, value, view) if nonfinite is None else nonfinite) * times
        self.steps.append(
            Step(
                name=name,
                shape=shape,
                dtype=self.be.dtype(value),
                value=stored,
                index=len(self.steps),
                op=op,
                axes=axes,
                view=view,
                flops=flops * times,
                terms=terms,
                inputs=names,
                repeat=times,
                nonfinite=bad,
            )
        )
        self._repeats[name] = [0, 0, 0]
        self.registry.add(value, name, axes)
        return value

    def _repeat(self, name: str, value: T, axes: tuple[str, ...], times: int) -> T:
        charges, _ = self.meter.take()
        flops = times * sum(c.coef * math.prod(c.shape) * c.k for c in charges)
        bad = times * self._nonfinite(name, value, False)
        with self._lock:  # flash's query blocks repeat steps from several threads
            tally = self._repeats[name]
            tally[0] += flops
            tally[1] += times
            tally[2] += bad
        self.registry.add(value, name, axes)
        return value

    def nonfinite(self, name: str, value: T) -> int:
        """NaN and ±inf in ``value`` by the rule of step ``name`` (see :meth:`_nonfinite`)."""
        return self._nonfinite(name, value, False)

    def _nonfinite(self, name: str, value: T, view: bool) -> int:
        """NaN and ±inf in ``value`` (0 on backends without values, and for views, which hold the
        values of an earlier step); -inf is what masking writes, so mask steps count NaN and
        +inf."""
        if view or not self.be.computes:
            return 0
        array = self.be.to_numpy(value)
        if array is None:
            return 0
        import numpy as np

        if array.dtype.kind not in "fc":
            return 0  # booleans (a mask) and integers hold no NaN or inf
        # two cheap passes: a NaN makes both NaN, +inf the max, -inf the min
        pooled = self.be.pools_checks
        if array.size and np.isfinite(map_parts(extremes, array, pooled=pooled)).all():
            return 0
        if name in MASKING_STEPS:
            return int(np.count_nonzero(np.isnan(array) | np.isposinf(array)))
        return int(array.size - np.count_nonzero(np.isfinite(array)))

    def declare(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: str,
        op: str,
        axes: tuple[str, ...],
        make: Callable[[], np.ndarray],
    ) -> None:
        """Record step ``name`` that no buffer holds (a view of nothing: no memory); its values,
        when kept, are ``make()`` on first read."""
        value = cast("np.ndarray", Lazy(make)) if self.keeps(name) else None
        step = Step(
            name=name,
            shape=shape,
            dtype=dtype,
            value=value,
            index=len(self.steps),
            op=op,
            axes=axes,
            view=True,
        )
        self.steps.append(step)
        self._repeats[name] = [0, 0, 0]

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T:
        """Record ``value``, a view of an earlier step's values (no memory, nothing to count)."""
        return self.step(name, value, op, axes, view=True, times=times)

    def has(self, name: str) -> bool:
        """Whether step ``name`` is recorded."""
        return name in self._repeats

    def settle(self, names: Collection[str], nonfinite: Mapping[str, int]) -> None:
        """Steps ``names``, recorded once and then repeated without records (flash's tiles),
        take their FLOPs and repeats from the shape trace, plus ``nonfinite`` more values."""
        assert self.shapes is not None  # computing backends always have it
        first = {s.name: s for s in self.steps}
        for name in names:
            total = self.shapes[name]
            self._repeats[name] = [
                total.flops - first[name].flops,
                total.repeat - first[name].repeat,
                nonfinite.get(name, 0),
            ]

    def refresh(self, name: str, value: T) -> None:
        """Take the values of step ``name`` from ``value`` at the end (a buffer filled later)."""
        if self.keeps(name):
            self._late[name] = value

    def finish(self) -> tuple[Step, ...]:
        """The recorded steps, repeats and late values added in."""
        steps = [
            replace(s, value=self.be.to_numpy(self._late[s.name])) if s.name in self._late else s
            for s in self.steps
        ]
        return tuple(
            replace(
                s,
                flops=s.flops + self._repeats[s.name][0],
                repeat=s.repeat + self._repeats[s.name][1],
                nonfinite=s.nonfinite + self._repeats[s.name][2],
            )
            if any(self._repeats[s.name])
            else s
            for s in steps
        )


def _recipe(
    be: Backend[T], make: Callable[[], T], part: Callable[[tuple[int, ...]], T] | None
) -> Lazy:
    """The :class:`Lazy` values of a step: ``make()`` (and ``part(index)``) as numpy arrays.
    It holds the backend, never the recorder: a cycle would keep every step alive."""
    one = None if part is None else (lambda at: be.to_numpy(part(at)))
    return Lazy(lambda: be.to_numpy(make()), one)
