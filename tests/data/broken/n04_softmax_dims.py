# expect: broadcasts from the right
import numpy as np

scores = np.random.rand(8, 3, 5)
t = np.exp(scores)
weights = t / np.sum(t, axis=-1)  # breaks
