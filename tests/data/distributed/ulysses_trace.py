"""Ulysses (DeepSpeed's sequence parallelism) as people write it with torch.distributed: each
rank holds S/N tokens; an all_to_all trades them for h/N heads over the whole sequence,
attention runs, and a second all_to_all trades back."""

import math

import torch
import torch.distributed as dist
from torch import nn


def seq_to_heads(t, world_size):
    """(B, S/N, h, d) on each rank -> (B, S, h/N, d): every rank's tokens, this rank's heads."""
    B, S, h, d = t.shape
    send = t.reshape(B, S, world_size, h // world_size, d).permute(2, 0, 1, 3, 4).contiguous()
    got = torch.empty_like(send)  # (N, B, S/N, h/N, d)
    dist.all_to_all_single(got, send)
    return got.permute(1, 0, 2, 3, 4).reshape(B, world_size * S, h // world_size, d)


def heads_to_seq(t, world_size):
    """(B, S, h/N, d) -> (B, S/N, h, d): back to this rank's tokens, every head."""
    B, S, h, d = t.shape
    send = t.reshape(B, world_size, S // world_size, h, d).permute(1, 0, 2, 3, 4).contiguous()
    got = torch.empty_like(send)  # (N, B, S/N, h/N, d)
    dist.all_to_all_single(got, send)
    return got.permute(1, 2, 0, 3, 4).reshape(B, S // world_size, world_size * h, d)


class UlyssesAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, world_size=1):
        super().__init__()
        self.heads, self.head_dim, self.world_size = num_heads, embed_dim // num_heads, world_size
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.o_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):  # x: (B, S/N, H)
        B, S, H = x.shape
        q = self.q_proj(x).view(B, S, self.heads, self.head_dim)
        k = self.k_proj(x).view(B, S, self.heads, self.head_dim)
        v = self.v_proj(x).view(B, S, self.heads, self.head_dim)
        q = seq_to_heads(q, self.world_size).transpose(1, 2)  # (B, h/N, S, d)
        k = seq_to_heads(k, self.world_size).transpose(1, 2)
        v = seq_to_heads(v, self.world_size).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        context = torch.softmax(scores, dim=-1) @ v  # (B, h/N, S, d)
        context = heads_to_seq(context.transpose(1, 2), self.world_size)  # (B, S/N, h, d)
        return self.o_proj(context.reshape(B, S, H))
