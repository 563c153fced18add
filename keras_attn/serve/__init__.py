"""``keras-attn serve``: a translation service speaking LibreTranslate's API, over the
exported artefacts (no decoding of its own): :mod:`.locate` and :mod:`.models` find what is
served, :mod:`.engines`, :mod:`.replicas` and :mod:`.batcher` decode, :mod:`.app` and
:mod:`.routes` answer HTTP, :mod:`.server` runs it under uvicorn.

Example:
    >>> from keras_attn.serve import serve
    >>> serve("exported", port=5000)           # CLI: keras-attn serve exported
    >>> serve(["runs/en-fr", "runs/fr-en"])     # keras-attn serve runs/en-fr runs/fr-en

May import: export, training, viz, the translator and everything below them; never
cli.
"""
from keras_attn.serve.locate import Artefact, locate  # noqa: F401  (no TensorFlow import)


def serve(*args, **kwargs):
    """:func:`keras_attn.serve.server.serve` (imported on first use)."""
    from keras_attn.serve.server import serve as run

    return run(*args, **kwargs)
