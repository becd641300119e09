# expect: broadcasts from the right | different order
import numpy as np

x = np.random.rand(3, 768)
q = np.reshape(x, [3, 8, 96])
k = np.transpose(q, [1, 0, 2])
mixed = q + k  # breaks
