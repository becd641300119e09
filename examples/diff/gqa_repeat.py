"""Bug: grouped-query attention expands the kv heads with repeat (0, 1, 0, 1) where each kv
head must serve consecutive query heads (repeat_interleave: 0, 0, 1, 1)."""

import math

import torch


class GQAttention(torch.nn.Module):
    def __init__(self, hidden=64, num_heads=4, num_key_value_heads=2):
        super().__init__()
        self.num_heads, self.num_key_value_heads = num_heads, num_key_value_heads
        self.head_dim = hidden // num_heads
        self.q_proj = torch.nn.Linear(hidden, num_heads * self.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(hidden, num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(hidden, num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(num_heads * self.head_dim, hidden, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        h, g, d = self.num_heads, self.num_key_value_heads, self.head_dim
        q = self.q_proj(x).view(B, S, h, d).transpose(1, 2)
        k = self.k_proj(x).view(B, S, g, d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, g, d).transpose(1, 2)
        k = k.repeat(1, h // g, 1, 1)
        v = v.repeat(1, h // g, 1, 1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        weights = scores.softmax(dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(B, S, h * d)
        return self.o_proj(context)
