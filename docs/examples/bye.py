import os

x = [1, 2, 3]
os._exit(7)  # ends the process without a word
