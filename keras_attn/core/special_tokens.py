"""The four reserved tokens every vocabulary starts with, and their ids.

Imports nothing, so the light modules (``config``, ``cli``) and the TensorFlow ones
(``text``, ``data``) read the same ids.
"""
PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
