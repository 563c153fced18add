"""The numerics under the layers: masks and the masked softmax (``masks``, public as
:mod:`keras_attn.ops`), the fill value (``numerics``), and the TensorFlow fast paths behind
one switch (``fastpath``): ``tf_ops``, ``tf_attention``, ``tf_step`` and the key/value
cache layouts (``kv_cache``).

May import: :mod:`keras_attn.core`, Keras, TensorFlow (the ``tf_*`` modules only).

Example:
    >>> from keras_attn.kernels import fastpath
    >>> with fastpath.disabled():  # the reference keras.ops path
    ...     pass
"""
