"""Counter-based random numbers for sampling: the same bits in every backend and artefact.

:func:`uniform` hashes (seed, row, step) with int32 arithmetic that TensorFlow, TFLite's
builtins, JAX and PyTorch compute alike, so a ``seed`` gives the same sample from the
``Translator``, the SavedModel and the TFLite file (a ``keras.random.SeedGenerator`` would
not: its bits differ between backends and it is state, not a function of the step).
"""
from keras import ops


def _mix16(h):
    """One round of a 16-bit integer hash: multiply (odd constants, mod 2**16) and
    ``h += h >> k`` steps. Only int32 add/mul/floor_div/floor_mod on values below 2**31 (no
    overflow, no bitwise op), so TF, TFLite builtins, JAX and PyTorch give the same bits."""
    h = ops.mod(h * 20201 + 13849, 65536)
    h = ops.mod(h + ops.floor_divide(h, 128), 65536)
    h = ops.mod(h * 30971, 65536)
    return ops.mod(h + ops.floor_divide(h, 512), 65536)


def uniform(seed, row, step):
    """A float32 in (0, 1) for each ``row`` (int32 ``(N,)``), from ``seed`` and ``step``
    (int32 scalars): a counter-based hash of (seed, row, step), the same bits on every
    backend and artefact. 24 random bits (two 16-bit streams), exact in float32."""
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
