# expect: einsum subscript
import torch

q = torch.randn(2, 4, 5, 8)
k = torch.randn(2, 4, 5, 8)
scores = torch.einsum("bhsd,bhdt->bhst", q, k)  # breaks
