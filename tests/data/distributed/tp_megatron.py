"""Megatron-style tensor-parallel self-attention, written as people write it with
torch.distributed: q, k and v column-parallel (each rank holds h/T heads), the output
projection row-parallel, and one all_reduce that sums the ranks' partial outputs."""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class ColumnParallelLinear(nn.Module):
    """y = x @ W_r.T: this rank's rows of W (out_features / world of them)."""

    def __init__(self, in_features, out_features, world_size, rank):
        super().__init__()
        full = torch.randn(out_features, in_features) / math.sqrt(in_features)
        part = out_features // world_size
        self.weight = nn.Parameter(full[rank * part : (rank + 1) * part].clone())

    def forward(self, x):
        return F.linear(x, self.weight)  # (B, S, out/T)


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r @ W_r.T: this rank's columns of W; the sum is an all_reduce."""

    def __init__(self, in_features, out_features, world_size, rank, group=None):
        super().__init__()
        full = torch.randn(out_features, in_features) / math.sqrt(in_features)
        part = in_features // world_size
        self.weight = nn.Parameter(full[:, rank * part : (rank + 1) * part].clone())
        self.group = group

    def forward(self, x):
        partial = F.linear(x, self.weight)  # (B, S, H): this rank's share of the sum
        dist.all_reduce(partial, group=self.group)
        return partial


class ParallelSelfAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, rank=0, world_size=1, group=None):
        super().__init__()
        assert num_heads % world_size == 0, "heads must split evenly across ranks"
        self.heads = num_heads // world_size  # this rank's heads
        self.head_dim = embed_dim // num_heads
        self.embed_dim = embed_dim
        self.q_proj = ColumnParallelLinear(embed_dim, embed_dim, world_size, rank)
        self.k_proj = ColumnParallelLinear(embed_dim, embed_dim, world_size, rank)
        self.v_proj = ColumnParallelLinear(embed_dim, embed_dim, world_size, rank)
        self.o_proj = RowParallelLinear(embed_dim, embed_dim, world_size, rank, group)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, h/T, S, S)
        weights = scores.softmax(dim=-1)
        context = weights @ v  # (B, h/T, S, d)
        merged = context.transpose(1, 2).reshape(B, S, self.heads * self.head_dim)
        return self.o_proj(merged)  # (B, S, H), summed over the ranks
