"""Translation: text in, text out, on any engine.

``pipeline``: the request pipeline every engine's ``translate_nbest`` runs (with
``passthrough``); ``alignment``: word alignments. The Keras engine's parts, which
:class:`keras_attn.translator.Translator` puts together: ``run``, ``engine``, ``search``,
``scoring``.

May import: :mod:`keras_attn.decoding`, :mod:`keras_attn.text`, :mod:`keras_attn.core`,
:mod:`keras_attn.models` (``pipeline`` imports neither TensorFlow nor Keras); never
training, export, serve or cli.
"""
