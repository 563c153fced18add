"""A Dense layer applied to a decoding step's one position per row."""
import keras

from keras_attn import fastpath


def dense(layer, x):
    """``layer(x)`` for a ``keras.layers.Dense`` and ``(B, L, d)`` inputs.

    On TensorFlow's fast path, when ``L`` is 1 (a decoding step), the same arithmetic as
    one ``BatchMatMulV3`` on ``(B, d)`` plus the bias and the activation
    (:func:`keras_attn.tf_attention.linear`): Keras's matmul of a rank-3 input reshapes
    around a ``MatMul`` that TensorFlow hands to oneDNN, a fixed cost per call that is most
    of a step on one sentence. Elsewhere, and for a quantized or LoRA-enabled layer, the
    layer's own call.
    """
    if (x.shape[1] != 1 or not fastpath.enabled() or getattr(layer, "quantization_mode", None)
            or getattr(layer, "lora_enabled", False)):
        return layer(x)
    from keras_attn import tf_attention

    dtype = layer.compute_dtype
    y = tf_attention.linear(keras.ops.cast(x, dtype), layer.kernel,
                            layer.bias if layer.use_bias else None)
    return layer.activation(y) if layer.activation is not None else y
