# expect: linear maps the last axis of x | in_features
import torch

x = torch.randn(3, 48)
q_proj = torch.nn.Linear(64, 64)
q = q_proj(x)  # breaks
