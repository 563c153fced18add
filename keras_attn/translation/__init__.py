"""Translation: text in, text out, on any engine.

``pipeline`` is the one request pipeline (text -> sentences -> batches -> hypotheses ->
documents) that every engine's ``translate_nbest`` runs, ``passthrough`` keeping URLs,
numbers, code and markup out of the model's way; ``alignment`` turns the
cross-attention into word alignments. The Keras engine's jobs, which
:class:`keras_attn.translator.Translator` puts together: ``run`` (loading a run directory),
``engine`` (what the pipeline drives), ``search`` (the traced search), ``scoring``.

May import: :mod:`keras_attn.decoding`, :mod:`keras_attn.text`, :mod:`keras_attn.core`,
:mod:`keras_attn.models` (``pipeline`` imports neither TensorFlow nor
Keras); never training, export, serve or cli.
"""
