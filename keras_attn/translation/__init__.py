"""Translation: text in, text out, on any engine.

``pipeline`` is the one request pipeline (text -> sentences -> batches -> hypotheses ->
documents) that every engine's ``translate_nbest`` runs; ``alignment`` turns the
cross-attention into word alignments. :class:`keras_attn.translator.Translator` is the
Keras engine.

May import: :mod:`keras_attn.decoding`, :mod:`keras_attn.text`, :mod:`keras_attn.core`
(``pipeline`` and ``alignment`` import neither TensorFlow nor Keras); never training,
export, serve or cli.
"""
