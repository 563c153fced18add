"""keras_attn: the attention chapter of D2L and "Attention Is All You Need" as Keras 3 layers.

Submodules, each loaded on first use (``import keras_attn`` itself imports neither Keras nor
TensorFlow, so ``keras-attn --help`` answers at once):

- ``ops``: masks and the masked softmax. ``layers``: attention layers, Transformer and
  Bahdanau blocks. ``models``: functional-API builders. ``schedules``, ``losses``.
- ``decoding`` (a package): greedy search, beam search and sampling with a key/value cache,
  and the per-request ``decode``; one module per job (``search``, ``samplers``,
  ``compacted``, ``step``, ``rng``, ``options``). ``alignment`` (word alignments from the
  cross-attention).
- ``fastpath`` (the kernel policy: the TensorFlow-only fast paths on or off, growing
  decoding caches, attention chunks); their kernels: ``tf_ops`` (softmax, loss, dropout),
  ``tf_attention`` (attention over whole sequences), ``tf_step`` (a cached one-position
  decoding step); ``numerics`` (the fill value for masked scores).
- ``special_tokens`` (the reserved ids), ``vocab`` (WordPiece and character vocabularies),
  ``text`` (character and WordPiece tokenizers, D2L
  normalisation), ``subword`` (SentencePiece: raw text in, natural text out), ``data``
  (datasets and tf.data pipelines).
- ``config`` (every option of a run; no TensorFlow), ``training`` (the ``keras-attn train``
  recipes), ``budget`` (training for a time budget), ``distribute`` (tf.distribute), ``evaluation`` (exact match, BLEU, chrF),
  ``documents`` (split text into sentences, join translations back),
  ``translation`` (the one request pipeline every engine runs), ``lazy`` (PEP 562 names),
  ``translator`` (text in, text out), ``runs`` (run directories), ``export`` (SavedModel,
  TFLite, CTranslate2), ``viz`` (attention heatmaps and the chapter's figures), ``cli``.

Example:
    >>> import keras_attn as ka
    >>> mha = ka.layers.MultiHeadAttention(num_hiddens=64, num_heads=4)

A ``.keras`` file holding keras_attn layers loads once their module is imported (the import
registers them with Keras): touch ``keras_attn.layers`` (or ``models``, ``losses``,
``schedules``) before ``keras.saving.load_model``.
"""
import importlib

__version__ = "0.1.0"

SUBMODULES = ("ops", "layers", "models", "schedules", "losses", "decoding", "alignment",
              "special_tokens", "vocab", "text", "subword", "data", "config", "training",
              "budget", "distribute", "evaluation", "translator", "runs", "export", "serve",
              "viz", "cli", "fastpath", "numerics", "tf_ops", "tf_attention", "tf_step",
              "documents", "translation", "lazy")
__all__ = list(SUBMODULES) + ["__version__"]


def __getattr__(name):
    """PEP 562: import a submodule the first time it is read as an attribute."""
    if name in SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES))
