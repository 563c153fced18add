"""``keras-attn serve``: a translation service speaking LibreTranslate's API.

A thin layer over the exported artefacts (no decoding of its own): the SavedModel's
``translate`` signature or the CTranslate2 model decode; this package batches the requests
of concurrent clients and answers HTTP.

Modules, one job each:

* :mod:`.locate`: a run or export directory -> the artefact to load (``Artefact``).
* :mod:`.engines`: ``SavedModelEngine``, ``CTranslate2Engine``: texts + ``DecodingOptions``
  -> n-best lists.
* :mod:`.replicas`: the engine in this process, or in ``--replicas`` worker processes.
* :mod:`.batcher`: requests within ``--batch-wait-ms`` decoded together, by option set;
  bounded queue and timeouts.
* :mod:`.limits`: API keys and requests a minute (in this process, or in Redis).
* :mod:`.store`: API keys and suggestions in SQLite (state several servers share).
* :mod:`.cache`: ``--translation-cache``, in this process or in Redis.
* :mod:`.api`: LibreTranslate's ``/translate`` fields and answer.
* :mod:`.http`: bodies within a limit, JSON and form fields, JSON errors, ``Server-Timing``,
  the middlewares.
* :mod:`.files`: ``/translate_file``: .txt, .html, .docx, .odt with their formatting.
* :mod:`.detect`: ``/detect``, by langid.
* :mod:`.metrics`: ``/metrics``, Prometheus's text format.
* :mod:`.spec`: the routes' declarations and their OpenAPI document (``/spec``).
* :mod:`.attention`: ``POST /attention``, the web page's heatmap: the cross-attention of a
  translation, from the Keras model of the run behind the artefact (when it is there).
* :mod:`.app`: the Starlette application (every route: docs/serving.md).
  :mod:`.server`: uvicorn and the replicas.

Example:
    >>> from keras_attn.serve import serve
    >>> serve("exported", port=5000)           # CLI: keras-attn serve exported

May import: export, training, viz, the translator and everything below them; never
cli.
"""
from keras_attn.serve.locate import Artefact, locate  # noqa: F401  (no TensorFlow import)


def serve(*args, **kwargs):
    """:func:`keras_attn.serve.server.serve` (imported on first use)."""
    from keras_attn.serve.server import serve as run

    return run(*args, **kwargs)
