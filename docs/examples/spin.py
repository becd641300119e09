import time

import numpy as np

x = np.random.rand(3, 8)
q = x @ np.random.rand(8, 8)
time.sleep(600)  # far past --timeout, which stops it
