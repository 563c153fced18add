"""Inverted dropout that draws two keep/drop decisions from every 32-bit random number.

A Transformer spends a surprising share of its training step on dropout: on the benchmark
model (issue 8) Keras's ``Dropout`` costs ~14 % of a CPU training step, 86 % of it in the
Philox generator producing one 32-bit float per element. This layer asks the same
generator for half as many 32-bit integers and reads each as two 16-bit uniforms, which
halves the random-number work; the decision and the scaling are one compare and one
multiply each way.

The price is a dropout probability quantised to 1/65536: ``rate`` is realised as
``round(rate * 65536) / 65536`` (0.1 becomes 0.1000061) and the kept values are scaled
by the exact inverse of the realised keep probability, so ``E[dropout(x)] == x`` holds
exactly. Statistical checks (rate, expectation, independence of neighbouring elements)
live in tests/test_dropout.py.
"""
import keras
import tensorflow as tf
from keras import ops

from keras_attn.layers import _checks

_LEVELS = 1 << 16


def quantized_rate(rate):
    """The drop probability the 16-bit decisions realise for ``rate``: k / 65536."""
    return round(float(rate) * _LEVELS) / _LEVELS


def _uniform16(shape, seed, static_dims=None):
    """uint16 uniforms of ``shape`` (a shape tensor), from half as many uint32 draws.

    The stateless generator fills its output in row-major order from one stream, so
    ``ceil(n / 2)`` words read as ``2 * ceil(n / 2)`` uint16 values give the same numbers
    whatever the shape; only the first ``n`` are used. ``static_dims`` (the shape as known
    at trace time, None for dynamic axes): when one of them is even, so is ``n`` and the
    words are reshaped without a slice. No ``cond`` either way: in a Keras model the batch
    and length axes are dynamic, and a ``cond`` on the parity of the shape cost ~3 % of the
    benchmark's training step.
    """
    n = tf.reduce_prod(shape)
    if static_dims is not None and any(d is not None and d % 2 == 0 for d in static_dims):
        bits = tf.random.stateless_uniform([n // 2], seed, minval=None, maxval=None,
                                           dtype=tf.uint32)
        return tf.reshape(tf.bitcast(bits, tf.uint16), shape)
    bits = tf.random.stateless_uniform([(n + 1) // 2], seed, minval=None, maxval=None,
                                       dtype=tf.uint32)
    return tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:n], shape)


def _draw_seed(seed):
    """A stateless-RNG seed: int32 ``(2,)``, advancing ``seed`` if it is a SeedGenerator."""
    if isinstance(seed, keras.random.SeedGenerator):
        seed = seed.next()
    seed = tf.convert_to_tensor(seed)
    if seed.dtype != tf.int32:  # SeedGenerator state is int64; XLA wants int32 seeds
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return seed


def dropout16(x, rate, seed, noise_shape=None):
    """``x`` with each element zeroed with probability ``quantized_rate(rate)`` and the rest
    scaled by ``1 / (1 - quantized_rate(rate))``.

    Args:
        x: float tensor of any shape (float16/bfloat16/float32/float64).
        rate: Python float in [0, 1).
        seed: a ``keras.random.SeedGenerator`` (advanced on every call) or an integer
            tensor of shape ``(2,)`` (a stateless seed).
        noise_shape: optional tuple, one entry per axis of ``x``: 1 to share the decision
            along that axis, None (or the axis size) for independent decisions.
    """
    threshold = round(float(rate) * _LEVELS)
    if threshold == 0:
        return x
    if threshold >= _LEVELS:
        return ops.zeros_like(x)
    seed = _draw_seed(seed)
    x = tf.convert_to_tensor(x)
    dims = x.shape.as_list()
    if noise_shape is not None:
        if len(noise_shape) != len(dims):
            raise ValueError(f"`noise_shape` must have one entry per axis of the inputs "
                             f"(rank {len(dims)}). Received: noise_shape={noise_shape}")
        dims = [d if n is None else n for d, n in zip(dims, noise_shape)]
    # A static shape keeps the random numbers independent of ``x``: the executor can draw
    # them while the ops producing ``x`` still run.
    if None not in dims:
        shape = tf.constant(dims, tf.int32)
    else:
        dynamic = tf.shape(x)
        shape = tf.stack([dynamic[i] if d is None else d for i, d in enumerate(dims)])
    keep = _uniform16(shape, seed, dims) >= tf.constant(threshold, tf.uint16)
    scale = _LEVELS / (_LEVELS - threshold)
    # mask = scale or 0: one Select; the multiply is the only op on the gradient path.
    mask = tf.where(keep, tf.constant(scale, x.dtype), tf.constant(0, x.dtype))
    return x * mask


@keras.saving.register_keras_serializable(package="keras_attn")
class Dropout(keras.layers.Layer):
    """Inverted dropout, two decisions per 32-bit random number (drop-in for
    ``keras.layers.Dropout``; used by every keras_attn layer).

    Args:
        rate: float in [0, 1), the drop probability; realised as ``round(rate * 65536) /
            65536`` (see :func:`quantized_rate`), kept values scaled so the expectation
            is unchanged.
        seed: optional int, for reproducible masks.
        noise_shape: optional tuple as in ``keras.layers.Dropout``: 1 on an axis shares
            the keep/drop decision along it, None keeps that axis of the inputs.

    Call arguments: ``inputs`` any shape; ``training`` (dropout only when True).
    Shapes: output = input.

    Example:
        >>> d = Dropout(0.5, seed=1)
        >>> y = d(np.ones((2, 4)), training=True)   # zeros and 2.0s
        >>> d(np.ones((2, 4)))                       # unchanged at inference

    References: Srivastava et al. 2014; Vaswani et al. 2017, section 5.4.
    """

    def __init__(self, rate, seed=None, noise_shape=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _checks.check_rate("rate", rate)
        if noise_shape is not None:
            if (not isinstance(noise_shape, (tuple, list)) or not all(
                    n is None or (isinstance(n, int) and not isinstance(n, bool) and n > 0)
                    for n in noise_shape)):
                raise ValueError("`noise_shape` must be a tuple of positive integers or None. "
                                 f"Received: noise_shape={noise_shape!r}")
            noise_shape = tuple(noise_shape)
        self.noise_shape = noise_shape
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an integer or None. Received: seed={seed!r}")
        self.seed = seed
        self.supports_masking = True
        self.built = True
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate > 0 else None

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            return dropout16(inputs, self.rate, self.seed_generator, self.noise_shape)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed,
                "noise_shape": self.noise_shape}
