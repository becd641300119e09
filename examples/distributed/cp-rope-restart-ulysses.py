# planted sharding bug (cp-rope-restart-ulysses): line 64 reads `positions = torch.arange(s)`
"""DeepSpeed-Ulysses sequence parallelism written with torch.distributed: each rank holds S /
world tokens of every head; an all-to-all trades them for all S tokens of heads / world heads,
attention runs on whole sequences, and a second all-to-all brings the context back. The
projections are replicated (the same seed on every rank)."""

import math

import torch
import torch.distributed as dist
import torch.nn as nn


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, positions, theta=10000.0):  # x: (B, s, h, d)
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(positions.double(), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]  # (s, 1, d)
    return x * emb.cos().float() + rotate_half(x) * emb.sin().float()


def seq_to_heads(t):
    """(B, s, h, d) of my tokens -> (B, S, h/world, d): every token of my heads."""
    world = dist.get_world_size()
    B, s, h, d = t.shape
    send = t.reshape(B, s, world, h // world, d).permute(2, 0, 1, 3, 4).contiguous()
    got = torch.empty_like(send)
    dist.all_to_all_single(got, send)  # got[i]: rank i's tokens of my heads
    return got.permute(1, 0, 2, 3, 4).reshape(B, world * s, h // world, d)


def heads_to_seq(t):
    """(B, S, h/world, d) of my heads -> (B, s, h, d): every head of my tokens."""
    world = dist.get_world_size()
    B, S, hw, d = t.shape
    send = t.reshape(B, world, S // world, hw, d).permute(1, 0, 2, 3, 4).contiguous()
    got = torch.empty_like(send)
    dist.all_to_all_single(got, send)  # got[i]: my tokens of rank i's heads
    return got.permute(1, 2, 0, 3, 4).reshape(B, S // world, world * hw, d)


class UlyssesAttention(nn.Module):
    def __init__(self, hidden=64, heads=8, causal=True, rope=True, bias=True):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.causal, self.rope = causal, rope
        self.q_proj = nn.Linear(hidden, hidden, bias=bias)
        self.k_proj = nn.Linear(hidden, hidden, bias=bias)
        self.v_proj = nn.Linear(hidden, hidden, bias=bias)
        self.o_proj = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, x):
        rank = dist.get_rank()
        B, s, H = x.shape  # this rank's chunk: tokens rank*s .. (rank+1)*s - 1
        q = self.q_proj(x).view(B, s, self.heads, self.head_dim)
        k = self.k_proj(x).view(B, s, self.heads, self.head_dim)
        v = self.v_proj(x).view(B, s, self.heads, self.head_dim)
        if self.rope:
            positions = torch.arange(s)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
        q, k, v = (seq_to_heads(t).transpose(1, 2) for t in (q, k, v))  # (B, h/world, S, d)
        S = q.shape[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if self.causal:
            future = torch.ones(S, S, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        context = scores.softmax(dim=-1) @ v  # (B, h/world, S, d)
        context = heads_to_seq(context.transpose(1, 2))  # (B, s, h, d)
        return self.o_proj(context.reshape(B, s, H))
