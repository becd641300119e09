# expect: broadcasts from the right | line up
import torch

x = torch.randn(1, 5, 16)
q = x.view(1, 5, 2, 8).transpose(1, 2)
scores = q @ q.transpose(-2, -1)
mask = torch.ones(4, 4)
masked = scores + mask  # breaks
