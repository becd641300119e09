# expect: matmul contracts the last axis | K is not transposed
import torch

x = torch.randn(2, 5, 32)
q = x.view(2, 5, 4, 8).transpose(1, 2)
k = x.view(2, 5, 4, 8).transpose(1, 2)
scores = q @ k  # breaks
