# expect: scaled_dot_product_attention | heads first
import torch
from torch.nn import functional

x = torch.randn(2, 6, 32)
q = x.view(2, 6, 4, 8).transpose(1, 2)
k = x.view(2, 6, 4, 8)
context = functional.scaled_dot_product_attention(q, k, k)  # breaks
