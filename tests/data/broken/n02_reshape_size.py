# expect: reshape keeps the number of elements | H used where d was meant
import numpy as np

x = np.random.rand(3, 768)
q = np.reshape(x, [3, 8, 768])  # breaks
