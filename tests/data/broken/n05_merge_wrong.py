# expect: reshape keeps the number of elements
import numpy as np

context = np.random.rand(8, 3, 96)
merged = np.transpose(context, [1, 0, 2])
out = np.reshape(merged, [3, 512])  # breaks
