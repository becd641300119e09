"""A correct Llama-style attention: no biases, grouped-query heads (repeat_interleave), rotary
embeddings (rotate_half, positions 0..S-1), a causal mask filled with -inf before the softmax."""

import math

import torch


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(torch.nn.Module):
    def __init__(self, hidden_size=32, num_heads=4, num_key_value_heads=2, rope_theta=10000.0):
        super().__init__()
        self.num_heads = num_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = hidden_size // num_heads
        self.rope_theta = rope_theta
        self.is_causal = True
        self.q_proj = torch.nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def rope(self, seq_len, dtype):
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim))
        positions = torch.arange(seq_len, dtype=torch.float64)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, x):
        bsz, q_len, _ = x.shape
        groups = self.num_heads // self.num_key_value_heads
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rope(q_len, x.dtype)
        q_rot = q * cos + rotate_half(q) * sin
        k_rot = k * cos + rotate_half(k) * sin
        k_rep = k_rot.repeat_interleave(groups, dim=1)
        v_rep = v.repeat_interleave(groups, dim=1)
        scores = q_rot @ k_rep.transpose(2, 3)
        scores = scores / math.sqrt(self.head_dim)
        future = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = weights @ v_rep
        context = context.transpose(1, 2).reshape(bsz, q_len, self.num_heads * self.head_dim)
        return self.o_proj(context)
