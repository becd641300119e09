# expect: view needs | contiguous
import torch

x = torch.randn(2, 5, 32)
heads = x.view(2, 5, 4, 8).transpose(1, 2)
merged = heads.view(2, 5, 32)  # breaks
