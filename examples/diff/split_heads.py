import math

import torch


class Attention(torch.nn.Module):
    def __init__(self, hidden=64, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = torch.nn.Linear(hidden, hidden)
        self.k_proj = torch.nn.Linear(hidden, hidden)
        self.v_proj = torch.nn.Linear(hidden, hidden)
        self.o_proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        B, S, H = x.shape
        h, d = self.num_heads, H // self.num_heads
        q = self.q_proj(x).view(B, h, S, d)
        k = self.k_proj(x).view(B, S, h, d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, h, d).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        weights = scores.softmax(dim=-1)
        context = weights @ v
        merged = context.transpose(1, 2).reshape(B, S, H)
        return self.o_proj(merged)
