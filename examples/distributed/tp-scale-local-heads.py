# planted sharding bug (tp-scale-local-heads): line 101 reads `self.scale = 1.0 / math.sqrt(hidden // self.local_heads)`
"""Tensor-parallel self-attention written by hand with torch.distributed, the way Megatron-LM's
ColumnParallelLinear / RowParallelLinear do it: q, k, v split by output rows (each rank holds
heads // world heads), the output projection split by input columns, its partial products
summed by one all-reduce, the bias added once after the sum. Every rank builds the full
("master") weights from the same seed and keeps its slice. With fewer kv heads than ranks each
rank keeps the one kv head its query heads read (copies of it on world // kv_heads ranks).
"""

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_tables(positions, dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(positions.double(), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().float(), emb.sin().float()


class ColumnParallelLinear(nn.Module):
    """Y = XA + b, A split by columns: rank r holds rows r*out/world .. of the (out, in) weight.
    No communication in the forward."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        world, rank = dist.get_world_size(), dist.get_rank()
        master = nn.Linear(in_features, out_features, bias=bias)  # same seed on every rank
        per = out_features // world
        rows = slice(rank * per, (rank + 1) * per)
        self.weight = nn.Parameter(master.weight.detach()[rows].clone())
        self.bias = nn.Parameter(master.bias.detach()[rows].clone()) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class KVParallelLinear(nn.Module):
    """k or v: kv_heads // world heads a rank, or with fewer kv heads than ranks the one kv head
    the rank's query heads read (replicated on world // kv_heads ranks)."""

    def __init__(self, in_features, kv_heads, head_dim, bias=True):
        super().__init__()
        world, rank = dist.get_world_size(), dist.get_rank()
        master = nn.Linear(in_features, kv_heads * head_dim, bias=bias)
        if kv_heads >= world:
            first, count = rank * (kv_heads // world), kv_heads // world
        else:
            first, count = rank * kv_heads // world, 1
        rows = slice(first * head_dim, (first + count) * head_dim)
        self.weight = nn.Parameter(master.weight.detach()[rows].clone())
        self.bias = nn.Parameter(master.bias.detach()[rows].clone()) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Y = XA + b, A split by rows: rank r holds columns r*in/world .. of the (out, in) weight,
    X arrives split the same way; the partial products are all-reduced, b added once."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        world, rank = dist.get_world_size(), dist.get_rank()
        master = nn.Linear(in_features, out_features, bias=bias)
        per = in_features // world
        self.weight = nn.Parameter(master.weight.detach()[:, rank * per : (rank + 1) * per].clone())
        self.bias = nn.Parameter(master.bias.detach().clone()) if bias else None

    def forward(self, x):
        partial = F.linear(x, self.weight)
        dist.all_reduce(partial)
        out = partial
        if self.bias is not None:
            out = out + self.bias
        return out


class ParallelSelfAttention(nn.Module):
    def __init__(self, hidden=64, heads=8, kv_heads=None, causal=False, rope=False, bias=True):
        super().__init__()
        world = dist.get_world_size()
        kv_heads = kv_heads or heads
        self.head_dim = hidden // heads
        self.local_heads = heads // world
        self.local_kv_heads = max(1, kv_heads // world)
        self.causal, self.rope = causal, rope
        self.q_proj = ColumnParallelLinear(hidden, heads * self.head_dim, bias)
        self.k_proj = KVParallelLinear(hidden, kv_heads, self.head_dim, bias)
        self.v_proj = KVParallelLinear(hidden, kv_heads, self.head_dim, bias)
        self.o_proj = RowParallelLinear(heads * self.head_dim, hidden, bias)
        self.scale = 1.0 / math.sqrt(hidden // self.local_heads)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.local_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.local_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.local_kv_heads, self.head_dim).transpose(1, 2)
        if self.rope:
            cos, sin = rope_tables(torch.arange(S), self.head_dim)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        groups = self.local_heads // self.local_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = q @ k.transpose(-2, -1) * self.scale
        if self.causal:
            future = torch.ones(S, S, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(B, S, self.local_heads * self.head_dim)
        return self.o_proj(context)
