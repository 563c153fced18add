"""keras_attn: the attention chapter of D2L and "Attention Is All You Need" as Keras 3 layers.

The packages, each one job, arrows only downward (``tests/test_architecture.py`` holds
them so with import-linter's contracts):

- ``cli``: ``keras-attn``'s commands. ``serve``: the HTTP server (LibreTranslate's API).
- ``export``: SavedModel, TFLite and CTranslate2 files and their runtimes.
- ``training``: the ``keras-attn train`` recipes, budgets, losses, evaluation, calibration.
- ``translator`` (the Keras engine: text in, text out) over ``translation`` (the one
  request pipeline every engine runs, word alignments).
- ``decoding``: greedy search, beam search and sampling with a key/value cache.
  ``data``: datasets and tf.data pipelines. ``viz``: attention heatmaps and figures.
- ``models``: functional-API builders, over ``layers`` (attention layers, Transformer and
  Bahdanau blocks), over ``ops`` (masks and the masked softmax) and ``schedules``.
- ``kernels``: the numerics under the layers and their TensorFlow fast paths.
- ``text``: normalisation, every tokenizer, vocabularies, sentence splitting.
- ``core``: the run directory, a run's config, the reserved token ids.

Each is loaded on first use (``import keras_attn`` itself imports neither Keras nor
TensorFlow, so ``keras-attn --help`` answers at once). The old homes of moved modules
(``keras_attn.tf_ops``, ``keras_attn.config``, ...) still resolve as attributes; the
CHANGELOG's "Moved" table lists them.

Example:
    >>> import keras_attn as ka
    >>> mha = ka.layers.MultiHeadAttention(num_hiddens=64, num_heads=4)

A ``.keras`` file holding keras_attn layers loads once their module is imported (the import
registers them with Keras): touch ``keras_attn.layers`` (or ``models``, ``schedules``,
``training.losses``) before ``keras.saving.load_model``.
"""
import importlib

__version__ = "0.1.0"

SUBMODULES = ("core", "text", "kernels", "ops", "layers", "models", "schedules", "decoding",
              "data", "translation", "translator", "training", "export", "serve", "viz", "cli")
# Modules that moved into a package: the attribute still resolves (``keras_attn.tf_ops``).
MOVED = {"runs": "core.runs", "config": "core.config", "special_tokens": "core.special_tokens",
         "lazy": "core.lazy", "fastpath": "kernels.fastpath", "numerics": "kernels.numerics",
         "tf_ops": "kernels.tf_ops", "tf_attention": "kernels.tf_attention",
         "tf_step": "kernels.tf_step", "vocab": "text.vocab", "subword": "text.subword",
         "documents": "text.documents", "budget": "training.budget",
         "distribute": "training.distribute", "losses": "training.losses",
         "calibration": "training.calibration", "evaluation": "training.evaluation",
         "alignment": "translation.alignment"}
__all__ = list(SUBMODULES) + ["__version__"]


def __getattr__(name):
    """PEP 562: import a submodule the first time it is read as an attribute."""
    if name in SUBMODULES or name in MOVED:
        module = importlib.import_module(f"{__name__}.{MOVED.get(name, name)}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES) | set(MOVED))
