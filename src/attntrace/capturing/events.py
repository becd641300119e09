"""The raw record of one captured operation, before axes and roles are worked out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attntrace.capturing.source import Site

Shape = tuple[int, ...]


@dataclass(kw_only=True)
class Event:
    """One operation of the user's code as the hooks saw it (mutable while capturing).

    ``kind`` is the rule its axes follow (``linear``, ``matmul``, ``reshape``, ``permute``,
    ``reduce``, ``create``, ``einsum``, ``sdpa`` or ``elementwise``); ``func`` the name shown.
    """

    index: int
    name: str
    kind: str
    func: str
    shape: Shape
    dtype: str
    inputs: tuple[int | None, ...]  # the event each tensor operand came from (None: unknown)
    input_shapes: tuple[Shape, ...]
    site: Site
    params: dict[str, Any] = field(default_factory=dict)
    value: Any = None  # the output (a tensor or array), kept by reference; see Recorder.snapshot
    version: int = -1  # torch's version counter when recorded (-1: not a torch tensor)


@dataclass(frozen=True)
class Operand:
    """A tensor operand of a failed operation: its name, shape and named axes."""

    name: str
    shape: Shape
    axes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Failure:
    """The operation that raised: where, what it was, its operands and the exception."""

    func: str
    kind: str
    site: Site
    operands: tuple[Operand, ...]
    error: BaseException
    params: dict[str, Any] = field(default_factory=dict)
