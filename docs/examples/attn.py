import torch


class Attention(torch.nn.Module):
    def __init__(self, embed_dim: int = 64, num_heads: int = 4):
        if embed_dim <= 0:
            raise ValueError("embed_dim must be positive")
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]
