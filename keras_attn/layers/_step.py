"""Layers applied to a decoding step's one position per row: on TensorFlow's fast path the
kernels of :mod:`keras_attn.kernels.tf_step`, elsewhere the layers' own call. A variant
those kernels do not compute is refused with a ``ValueError`` naming it.
"""
import keras

from keras_attn.kernels import fastpath


def _one_position(x):
    """Whether ``x`` ``(B, 1, d)`` is a decoding step's input on TensorFlow's fast path."""
    return len(x.shape) == 3 and x.shape[1] == 1 and fastpath.enabled()


def check_dense(layer):
    """``ValueError`` for a quantized ``keras.layers.Dense`` (the step kernels multiply by its
    ``kernel``; a LoRA-enabled layer's ``kernel`` includes the update, so it is computed).
    """
    mode = getattr(layer, "quantization_mode", None)
    if mode:
        raise ValueError(
            f"The decoding step's fast kernels (keras_attn.kernels.tf_step) have no "
            f"{mode!r}-quantized Dense ({layer.name!r}): decode under "
            f"keras_attn.kernels.fastpath.using(fast_paths=False), or quantize the export "
            f"instead (TFLite int8, CTranslate2 int8). Received: quantization_mode={mode!r}")


def dense(layer, x):
    """``layer(x)`` for a ``keras.layers.Dense`` and ``(B, L, d)`` inputs; for a decoding
    step on TensorFlow's fast path :func:`keras_attn.kernels.tf_step.linear`, without
    Keras's reshapes around a oneDNN ``MatMul``.

    Raises:
        ValueError: a quantized layer on the fast path (:func:`check_dense`).
    """
    if not _one_position(x):
        return layer(x)
    from keras_attn.kernels import tf_step

    check_dense(layer)
    dtype = layer.compute_dtype
    return tf_step.linear(keras.ops.cast(x, dtype), layer.kernel,
                          layer.bias if layer.use_bias else None, activation=layer.activation)


def check_layer_norm(layer):
    """``ValueError`` for a ``keras.layers.LayerNormalization`` the step kernel does not compute
    (other axes than the last, RMS scaling, no ``center``/``scale``).
    """
    variants = {"axis": layer.axis not in (-1, [-1], [2]), "rms_scaling": layer.rms_scaling,
                "center": not layer.center, "scale": not layer.scale}
    bad = [name for name, yes in variants.items() if yes]
    if bad:
        raise ValueError(
            f"The decoding step's fast LayerNorm (keras_attn.kernels.tf_step.layer_norm) "
            f"normalises the last axis with gamma and beta; {layer.name!r} differs in {bad}: "
            f"decode under keras_attn.kernels.fastpath.using(fast_paths=False). Received: "
            + ", ".join(f"{name}={getattr(layer, name)!r}" for name in bad))


def layer_norm(layer, x):
    """``layer(x)`` for a ``keras.layers.LayerNormalization`` over the last axis; for a
    decoding step on TensorFlow's fast path :func:`keras_attn.kernels.tf_step.layer_norm`.

    Raises:
        ValueError: a variant the kernel does not compute (:func:`check_layer_norm`).
    """
    if not _one_position(x):
        return layer(x)
    from keras_attn.kernels import tf_step

    check_layer_norm(layer)
    return tf_step.layer_norm(x, layer.gamma, layer.beta, layer.epsilon, layer.compute_dtype)
