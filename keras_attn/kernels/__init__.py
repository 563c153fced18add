"""The numerics under the layers: masks and the masked softmax in ``keras.ops`` (``masks``,
public as :mod:`keras_attn.ops`), the fill value of masked scores (``numerics``), and the
TensorFlow fast paths behind one switch (``fastpath``): softmax, loss and dropout
(``tf_ops``), attention over whole sequences (``tf_attention``), the cached one-position
decoding step (``tf_step``) and the key/value cache layouts it reads (``kv_cache``).

May import: :mod:`keras_attn.core`, Keras, TensorFlow (the ``tf_*`` modules only).

Example:
    >>> from keras_attn.kernels import fastpath
    >>> with fastpath.disabled():  # the reference keras.ops path
    ...     pass
"""
