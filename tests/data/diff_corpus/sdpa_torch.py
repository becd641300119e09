"""Correct attention through F.scaled_dot_product_attention (no scores or weights to see), and
an nn.MultiheadAttention wrapped in a module."""

import torch
import torch.nn.functional as F


class SDPA(torch.nn.Module):
    def __init__(self, hidden=32, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = torch.nn.Linear(hidden, hidden)
        self.k_proj = torch.nn.Linear(hidden, hidden)
        self.v_proj = torch.nn.Linear(hidden, hidden)
        self.o_proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        B, S, H = x.shape
        h = self.num_heads
        q = self.q_proj(x).view(B, S, h, H // h).transpose(1, 2)
        k = self.k_proj(x).view(B, S, h, H // h).transpose(1, 2)
        v = self.v_proj(x).view(B, S, h, H // h).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, S, H))


class Wrapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads = 4
        self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]
