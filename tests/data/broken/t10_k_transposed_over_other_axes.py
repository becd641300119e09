# expect: matmul contracts the last axis | but K^T must be (B, h, d, S) | K.transpose(-2, -1)
import torch

x = torch.randn(2, 5, 64)
q = x.view(2, 5, 4, 16).transpose(1, 2)
k = x.view(2, 5, 4, 16).transpose(1, 2)
scores = q @ k.transpose(1, 2)  # breaks
