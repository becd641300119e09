"""torch.distributed's collectives as steps of the user's code (``trace --nproc N``).

In torch 2.13 every collective of ``torch.distributed`` (``all_reduce``, ``all_gather``,
``reduce_scatter``, ``all_to_all``, ``send``/``recv``/``isend``/``irecv``, ``broadcast`` …)
dispatches through ``__torch_function__``, so the capture's ``TorchFunctionMode`` sees it;
``batch_isend_irecv`` calls ``isend``/``irecv`` once per ``P2POp``, and DTensor's
redistributions (``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``) call the
functional collectives (``torch.ops._c10d_functional``). :func:`record_collective` runs one and
records it as a step at the user's line (the innermost frame of the user's files), with what the
rank hands in and what it ends with, the group's size, the peer, the bytes moved, and for
DTensor the placements (read from the redistribution that runs it, :func:`placements_seen`).

A collective step is named ``<operand>_<op>`` (``out_all_reduce``); its role is the reference
rank view's name where one corresponds (:func:`collective_role`).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from attntrace.capturing.source import Site, is_user_file, site_of

#: The kind of each collective (``sharding.comm.KINDS``, plus broadcast, reduce, scatter,
#: gather), by the name torch gives the function; the functional ops have the same names.
KIND = {
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "all_gather": "all_gather",
    "all_gather_single": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "send": "send_recv",
    "isend": "send_recv",
    "recv": "send_recv",
    "irecv": "send_recv",
    "scatter": "scatter",
    "gather": "gather",
}

#: Where each function keeps what it reads and what it writes: (argument names read, argument
#: names written); a name ending in ``*`` holds a list of tensors.
_ARGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "all_reduce": (("tensor",), ("tensor",)),
    "broadcast": (("tensor",), ("tensor",)),
    "reduce": (("tensor",), ("tensor",)),
    "all_gather": (("tensor",), ("tensor_list*",)),
    "all_gather_single": (("input_tensor",), ("output_tensor",)),
    "reduce_scatter": (("input_list*",), ("output",)),
    "reduce_scatter_single": (("input",), ("output",)),
    "all_to_all_single": (("input",), ("output",)),
    "all_to_all": (("input_tensor_list*",), ("output_tensor_list*",)),
    "send": (("tensor",), ()),
    "isend": (("tensor",), ()),
    "recv": ((), ("tensor",)),
    "irecv": ((), ("tensor",)),
    "scatter": (("scatter_list*",), ("tensor",)),
    "gather": (("tensor",), ("gather_list*",)),
}

#: The modules whose functions are collectives.
_C10D = "torch.distributed.distributed_c10d"
_FUNCTIONAL = "torch._ops._c10d_functional"

#: How many frames up a collective's caller is looked for (torch's own layers between).
_DEPTH = 60


def collective_name(func: Any, name: str) -> str | None:
    """The name of the collective ``func`` is (``all_reduce`` …), None for any other function.

    >>> collective_name(len, "len") is None
    True
    """
    if name not in KIND:
        return None
    module = getattr(func, "__module__", "") or ""
    return name if module in (_C10D, _FUNCTIONAL) else None


@dataclass(frozen=True)
class Moved:
    """One collective call as a rank sees it: the tensors it reads and writes."""

    name: str
    read: tuple[Any, ...]
    written: tuple[Any, ...]
    group_size: int
    peer: int | None


def moved(func: Any, name: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Moved:
    """What the call ``func(*args, **kwargs)`` (its result ``out``) read and wrote."""
    if getattr(func, "__module__", "") == _FUNCTIONAL:  # functional: reads arg 0, returns
        size = _functional_size(name, args)
        return Moved(name, tuple(args[:1]), (out,), size, None)
    bound = _bound(func, args, kwargs)
    read, written = _ARGS.get(name, ((), ()))
    group = bound.get("group")
    peer = next((bound[k] for k in ("dst", "src", "group_dst", "group_src") if k in bound), None)
    return Moved(
        name,
        tuple(_tensors(bound, read)),
        tuple(_tensors(bound, written)),
        _world(group),
        peer if isinstance(peer, int) else None,
    )


def _bound(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(inspect.signature(func).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return dict(kwargs)


def _tensors(bound: dict[str, Any], names: Sequence[str]) -> Iterator[Any]:
    for name in names:
        value = bound.get(name.rstrip("*"))
        if name.endswith("*") and isinstance(value, list | tuple):
            yield from value
        elif value is not None and not name.endswith("*"):
            yield value


def _world(group: Any) -> int:
    import torch.distributed as dist

    try:
        return int(dist.get_world_size(group))
    except (RuntimeError, ValueError, TypeError):
        return 1


def _functional_size(name: str, args: Sequence[Any]) -> int:
    """The group size a functional collective states (all_gather, reduce_scatter), else the
    world's."""
    at = {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 2}.get(name)
    if at is not None and len(args) > at and isinstance(args[at], int):
        return int(args[at])
    return _world(None)


def caller_site() -> Site | None:
    """The site of the innermost frame of the user's files above this call (torch's layers,
    a deprecation wrapper, DTensor's hooks walked past), None when there is none."""
    frame = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        if is_user_file(frame.f_code.co_filename):
            return site_of(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def step_site(site: Site, base: str, name: str) -> Site:
    """``site`` with the step's name: ``<base>_<name>`` (``out_all_reduce``).

    >>> step_site(Site("a.py:3", "dist.all_reduce(out)"), "out", "all_reduce").target
    'out_all_reduce'
    """
    return Site(site.location, site.source, f"{base}_{name}" if base else name)


def params(m: Moved, read: Sequence[tuple[int, ...]], dtype: str) -> dict[str, Any]:
    """The step's ``collective`` record: kind, ranks, peer, bytes, placements."""
    kind = KIND[m.name]
    sent, received = traffic(kind, m.name, read, m.group_size, dtype)
    return {
        "collective": {
            "kind": kind,
            "ranks": m.group_size,
            "peer": m.peer,
            "bytes_sent": sent,
            "bytes_received": received,
            "placements": _PLACEMENTS[-1] if _PLACEMENTS else None,
        }
    }


def traffic(
    kind: str, name: str, read: Sequence[tuple[int, ...]], n: int, dtype: str
) -> tuple[int, int]:
    """(bytes sent, bytes received) once, by the ring algorithm of :mod:`attntrace.sharding.comm`
    (its :class:`Collective`); a send only sends, a receive only receives.

    >>> traffic("all_reduce", "all_reduce", [(4, 16)], 8, "float32")
    (448, 448)
    """
    from attntrace.config.attention_config import ELEMENT_BYTES
    from attntrace.sharding.comm import KINDS, Collective

    size = ELEMENT_BYTES.get(dtype, 0)
    shape = read[0] if read else ()
    if kind not in KINDS or not read or not size:
        return 0, 0
    if name in ("recv", "irecv"):
        return 0, _numel(shape) * size
    out = list(shape)
    if kind == "reduce_scatter" and out:
        out[0] = max(out[0] // n, 0)
    c = Collective(
        step="", kind=kind, group="", size=n, shape_in=shape, shape_out=tuple(out), dtype=dtype
    )
    sent = c.sent * (len(read) if kind in ("all_to_all", "reduce_scatter") and len(read) > 1 else 1)
    return (sent, 0) if name in ("send", "isend") else (sent, sent)


def _numel(shape: Sequence[int]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


# --- DTensor: the placements of the redistribution a functional collective runs for ----------

_PLACEMENTS: list[str] = []


@contextlib.contextmanager
def placements_seen() -> Iterator[None]:
    """While the block runs, each DTensor redistribution states its placements
    (``Partial(sum) -> Replicate()``) to the functional collectives it calls; nothing when
    DTensor was never imported."""
    module = sys.modules.get("torch.distributed.tensor._redistribute")
    original = getattr(module, "redistribute_local_tensor", None)
    if module is None or original is None:
        yield
        return
    holders = [
        m
        for n in ("_redistribute", "_api", "_dispatch")
        if getattr(m := sys.modules.get(f"torch.distributed.tensor.{n}"), _NAME, None) is original
    ]

    def redistribute(local: Any, current: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        _PLACEMENTS.append(f"{_placed(current)} -> {_placed(target)}")
        try:
            return original(local, current, target, *args, **kwargs)
        finally:
            _PLACEMENTS.pop()

    for m in holders:
        setattr(m, _NAME, redistribute)
    try:
        yield
    finally:
        for m in holders:
            setattr(m, _NAME, original)


_NAME = "redistribute_local_tensor"


def _placed(spec: Any) -> str:
    return ", ".join(str(p) for p in getattr(spec, "placements", ()))


class Mark:
    """A key no tensor has: a step recorded under it is the source of nothing (a send)."""

    __slots__ = ("__weakref__",)
