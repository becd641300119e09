"""The ranks as real processes: :class:`TorchDistComm` runs each collective with
``torch.distributed`` (gloo on the CPU), and ``python -m attntrace.sharding.distributed`` is one
rank's process, started by :func:`attntrace.tools.verify_ranks.verify_ranks`.

A worker reads the config from ``ATTNTRACE_CONFIG`` (a pickle the parent wrote), joins the
process group (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, as ``torchrun``
sets them), creates the TP and CP groups, runs its rank on the torch backend with every value
kept, and writes ``rank-R.npz`` (every step's values, and ``output``) into ``ATTNTRACE_OUT``.
"""

from __future__ import annotations

import datetime
import os
import pickle
from pathlib import Path
from typing import Any

from attntrace.backends import get_backend
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.engine.inputs import random_sources
from attntrace.engine.recorder import Recorder
from attntrace.engine.rope import rope_sources
from attntrace.sharding.comm import Comm, concat, split
from attntrace.sharding.context import forward
from attntrace.sharding.rank import RankAttention

#: Seconds a worker waits on the others (the process group's timeout).
GROUP_TIMEOUT_S = 60


class TorchDistComm(Comm[Any]):
    """Each collective run by torch.distributed on the rank's TP or CP group."""

    def __init__(self, be: Any, layout: ParallelLayout, rank: int, groups: dict[str, Any]) -> None:
        super().__init__(be, layout, rank)
        self.groups = groups  # "tp", "cp": this rank's process groups

    def run(self, kind: str, x: Any, group: str, axes: tuple[int, int] = (0, 0)) -> Any:
        import torch
        import torch.distributed as dist

        g, (n, me) = self.groups[group], self.group(group)
        x = x.contiguous()
        if kind == "all_reduce":
            out = x.clone()
            dist.all_reduce(out, group=g)
            return out
        if kind == "all_gather":
            parts = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(parts, x, group=g)
            return concat(self.be, parts, axes[0])
        if kind == "reduce_scatter":
            whole = x.movedim(axes[0], 0).contiguous()  # the scattered axis first
            part = torch.empty((whole.shape[0] // n, *whole.shape[1:]), dtype=x.dtype)
            dist.reduce_scatter_tensor(part, whole, group=g)
            return part.movedim(0, axes[0])
        if kind == "all_to_all":
            sent = torch.stack(split(self.be, x, axes[0], n)).contiguous()  # (n, ...)
            got = torch.empty_like(sent)
            dist.all_to_all_single(got, sent, group=g)
            return concat(self.be, list(got.unbind(0)), axes[1])
        return self._ring(x, n, me, g)

    def _ring(self, x: Any, n: int, me: int, g: Any) -> Any:
        """send_recv: to the next rank of the CP ring, from the previous (global ranks)."""
        import torch
        import torch.distributed as dist

        T = self.layout.tp
        t = self.rank % T
        to, of = ((me + 1) % n) * T + t, ((me - 1) % n) * T + t
        got = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, to, g), dist.P2POp(dist.irecv, got, of, g)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return got


def make_groups(layout: ParallelLayout, rank: int) -> dict[str, Any]:
    """Every TP and CP group, created in the same order on every rank; this rank's two."""
    import torch.distributed as dist

    T, C = layout.tp, layout.cp
    mine: dict[str, Any] = {}
    for c in range(C):
        g = dist.new_group([c * T + t for t in range(T)])
        if rank // T == c:
            mine["tp"] = g
    for t in range(T):
        g = dist.new_group([c * T + t for c in range(C)])
        if rank % T == t:
            mine["cp"] = g
    return mine


def run_worker(config: AttentionConfig, rank: int, out: Path) -> None:
    """One rank's process: join the group, run the rank, write its values."""
    import numpy as np
    import torch.distributed as dist

    layout = config.parallel
    assert layout is not None
    timeout = datetime.timedelta(seconds=GROUP_TIMEOUT_S)
    dist.init_process_group("gloo", rank=rank, world_size=layout.ranks, timeout=timeout)
    try:
        be = get_backend("torch")
        single = AttentionConfig(**{**_fields(config), "parallel": None})
        seeded = {**random_sources(single), **rope_sources(single)}
        sources = {name: be.tensor(s) for name, s in seeded.items()}
        comm = TorchDistComm(be, layout, rank, make_groups(layout, rank))
        rec: Recorder[Any] = Recorder(be, config, True)
        run = forward(RankAttention(config, layout, rank, rec, comm), sources)
        values: dict[str, Any] = {s.name: s.value for s in rec.finish() if s.value is not None}
        values["__output__"] = be.to_numpy(run.output)
        np.savez(out / f"rank-{rank}.npz", **values)
    finally:
        dist.destroy_process_group()


def _fields(config: AttentionConfig) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}


def main() -> None:
    """``python -m attntrace.sharding.distributed``: one rank (see the module docstring)."""
    config = pickle.loads(Path(os.environ["ATTNTRACE_CONFIG"]).read_bytes())
    run_worker(config, int(os.environ["RANK"]), Path(os.environ["ATTNTRACE_OUT"]))


if __name__ == "__main__":
    main()
