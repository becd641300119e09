"""A row-parallel projection whose rank ``bad`` goes wrong in the way ``mode`` says, for the
tests of what trace --nproc does when one rank fails: raise, hang, be killed, run out of
memory, or skip the all_reduce its peers wait in."""

import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn


class RowParallel(nn.Module):
    def __init__(self, embed_dim=32, mode="raise", bad=1, rank=0, world_size=1):
        super().__init__()
        self.proj = nn.Linear(embed_dim // world_size, embed_dim, bias=False)
        self.mode, self.bad, self.rank, self.world = mode, bad, rank, world_size
        self.embed_dim = embed_dim

    def forward(self, x):
        part = self.embed_dim // self.world
        mine = x[..., self.rank * part : (self.rank + 1) * part]
        partial = self.proj(mine)
        if self.rank == self.bad:
            self.go_wrong()
        if self.mode == "skip" and self.rank == self.bad:
            return partial  # forgot the all_reduce: the other ranks wait for it
        dist.all_reduce(partial)
        return partial

    def go_wrong(self):
        if self.mode == "raise":
            raise ValueError(f"rank {self.rank} cannot split {self.embed_dim} evenly")
        if self.mode == "hang":
            time.sleep(600)
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "memory":
            torch.ones(2**40, dtype=torch.uint8)  # a TiB: past the memory limit


class BadInit(nn.Module):
    """Rank 1 refuses its heads in __init__; rank 0 waits for it at a barrier."""

    def __init__(self, embed_dim=32, num_heads=3, rank=0, world_size=1):
        super().__init__()
        if num_heads % world_size and rank == 1:
            raise ValueError(f"{num_heads} heads do not split over {world_size} ranks")
        dist.barrier()
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        return self.proj(x)
