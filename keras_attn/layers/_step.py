"""Layers applied to a decoding step's one position per row: the TensorFlow kernels the
fast path (:mod:`keras_attn.fastpath`) chooses for them, and the layers' own call
elsewhere."""
import keras

from keras_attn import fastpath


def _one_position(x):
    """Whether ``x`` ``(B, 1, d)`` is a decoding step's input on TensorFlow's fast path."""
    return len(x.shape) == 3 and x.shape[1] == 1 and fastpath.enabled()


def dense(layer, x):
    """``layer(x)`` for a ``keras.layers.Dense`` and ``(B, L, d)`` inputs.

    On TensorFlow's fast path, when ``L`` is 1 (a decoding step), the same arithmetic as
    one ``BatchMatMulV3`` on ``(B, d)`` plus the bias and the activation
    (:func:`keras_attn.tf_attention.linear`): Keras's matmul of a rank-3 input reshapes
    around a ``MatMul`` that TensorFlow hands to oneDNN, a fixed cost per call that is most
    of a step on one sentence. Elsewhere, and for a quantized or LoRA-enabled layer, the
    layer's own call.
    """
    if (not _one_position(x) or getattr(layer, "quantization_mode", None)
            or getattr(layer, "lora_enabled", False)):
        return layer(x)
    from keras_attn import tf_attention

    dtype = layer.compute_dtype
    return tf_attention.linear(keras.ops.cast(x, dtype), layer.kernel,
                               layer.bias if layer.use_bias else None,
                               activation=layer.activation)


def layer_norm(layer, x):
    """``layer(x)`` for a ``keras.layers.LayerNormalization`` over the last axis.

    On TensorFlow's fast path, for a decoding step in float32, Keras's arithmetic
    (``keras.ops.layer_normalization``: the same values) without the reshapes of gamma and
    beta and the ``moments`` bookkeeping around it: 10 ops instead of about 20, at every
    LayerNorm of every step.
    """
    if not _one_position(x) or layer.compute_dtype != "float32" or layer.axis not in (
            -1, [-1], [2]) or layer.rms_scaling or not (layer.center and layer.scale):
        return layer(x)
    from keras_attn import tf_attention

    return tf_attention.layer_norm(x, layer.gamma, layer.beta, layer.epsilon)
