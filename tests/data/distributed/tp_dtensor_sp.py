"""Tensor and sequence parallelism with DTensor, as torch's tutorial writes a transformer
block: the norm SequenceParallel (each rank normalises its S/N tokens), ColwiseParallel q, k, v
taking the sequence shards (an all-gather), RowwiseParallel output giving them back (a
reduce-scatter)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


class Block(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.head_dim = embed_dim // num_heads
        self.norm = nn.LayerNorm(embed_dim)
        self.wq = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wk = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wv = nn.Linear(embed_dim, embed_dim, bias=False)
        self.wo = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x):
        h = self.norm(x)
        B, S = h.shape[0], h.shape[1]
        q = self.wq(h)
        k = self.wk(h)
        v = self.wv(h)
        S = q.shape[1]  # the whole sequence after the all-gather
        q = q.view(B, S, -1, self.head_dim).transpose(1, 2)
        k = k.view(B, S, -1, self.head_dim).transpose(1, 2)
        v = v.view(B, S, -1, self.head_dim).transpose(1, 2)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(context.transpose(1, 2).reshape(B, S, -1))


class SPBlock(nn.Module):
    def __init__(self, device_mesh, embed_dim=64, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        torch.manual_seed(0)
        self.block = parallelize_module(
            Block(embed_dim, num_heads),
            device_mesh,
            {
                "norm": SequenceParallel(),
                "wq": ColwiseParallel(input_layouts=Shard(1)),
                "wk": ColwiseParallel(input_layouts=Shard(1)),
                "wv": ColwiseParallel(input_layouts=Shard(1)),
                "wo": RowwiseParallel(output_layouts=Shard(1)),
            },
        )

    def forward(self, x):  # x: (B, S/N, H), this rank's tokens
        return self.block(x)
