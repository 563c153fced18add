"""keras_attn: the attention chapter of D2L and "Attention Is All You Need" as Keras 3 layers.

The packages, each one job, import only downward (docs/architecture.md): ``cli``, ``serve``
(the HTTP server), ``export`` (SavedModel, TFLite, CTranslate2), ``training``, ``viz``,
``translator`` over ``translation`` (the request pipeline), ``decoding``, ``data``,
``models`` over ``layers``, ``ops`` and ``schedules``, ``kernels``, ``text``, ``core``.

Each is loaded on first use (``import keras_attn`` imports neither Keras nor TensorFlow).
The old homes of moved modules (``keras_attn.tf_ops``, ...) still resolve as attributes;
the CHANGELOG's "Moved" table lists them.

Example:
    >>> import keras_attn as ka
    >>> mha = ka.layers.MultiHeadAttention(num_hiddens=64, num_heads=4)

A ``.keras`` file holding keras_attn layers loads once their module is imported: touch
``keras_attn.layers`` (or ``models``, ``schedules``, ``training.losses``) first.
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
