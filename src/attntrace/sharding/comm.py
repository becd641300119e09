"""The collectives a rank calls, and what each one moves.

A rank's algorithm (:mod:`attntrace.sharding.rank`) calls :class:`Comm`'s five operations on a
group (``"tp"``: the T ranks holding the same tokens; ``"cp"``: the C ranks holding the same
heads), named as Megatron's ``mappings.py`` and torch.distributed name them:

==============  ===================================  =============================================
operation       what each rank ends with             sent = received per rank (ring algorithm)
==============  ===================================  =============================================
all_reduce      the sum of every rank's tensor       2·(n-1)/n · bytes of the tensor
all_gather      every rank's tensor, concatenated    (n-1) · bytes of the rank's tensor
reduce_scatter  its part of the sum                  (n-1) · bytes of the part
all_to_all      part i of every rank, concatenated   (n-1)/n · bytes of the tensor
send_recv       the previous rank's tensor (ring)    bytes of the tensor
==============  ===================================  =============================================

Two kinds of :class:`Comm`: :class:`ShapeComm` answers with the right shape and no values (the
shape backend, one rank alone), :class:`ThreadComm` exchanges real tensors between the ranks of
one process, each on a thread of its own (the numpy and torch backends: the simulation).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from attntrace.backends.base import Backend
from attntrace.config.attention_config import ELEMENT_BYTES
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import AttntraceError

T = TypeVar("T")
Shape = tuple[int, ...]

#: The collectives, in the order the guide explains them.
KINDS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

#: Seconds a simulated rank waits for the others at a collective before giving up.
WAIT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class Collective:
    """One collective as a rank sees it: the step it makes, the group, the shapes it reads and
    gives, and the bytes it sends and receives (the ring algorithm's, NCCL's default)."""

    step: str  # the step it records, e.g. "o_all_reduce"
    kind: str  # one of KINDS
    group: str  # "tp" or "cp"
    size: int  # n, the ranks of the group
    shape_in: Shape
    shape_out: Shape
    dtype: str
    count: int = 1  # times per layer (ring: C-1 rounds)

    @property
    def bytes_in(self) -> int:
        """Bytes of the tensor the rank hands in."""
        return _numel(self.shape_in) * ELEMENT_BYTES[self.dtype]

    @property
    def bytes_out(self) -> int:
        """Bytes of the tensor the rank gets back."""
        return _numel(self.shape_out) * ELEMENT_BYTES[self.dtype]

    @property
    def sent(self) -> int:
        """Bytes the rank sends, once (received: the same, every algorithm here is symmetric).

        >>> c = Collective(step="o", kind="all_reduce", group="tp", size=8, shape_in=(4, 16),
        ...                shape_out=(4, 16), dtype="float32")
        >>> c.sent  # 2 * 7/8 * 256 bytes
        448
        """
        n, kind = self.size, self.kind
        if kind == "all_reduce":
            return 2 * (n - 1) * self.bytes_in // n
        if kind == "all_gather":
            return (n - 1) * self.bytes_in
        if kind == "reduce_scatter":
            return (n - 1) * self.bytes_out
        if kind == "all_to_all":
            return (n - 1) * self.bytes_in // n
        return self.bytes_in  # send_recv

    @property
    def received(self) -> int:
        """Bytes the rank receives, once."""
        return self.sent

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (per layer: ``count`` times the bytes)."""
        return {
            "step": self.step,
            "kind": self.kind,
            "group": self.group,
            "ranks": self.size,
            "shape_in": list(self.shape_in),
            "shape_out": list(self.shape_out),
            "dtype": self.dtype,
            "count": self.count,
            "bytes_sent": self.sent,
            "bytes_received": self.received,
            "bytes_per_layer": self.count * (self.sent + self.received),
        }


def _numel(shape: Shape) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


class Comm(Generic[T]):
    """The collectives of one rank on backend ``be`` (the raw backend: a collective charges no
    FLOPs to the step it makes). Subclasses implement :meth:`_exchange`."""

    def __init__(self, be: Backend[T], layout: ParallelLayout, rank: int) -> None:
        self.be, self.layout, self.rank = be, layout, rank

    def group(self, name: str) -> tuple[int, int]:
        """(n, my index) of group ``name`` for this rank."""
        t, c = self.rank % self.layout.tp, self.rank // self.layout.tp
        return (self.layout.tp, t) if name == "tp" else (self.layout.cp, c)

    def run(self, kind: str, x: T, group: str, axes: tuple[int, int] = (0, 0)) -> T:
        """Collective ``kind`` of ``x`` over ``group``; ``axes``: the gathered (all_gather), the
        scattered (reduce_scatter) or the (scattered, gathered) axes (all_to_all)."""
        n, me = self.group(group)
        values = self._exchange(kind, x, group)
        return self._combine(kind, values, n, me, axes)

    def _exchange(self, kind: str, x: T, group: str) -> list[T] | None:
        """Every group member's tensor, in group order (None: shapes only)."""
        raise NotImplementedError

    def _combine(
        self, kind: str, values: list[T] | None, n: int, me: int, axes: tuple[int, int]
    ) -> T:
        raise NotImplementedError


class ShapeComm(Comm[T]):
    """Collectives that give the right shapes and nothing else: one rank traced alone."""

    def run(self, kind: str, x: T, group: str, axes: tuple[int, int] = (0, 0)) -> T:
        n, _ = self.group(group)
        shape = list(self.be.shape(x))
        if kind == "all_gather":
            shape[axes[0]] *= n
        elif kind == "reduce_scatter":
            shape[axes[0]] //= n
        elif kind == "all_to_all":
            shape[axes[0]] //= n
            shape[axes[1]] *= n
        return self.be.full(tuple(shape), 0.0, self.be.dtype(x))


class Exchange:
    """Where the simulated ranks of one process meet: a barrier and a slot per group."""

    def __init__(self, layout: ParallelLayout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, int], list[Any]] = {}
        self._barriers: dict[tuple[str, int], threading.Barrier] = {}

    def key(self, rank: int, group: str) -> tuple[str, int]:
        """The group of ``rank``: its CP index for "tp" (same tokens), its TP index for "cp"."""
        t, c = rank % self.layout.tp, rank // self.layout.tp
        return (group, c if group == "tp" else t)

    def barrier(self, key: tuple[str, int], n: int) -> threading.Barrier:
        with self._lock:
            if key not in self._barriers:
                self._barriers[key] = threading.Barrier(n, timeout=WAIT_S)
                self._slots[key] = [None] * n
            return self._barriers[key]

    def swap(self, key: tuple[str, int], n: int, me: int, value: Any) -> list[Any]:
        """Hand in ``value``, wait for the group, read every member's, wait again."""
        barrier = self.barrier(key, n)
        self._slots[key][me] = value
        barrier.wait()
        values = list(self._slots[key])
        barrier.wait()
        return values

    def abort(self) -> None:
        """Wake every waiting rank with an error (one rank failed)."""
        with self._lock:
            for barrier in self._barriers.values():
                barrier.abort()


class ThreadComm(Comm[T]):
    """Collectives between ranks simulated on threads of one process (:class:`Exchange`)."""

    def __init__(
        self, be: Backend[T], layout: ParallelLayout, rank: int, exchange: Exchange
    ) -> None:
        super().__init__(be, layout, rank)
        self.exchange = exchange

    def _exchange(self, kind: str, x: T, group: str) -> list[T]:
        n, me = self.group(group)
        try:
            return self.exchange.swap(self.exchange.key(self.rank, group), n, me, x)
        except threading.BrokenBarrierError:
            raise AttntraceError(f"rank {self.rank}: another rank failed at {kind}") from None

    def _combine(
        self, kind: str, values: list[T] | None, n: int, me: int, axes: tuple[int, int]
    ) -> T:
        assert values is not None
        be = self.be
        if kind == "send_recv":
            return values[(me - 1) % n]  # the ring: from the previous rank
        if kind == "all_gather":
            return concat(be, values, axes[0])
        if kind == "all_to_all":
            parts = [split(be, v, axes[0], n)[me] for v in values]
            return concat(be, parts, axes[1])
        total = values[0]
        for v in values[1:]:  # the same order on every rank: every rank has the same sum
            total = be.add(total, v)
        if kind == "all_reduce":
            return total
        return split(be, total, axes[0], n)[me]  # reduce_scatter


def split(be: Backend[T], x: T, axis: int, n: int) -> list[T]:
    """``x`` cut in ``n`` equal parts along ``axis`` (views)."""
    size = be.shape(x)[axis] // n
    return [be.narrow(x, axis, i * size, (i + 1) * size) for i in range(n)]


def concat(be: Backend[T], parts: Sequence[T], axis: int) -> T:
    """``parts`` joined along ``axis`` (a new tensor)."""
    if len(parts) == 1:
        return parts[0]
    shape = list(be.shape(parts[0]))
    shape[axis] = sum(be.shape(p)[axis] for p in parts)
    out = be.full(tuple(shape), 0.0, be.dtype(parts[0]))
    at = 0
    for p in parts:
        be.write(out, axis, at, p)
        at += be.shape(p)[axis]
    return out
