# expect: linear maps the last axis | heads not merged back
import torch

x = torch.randn(2, 5, 32)
out_proj = torch.nn.Linear(32, 32)
q = x.view(2, 5, 4, 8).transpose(1, 2)
context = torch.softmax(q @ q.transpose(-2, -1), dim=-1) @ q
output = out_proj(context)  # breaks
