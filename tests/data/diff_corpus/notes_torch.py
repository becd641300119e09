"""A correct multi-head attention module written the way the study notes (000) write it:
separate linear layers, split_heads / combine_heads, softmax over the last axis."""

import torch
import torch.nn.functional as F


class NotesAttention(torch.nn.Module):
    def __init__(self, feature_dim=16, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.linear_q = torch.nn.Linear(feature_dim, feature_dim)
        self.linear_k = torch.nn.Linear(feature_dim, feature_dim)
        self.linear_v = torch.nn.Linear(feature_dim, feature_dim)
        self.linear_out = torch.nn.Linear(feature_dim, feature_dim)

    def split_heads(self, tensor):
        batch_size, seq_len, feature_dim = tensor.size()
        head_dim = feature_dim // self.num_heads
        output = tensor.view(batch_size, seq_len, self.num_heads, head_dim).transpose(1, 2)
        return output

    def combine_heads(self, tensor):
        batch_size, num_heads, seq_len, head_dim = tensor.size()
        output = tensor.transpose(1, 2).contiguous().view(batch_size, seq_len, num_heads * head_dim)
        return output

    def forward(self, x):
        Q = self.linear_q(x)
        K = self.linear_k(x)
        V = self.linear_v(x)
        Q = self.split_heads(Q)
        K = self.split_heads(K)
        V = self.split_heads(V)
        raw_weights = torch.matmul(Q, K.transpose(-2, -1))
        scale_factor = K.size(-1) ** 0.5
        scaled_weights = raw_weights / scale_factor
        attn_weights = F.softmax(scaled_weights, dim=-1)
        attn_outputs = torch.matmul(attn_weights, V)
        attn_outputs = self.combine_heads(attn_outputs)
        return self.linear_out(attn_outputs)
