# expect: matmul contracts the last axis | but K^T must be (h, d, S) | np.swapaxes(K, -1, -2)
import numpy as np

x = np.random.rand(5, 64)
q = x.reshape(5, 4, 16).transpose(1, 0, 2)
k = x.reshape(5, 4, 16).transpose(1, 0, 2)
scores = q @ k.transpose(1, 0, 2)  # breaks
