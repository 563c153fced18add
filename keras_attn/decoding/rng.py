"""Counter-based random numbers for sampling: the same bits in every backend and artefact
(a ``keras.random.SeedGenerator``'s bits differ between backends, and it is state).
"""
from keras import ops


def _mix16(h):
    """A 16-bit integer hash round in int32 arithmetic only (every backend and TFLite alike)."""
    h = ops.mod(h * 20201 + 13849, 65536)
    h = ops.mod(h + ops.floor_divide(h, 128), 65536)
    h = ops.mod(h * 30971, 65536)
    return ops.mod(h + ops.floor_divide(h, 512), 65536)


def uniform(seed, row, step):
    """A float32 in (0, 1) per ``row`` (int32 ``(N,)``) from ``seed`` and ``step`` (24 bits)."""
    seed = ops.cast(seed, "int32")
    parts = [ops.mod(seed, 65536), ops.mod(ops.floor_divide(seed, 65536), 65536),
             ops.mod(ops.cast(row, "int32"), 65536), ops.mod(ops.cast(step, "int32"), 65536)]
    words = []
    for stream in (1, 2):
        h = stream * 7919
        for part in parts:  # absorb one input, then mix twice
            h = _mix16(_mix16(ops.mod(h + part, 65536)))
        words.append(h)
    bits = words[0] * 256 + ops.floor_divide(words[1], 256)  # 24 bits
    return (ops.cast(bits, "float32") + 0.5) / 16777216.0
