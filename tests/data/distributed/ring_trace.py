"""Ring attention (context parallelism) as people write it with torch.distributed: each rank
holds S/N tokens of q, k and v; the key/value blocks travel round the ring with
batch_isend_irecv, and each block's partial output is merged by its log-sum-exp."""

import math

import torch
import torch.distributed as dist
from torch import nn


def ring_pass(tensor, rank, world_size):
    """Send ``tensor`` to the next rank, receive the previous rank's."""
    tensor = tensor.contiguous()  # gloo sends contiguous memory only
    received = torch.empty_like(tensor)
    ops = [
        dist.P2POp(dist.isend, tensor, (rank + 1) % world_size),
        dist.P2POp(dist.irecv, received, (rank - 1) % world_size),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received


class RingAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, rank=0, world_size=1):
        super().__init__()
        self.heads, self.head_dim = num_heads, embed_dim // num_heads
        self.rank, self.world_size = rank, world_size
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):  # x: (B, S/N, H), this rank's tokens
        B, S, H = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(B, S, self.heads, self.head_dim).transpose(1, 2)  # (B, h, S/N, d)
        k = k.view(B, S, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(B, S, self.heads, self.head_dim).transpose(1, 2)
        out = torch.zeros_like(q)
        lse = torch.full((B, self.heads, S, 1), -math.inf)
        for step in range(self.world_size):
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, h, S/N, S/N)
            block_lse = torch.logsumexp(scores, dim=-1, keepdim=True)
            block_out = torch.softmax(scores, dim=-1) @ v
            new_lse = torch.logaddexp(lse, block_lse)
            out = out * torch.exp(lse - new_lse) + block_out * torch.exp(block_lse - new_lse)
            lse = new_lse
            if step + 1 < self.world_size:
                k = ring_pass(k, self.rank, self.world_size)
                v = ring_pass(v, self.rank, self.world_size)
        merged = out.transpose(1, 2).reshape(B, S, H)
        return self.out(merged)
