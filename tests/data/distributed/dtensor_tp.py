"""Tensor parallelism with DTensor: a plain attention module, then torch's parallelize_module
with ColwiseParallel for q, k, v and RowwiseParallel for the output projection (the plan
torchtitan uses). The forward reads the local number of heads from the local width (-1)."""

import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Attention(nn.Module):
    def __init__(self, hidden=64, heads=8, causal=False, bias=True):
        super().__init__()
        self.heads, self.head_dim, self.causal = heads, hidden // heads, causal
        self.q_proj = nn.Linear(hidden, hidden, bias=bias)
        self.k_proj = nn.Linear(hidden, hidden, bias=bias)
        self.v_proj = nn.Linear(hidden, hidden, bias=bias)
        self.o_proj = nn.Linear(hidden, hidden, bias=bias)

    def split_heads(self, t):
        B, S, _ = t.shape
        return t.view(B, S, -1, self.head_dim).transpose(1, 2)  # the rank's heads: -1

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = (self.split_heads(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if self.causal:
            future = torch.ones(S, S, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = scores.softmax(dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(B, S, -1)
        return self.o_proj(context)


PLAN = {
    "q_proj": ColwiseParallel(),
    "k_proj": ColwiseParallel(),
    "v_proj": ColwiseParallel(),
    "o_proj": RowwiseParallel(),
}


class TPAttention(Attention):
    """The attention with its projections sharded over the mesh's ranks."""

    def __init__(self, hidden=64, heads=8, causal=False, bias=True, device_mesh=None):
        super().__init__(hidden, heads, causal, bias)
        mesh = device_mesh or init_device_mesh("cpu", (dist.get_world_size(),))
        parallelize_module(self, mesh, PLAN)
