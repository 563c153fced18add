"""Translation: the one request pipeline (:mod:`~keras_attn.translation.pipeline`: text ->
sentences -> batches -> hypotheses -> documents) that every engine's ``translate_nbest``
runs, and the plain-Python tokenizers (:mod:`~keras_attn.translation.tokenizers`) of an
engine without TensorFlow. Neither module imports TensorFlow or Keras."""
