"""Inverted dropout whose keep/drop decisions are 16-bit uniforms.

``rate`` is realised as ``round(rate * 65536) / 65536`` and kept values are scaled by the
exact inverse of the realised keep probability, so ``E[dropout(x)] == x``. The reference
path draws one ``keras.random.randint(0, 65536)`` per element; TensorFlow's fast path
(:func:`keras_attn.kernels.tf_ops.dropout16`) reads two from each 32-bit random word.
"""
import keras
from keras import ops

from keras_attn.kernels import fastpath
from keras_attn.layers import _checks

_LEVELS = 1 << 16


def quantized_rate(rate):
    """The drop probability the 16-bit decisions realise for ``rate``: k / 65536."""
    return round(float(rate) * _LEVELS) / _LEVELS


def dropout16(x, rate, seed, noise_shape=None):
    """``x`` with each element zeroed with probability ``quantized_rate(rate)``, the rest scaled
    by ``1 / (1 - quantized_rate(rate))``.

    Args:
        x: float tensor of any shape.
        rate: Python float in [0, 1).
        seed: a ``keras.random.SeedGenerator`` or an integer tensor ``(2,)`` (stateless).
        noise_shape: optional tuple, one entry per axis of ``x``: 1 shares the decision along
            that axis, None (or the axis size) gives independent decisions.
    """
    threshold = round(float(rate) * _LEVELS)
    if threshold == 0:
        return x
    if threshold >= _LEVELS:
        return ops.zeros_like(x)
    x = ops.convert_to_tensor(x)
    dims = list(x.shape)
    if noise_shape is not None:
        if len(noise_shape) != len(dims):
            raise ValueError(f"`noise_shape` must have one entry per axis of the inputs "
                             f"(rank {len(dims)}). Received: noise_shape={noise_shape}")
        dims = [d if n is None else n for d, n in zip(dims, noise_shape)]
    if fastpath.enabled():
        from keras_attn.kernels import tf_ops

        return tf_ops.dropout16(x, threshold, seed, dims)
    dynamic = ops.shape(x)
    shape = tuple(dynamic[i] if d is None else d for i, d in enumerate(dims))
    keep = keras.random.randint(shape, 0, _LEVELS, dtype="int32", seed=seed) >= threshold
    scale = ops.cast(_LEVELS / (_LEVELS - threshold), x.dtype)
    return ops.where(keep, x * scale, ops.zeros_like(x))


@keras.saving.register_keras_serializable(package="keras_attn")
class Dropout(keras.layers.Layer):
    """Inverted dropout with 16-bit keep/drop decisions (drop-in for ``keras.layers.Dropout``).

    Args:
        rate: float in [0, 1), the drop probability (see :func:`quantized_rate`).
        seed: optional int, for reproducible masks.
        noise_shape: optional tuple as in ``keras.layers.Dropout``.

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
