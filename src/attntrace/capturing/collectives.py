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
from collections.abc import Callable, Iterator, Sequence
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
    return Moved(
        name,
        tuple(_tensors(bound, read)),
        tuple(_tensors(bound, written)),
        _world(group),
        _peer(bound, group),
    )


def _peer(bound: dict[str, Any], group: Any) -> int | None:
    """The global rank a send goes to or a receive comes from (``dst``/``src``, or the
    group's ``group_dst``/``group_src`` that ``batch_isend_irecv`` passes)."""
    for key in ("dst", "src"):
        if isinstance(bound.get(key), int):
            return int(bound[key])
    for key in ("group_dst", "group_src"):
        if isinstance(bound.get(key), int):
            if group is None:
                return int(bound[key])
            import torch.distributed as dist

            with contextlib.suppress(RuntimeError, ValueError):
                return int(dist.get_global_rank(group, bound[key]))
            return int(bound[key])
    return None


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
    return Site(site.location, site.source, f"{base}_{name}" if base else name, called=site.called)


def params(m: Moved, read: Sequence[tuple[int, ...]], dtype: str) -> dict[str, Any]:
    """The step's ``collective`` record: kind, ranks, peer, bytes, placements (None)."""
    kind = KIND[m.name]
    sent, received = traffic(kind, m.name, read, m.group_size, dtype)
    return {
        "collective": {
            "kind": kind,
            "ranks": m.group_size,
            "peer": m.peer,
            "bytes_sent": sent,
            "bytes_received": received,
            "placements": None,
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


# --- DTensor: a redistribution as one step --------------------------------------------------


@dataclass
class Redistribution:
    """One DTensor redistribution while it runs: its placements (``S(1) -> R``) and the
    collective records of the functional collectives it calls (one step in all)."""

    placements: str
    moved: list[dict[str, Any]]

    def record(self, group_size: int = 1) -> dict[str, Any] | None:
        """The step's ``collective`` record: the first collective's kind and group, the bytes
        of all; None when it moved nothing (a replicated tensor cut into the rank's part)."""
        if not self.moved:
            return None
        first = self.moved[0]["collective"]
        return {
            "collective": {
                **first,
                "bytes_sent": sum(m["collective"]["bytes_sent"] for m in self.moved),
                "bytes_received": sum(m["collective"]["bytes_received"] for m in self.moved),
                "placements": self.placements,
            }
        }


_RUNNING: list[Redistribution] = []


def redistributing() -> Redistribution | None:
    """The DTensor redistribution running now (its collectives are parts of its step)."""
    return _RUNNING[-1] if _RUNNING else None


Done = Callable[[Any, Any, Redistribution], None]


@contextlib.contextmanager
def placements_seen(done: Done | None = None) -> Iterator[None]:
    """While the block runs, each DTensor redistribution is followed: the functional
    collectives it calls add to it (:func:`redistributing`), and ``done(local, out, it)`` is
    called with the rank's tensor before and after; nothing when DTensor was never imported."""
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
        it = Redistribution(f"{_placed(current)} -> {_placed(target)}", [])
        _RUNNING.append(it)
        try:
            out = original(local, current, target, *args, **kwargs)
        finally:
            _RUNNING.pop()
        if done is not None:
            done(local, out, it)
        return out

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
