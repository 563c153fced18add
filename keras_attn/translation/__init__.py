"""Translation: text in, text out, on any engine.

``pipeline`` (with ``passthrough`` and ``glossary``): the request pipeline every engine runs; ``alignment``:
word alignments; ``run``, ``engine`` (with scoring), ``search``: the Keras engine's parts.

May import: :mod:`keras_attn.decoding`, :mod:`keras_attn.text`, :mod:`keras_attn.core`,
:mod:`keras_attn.models` (``pipeline`` imports neither TensorFlow nor Keras); never
training, export, serve or cli.
"""
