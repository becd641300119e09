"""Tensor-parallel attention with DTensor, as torch's tutorial writes it: an ordinary module,
then ``parallelize_module`` with ColwiseParallel for q, k, v and RowwiseParallel for the output
(the all-reduce is DTensor's, inside RowwiseParallel)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Attention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.wq = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wk = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wv = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wo = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.wq(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # local heads: -1
        k = self.wk(x).view(B, S, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, S, -1, self.head_dim).transpose(1, 2)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        merged = context.transpose(1, 2).reshape(B, S, -1)
        return self.wo(merged)


class TPAttention(nn.Module):
    """The attention split over the ranks of ``device_mesh`` (given by the launcher)."""

    def __init__(self, device_mesh, embed_dim=64, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        torch.manual_seed(0)  # the same full weights on every rank before they are sharded
        self.attn = parallelize_module(
            Attention(embed_dim, num_heads),
            device_mesh,
            {
                "wq": ColwiseParallel(),
                "wk": ColwiseParallel(),
                "wv": ColwiseParallel(),
                "wo": RowwiseParallel(),
            },
        )

    def forward(self, x):
        return self.attn(x)
