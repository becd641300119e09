# expect: reshape keeps the number of elements | H used where d was meant
import torch

x = torch.randn(2, 5, 32)
q = x.view(2, 5, 4, 32)  # breaks
