"""Numeric constants shared by the reference paths and TensorFlow's fast paths."""
import keras


def large_negative(dtype):
    """The fill value for masked scores that is finite in ``dtype``.

    -3e4 for float16 (its max is 65504; D2L's -1e6 overflows to -inf and gives NaN for a
    fully masked row), -1e9 otherwise. The one place this constant lives.
    """
    return -3e4 if keras.backend.standardize_dtype(dtype) == "float16" else -1e9
