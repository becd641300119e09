"""One rank of ``trace --nproc N``, inside its sandbox child: the process group joined before
the user's code is imported, and how that code is built, called and fed on the rank.

The convention (``docs/guides/across-devices.md``):

- ``FILE.py:Class`` is built on every rank after ``init_process_group`` and after
  ``torch.manual_seed(--seed)`` (every rank the same weights before the code shards them);
  ``__init__`` parameters named as in :data:`GIVEN` that ``--init`` does not give are passed;
- ``FILE.py:fn`` is called ``fn(x, **those of GIVEN it names)``;
- x is the full x on every rank (Megatron-style tensor parallelism shards the weights), or with
  ``--shard-x seq`` the rank's contiguous part of the sequence axis (ring, Ulysses).
"""

from __future__ import annotations

import datetime
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from attntrace.errors import ConfigError

#: Parameters of the user's ``__init__`` or function that the rank fills, by name.
GIVEN = ("group", "process_group", "pg", "rank", "world_size", "device_mesh", "mesh")
#: How x is handed to each rank (``--shard-x``).
SHARDS = ("none", "seq")
#: Seconds gloo waits in a collective past the time limit: attntrace's own limit (the child's
#: watchdog, which names the line) ends a hang first, gloo's is the backstop.
GLOO_SLACK = 30.0


@dataclass(frozen=True)
class Rank:
    """This process's place among the ranks."""

    rank: int
    world: int
    shard: str = "none"  # "none": the full x; "seq": the rank's part of the sequence
    group: Any = None  # the WORLD process group

    def given(self) -> dict[str, Any]:
        """What each name of :data:`GIVEN` stands for on this rank."""
        out: dict[str, Any] = {"group": self.group, "process_group": self.group, "pg": self.group}
        out |= {"rank": self.rank, "world_size": self.world}
        return out


def join(request: Mapping[str, Any]) -> Rank:
    """Join the process group the request names (gloo; the rendezvous in the file ``store``,
    or on 127.0.0.1 at ``port``) and seed torch; the :class:`Rank` the user's code is built
    and called with (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` set as torchrun sets them)."""
    import torch
    import torch.distributed as dist

    rank, world = int(request["rank"]), int(request["world"])
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world)
    )
    if "store" in request:
        where = f"file://{request['store']}"
    else:
        where = f"tcp://127.0.0.1:{int(request['port'])}"
    wait = datetime.timedelta(seconds=float(request.get("timeout", 60.0)) + GLOO_SLACK)
    dist.init_process_group("gloo", init_method=where, rank=rank, world_size=world, timeout=wait)
    torch.manual_seed(int((request.get("inputs") or {}).get("seed", 0)))
    shard = str(request.get("shard", "none"))
    return Rank(rank, world, shard, dist.group.WORLD)


def filled(fn: Callable[..., Any], given: Mapping[str, Any], rank: Rank) -> dict[str, Any]:
    """The keyword arguments of :data:`GIVEN` that ``fn`` names and ``given`` lacks.

    >>> def build(embed_dim, num_heads, rank, world_size): ...
    >>> filled(build, {"embed_dim": 8}, Rank(1, 4))
    {'rank': 1, 'world_size': 4}
    """
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    wanted = [n for n in GIVEN if n in names and n not in given]
    values = rank.given()
    if any(n in ("device_mesh", "mesh") for n in wanted):
        values |= {"device_mesh": _mesh(rank), "mesh": _mesh(rank)}
    return {n: values[n] for n in wanted}


def _mesh(rank: Rank) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (rank.world,))


def shard_x(x: Any, rank: Rank) -> Any:
    """x as the rank gets it: whole, or its contiguous part of the sequence axis (the one
    before H: (B, S, H) or (S, H)).

    >>> import numpy as np
    >>> shard_x(np.zeros((2, 8, 4)), Rank(1, 4, "seq")).shape
    (2, 2, 4)
    """
    if rank.shard == "none":
        return x
    S = int(x.shape[-2])
    if S % rank.world:
        raise ConfigError(
            f"--shard-x seq cuts the sequence in {rank.world} equal parts, and --seq {S} is not "
            f"a multiple of {rank.world}; give --seq {max(rank.world, S - S % rank.world)}"
        )
    n = S // rank.world
    return x[..., rank.rank * n : (rank.rank + 1) * n, :]  # (B, S/N, H)


def check_shard(shard: str) -> str:
    """``--shard-x``'s value, checked.

    >>> check_shard("seq")
    'seq'
    """
    if shard not in SHARDS:
        raise ConfigError(f"--shard-x {shard} is not one of {', '.join(SHARDS)}; give seq or none")
    return shard
