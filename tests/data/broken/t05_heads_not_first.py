# expect: matmul broadcasts the leading | heads first
import torch

x = torch.randn(2, 5, 32)
q = x.view(2, 5, 4, 8)
k_t = x.view(2, 5, 4, 8).transpose(1, 2).transpose(-2, -1)
scores = q @ k_t  # breaks
