# expect: matmul contracts the last axis
import numpy as np

x = np.random.rand(3, 768)
w = np.random.rand(512, 768)
q = x @ w  # breaks
