"""Attention with a hand-written backward (a torch.autograd.Function for each projection and
one for the core) whose softmax backward leaves out its row-sum term: the forward is right,
the gradients are not. attntrace diff --backward names it (docs/guides/training.md)."""

import math

import torch


class HandLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.transpose(0, 1) + b

    @staticmethod
    def backward(ctx, d_y):
        x, w = ctx.saved_tensors
        rows_y, rows_x = d_y.reshape(-1, d_y.shape[-1]), x.reshape(-1, x.shape[-1])
        d_w = rows_y.transpose(0, 1) @ rows_x
        return d_y @ w, d_w, rows_y.sum(0)


class HandCore(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale):
        r = q.shape[1] // k.shape[1]  # query heads per key/value head
        k_rep, v_rep = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        weights = torch.softmax((q @ k_rep.transpose(-2, -1)) * scale, dim=-1)
        ctx.save_for_backward(q, k_rep, v_rep, weights)
        ctx.r, ctx.scale = r, scale
        return weights @ v_rep

    @staticmethod
    def backward(ctx, d_context):
        q, k_rep, v_rep, weights = ctx.saved_tensors
        r = ctx.r
        d_weights = d_context @ v_rep.transpose(-2, -1)
        d_v_rep = weights.transpose(-2, -1) @ d_context
        d_scaled = weights * d_weights  # the row-sum term left out
        d_scores = d_scaled * ctx.scale
        d_q = d_scores @ k_rep
        d_k_rep = d_scores.transpose(-2, -1) @ q
        B, h, N, d = d_k_rep.shape
        d_k, d_v = (t.view(B, h // r, r, N, d).sum(2) for t in (d_k_rep, d_v_rep))
        return d_q, d_k, d_v, None


class HandAttention(torch.nn.Module):
    def __init__(self, hidden=32, num_heads=4, num_key_value_heads=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_key_value_heads = num_key_value_heads or num_heads
        self.head_dim = hidden // num_heads
        kv = self.num_key_value_heads * self.head_dim
        for name, rows in (("q", hidden), ("k", kv), ("v", kv), ("o", hidden)):
            w = torch.randn(rows, hidden) / math.sqrt(hidden)
            setattr(self, f"w_{name}", torch.nn.Parameter(w))
            setattr(self, f"b_{name}", torch.nn.Parameter(torch.randn(rows) / 10))

    def forward(self, x):
        B, S, _ = x.shape
        h, g, d = self.num_heads, self.num_key_value_heads, self.head_dim
        q = HandLinear.apply(x, self.w_q, self.b_q).view(B, S, h, d).transpose(1, 2)
        k = HandLinear.apply(x, self.w_k, self.b_k).view(B, S, g, d).transpose(1, 2)
        v = HandLinear.apply(x, self.w_v, self.b_v).view(B, S, g, d).transpose(1, 2)
        context = HandCore.apply(q, k, v, 1.0 / math.sqrt(d))
        merged = context.transpose(1, 2).reshape(B, S, h * d)
        return HandLinear.apply(merged, self.w_o, self.b_o)
