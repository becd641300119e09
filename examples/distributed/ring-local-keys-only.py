# planted sharding bug (ring-local-keys-only): line 87 reads `if source == rank:`
"""Ring attention written with torch.distributed: each rank holds a contiguous chunk of the
sequence (S / world tokens), keeps its queries and passes its keys and values round the ring
with batch_isend_irecv; each block's output is merged into the running one by the log-sum-exp of
its rows. Causal: a block from a later rank is skipped, the rank's own block is masked, earlier
blocks are seen whole. The projections are replicated (the same seed on every rank)."""

import math

import torch
import torch.distributed as dist
import torch.nn as nn


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, positions, theta=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.outer(positions.double(), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return x * emb.cos().float() + rotate_half(x) * emb.sin().float()


def block_attention(q, k, v, scale, causal):
    """One block: its normalised output and the log-sum-exp of each query row."""
    scores = q @ k.transpose(-2, -1) * scale
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1) @ v
    return out, lse


def merge(out, lse, block_out, block_lse):
    """Two partial softmax results merged: each rescaled by exp(its lse - the new lse)."""
    if out is None:
        return block_out, block_lse
    new_lse = torch.logaddexp(lse, block_lse)
    w_old, w_new = torch.exp(lse - new_lse), torch.exp(block_lse - new_lse)
    out = out * w_old.unsqueeze(-1) + block_out * w_new.unsqueeze(-1)
    return out, new_lse


def ring_pass(k, v):
    """Send k, v to the next rank, receive the previous rank's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    ops = [
        dist.P2POp(dist.isend, k, (rank + 1) % world),
        dist.P2POp(dist.isend, v, (rank + 1) % world),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % world),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % world),
    ]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return k_next, v_next


class RingAttention(nn.Module):
    def __init__(self, hidden=64, heads=8, causal=True, rope=True, bias=True):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.causal, self.rope = causal, rope
        self.q_proj = nn.Linear(hidden, hidden, bias=bias)
        self.k_proj = nn.Linear(hidden, hidden, bias=bias)
        self.v_proj = nn.Linear(hidden, hidden, bias=bias)
        self.o_proj = nn.Linear(hidden, hidden, bias=bias)

    def forward(self, x):
        rank, world = dist.get_rank(), dist.get_world_size()
        B, s, H = x.shape  # this rank's chunk: tokens rank*s .. (rank+1)*s - 1
        q = self.q_proj(x).view(B, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, s, self.heads, self.head_dim).transpose(1, 2)
        if self.rope:
            positions = torch.arange(rank * s, (rank + 1) * s)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
        scale = 1.0 / math.sqrt(self.head_dim)
        out, lse = None, None
        for step in range(world):
            source = (rank - step) % world  # whose keys and values this block holds
            if source == rank:
                block_out, block_lse = block_attention(
                    q, k, v, scale, causal=self.causal and source == rank
                )
                out, lse = merge(out, lse, block_out, block_lse)
            if step < world - 1:
                k, v = ring_pass(k.contiguous(), v.contiguous())
        return self.o_proj(out.transpose(1, 2).reshape(B, s, H))
