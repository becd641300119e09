# expect: matmul contracts the last axis | K is not transposed
import numpy as np

x = np.random.rand(3, 768)
q = np.transpose(np.reshape(x, [3, 8, 96]), [1, 0, 2])
k = np.transpose(np.reshape(x, [3, 8, 96]), [1, 0, 2])
scores = q @ k  # breaks
