# expect: einsum subscript
import numpy as np

q = np.random.rand(8, 3, 96)
k = np.random.rand(8, 5, 64)
scores = np.einsum("hsd,htd->hst", q, k)  # breaks
