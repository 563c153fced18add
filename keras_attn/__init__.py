"""keras_attn: the attention chapter of D2L and "Attention Is All You Need" as Keras 3 layers.

Submodules: ``ops`` (masked softmax, masks), ``layers`` (attention layers, Transformer and
Bahdanau blocks), ``models`` (functional-API builders), ``schedules``, ``losses``, ``text``
(tensorflow-text tokenizers), ``data`` (datasets, tf.data pipelines), ``decoding`` (greedy and
beam search), ``export`` (SavedModel / TFLite) and ``viz`` (attention heatmaps).
"""
__version__ = "0.1.0"

from keras_attn import layers, losses, models, ops, schedules  # noqa: F401,E402
